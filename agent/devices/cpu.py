"""The host CPU: TVM's llvm target with the host's -mcpu, real measurements.

Without `mcpu` LLVM emits generic x86-64 code (about 4.6x slower), so the target
always names the host CPU. The analytical specs are what the OS tells
(cores, clock, SIMD width, caches); DRAM bandwidth is not exposed anywhere a
process can read, so the spec value is a stated estimate and the profiler's
measured bandwidth is what the model relies on.
"""

from __future__ import annotations

import functools
import platform
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import psutil

from agent.devices.base import Device
from schemas import AnalyticalSpecs, RunFailure
from simoe_model import tvm_compat

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import meta_schedule as ms

# An assumed DRAM bandwidth per physical core when nothing better is known (GB/s).
_ESTIMATED_BANDWIDTH_PER_CORE_GBS = 10.0
# MetaSchedule's 30 s default kills builds whose worker is still importing TVM on a
# busy machine; a slow build is better than a candidate lost as a "timeout".
_WORKER_TIMEOUT_S = 120.0


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _cache_kb(level: int, kind: str = "Data") -> float | None:
    """Size of the cache of a level (from sysfs), in KiB."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")):
        try:
            if int((index / "level").read_text()) != level:
                continue
            if level == 1 and (index / "type").read_text().strip() != kind:
                continue
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        match = re.fullmatch(r"(\d+)([KMG]?)", size)
        if match:
            scale = {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024 * 1024}[match.group(2)]
            return int(match.group(1)) * scale
    return None


def _simd_lanes_fp32(flags: set[str]) -> int:
    if "avx512f" in flags:
        return 16
    if "avx2" in flags or "avx" in flags:
        return 8
    return 4  # SSE / NEON


# FMA pipes per core by LLVM cpu name where it is not 2 (Haswell and later Intel cores, Zen 2
# and later). Zen 1 splits a 256-bit FMA over its two 128-bit pipes: one per cycle. Sources:
# AMD's and Intel's optimization manuals; Agner Fog's instruction tables.
_FMA_PIPES = {"znver1": 1, "btver2": 1, "bdver4": 1}


def fma_pipes(mcpu: str, flags: set[str]) -> int:
    """Full-width vector FMA instructions one core issues per cycle."""
    if "fma" not in flags and "avx512f" not in flags:
        return 1
    return _FMA_PIPES.get(mcpu, 2)


class CPUDevice(Device):
    """This machine's CPU through LLVM.

    Args:
        num_cores: threads TVM may use (default: the physical cores).
        min_repeat_ms: minimum time of one timed repeat in the runner.
    """

    kind = "cpu"
    simulated = False

    def __init__(self, num_cores: int | None = None, min_repeat_ms: int = 50) -> None:
        super().__init__("cpu")
        self.num_cores = num_cores or psutil.cpu_count(logical=False) or 1
        self.min_repeat_ms = min_repeat_ms

    @functools.cached_property
    def _flags(self) -> set[str]:
        match = re.search(r"^flags\s*:\s*(.*)$", _cpuinfo(), re.MULTILINE)
        return set(match.group(1).split()) if match else set()

    @property
    def hardware_name(self) -> str:
        match = re.search(r"^model name\s*:\s*(.*)$", _cpuinfo(), re.MULTILINE)
        return match.group(1).strip() if match else (platform.processor() or platform.machine())

    @functools.cached_property
    def mcpu(self) -> str:
        import tvm  # noqa: F401  (loading libtvm registers the function)
        import tvm_ffi

        return str(tvm_ffi.get_global_func("target.llvm_get_system_cpu")())

    def target(self) -> tvm.target.Target:
        import tvm

        return tvm.target.Target({"kind": "llvm", "num-cores": self.num_cores, "mcpu": self.mcpu})

    def memory_bytes(self) -> int:
        return int(psutil.virtual_memory().total)

    def analytical_specs(self) -> AnalyticalSpecs:
        freq = psutil.cpu_freq()
        clock_mhz = (freq.max or freq.current) if freq else 0.0
        if not clock_mhz:
            match = re.search(r"^cpu MHz\s*:\s*([\d.]+)", _cpuinfo(), re.MULTILINE)
            clock_mhz = float(match.group(1)) if match else 2000.0
        lanes = _simd_lanes_fp32(self._flags)
        # FMA counts as two FLOPs; one FMA per pipe per lane per cycle. The OS clock is
        # often the base clock: bench/compile/cpu_peak.py checks this against a measured FMA loop.
        pipes = fma_pipes(self.mcpu, self._flags)
        fp32_gflops = self.num_cores * clock_mhz / 1000 * lanes * 2 * pipes
        logical = psutil.cpu_count(logical=True) or self.num_cores
        return AnalyticalSpecs(
            compute_units=self.num_cores,
            clock_mhz=clock_mhz,
            fp32_gflops=fp32_gflops,
            fp16_gflops=fp32_gflops,  # no native FP16 arithmetic assumed
            mem_bandwidth_gbs=_ESTIMATED_BANDWIDTH_PER_CORE_GBS * self.num_cores,
            l2_cache_kb=_cache_kb(3) or _cache_kb(2) or 1024.0,
            shared_mem_per_unit_kb=_cache_kb(1) or 32.0,
            registers_per_unit=(32 if lanes == 16 else 16) * lanes,
            max_threads_per_unit=max(1, logical // self.num_cores),
            max_blocks_per_unit=1,
            warp_size=lanes,
            compute_capability=0.0,
        )

    def builder(self) -> ms.builder.Builder:
        from tvm.s_tir import meta_schedule as ms

        return ms.builder.LocalBuilder(
            timeout_sec=_WORKER_TIMEOUT_S, initializer=tvm_compat.install
        )

    def runner(self) -> ms.runner.Runner:
        from tvm.s_tir import meta_schedule as ms

        config = ms.runner.EvaluatorConfig(
            number=3, repeat=1, min_repeat_ms=self.min_repeat_ms, enable_cpu_cache_flush=False
        )
        return ms.runner.LocalRunner(
            timeout_sec=_WORKER_TIMEOUT_S, evaluator_config=config, initializer=tvm_compat.install
        )

    def measure(self, mod: tvm.IRModule, repeat: int = 5) -> list[float]:
        """Build `mod` (scheduled) for this CPU and time `main` on random inputs."""
        import tvm
        from tvm.s_tir import meta_schedule as ms

        try:
            executable = tvm.compile(mod, target=self.target())
        except Exception as exc:  # noqa: BLE001 - TVM raises many kinds
            raise RunFailure(f"building for cpu failed: {str(exc).splitlines()[0]}") from exc
        device = tvm.cpu()
        rng = np.random.default_rng(0)
        args = [
            # float32 draws: float64 ones and a cast cost 10x more on large probe inputs
            tvm.runtime.tensor(
                rng.random(tuple(info.shape), dtype=np.float32).astype(info.dtype), device
            )
            for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        ]
        timer = executable.mod.time_evaluator(
            "main", device, number=1, repeat=repeat, min_repeat_ms=5
        )
        return [float(s) for s in timer(*args).results]
