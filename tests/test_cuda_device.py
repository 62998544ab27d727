"""The CUDA device without a GPU: spec derivation from raw attributes, and the no-GPU error."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# isort: split
import tvm

from agent.devices import get_device
from agent.devices.cuda import CudaAttributes, CUDADevice, analytical_specs_from, target_config
from schemas import BadInputError


def _attrs(**overrides: object) -> CudaAttributes:
    base: dict[str, object] = dict(
        name="NVIDIA A100-SXM4-40GB", sm_count=108, sm_clock_mhz=1410, mem_clock_mhz=1215,
        mem_bus_width_bits=5120, total_memory_bytes=40 << 30, compute_capability=(8, 0),
        max_threads_per_block=1024, max_shared_memory_per_block=49152, l2_cache_bytes=40 << 20,
    )  # fmt: skip
    base.update(overrides)
    return CudaAttributes(**base)  # type: ignore[arg-type]


# name: (raw attributes, spec sheet FP32 TFLOP/s, FP16 non-tensor TFLOP/s, GB/s)
SPEC_SHEETS = {
    "A100": (_attrs(), 19.5, 78.0, 1555),
    "T4": (
        _attrs(name="Tesla T4", sm_count=40, sm_clock_mhz=1590, mem_clock_mhz=5001,
               mem_bus_width_bits=256, compute_capability=(7, 5), l2_cache_bytes=4 << 20),
        8.1, 16.2, 320,
    ),
    "RTX 3090": (
        _attrs(name="NVIDIA GeForce RTX 3090", sm_count=82, sm_clock_mhz=1695,
               mem_clock_mhz=9751, mem_bus_width_bits=384, compute_capability=(8, 6)),
        35.6, 35.6, 936,
    ),
    "H100 SXM": (
        _attrs(name="NVIDIA H100 80GB HBM3", sm_count=132, sm_clock_mhz=1980,
               mem_clock_mhz=2619, mem_bus_width_bits=5120, compute_capability=(9, 0)),
        66.9, 133.8, 3352,
    ),
    "GTX 1080": (
        _attrs(name="NVIDIA GeForce GTX 1080", sm_count=20, sm_clock_mhz=1733,
               mem_clock_mhz=5005, mem_bus_width_bits=256, compute_capability=(6, 1)),
        8.87, 0.139, 320,
    ),
}  # fmt: skip


@pytest.mark.parametrize("gpu", list(SPEC_SHEETS))
def test_specs_from_attributes_match_the_spec_sheet(gpu: str) -> None:
    attrs, fp32_tflops, fp16_tflops, bandwidth = SPEC_SHEETS[gpu]
    specs = analytical_specs_from(attrs)
    assert specs.fp32_gflops / 1000 == pytest.approx(fp32_tflops, rel=0.02)
    assert specs.fp16_gflops / 1000 == pytest.approx(fp16_tflops, rel=0.02)
    assert specs.mem_bandwidth_gbs == pytest.approx(bandwidth, rel=0.01)
    assert specs.compute_units == attrs.sm_count
    assert specs.compute_capability == pytest.approx(
        attrs.compute_capability[0] + attrs.compute_capability[1] / 10
    )
    assert specs.l2_cache_kb == attrs.l2_cache_bytes / 1024


@settings(max_examples=60, deadline=None)
@given(
    sm_count=st.integers(1, 256),
    clock=st.floats(300, 3000),
    mem_clock=st.floats(500, 12000),
    bus=st.sampled_from([64, 128, 192, 256, 320, 384, 4096, 5120, 6144]),
    cc=st.tuples(st.integers(3, 13), st.integers(0, 9)),
)
def test_any_plausible_gpu_gives_valid_specs(
    sm_count: int, clock: float, mem_clock: float, bus: int, cc: tuple[int, int]
) -> None:
    specs = analytical_specs_from(
        _attrs(sm_count=sm_count, sm_clock_mhz=clock, mem_clock_mhz=mem_clock,
               mem_bus_width_bits=bus, compute_capability=cc)
    )  # fmt: skip
    cores_per_sm = specs.fp32_gflops * 1000 / (2 * sm_count * clock)
    assert round(cores_per_sm, 6) in (64, 128, 192)
    assert specs.max_threads_per_unit >= 1024 and specs.registers_per_unit == 65536


def test_target_is_the_gpus_cuda_target_with_an_llvm_host() -> None:
    attrs = _attrs(compute_capability=(8, 6), max_shared_memory_per_block=101376)
    assert target_config(attrs) == {
        "kind": "cuda",
        "arch": "sm_86",
        "max_threads_per_block": 1024,
        "max_shared_memory_per_block": 101376,
        "thread_warp_size": 32,
    }
    device = CUDADevice(1, attributes=attrs)
    target = device.target()
    assert target.kind.name == "cuda" and str(target.attrs["arch"]) == "sm_86"
    assert target.host is not None and target.host.kind.name == "llvm"
    assert device.name == "cuda:1" and device.kind == "cuda" and not device.simulated
    assert device.hardware_name == attrs.name
    assert device.analytical_specs() == analytical_specs_from(attrs)


def test_probes_build_for_the_gpus_target() -> None:
    from agent.probes import PROBES_BY_NAME

    target = CUDADevice(0, attributes=_attrs()).target()
    mod = PROBES_BY_NAME["matmul_tiled"].build(target)
    source = tvm.compile(mod, target=target).mod.imports[0].inspect_source("cuda")
    assert "__shared__" in source


# --------------------------------------------------------------------------- no GPU

HAS_GPU = bool(tvm.cuda(0).exist)


def _fake_pynvml(*, count: int | None) -> types.ModuleType:
    """A pynvml whose init fails (count None) or that sees `count` GPUs."""
    fake = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init() -> None:
        if count is None:
            raise NVMLError("Driver Not Loaded")

    fake.NVMLError = NVMLError  # type: ignore[attr-defined]
    fake.nvmlInit = init  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCount = lambda: count  # type: ignore[attr-defined]
    return fake


@pytest.mark.parametrize(
    ("count", "index", "why"),
    [
        (None, 0, "NVML: Driver Not Loaded"),
        (0, 0, "NVML sees 0 GPUs"),
        (2, 5, "NVML sees 2 GPUs"),
    ],
)
def test_missing_gpu_is_a_one_line_bad_input(
    monkeypatch: pytest.MonkeyPatch, count: int | None, index: int, why: str
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(count=count))
    with pytest.raises(BadInputError) as raised:
        CUDADevice(index)
    message = str(raised.value)
    assert message == f"device cuda:{index}: no NVIDIA GPU found ({why})"


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_gpu_seen_by_nvml_but_not_by_cuda_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(count=1))
    # The real cause is named: here the driver library that cannot load.
    with pytest.raises(BadInputError, match=r"libcuda\.so\.1|CUDA runtime cannot open it"):
        CUDADevice(0)


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_get_device_cuda_without_a_gpu_is_bad_input() -> None:
    with pytest.raises(BadInputError, match=r"^device cuda:0: no NVIDIA GPU found \("):
        get_device("cuda:0")
    with pytest.raises(BadInputError):
        get_device("cuda:x")


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_cli_profile_cuda_without_a_gpu_exits_2_with_one_line(simoe_home: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from agent.cli import main; main()",
         "profile", "--device", "cuda:0"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "SIMOE_HOME": str(simoe_home)},
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("simoe-agent: error: device cuda:0: no NVIDIA GPU found (")


def test_attributes_are_read_from_nvml_and_the_cuda_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reading path with a fake T4 behind NVML and TVM's CUDA device attributes."""
    fake = _fake_pynvml(count=1)
    fake.NVML_CLOCK_SM, fake.NVML_CLOCK_MEM = 1, 2  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda index: f"handle{index}"  # type: ignore[attr-defined]
    fake.nvmlDeviceGetName = lambda handle: b"Tesla T4"  # type: ignore[attr-defined]
    fake.nvmlDeviceGetMaxClockInfo = (  # type: ignore[attr-defined]
        lambda handle, kind: {1: 1590, 2: 5001}[kind]
    )
    fake.nvmlDeviceGetMemoryBusWidth = lambda handle: 256  # type: ignore[attr-defined]
    fake.nvmlDeviceGetMemoryInfo = (  # type: ignore[attr-defined]
        lambda handle: types.SimpleNamespace(total=16 << 30)
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cuda_dev = types.SimpleNamespace(
        exist=True, multi_processor_count=40, compute_version="7.5", max_clock_rate=1590000,
        max_threads_per_block=1024, max_shared_memory_per_block=49152,
        l2_cache_size_bytes=4 << 20, warp_size=32,
    )  # fmt: skip
    monkeypatch.setattr(tvm, "cuda", lambda index=0: cuda_dev)
    device = CUDADevice(0)
    assert device.attributes == CudaAttributes(
        name="Tesla T4", sm_count=40, sm_clock_mhz=1590, mem_clock_mhz=5001,
        mem_bus_width_bits=256, total_memory_bytes=16 << 30, compute_capability=(7, 5),
        max_threads_per_block=1024, max_shared_memory_per_block=49152,
        l2_cache_bytes=4 << 20, warp_size=32,
    )  # fmt: skip
    assert device.hardware_name == "Tesla T4"
    assert device.analytical_specs().mem_bandwidth_gbs == pytest.approx(320, rel=0.01)
    assert target_config(device.attributes)["arch"] == "sm_75"


def test_an_unsupported_nvml_field_falls_back_to_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bus width and max clocks "not supported" (virtualised GPUs) never abort the reading."""
    fake = _fake_pynvml(count=1)
    fake.NVML_CLOCK_SM, fake.NVML_CLOCK_MEM = 1, 2  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda index: f"handle{index}"  # type: ignore[attr-defined]
    fake.nvmlDeviceGetName = lambda handle: "NVIDIA H200"  # type: ignore[attr-defined]

    def unsupported(*_args: object) -> None:
        raise fake.NVMLError("Not Supported")

    fake.nvmlDeviceGetMaxClockInfo = unsupported  # type: ignore[attr-defined]
    fake.nvmlDeviceGetMemoryBusWidth = unsupported  # type: ignore[attr-defined]
    fake.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=141 << 30)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cuda_dev = types.SimpleNamespace(
        exist=True, multi_processor_count=132, compute_version="9.0", max_clock_rate=1980000,
        max_threads_per_block=1024, max_shared_memory_per_block=49152,
        l2_cache_size_bytes=60 << 20, warp_size=32, total_global_memory=141 << 30,
    )  # fmt: skip
    monkeypatch.setattr(tvm, "cuda", lambda index=0: cuda_dev)
    import agent.devices.cuda as cuda_module

    fallback = {"MEMORY_CLOCK_RATE": 3_201_000.0, "GLOBAL_MEMORY_BUS_WIDTH": 6144.0}
    monkeypatch.setattr(cuda_module, "_cuda_attribute", lambda index, name: fallback[name])
    attrs = CUDADevice(0).attributes
    assert attrs.sm_clock_mhz == 1980 and attrs.mem_clock_mhz == 3201
    assert attrs.mem_bus_width_bits == 6144 and attrs.name == "NVIDIA H200"


def test_cuda_visible_devices_is_respected_and_mapped_to_nvml() -> None:
    from agent.devices.cuda import nvml_handle_for, visible_device_for

    assert visible_device_for(1, {}) == "1"
    assert visible_device_for(1, {"CUDA_VISIBLE_DEVICES": "3,5"}) == "5"  # never widened
    with pytest.raises(BadInputError, match="shows 2 GPU"):
        visible_device_for(2, {"CUDA_VISIBLE_DEVICES": "3,5"})
    fake = types.SimpleNamespace(
        nvmlDeviceGetHandleByIndex=lambda i: f"index{i}",
        nvmlDeviceGetHandleByUUID=lambda u: f"uuid:{u}",
    )
    assert nvml_handle_for(fake, 0, {"CUDA_VISIBLE_DEVICES": "3,5"}) == "index3"
    assert nvml_handle_for(fake, 0, {"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == "uuid:GPU-abc"


def test_runner_worker_sees_only_its_gpu_in_pci_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.devices.cuda import _init_gpu_worker

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,7")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    device = CUDADevice(1, attributes=_attrs())
    runner = device.runner()  # the worker's view is decided here, from the user's list
    assert runner is not None
    from agent.devices.cuda import visible_device_for

    _init_gpu_worker(visible_device_for(1))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "7"
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_builds_run_under_the_target_so_the_arch_reaches_the_compiler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TVM's CUDA compile callback reads Target.current(): it must be our GPU's target."""
    from tvm.s_tir.meta_schedule.builder import local_builder

    from agent.devices.cuda import build_in_target

    seen = []
    monkeypatch.setattr(
        local_builder,
        "default_build",
        lambda mod, target, params: seen.append(str(tvm.target.Target.current().attrs["arch"])),
    )
    device = CUDADevice(1, attributes=_attrs(compute_capability=(9, 0)))
    build_in_target(None, device.target(), None)
    assert seen == ["sm_90"]


def test_cuda_root_is_found_behind_a_wrapper_script(tmp_path: Path) -> None:
    from agent.devices.cuda_env import find_cuda_root

    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (toolkit / "bin" / "nvcc").chmod(0o755)
    wrappers = tmp_path / "usr-local-bin"
    wrappers.mkdir()
    (wrappers / "nvcc").write_text(f'#!/bin/sh\nexec {toolkit}/bin/nvcc "$@"\n')
    (wrappers / "nvcc").chmod(0o755)
    # `which nvcc` finds the wrapper; TVM's guess (its ../..) would be tmp_path
    assert find_cuda_root({"PATH": str(wrappers)}) == toolkit
    other = tmp_path / "other"
    assert find_cuda_root({"PATH": str(wrappers), "CUDA_PATH": str(other)}) == toolkit
    (other / "bin").mkdir(parents=True)
    (other / "include").mkdir()
    (other / "include" / "cuda_runtime.h").write_text("")
    (other / "bin" / "nvcc").write_text("")
    assert find_cuda_root({"PATH": str(wrappers), "CUDA_HOME": str(other)}) == other
    assert find_cuda_root({"PATH": str(wrappers), "CUDA_PATH": str(other)}) == other


def test_nvrtc_check_fails_when_libnvrtc_does_not_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """`from cuda.bindings import nvrtc` imports without libnvrtc; the check must call it."""
    from agent.devices.cuda_env import nvrtc_status

    def missing() -> None:
        raise RuntimeError("Failed to dlopen libnvrtc.so.13")

    fake_nvrtc = types.SimpleNamespace(nvrtcVersion=missing)
    bindings = types.ModuleType("cuda.bindings")
    bindings.nvrtc = fake_nvrtc  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", fake_nvrtc)
    ok, why = nvrtc_status()
    assert not ok and "libnvrtc" in why
    fake_nvrtc.nvrtcVersion = lambda: (0, 13, 0)
    assert nvrtc_status() == (True, "NVRTC 13.0")


def test_a_hopeless_search_stops_early_with_its_first_error() -> None:
    from agent.devices.cuda_failfast import FailureLog
    from schemas import RunFailure

    log = FailureLog(limit=3)
    log.note("build", "LocalBuilder: An exception occurred\nRuntimeError: Cannot find CUDA headers")
    log.note("build", "other")
    log.check()  # two failures: not yet
    log.note("run", "a run error")
    with pytest.raises(RunFailure, match="first error: RuntimeError: Cannot find CUDA headers"):
        log.check()
    assert log.first_run_error == "a run error"
    healthy = FailureLog(limit=2)
    healthy.note("build", None)
    for _ in range(5):
        healthy.note("build", "one bad candidate")
    healthy.check()  # something built once: ordinary failed candidates, never a stop
