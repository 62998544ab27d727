"""The probe suite: fixed tensor programs with fixed schedules, the empirical half of a profile.

Each probe is one small TE computation with a hand-written schedule for each target
kind: for `llvm` a CPU schedule (parallel outer loop, vectorized inner loop, cache
blocking), for `cuda` a thread-bound GPU schedule (blockIdx/threadIdx bindings,
shared-memory cache stages, unroll annotations). The schedules are deliberately plain
so that the simulated GPU's analytical model can read them as well as a real GPU runs
them. FLOPs and compulsory DRAM bytes of each probe are known, which turns the
streaming probe into a bandwidth and the FMA probe into a throughput.

Sizes are chosen so that on a CPU the probe latencies are spread out (roughly 2x or
more between neighbours when sorted), which keeps their order stable under noise.
Changing any probe (size, compute or schedule) changes what the fingerprint means:
bump `PROBE_SUITE_VERSION`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import tvm
from tvm import te
from tvm.s_tir import Schedule

from schemas import BadInputError

PROBE_SUITE_VERSION = "1"

ProbeCategory = Literal["launch", "memory", "cache", "compute"]
TargetKind = Literal["llvm", "cuda"]

F32 = 4  # bytes per float32
F16 = 2


@dataclass(frozen=True)
class Variant:
    """A probe at the size and with the schedule for one target kind.

    Attributes:
        compute: builds the unscheduled PrimFunc.
        schedule: schedules that PrimFunc in place.
        flops: floating-point operations of one run (an FMA counts as 2).
        bytes: compulsory DRAM traffic of one run (inputs read once, outputs written once).
    """

    compute: Callable[[], tvm.tir.PrimFunc]
    schedule: Callable[[Schedule], None]
    flops: float
    bytes: float


@dataclass(frozen=True)
class Probe:
    """One fixed tensor program of the suite.

    A GPU is about 100x faster than a CPU, so each target kind gets its own size: the
    CPU sizes spread the latencies out, the GPU sizes keep all but the launch probes
    well above launch overhead.

    Attributes:
        name: stable key in `EmpiricalFingerprint.probe_latency_us`.
        category: what the probe stresses (launch, memory, cache, compute).
        variants: per target kind (llvm, cuda), the size and schedule.
    """

    name: str
    category: ProbeCategory
    variants: dict[str, Variant]

    def variant(self, target: tvm.target.Target) -> Variant:
        return self.variants[target_kind(target)]

    def build(self, target: tvm.target.Target) -> tvm.IRModule:
        """The probe as an already scheduled IRModule for `target` (llvm or cuda)."""
        variant = self.variant(target)
        sch = Schedule(tvm.IRModule({"main": variant.compute()}))
        variant.schedule(sch)
        return sch.mod

    def flops(self, target: tvm.target.Target) -> float:
        return self.variant(target).flops

    def bytes(self, target: tvm.target.Target) -> float:
        return self.variant(target).bytes


def target_kind(target: tvm.target.Target) -> TargetKind:
    """The probe schedule family for a target: llvm or cuda."""
    kind = str(target.kind.name)
    if kind not in ("llvm", "cuda"):
        raise BadInputError(f"target kind {kind!r}: the probe suite has llvm and cuda schedules")
    return kind  # type: ignore[return-value]


# --------------------------------------------------------------------------- computes


def _prim(*tensors: te.Tensor) -> tvm.tir.PrimFunc:
    return te.create_prim_func(list(tensors))


def _elementwise_add(n: int, dtype: str = "float32") -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n,), dtype, name="A")
        b = te.placeholder((n,), dtype, name="B")
        c = te.compute((n,), lambda i: a[i] + b[i], name="C")
        return _prim(a, b, c)

    return compute


def _copy(n: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n,), "float32", name="A")
        c = te.compute((n,), lambda i: a[i], name="C")
        return _prim(a, c)

    return compute


def _strided_copy(n: int, stride: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n * stride,), "float32", name="A")
        c = te.compute((n,), lambda i: a[i * stride], name="C")
        return _prim(a, c)

    return compute


def _column_sum(rows: int, cols: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((rows, cols), "float32", name="A")
        k = te.reduce_axis((0, rows), name="k")
        c = te.compute((cols,), lambda j: te.sum(a[k, j], axis=k), name="C")
        return _prim(a, c)

    return compute


def _transpose(n: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n, n), "float32", name="A")
        c = te.compute((n, n), lambda i, j: a[j, i], name="C")
        return _prim(a, c)

    return compute


def _stencil5(n: int) -> Callable[[], tvm.tir.PrimFunc]:
    """5-point stencil over an (n+2)^2 padded grid: no boundary branches."""

    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n + 2, n + 2), "float32", name="A")
        c = te.compute(
            (n, n),
            lambda i, j: (
                (a[i, j + 1] + a[i + 2, j + 1] + a[i + 1, j] + a[i + 1, j + 2] + a[i + 1, j + 1])
                * 0.2
            ),
            name="C",
        )
        return _prim(a, c)

    return compute


def _matmul(m: int, n: int, k: int, dtype: str = "float32") -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((m, k), dtype, name="A")
        b = te.placeholder((k, n), dtype, name="B")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
        return _prim(a, b, c)

    return compute


def _fma_chain(n: int, steps: int, dtype: str = "float32") -> Callable[[], tvm.tir.PrimFunc]:
    """C[i] = sum_s A[i] * B[s]: `steps` dependent FMAs per element, operands in registers."""

    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n,), dtype, name="A")
        b = te.placeholder((steps,), dtype, name="B")
        s = te.reduce_axis((0, steps), name="s")
        c = te.compute((n,), lambda i: te.sum(a[i] * b[s], axis=s), name="C")
        return _prim(a, b, c)

    return compute


def _exp(n: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n,), "float32", name="A")
        c = te.compute((n,), lambda i: te.exp(a[i]) * te.sqrt(te.abs(a[i]) + 1.0), name="C")
        return _prim(a, c)

    return compute


def _batch_matmul(batch: int, size: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((batch, size, size), "float32", name="A")
        b = te.placeholder((batch, size, size), "float32", name="B")
        r = te.reduce_axis((0, size), name="k")
        c = te.compute(
            (batch, size, size),
            lambda z, i, j: te.sum(a[z, i, r] * b[z, r, j], axis=r),
            name="C",
        )
        return _prim(a, b, c)

    return compute


# --------------------------------------------------------------------------- schedules


def _cpu_flat(parallel: bool, lanes: int = 16, chunk: int | None = None) -> Callable:
    """CPU: fuse everything, vectorize `lanes`, parallelize the outer loop if asked."""

    def schedule(sch: Schedule) -> None:
        block = sch.get_sblock("C")
        loops = sch.get_loops(block)
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        outer, vec = sch.split(fused, [None, lanes])
        if parallel:
            if chunk:
                outer, _ = sch.split(outer, [None, chunk])
            sch.parallel(outer)
        sch.vectorize(vec)

    return schedule


def _gpu_flat(threads: int, lanes: int = 1) -> Callable:
    """GPU: fuse everything, one thread per `lanes` elements, `threads` per block."""

    def schedule(sch: Schedule) -> None:
        block = sch.get_sblock("C")
        loops = sch.get_loops(block)
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        if lanes > 1:
            bx, tx, vec = sch.split(fused, [None, threads, lanes])
            sch.vectorize(vec)
        else:
            bx, tx = sch.split(fused, [None, threads])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")

    return schedule


def _cpu_column_sum(sch: Schedule) -> None:
    """Serial: on a small probe a thread pool's wake-up noise would dominate."""
    block = sch.get_sblock("C")
    j, k = sch.get_loops(block)
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(jo, k, ji)
    sch.vectorize(ji)
    init = sch.decompose_reduction(block, k)
    sch.vectorize(sch.get_loops(init)[-1])


def _gpu_column_sum(sch: Schedule) -> None:
    """One thread per column: adjacent threads read adjacent addresses (coalesced)."""
    block = sch.get_sblock("C")
    j, k = sch.get_loops(block)
    bx, tx = sch.split(j, [None, 128])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.annotate(k, "pragma_unroll_explicit", 0)
    sch.annotate(k, "pragma_auto_unroll_max_step", 16)


def _cpu_transpose(sch: Schedule) -> None:
    """Cache-blocked: 16x16 tiles, vectorized along the output row."""
    block = sch.get_sblock("C")
    i, j = sch.get_loops(block)
    io, ii = sch.split(i, [None, 16])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(io, jo, ii, ji)
    sch.parallel(io)
    sch.vectorize(ji)


def _gpu_transpose(sch: Schedule) -> None:
    """32x32 tiles staged through shared memory; reads and writes both coalesced."""
    block = sch.get_sblock("C")
    i, j = sch.get_loops(block)
    bi, ty, ii = sch.split(i, [None, 4, 8])
    bj, tx = sch.split(j, [None, 32])
    sch.reorder(bi, bj, ii, ty, tx)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    shared = sch.cache_read(block, 0, "shared")
    sch.compute_at(shared, bj)
    _cooperative_fetch(sch, shared, ty_extent=4, tx_extent=32)


def _cooperative_fetch(sch: Schedule, block: object, ty_extent: int, tx_extent: int) -> None:
    """All threads of the block copy a tile into shared memory together."""
    loops = sch.get_loops(block)
    # the copy's own loops are the innermost ones, after the loops it was computed at
    n_copy = len(sch.get(block).iter_vars)
    fused = sch.fuse(*loops[-n_copy:])
    _, ty, tx = sch.split(fused, [None, ty_extent, tx_extent])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")


def _cpu_stencil(sch: Schedule) -> None:
    """Serial rows, vectorized along the row."""
    block = sch.get_sblock("C")
    _, j = sch.get_loops(block)
    _, ji = sch.split(j, [None, 16])
    sch.vectorize(ji)


def _gpu_stencil(sch: Schedule) -> None:
    """16x16 output tiles; the (16+2)^2 input tile with halo is staged in shared memory."""
    block = sch.get_sblock("C")
    i, j = sch.get_loops(block)
    bi, ty = sch.split(i, [None, 16])
    bj, tx = sch.split(j, [None, 16])
    sch.reorder(bi, bj, ty, tx)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    shared = sch.cache_read(block, 0, "shared")
    sch.compute_at(shared, bj)
    _cooperative_fetch(sch, shared, ty_extent=16, tx_extent=16)


def _cpu_matmul(tile_i: int, tile_j: int, tile_k: int, parallel: bool = True) -> Callable:
    """Cache-blocked matmul: a local accumulator tile, vectorized along j, parallel over i."""

    def schedule(sch: Schedule) -> None:
        block = sch.get_sblock("C")
        i, j, k = sch.get_loops(block)
        io, ii = sch.split(i, [None, tile_i])
        jo, jv = sch.split(j, [None, tile_j])
        ko, ki = sch.split(k, [None, tile_k])
        sch.reorder(io, jo, ko, ki, ii, jv)
        fused = sch.fuse(io, jo)
        if parallel:
            sch.parallel(fused)
        local = sch.cache_write(block, 0, "global")
        sch.reverse_compute_at(local, fused)
        sch.vectorize(sch.get_loops(local)[-1])
        sch.unroll(ii)
        sch.vectorize(jv)
        init = sch.decompose_reduction(block, ko)
        sch.vectorize(sch.get_loops(init)[-1])

    return schedule


def _gpu_matmul(tile: int, thread_tile: int, tile_k: int) -> Callable:
    """Classic shared-memory tiled matmul: (tile/thread_tile)^2 threads, a register
    tile of thread_tile^2 outputs per thread, A and B tiles cooperatively fetched."""

    def schedule(sch: Schedule) -> None:
        block = sch.get_sblock("C")
        threads = tile // thread_tile
        i, j, k = sch.get_loops(block)
        bi, ty, ii = sch.split(i, [None, threads, thread_tile])
        bj, tx, ji = sch.split(j, [None, threads, thread_tile])
        ko, ki = sch.split(k, [None, tile_k])
        sch.reorder(bi, bj, ty, tx, ko, ki, ii, ji)
        sch.bind(bi, "blockIdx.y")
        sch.bind(bj, "blockIdx.x")
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        local = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(local, tx)
        a_shared = sch.cache_read(block, 0, "shared")
        b_shared = sch.cache_read(block, 1, "shared")
        for stage in (a_shared, b_shared):
            sch.compute_at(stage, ko)
            _cooperative_fetch(sch, stage, ty_extent=threads, tx_extent=threads)
        sch.decompose_reduction(block, ko)
        sch.unroll(ki)
        sch.unroll(ii)
        sch.unroll(ji)

    return schedule


def _cpu_fma(lanes: int, chains: int) -> Callable:
    """`chains` independent vector accumulators per core keep the FMA pipes full."""

    def schedule(sch: Schedule) -> None:
        block = sch.get_sblock("C")
        i, s = sch.get_loops(block)
        io, ic, iv = sch.split(i, [None, chains, lanes])
        sch.reorder(io, s, ic, iv)
        sch.parallel(io)
        local = sch.cache_write(block, 0, "global")
        sch.reverse_compute_at(local, io)
        sch.vectorize(sch.get_loops(local)[-1])
        sch.unroll(ic)
        sch.vectorize(iv)
        init = sch.decompose_reduction(block, s)
        sch.vectorize(sch.get_loops(init)[-1])

    return schedule


def _gpu_fma(threads: int, chains: int) -> Callable:
    """Register-resident FMA chains: each thread keeps `chains` operands of A and as many
    accumulators in registers; B is staged once per block in shared memory and read as a
    broadcast, one shared load per `chains` FMAs."""

    def schedule(sch: Schedule) -> None:
        block = sch.get_sblock("C")
        i, s = sch.get_loops(block)
        bx, tx, ic = sch.split(i, [None, threads, chains])
        sch.reorder(bx, tx, s, ic)
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        local = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(local, tx)
        a_local = sch.cache_read(block, 0, "local")
        sch.compute_at(a_local, tx)
        b_shared = sch.cache_read(block, 1, "shared")
        sch.compute_at(b_shared, bx)
        (copy,) = sch.get_loops(b_shared)[-1:]
        _, copy_tx = sch.split(copy, [None, threads])
        sch.bind(copy_tx, "threadIdx.x")
        sch.decompose_reduction(block, s)
        so, _ = sch.split(s, [None, 8])
        sch.unroll(ic)
        sch.annotate(so, "pragma_auto_unroll_max_step", 64)
        sch.annotate(so, "pragma_unroll_explicit", 1)

    return schedule


def _cpu_batch_matmul(sch: Schedule) -> None:
    block = sch.get_sblock("C")
    z, i, j, k = sch.get_loops(block)
    sch.reorder(z, i, k, j)
    sch.vectorize(j)
    init = sch.decompose_reduction(block, k)
    sch.vectorize(sch.get_loops(init)[-1])


def _gpu_batch_matmul(sch: Schedule) -> None:
    """One block per small matrix, one thread per output element."""
    block = sch.get_sblock("C")
    z, i, j, k = sch.get_loops(block)
    sch.bind(z, "blockIdx.x")
    sch.bind(i, "threadIdx.y")
    sch.bind(j, "threadIdx.x")
    sch.unroll(k)


# --------------------------------------------------------------------------- variants
# Each function returns the probe at one size with one schedule; FLOPs and bytes follow
# from the size.


def _add_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_elementwise_add(n), schedule, flops=n, bytes=3 * n * F32)


def _copy_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_copy(n), schedule, flops=0, bytes=2 * n * F32)


def _strided_variant(n: int, stride: int, schedule: Callable[[Schedule], None]) -> Variant:
    # every strided read brings in its own 32-byte sector / 64-byte line; count the sector
    return Variant(_strided_copy(n, stride), schedule, flops=0, bytes=n * (32 + F32))


def _column_sum_variant(rows: int, cols: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(
        _column_sum(rows, cols), schedule, flops=rows * cols, bytes=(rows + 1) * cols * F32
    )


def _transpose_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_transpose(n), schedule, flops=0, bytes=2 * n * n * F32)


def _stencil_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_stencil5(n), schedule, flops=5 * n * n, bytes=((n + 2) ** 2 + n * n) * F32)


def _matmul_variant(
    m: int, n: int, k: int, schedule: Callable[[Schedule], None], dtype: str = "float32"
) -> Variant:
    size = F16 if dtype == "float16" else F32
    return Variant(
        _matmul(m, n, k, dtype),
        schedule,
        flops=2 * m * n * k,
        bytes=(m * k + k * n + m * n) * size,
    )


def _fma_variant(n: int, steps: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_fma_chain(n, steps), schedule, flops=2 * n * steps, bytes=(2 * n + steps) * F32)


def _exp_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    # exp, abs, add, sqrt, multiply: counted as 5 operations
    return Variant(_exp(n), schedule, flops=5 * n, bytes=2 * n * F32)


def _batch_matmul_variant(batch: int, size: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(
        _batch_matmul(batch, size),
        schedule,
        flops=2 * batch * size**3,
        bytes=3 * batch * size * size * F32,
    )


# --------------------------------------------------------------------------- the suite
# CPU sizes were chosen so that on a 2-core x86 host (AVX-512) the latencies come out
# about 2-3x apart, in this order: launch_tiny < vadd < batch_matmul_tiny < exp_sqrt <
# column_sum < stencil5 < matmul_tiled < hgemm < fma_chain < strided_copy <
# matmul_small_k < transpose < copy_stream (0.05 us to ~15 ms unloaded). Small CPU
# probes run on one thread: a thread pool's wake-up jitter would swamp them. GPU sizes:
# tens of microseconds to a few milliseconds on a T4-class GPU, above launch overhead
# except for launch_tiny.

PROBES: tuple[Probe, ...] = (
    Probe(
        name="launch_tiny",
        category="launch",
        variants={
            "llvm": _add_variant(64, _cpu_flat(parallel=False)),
            "cuda": _add_variant(64, _gpu_flat(threads=64)),
        },
    ),
    Probe(
        name="vadd",
        category="memory",
        variants={
            "llvm": _add_variant(1024, _cpu_flat(parallel=False)),
            "cuda": _add_variant(1 << 20, _gpu_flat(threads=256)),
        },
    ),
    Probe(
        name="exp_sqrt",
        category="compute",
        variants={
            "llvm": _exp_variant(256, _cpu_flat(parallel=False, lanes=8)),
            "cuda": _exp_variant(1 << 22, _gpu_flat(threads=256)),
        },
    ),
    Probe(
        name="batch_matmul_tiny",
        category="launch",
        variants={
            "llvm": _batch_matmul_variant(3, 16, _cpu_batch_matmul),
            "cuda": _batch_matmul_variant(4096, 16, _gpu_batch_matmul),
        },
    ),
    Probe(
        name="column_sum",
        category="memory",
        variants={
            "llvm": _column_sum_variant(48, 1024, _cpu_column_sum),
            "cuda": _column_sum_variant(4096, 4096, _gpu_column_sum),
        },
    ),
    Probe(
        name="stencil5",
        category="cache",
        variants={
            "llvm": _stencil_variant(144, _cpu_stencil),
            "cuda": _stencil_variant(2048, _gpu_stencil),
        },
    ),
    Probe(
        name="matmul_tiled",
        category="cache",
        variants={
            "llvm": _matmul_variant(
                96, 96, 96, _cpu_matmul(tile_i=8, tile_j=32, tile_k=32, parallel=False)
            ),
            "cuda": _matmul_variant(
                1024, 1024, 1024, _gpu_matmul(tile=64, thread_tile=4, tile_k=16)
            ),
        },
    ),
    Probe(
        name="fma_chain",
        category="compute",
        variants={
            "llvm": _fma_variant(12288, 1024, _cpu_fma(lanes=16, chains=8)),
            "cuda": _fma_variant(1 << 22, 1024, _gpu_fma(threads=128, chains=8)),
        },
    ),
    Probe(
        name="strided_copy",
        category="memory",
        variants={
            "llvm": _strided_variant(1 << 17, 16, _cpu_flat(parallel=True, lanes=8, chunk=256)),
            "cuda": _strided_variant(1 << 20, 16, _gpu_flat(threads=256)),
        },
    ),
    Probe(
        name="matmul_small_k",
        category="compute",
        variants={
            "llvm": _matmul_variant(2048, 1024, 16, _cpu_matmul(tile_i=4, tile_j=64, tile_k=16)),
            "cuda": _matmul_variant(4096, 4096, 16, _gpu_matmul(tile=64, thread_tile=4, tile_k=16)),
        },
    ),
    Probe(
        name="hgemm",
        category="compute",
        variants={
            "llvm": _matmul_variant(
                80, 80, 80, _cpu_matmul(8, 16, 16, parallel=False), dtype="float16"
            ),
            "cuda": _matmul_variant(
                1024, 1024, 1024, _gpu_matmul(tile=64, thread_tile=4, tile_k=16), "float16"
            ),
        },
    ),
    Probe(
        name="transpose",
        category="cache",
        variants={
            "llvm": _transpose_variant(1792, _cpu_transpose),
            "cuda": _transpose_variant(4096, _gpu_transpose),
        },
    ),
    Probe(
        name="copy_stream",
        category="memory",
        variants={
            # 2 x 64 MiB: more than any last-level cache or GPU L2 we expect
            "llvm": _copy_variant(1 << 24, _cpu_flat(parallel=True, lanes=16, chunk=1024)),
            "cuda": _copy_variant(1 << 24, _gpu_flat(threads=256, lanes=4)),
        },
    ),
)

PROBES_BY_NAME: dict[str, Probe] = {probe.name: probe for probe in PROBES}

# The probes whose rates the fingerprint reports.
BANDWIDTH_PROBE = "copy_stream"
FMA_PROBE = "fma_chain"
