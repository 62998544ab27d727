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

This module is the suite; each probe's compute and cost are in `agent.probe_computes`,
its schedules in `agent.probe_schedules`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import tvm
from tvm.s_tir import Schedule

from agent.probe_computes import (
    Variant,
    add_variant,
    batch_matmul_variant,
    column_sum_variant,
    copy_variant,
    exp_variant,
    fma_variant,
    matmul_variant,
    stencil_variant,
    strided_variant,
    transpose_variant,
)
from agent.probe_schedules import (
    cpu_batch_matmul,
    cpu_column_sum,
    cpu_flat,
    cpu_fma,
    cpu_matmul,
    cpu_stencil,
    cpu_transpose,
    gpu_batch_matmul,
    gpu_column_sum,
    gpu_flat,
    gpu_fma,
    gpu_matmul,
    gpu_stencil,
    gpu_transpose,
)
from schemas import BadInputError, EmpiricalFingerprint

PROBE_SUITE_VERSION = "1"

ProbeCategory = Literal["launch", "memory", "cache", "compute"]
TargetKind = Literal["llvm", "cuda"]


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
            "llvm": add_variant(64, cpu_flat(parallel=False)),
            "cuda": add_variant(64, gpu_flat(threads=64)),
        },
    ),
    Probe(
        name="vadd",
        category="memory",
        variants={
            "llvm": add_variant(1024, cpu_flat(parallel=False)),
            "cuda": add_variant(1 << 20, gpu_flat(threads=256)),
        },
    ),
    Probe(
        name="exp_sqrt",
        category="compute",
        variants={
            "llvm": exp_variant(256, cpu_flat(parallel=False, lanes=8)),
            "cuda": exp_variant(1 << 22, gpu_flat(threads=256)),
        },
    ),
    Probe(
        name="batch_matmul_tiny",
        category="launch",
        variants={
            "llvm": batch_matmul_variant(3, 16, cpu_batch_matmul),
            "cuda": batch_matmul_variant(4096, 16, gpu_batch_matmul),
        },
    ),
    Probe(
        name="column_sum",
        category="memory",
        variants={
            "llvm": column_sum_variant(48, 1024, cpu_column_sum),
            "cuda": column_sum_variant(4096, 4096, gpu_column_sum),
        },
    ),
    Probe(
        name="stencil5",
        category="cache",
        variants={
            "llvm": stencil_variant(144, cpu_stencil),
            "cuda": stencil_variant(2048, gpu_stencil),
        },
    ),
    Probe(
        name="matmul_tiled",
        category="cache",
        variants={
            "llvm": matmul_variant(
                96, 96, 96, cpu_matmul(tile_i=8, tile_j=32, tile_k=32, parallel=False)
            ),
            "cuda": matmul_variant(1024, 1024, 1024, gpu_matmul(tile=64, thread_tile=4, tile_k=16)),
        },
    ),
    Probe(
        name="fma_chain",
        category="compute",
        variants={
            "llvm": fma_variant(12288, 1024, cpu_fma(lanes=16, chains=8)),
            "cuda": fma_variant(1 << 22, 1024, gpu_fma(threads=128, chains=8)),
        },
    ),
    Probe(
        name="strided_copy",
        category="memory",
        variants={
            "llvm": strided_variant(1 << 17, 16, cpu_flat(parallel=True, lanes=8, chunk=256)),
            "cuda": strided_variant(1 << 20, 16, gpu_flat(threads=256)),
        },
    ),
    Probe(
        name="matmul_small_k",
        category="compute",
        variants={
            "llvm": matmul_variant(2048, 1024, 16, cpu_matmul(tile_i=4, tile_j=64, tile_k=16)),
            "cuda": matmul_variant(4096, 4096, 16, gpu_matmul(tile=64, thread_tile=4, tile_k=16)),
        },
    ),
    Probe(
        name="hgemm",
        category="compute",
        variants={
            "llvm": matmul_variant(
                80, 80, 80, cpu_matmul(8, 16, 16, parallel=False), dtype="float16"
            ),
            "cuda": matmul_variant(
                1024, 1024, 1024, gpu_matmul(tile=64, thread_tile=4, tile_k=16), "float16"
            ),
        },
    ),
    Probe(
        name="transpose",
        category="cache",
        variants={
            "llvm": transpose_variant(1792, cpu_transpose),
            "cuda": transpose_variant(4096, gpu_transpose),
        },
    ),
    Probe(
        name="copy_stream",
        category="memory",
        variants={
            # 2 x 64 MiB: more than any last-level cache or GPU L2 we expect
            "llvm": copy_variant(1 << 24, cpu_flat(parallel=True, lanes=16, chunk=1024)),
            "cuda": copy_variant(1 << 24, gpu_flat(threads=256, lanes=4)),
        },
    ),
)

PROBES_BY_NAME: dict[str, Probe] = {probe.name: probe for probe in PROBES}

# The probes whose rates the fingerprint reports.
BANDWIDTH_PROBE = "copy_stream"
FMA_PROBE = "fma_chain"

# Smallest latency reported: PositiveFloat must hold even for a timer that rounds to 0.
MIN_LATENCY_US = 1e-3


def fingerprint_from(
    latencies_s: Mapping[str, float], *, stream_bytes: float, fma_flops: float
) -> EmpiricalFingerprint:
    """The empirical fingerprint from the suite's median latencies (seconds per run).

    The one derivation of it: the profiler passes what it measured here and the sizes of
    its own target's probes, the bundle importer what a GPU run measured and the sizes the
    exported probes had. Bandwidth is the stream probe's bytes over its latency, the FMA
    rate the FMA probe's flops over its latency.
    """
    return EmpiricalFingerprint(
        probe_suite_version=PROBE_SUITE_VERSION,
        probe_latency_us={
            name: max(secs * 1e6, MIN_LATENCY_US) for name, secs in latencies_s.items()
        },
        bandwidth_gbs=stream_bytes / latencies_s[BANDWIDTH_PROBE] / 1e9,
        fma_gflops=fma_flops / latencies_s[FMA_PROBE] / 1e9,
    )
