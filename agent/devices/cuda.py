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


def visible_device_for(index: int, environ: dict[str, str] | None = None) -> str:
    """The CUDA_VISIBLE_DEVICES value that shows a worker only GPU `index` (as CUDA counts).

    A user's own CUDA_VISIBLE_DEVICES is respected: `cuda:N` is its Nth entry, so the
    worker sees that GPU and no other, never one the user hid.
    """
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return str(index)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if index >= len(entries):
        raise _no_gpu(index, f"CUDA_VISIBLE_DEVICES={visible} shows {len(entries)} GPU(s)")
    return entries[index]


def nvml_handle_for(pynvml: Any, index: int, environ: dict[str, str] | None = None) -> Any:
    """NVML's handle of CUDA's GPU `index`.

    NVML counts every GPU in PCI order and ignores CUDA_VISIBLE_DEVICES; CUDA counts
    only the visible ones (in PCI order with CUDA_DEVICE_ORDER=PCI_BUS_ID, which the
    agent sets). So map through the visible list: an entry is an NVML index or a UUID.
    """
    entry = visible_device_for(index, environ)
    if entry.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    return pynvml.nvmlDeviceGetHandleByUUID(entry)


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


def nvml_fields(pynvml: Any, handle: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """NVML's facts about one GPU, each queried on its own: (values, errors by field).

    A field this GPU or driver does not support (bus width, max clocks on some
    virtualised GPUs) is left out with its reason; the caller falls back to CUDA.
    """
    queries = {
        "name": lambda: pynvml.nvmlDeviceGetName(handle),
        "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "mem_bus_width_bits": lambda: pynvml.nvmlDeviceGetMemoryBusWidth(handle),
        "total_memory_bytes": lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).total,
    }
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for key, query in queries.items():
        try:
            value = query()
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported and friends
            errors[key] = str(exc) or type(exc).__name__
            continue
        values[key] = value.decode() if isinstance(value, bytes) else value
    return values, errors


def attributes_from_report(facts: dict[str, Any]) -> CudaAttributes:
    """CudaAttributes from what a thin node's runner reported (NVML first, then CUDA)."""

    def first(*keys: str, scale: float = 1.0) -> float:
        for key in keys:
            value = facts.get(key)
            if value:
                return float(value) * (scale if key.startswith("cuda_") else 1.0)
        raise BadInputError(f"the GPU report lacks {' and '.join(keys)}")

    cc = facts.get("compute_capability") or [0, 0]
    return CudaAttributes(
        name=str(facts.get("name") or facts.get("nvml_name") or "unknown NVIDIA GPU"),
        sm_count=int(first("sm_count")),
        sm_clock_mhz=first("sm_clock_mhz", "cuda_sm_clock_khz", scale=1e-3),
        mem_clock_mhz=first("mem_clock_mhz", "cuda_mem_clock_khz", scale=1e-3),
        mem_bus_width_bits=int(first("mem_bus_width_bits", "cuda_mem_bus_width_bits")),
        total_memory_bytes=int(first("total_memory_bytes")),
        compute_capability=(int(cc[0]), int(cc[1])),
        max_threads_per_block=int(facts.get("max_threads_per_block") or 1024),
        max_shared_memory_per_block=int(facts.get("max_shared_memory_per_block") or 49152),
        l2_cache_bytes=int(first("l2_cache_bytes")),
        warp_size=int(facts.get("warp_size") or 32),
    )


def read_attributes(index: int) -> CudaAttributes:
    """The GPU's raw attributes; a one-line BadInputError when there is no such GPU."""
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # NVML's order, before CUDA starts
    pynvml = _nvml(index)
    import tvm

    dev = tvm.cuda(index)
    if not dev.exist:
        from agent.devices.cuda_env import cuda_load_failure

        cause = cuda_load_failure() or "NVML sees it but the CUDA runtime cannot open it"
        raise _no_gpu(index, cause)
    try:
        handle = nvml_handle_for(pynvml, index)
    except Exception as exc:  # noqa: BLE001 - pynvml.NVMLError and a bad UUID
        raise RunFailure(f"device cuda:{index}: NVML cannot find it: {exc}") from None
    nvml, _errors = nvml_fields(pynvml, handle)
    major, minor = (int(part) for part in str(dev.compute_version).split(".")[:2])
    # CUDA's own clock attributes are kHz; NVML can answer 0 or "not supported".
    mem_clock = float(nvml.get("mem_clock_mhz") or 0)
    bus_width = int(nvml.get("mem_bus_width_bits") or 0)
    memory = int(nvml.get("total_memory_bytes") or 0)
    return CudaAttributes(
        name=str(nvml.get("name") or f"NVIDIA GPU cuda:{index}"),
        sm_count=int(dev.multi_processor_count),
        sm_clock_mhz=float(nvml.get("sm_clock_mhz") or 0) or float(dev.max_clock_rate) / 1000,
        mem_clock_mhz=mem_clock or _cuda_attribute(index, "MEMORY_CLOCK_RATE") / 1000,
        mem_bus_width_bits=bus_width or int(_cuda_attribute(index, "GLOBAL_MEMORY_BUS_WIDTH")),
        total_memory_bytes=memory or int(dev.total_global_memory or 0),
        compute_capability=(major, minor),
        max_threads_per_block=int(dev.max_threads_per_block),
        max_shared_memory_per_block=int(dev.max_shared_memory_per_block),
        l2_cache_bytes=int(dev.l2_cache_size_bytes),
        warp_size=int(dev.warp_size),
    )  # fmt: skip


def _cuda_attribute(index: int, name: str) -> float:
    """A CUDA device attribute through cuda-bindings (the fallback for NVML); 0 if unknown."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0.0
    try:
        driver.cuInit(0)
        err, dev = driver.cuDeviceGet(index)
        attr = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        err2, value = driver.cuDeviceGetAttribute(attr, dev)
    except Exception:  # noqa: BLE001
        return 0.0
    return float(value) if int(err) == 0 and int(err2) == 0 else 0.0


def _init_gpu_worker(visible: str) -> None:
    """MetaSchedule runner worker initializer: the inspect patch, and only our GPU visible.

    LocalRunner always measures on device 0 of its worker process, so the worker is
    shown only our GPU (before it initialises CUDA), within what the user made visible.
    """
    tvm_compat.install()
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    os.environ["CUDA_VISIBLE_DEVICES"] = visible


def build_in_target(mod: Any, target: Any, params: Any) -> Any:
    """MetaSchedule's default build, under `with target:`.

    TVM 0.27 compiles CUDA in a Python callback that reads the arch from the current
    target, else from `tvm.cuda(0)` of the compiling process: without the scope every
    builder worker starts CUDA, and cuda:N on a mixed box compiles for GPU 0.
    """
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build

    with target:
        return default_build(mod, target, params)


def _warm_builder_worker() -> None:
    """Builder worker initializer: the inspect patch, then TVM's slow imports (untimed)."""
    tvm_compat.install()
    import tvm.s_tir.tensor_intrin  # noqa: F401
    from tvm.s_tir.meta_schedule.builder import local_builder  # noqa: F401


def export_shared_library(rt_mod: Any) -> str:
    """Link the built module into a .so here, in the builder, so the runner needs no g++."""
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="simoe-cuda-"), "candidate.so")
    rt_mod.export_library(path)
    return path


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
        from agent.devices.cuda_failfast import FailureLog

        self.failures = FailureLog(limit=16)  # the first build/run errors, for reports

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
        """LocalBuilder under `with target:`, linking a .so; stops early when nothing builds."""
        from tvm.s_tir import meta_schedule as ms

        from agent.devices.cuda_env import export_cuda_root
        from agent.devices.cuda_failfast import FailFastBuilder

        export_cuda_root()  # the workers inherit CUDA_PATH: TVM finds the real headers
        inner = ms.builder.LocalBuilder(
            initializer=_warm_builder_worker,
            f_build=build_in_target,
            f_export=export_shared_library,
        )
        return FailFastBuilder(inner, self.failures)

    def runner(self) -> ms.runner.Runner:
        """LocalRunner on this GPU alone; loads the builder's .so (no g++ needed here)."""
        from tvm.s_tir import meta_schedule as ms

        from agent.devices.cuda_failfast import FailFastRunner

        config = ms.runner.EvaluatorConfig(
            number=3, repeat=1, min_repeat_ms=self.min_repeat_ms, enable_cpu_cache_flush=False
        )
        inner = ms.runner.LocalRunner(
            evaluator_config=config,
            timeout_sec=60,
            initializer=functools.partial(_init_gpu_worker, visible_device_for(self.index)),
        )
        return FailFastRunner(inner, self.failures)

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
            target = self.target()
            with target:  # the arch reaches the CUDA compile callback (see build_in_target)
                runnable = tvm.compile(mod, target=target).jit()
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
