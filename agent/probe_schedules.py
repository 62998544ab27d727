"""Hand-written probe schedules, one family per target kind.

For `llvm` a CPU schedule (parallel outer loop, vectorized inner loop, cache blocking),
for `cuda` a thread-bound GPU schedule (blockIdx/threadIdx bindings, shared-memory cache
stages, unroll annotations). They are deliberately plain, so that the simulated GPU's
analytical model can read them as well as a real GPU runs them. Each schedules the
probe's block "C" in place.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm.s_tir import Schedule


def cpu_flat(parallel: bool, lanes: int = 16, chunk: int | None = None) -> Callable:
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


def gpu_flat(threads: int, lanes: int = 1) -> Callable:
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


def cpu_column_sum(sch: Schedule) -> None:
    """Serial: on a small probe a thread pool's wake-up noise would dominate."""
    block = sch.get_sblock("C")
    j, k = sch.get_loops(block)
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(jo, k, ji)
    sch.vectorize(ji)
    init = sch.decompose_reduction(block, k)
    sch.vectorize(sch.get_loops(init)[-1])


def gpu_column_sum(sch: Schedule) -> None:
    """One thread per column: adjacent threads read adjacent addresses (coalesced)."""
    block = sch.get_sblock("C")
    j, k = sch.get_loops(block)
    bx, tx = sch.split(j, [None, 128])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.annotate(k, "pragma_unroll_explicit", 0)
    sch.annotate(k, "pragma_auto_unroll_max_step", 16)


def cpu_transpose(sch: Schedule) -> None:
    """Cache-blocked: 16x16 tiles, vectorized along the output row."""
    block = sch.get_sblock("C")
    i, j = sch.get_loops(block)
    io, ii = sch.split(i, [None, 16])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(io, jo, ii, ji)
    sch.parallel(io)
    sch.vectorize(ji)


def gpu_transpose(sch: Schedule) -> None:
    """32x32 tiles staged through shared memory; reads and writes both coalesced."""
    block = sch.get_sblock("C")
    i, j = sch.get_loops(block)
    bi, ty, ii = sch.split(i, [None, 4, 8])
    bj, tx = sch.split(j, [None, 32])
    sch.reorder(bi, bj, ii, ty, tx)
    _bind_tiles(sch, bi, bj, ty, tx)
    _stage_input(sch, block, at=bj, ty_extent=4, tx_extent=32)


def _bind_tiles(sch: Schedule, bi: object, bj: object, ty: object, tx: object) -> None:
    """GPU: a block per output tile (y over rows, x over columns), a thread per tile cell."""
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")


def _stage_input(
    sch: Schedule, block: object, *, at: object, ty_extent: int, tx_extent: int
) -> None:
    """GPU: the block's tile of input 0 copied into shared memory at loop `at`, by all threads."""
    shared = sch.cache_read(block, 0, "shared")
    sch.compute_at(shared, at)
    _cooperative_fetch(sch, shared, ty_extent=ty_extent, tx_extent=tx_extent)


def _cooperative_fetch(sch: Schedule, block: object, ty_extent: int, tx_extent: int) -> None:
    """All threads of the block copy a tile into shared memory together."""
    loops = sch.get_loops(block)
    # the copy's own loops are the innermost ones, after the loops it was computed at
    n_copy = len(sch.get(block).iter_vars)
    fused = sch.fuse(*loops[-n_copy:])
    _, ty, tx = sch.split(fused, [None, ty_extent, tx_extent])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")


def cpu_stencil(sch: Schedule) -> None:
    """Serial rows, vectorized along the row."""
    block = sch.get_sblock("C")
    _, j = sch.get_loops(block)
    _, ji = sch.split(j, [None, 16])
    sch.vectorize(ji)


def gpu_stencil(sch: Schedule) -> None:
    """16x16 output tiles; the (16+2)^2 input tile with halo is staged in shared memory."""
    block = sch.get_sblock("C")
    i, j = sch.get_loops(block)
    bi, ty = sch.split(i, [None, 16])
    bj, tx = sch.split(j, [None, 16])
    sch.reorder(bi, bj, ty, tx)
    _bind_tiles(sch, bi, bj, ty, tx)
    _stage_input(sch, block, at=bj, ty_extent=16, tx_extent=16)


def _vector_accumulators(
    sch: Schedule, block: object, *, at: object, rows: object, lanes: object, reduction: object
) -> None:
    """CPU: accumulate in a local tile of `rows` (unrolled) x `lanes` (vectorized) registers,
    written back at loop `at`; the tile's zeroing, split off at `reduction`, is vectorized."""
    local = sch.cache_write(block, 0, "global")
    sch.reverse_compute_at(local, at)
    sch.vectorize(sch.get_loops(local)[-1])
    sch.unroll(rows)
    sch.vectorize(lanes)
    init = sch.decompose_reduction(block, reduction)
    sch.vectorize(sch.get_loops(init)[-1])


def cpu_matmul(tile_i: int, tile_j: int, tile_k: int, parallel: bool = True) -> Callable:
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
        _vector_accumulators(sch, block, at=fused, rows=ii, lanes=jv, reduction=ko)

    return schedule


def gpu_matmul(tile: int, thread_tile: int, tile_k: int) -> Callable:
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
        _bind_tiles(sch, bi, bj, ty, tx)
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


def cpu_fma(lanes: int, chains: int) -> Callable:
    """`chains` independent vector accumulators per core keep the FMA pipes full."""

    def schedule(sch: Schedule) -> None:
        block = sch.get_sblock("C")
        i, s = sch.get_loops(block)
        io, ic, iv = sch.split(i, [None, chains, lanes])
        sch.reorder(io, s, ic, iv)
        sch.parallel(io)
        _vector_accumulators(sch, block, at=io, rows=ic, lanes=iv, reduction=s)

    return schedule


def gpu_fma(threads: int, chains: int) -> Callable:
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


def cpu_batch_matmul(sch: Schedule) -> None:
    block = sch.get_sblock("C")
    z, i, j, k = sch.get_loops(block)
    sch.reorder(z, i, k, j)
    sch.vectorize(j)
    init = sch.decompose_reduction(block, k)
    sch.vectorize(sch.get_loops(init)[-1])


def gpu_batch_matmul(sch: Schedule) -> None:
    """One block per small matrix, one thread per output element."""
    block = sch.get_sblock("C")
    z, i, j, k = sch.get_loops(block)
    sch.bind(z, "blockIdx.x")
    sch.bind(i, "threadIdx.y")
    sch.bind(j, "threadIdx.x")
    sch.unroll(k)
