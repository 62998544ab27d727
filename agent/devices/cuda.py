"""A real NVIDIA GPU: specs from NVML and CUDA attributes, measurements on the GPU.

The raw facts about a GPU (`CudaAttributes`) are read once, from NVML (name, clocks,
memory bus) and from the CUDA runtime through TVM (SMs, per-block limits, compute
capability, L2). Everything else (the analytical specs, the TVM target) is derived
from those facts by pure functions, so the derivation is testable on a machine
without a GPU by handing `CUDADevice` a made-up `CudaAttributes`.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.devices.base import Device
from schemas import AnalyticalSpecs, BadInputError, RunFailure
from simoe_model import tvm_compat

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import meta_schedule as ms

# FP32 cores per SM by compute capability (CUDA C Programming Guide, "Arithmetic
# Instructions" throughput table); a major version alone is the fallback for its minors.
_FP32_CORES_PER_SM: dict[tuple[int, int] | int, int] = {
    3: 192,
    5: 128,
    (6, 0): 64,
    6: 128,
    7: 64,
    (8, 0): 64,
    8: 128,
    9: 128,
    10: 128,
    12: 128,
}
# Non-tensor FP16 rate relative to FP32 (same table); consumer Pascal runs FP16 at 1/64.
_FP16_RATIO: dict[tuple[int, int] | int, float] = {
    3: 1.0,
    5: 1.0,
    (5, 3): 2.0,
    (6, 0): 2.0,
    (6, 2): 2.0,
    6: 1 / 64,
    7: 2.0,
    (8, 0): 4.0,
    8: 1.0,
    9: 2.0,
    10: 2.0,
    12: 1.0,
}
# Shared memory per SM (KiB), resident threads and blocks per SM (Programming Guide,
# "Technical Specifications per Compute Capability").
_SHARED_KB_PER_SM: dict[tuple[int, int] | int, float] = {
    3: 48,
    5: 64,
    (5, 2): 96,
    6: 64,
    (6, 1): 96,
    7: 96,
    (7, 5): 64,
    (8, 0): 164,
    8: 100,
    (8, 7): 164,
    9: 228,
    10: 228,
    12: 100,
}
_THREADS_PER_SM: dict[tuple[int, int] | int, int] = {
    3: 2048,
    5: 2048,
    6: 2048,
    7: 2048,
    (7, 5): 1024,
    (8, 0): 2048,
    8: 1536,
    9: 2048,
    10: 2048,
    12: 1536,
}
_BLOCKS_PER_SM: dict[tuple[int, int] | int, int] = {
    3: 16,
    5: 32,
    6: 32,
    7: 32,
    (7, 5): 16,
    (8, 0): 32,
    8: 16,
    (8, 9): 24,
    9: 32,
    10: 32,
    12: 32,
}
_REGISTERS_PER_SM = 65536  # every compute capability from 5.0 on


def _by_capability(table: dict[tuple[int, int] | int, Any], cc: tuple[int, int]) -> Any:
    """The entry for (major, minor), else for major, else for the newest major below."""
    if cc in table:
        return table[cc]
    if cc[0] in table:
        return table[cc[0]]
    majors = sorted(key for key in table if isinstance(key, int) and key <= cc[0])
    return table[majors[-1] if majors else min(k for k in table if isinstance(k, int))]


@dataclass(frozen=True)
class CudaAttributes:
    """Raw facts about one GPU, as NVML and the CUDA runtime report them."""

    name: str
    sm_count: int
    sm_clock_mhz: float  # maximum (boost) SM clock
    mem_clock_mhz: float  # maximum memory clock as NVML reports it (data rate / 2)
    mem_bus_width_bits: int
    total_memory_bytes: int
    compute_capability: tuple[int, int]
    max_threads_per_block: int
    max_shared_memory_per_block: int
    l2_cache_bytes: int
    warp_size: int = 32


def analytical_specs_from(attrs: CudaAttributes) -> AnalyticalSpecs:
    """The spec-sheet vector of a GPU from its raw attributes."""
    cc = attrs.compute_capability
    cores = _by_capability(_FP32_CORES_PER_SM, cc)
    # An FMA per core per clock, counted as two FLOPs.
    fp32_gflops = attrs.sm_count * cores * 2 * attrs.sm_clock_mhz / 1000
    # NVML's memory clock is half the data rate (DDR); bus width in bits -> bytes.
    bandwidth_gbs = attrs.mem_clock_mhz * 1e6 * 2 * (attrs.mem_bus_width_bits / 8) / 1e9
    return AnalyticalSpecs(
        compute_units=attrs.sm_count,
        clock_mhz=attrs.sm_clock_mhz,
        fp32_gflops=fp32_gflops,
        fp16_gflops=fp32_gflops * _by_capability(_FP16_RATIO, cc),
        mem_bandwidth_gbs=bandwidth_gbs,
        l2_cache_kb=attrs.l2_cache_bytes / 1024,
        shared_mem_per_unit_kb=float(_by_capability(_SHARED_KB_PER_SM, cc)),
        registers_per_unit=_REGISTERS_PER_SM,
        max_threads_per_unit=_by_capability(_THREADS_PER_SM, cc),
        max_blocks_per_unit=_by_capability(_BLOCKS_PER_SM, cc),
        warp_size=attrs.warp_size,
        compute_capability=cc[0] + cc[1] / 10,
    )


def target_config(attrs: CudaAttributes) -> dict[str, Any]:
    """The TVM cuda target dict (without host) for a GPU."""
    major, minor = attrs.compute_capability
    return {
        "kind": "cuda",
        "arch": f"sm_{major}{minor}",
        "max_threads_per_block": attrs.max_threads_per_block,
        "max_shared_memory_per_block": attrs.max_shared_memory_per_block,
        "thread_warp_size": attrs.warp_size,
    }


def _no_gpu(index: int, why: str) -> BadInputError:
    return BadInputError(f"device cuda:{index}: no NVIDIA GPU found ({why})")


def _nvml(index: int) -> Any:
    """pynvml, initialised, with `index` checked against the GPUs NVML sees."""
    try:
        import pynvml
    except ImportError:
        raise _no_gpu(index, "the nvidia-ml-py package is not installed") from None
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        raise _no_gpu(index, f"NVML: {exc}") from None
    if index >= count:
        raise _no_gpu(index, f"NVML sees {count} GPU{'s' if count != 1 else ''}")
    return pynvml


def read_attributes(index: int) -> CudaAttributes:
    """The GPU's raw attributes; a one-line BadInputError when there is no such GPU."""
    pynvml = _nvml(index)
    import tvm

    dev = tvm.cuda(index)
    if not dev.exist:
        raise _no_gpu(index, "NVML sees it but the CUDA runtime cannot open it")
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        sm_clock = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
        mem_clock = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM))
        bus_width = int(pynvml.nvmlDeviceGetMemoryBusWidth(handle))
        total_memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except pynvml.NVMLError as exc:
        raise RunFailure(
            f"device cuda:{index}: reading its NVML attributes failed: {exc}"
        ) from None
    major, minor = (int(part) for part in str(dev.compute_version).split(".")[:2])
    return CudaAttributes(
        name=name,
        sm_count=int(dev.multi_processor_count),
        # NVML can answer 0 on some virtualised GPUs: then the CUDA attribute (kHz)
        sm_clock_mhz=sm_clock or float(dev.max_clock_rate) / 1000,
        mem_clock_mhz=mem_clock,
        mem_bus_width_bits=bus_width,
        total_memory_bytes=total_memory,
        compute_capability=(major, minor),
        max_threads_per_block=int(dev.max_threads_per_block),
        max_shared_memory_per_block=int(dev.max_shared_memory_per_block),
        l2_cache_bytes=int(dev.l2_cache_size_bytes),
        warp_size=int(dev.warp_size),
    )


def _init_gpu_worker(index: int) -> None:
    """MetaSchedule worker initializer: the inspect patch, and only our GPU visible.

    LocalRunner always measures on device 0 of its worker process, so the worker is
    shown only GPU `index` (before it initialises CUDA).
    """
    tvm_compat.install()
    if index != 0:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(index)


class CUDADevice(Device):
    """An NVIDIA GPU through TVM's cuda target; real measurements.

    Args:
        index: the GPU's CUDA index (cuda:N).
        attributes: the GPU's raw attributes; read from NVML and CUDA when omitted
            (tests pass made-up ones: then no GPU is needed, except to measure).
        min_repeat_ms: minimum time of one timed repeat.
    """

    kind = "cuda"
    simulated = False

    _CACHE_SIZE = 32  # compiled modules kept, so interleaved measurements compile once

    def __init__(
        self, index: int = 0, *, attributes: CudaAttributes | None = None, min_repeat_ms: int = 20
    ) -> None:
        super().__init__(f"cuda:{index}")
        if index < 0:
            raise BadInputError(f"device cuda:{index}: a GPU index is 0 or more")
        self.index = index
        self.attributes = attributes if attributes is not None else read_attributes(index)
        self.min_repeat_ms = min_repeat_ms
        self._compiled: OrderedDict[int, Any] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def hardware_name(self) -> str:
        return self.attributes.name

    @functools.cached_property
    def _host(self) -> tvm.target.Target:
        import tvm
        import tvm_ffi

        cpu = str(tvm_ffi.get_global_func("target.llvm_get_system_cpu")())
        return tvm.target.Target({"kind": "llvm", "mcpu": cpu})

    def target(self) -> tvm.target.Target:
        import tvm

        return tvm.target.Target(target_config(self.attributes), host=self._host)

    def analytical_specs(self) -> AnalyticalSpecs:
        return analytical_specs_from(self.attributes)

    def memory_bytes(self) -> int:
        return self.attributes.total_memory_bytes

    def builder(self) -> ms.builder.Builder:
        from tvm.s_tir import meta_schedule as ms

        return ms.builder.LocalBuilder(initializer=tvm_compat.install)

    def runner(self) -> ms.runner.Runner:
        from tvm.s_tir import meta_schedule as ms

        config = ms.runner.EvaluatorConfig(
            number=3, repeat=1, min_repeat_ms=self.min_repeat_ms, enable_cpu_cache_flush=False
        )
        # The runner loads the module, so the CUDA compile (NVRTC) happens there: allow it.
        return ms.runner.LocalRunner(
            evaluator_config=config,
            timeout_sec=60,
            initializer=functools.partial(_init_gpu_worker, self.index),
        )

    def _compile(self, mod: tvm.IRModule) -> Any:
        """The runnable module for `mod`, compiled once (LRU by structural hash)."""
        import tvm
        import tvm_ffi

        key = int(tvm_ffi.structural_hash(mod))
        with self._lock:
            if key in self._compiled:
                self._compiled.move_to_end(key)
                return self._compiled[key]
        try:
            runnable = tvm.compile(mod, target=self.target()).jit()
        except Exception as exc:  # noqa: BLE001 - TVM and NVRTC raise many kinds
            first = str(exc).strip().splitlines()
            raise RunFailure(
                f"building for {self.name} failed: {first[0] if first else type(exc).__name__}"
            ) from exc
        with self._lock:
            self._compiled[key] = runnable
            while len(self._compiled) > self._CACHE_SIZE:
                self._compiled.popitem(last=False)
        return runnable

    def measure(self, mod: tvm.IRModule, repeat: int = 5) -> list[float]:
        """Build `mod` (scheduled) for this GPU and time `main` on random inputs."""
        import tvm
        from tvm.s_tir import meta_schedule as ms

        runnable = self._compile(mod)
        device = tvm.cuda(self.index)
        rng = np.random.default_rng(0)
        try:
            args = [
                tvm.runtime.tensor(rng.random(info.shape).astype(info.dtype), device)
                for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])
            ]
            timer = runnable.time_evaluator(
                "main", device, number=1, repeat=repeat, min_repeat_ms=self.min_repeat_ms
            )
            results = timer(*args).results
            device.sync()
        except Exception as exc:  # noqa: BLE001 - a launch failure surfaces as a TVM error
            first = str(exc).strip().splitlines()
            raise RunFailure(
                f"running on {self.name} failed: {first[0] if first else type(exc).__name__}"
            ) from exc
        return [float(s) for s in results]
