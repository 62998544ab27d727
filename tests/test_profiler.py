"""The probe suite and the profiler: real CPU profiles, cuda probes without a GPU, the cache."""

from __future__ import annotations

import json
import logging
import sys
from itertools import combinations
from pathlib import Path

import pytest

# isort: split
import tvm

from agent.devices.base import Device
from agent.devices.sim import SimulatedGPU
from agent.node_state import load_or_profile, profile_path
from agent.probes import BANDWIDTH_PROBE, FMA_PROBE, PROBE_SUITE_VERSION, PROBES, target_kind
from agent.profiler import profile_device
from agent.store import Store
from schemas import AnalyticalSpecs, BadInputError, HardwareProfile

CUDA_TARGET = {
    "kind": "cuda",
    "arch": "sm_75",
    "max_threads_per_block": 1024,
    "max_shared_memory_per_block": 49152,
    "thread_warp_size": 32,
}
SHARED_MEMORY_PROBES = {"transpose", "stencil5", "matmul_tiled", "matmul_small_k", "hgemm"}


# --------------------------------------------------------------------------- the suite


def test_suite_is_versioned_and_covers_every_kind_of_bottleneck() -> None:
    names = [probe.name for probe in PROBES]
    assert len(names) >= 12
    assert len(set(names)) == len(names)
    assert {probe.category for probe in PROBES} == {"launch", "memory", "cache", "compute"}
    assert PROBE_SUITE_VERSION == "1"
    assert BANDWIDTH_PROBE in names and FMA_PROBE in names
    for probe in PROBES:
        assert set(probe.variants) == {"llvm", "cuda"}
        for variant in probe.variants.values():
            assert variant.bytes > 0 and variant.flops >= 0


def test_a_probe_is_the_same_program_every_time() -> None:
    target = tvm.target.Target({"kind": "llvm"})
    for probe in PROBES[:4]:
        tvm.ir.assert_structural_equal(probe.build(target), probe.build(target))


def test_other_target_kinds_are_refused() -> None:
    with pytest.raises(BadInputError, match="probe suite"):
        target_kind(tvm.target.Target({"kind": "c"}))


def test_cuda_probes_compile_to_cuda_source_without_a_gpu() -> None:
    target = tvm.target.Target(CUDA_TARGET, host={"kind": "llvm"})
    for probe in PROBES:
        mod = probe.build(target)
        source = tvm.compile(mod, target=target).mod.imports[0].inspect_source("cuda")
        assert "__global__" in source, probe.name
        assert "threadIdx.x" in source, probe.name  # one block for launch_tiny: no blockIdx
        if probe.name in SHARED_MEMORY_PROBES:
            assert "__shared__" in source, probe.name


def _passes_gpu_verification(probe_name: str, target: tvm.target.Target) -> bool:
    """MetaSchedule's VerifyGPUCode: threads, shared memory, vector width within limits."""
    from tvm.s_tir import meta_schedule as ms

    from agent.probes import PROBES_BY_NAME

    mod = PROBES_BY_NAME[probe_name].build(target)
    postproc = ms.postproc.VerifyGPUCode()
    space = ms.space_generator.PostOrderApply(sch_rules=[], postprocs=[], mutator_probs={})
    context = ms.TuneContext(mod=mod, target=target, space_generator=space, task_name="probe")
    postproc._initialize_with_tune_context(context)
    return bool(postproc.apply(tvm.s_tir.Schedule(mod)))


def test_cuda_probes_respect_the_gpus_limits() -> None:
    target = tvm.target.Target(CUDA_TARGET, host={"kind": "llvm"})
    for probe in PROBES:
        assert _passes_gpu_verification(probe.name, target), probe.name
    # the check has teeth: 1 KiB of shared memory is too little for the tiled matmul
    tiny = tvm.target.Target({**CUDA_TARGET, "max_shared_memory_per_block": 1024})
    assert not _passes_gpu_verification("matmul_tiled", tiny)


# --------------------------------------------------------------------------- CPU profiles


@pytest.fixture(scope="module")
def cpu_profiles() -> tuple[HardwareProfile, HardwareProfile]:
    from agent.devices.cpu import CPUDevice

    device = CPUDevice()
    return profile_device(device), profile_device(device)


def test_cpu_profile_has_specs_and_a_full_fingerprint(
    cpu_profiles: tuple[HardwareProfile, HardwareProfile],
) -> None:
    profile = cpu_profiles[0]
    assert profile.device == "cpu" and profile.device_kind == "cpu" and not profile.simulated
    assert isinstance(profile.analytical, AnalyticalSpecs)
    fingerprint = profile.empirical
    assert fingerprint.probe_suite_version == PROBE_SUITE_VERSION
    assert set(fingerprint.probe_latency_us) == {probe.name for probe in PROBES}
    # plausible for any CPU: between 0.1 and 10,000 GB/s, 0.1 and 100,000 GFLOP/s
    assert 0.1 < fingerprint.bandwidth_gbs < 1e4
    assert 0.1 < fingerprint.fma_gflops < 1e5
    HardwareProfile.model_validate_json(profile.model_dump_json())  # round trip


def test_two_cpu_profiles_agree_within_noise(
    cpu_profiles: tuple[HardwareProfile, HardwareProfile],
) -> None:
    """Probes 2x apart in both profiles are in the same order in both.

    The suite spaces its CPU latencies roughly 2.5x or more apart; a pair that each profile
    puts 2x apart, in opposite orders, means the fingerprint is not a fingerprint. (Either
    profile alone is not enough: on 2 cores shared with other jobs one probe can take 2x
    its time, which made a pair 2x apart in one profile and swapped by noise in the other.)
    """
    first, second = (p.empirical.probe_latency_us for p in cpu_profiles)
    swapped = []
    for a, b in combinations(first, 2):
        separated = (
            max(first[a] / first[b], first[b] / first[a]) >= 2
            and max(second[a] / second[b], second[b] / second[a]) >= 2
        )
        if separated and (first[a] < first[b]) != (second[a] < second[b]):
            swapped.append((a, b, first[a], first[b], second[a], second[b]))
    assert not swapped, swapped
    # and most of the suite is that well separated, so the check above has teeth
    ranked = sorted(first.values())
    assert sum(hi / lo >= 2 for lo, hi in zip(ranked, ranked[1:], strict=False)) >= len(ranked) // 2


# --------------------------------------------------------------------------- the cache


class CountingDevice(Device):
    """A device whose 'measurements' are fixed numbers: profiles in milliseconds."""

    kind = "cpu"
    simulated = False

    def __init__(self) -> None:
        super().__init__("cpu")
        self.calls = 0

    @property
    def hardware_name(self) -> str:
        return "counting test device"

    def target(self) -> tvm.target.Target:
        return tvm.target.Target({"kind": "llvm"})

    def analytical_specs(self) -> AnalyticalSpecs:
        return AnalyticalSpecs(
            compute_units=2, clock_mhz=2000, fp32_gflops=128, fp16_gflops=128,
            mem_bandwidth_gbs=20, l2_cache_kb=1024, shared_mem_per_unit_kb=32,
            registers_per_unit=256, max_threads_per_unit=2, max_blocks_per_unit=1,
            warp_size=8, compute_capability=0,
        )  # fmt: skip

    def builder(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def runner(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def measure(self, mod: tvm.IRModule, repeat: int = 5) -> list[float]:
        self.calls += 1
        return [1e-3] * repeat


@pytest.fixture()
def counting_device(monkeypatch: pytest.MonkeyPatch) -> CountingDevice:
    # building the 13 llvm probes is what takes time here; a cheap stand-in module
    monkeypatch.setattr("agent.probes.Probe.build", lambda self, target: tvm.IRModule({}))
    return CountingDevice()


def test_profile_is_cached_and_reused(counting_device: CountingDevice, tmp_path: Path) -> None:
    first = load_or_profile(counting_device, tmp_path, repeat=2)
    calls = counting_device.calls
    assert calls > 0
    assert profile_path(counting_device, tmp_path) == tmp_path / "profiles" / "cpu.json"
    assert profile_path(counting_device, tmp_path).exists()

    again = load_or_profile(counting_device, tmp_path, repeat=2)
    assert counting_device.calls == calls  # nothing measured
    assert again == first

    refreshed = load_or_profile(counting_device, tmp_path, refresh=True, repeat=2)
    assert counting_device.calls > calls
    assert refreshed.created_at > first.created_at


def test_profile_is_saved_into_the_store(counting_device: CountingDevice, tmp_path: Path) -> None:
    profile = load_or_profile(counting_device, tmp_path, repeat=1)
    with Store(tmp_path / "store.sqlite") as store:
        assert store.latest_profile("cpu") == profile


@pytest.mark.parametrize(
    "content",
    [b"not json at all", b'{"schema_version": 1}', b"\x00\xff\xfe", b""],
    ids=["garbage", "incomplete", "binary", "empty"],
)
def test_a_corrupt_cache_is_profiled_again_with_a_warning(
    counting_device: CountingDevice,
    tmp_path: Path,
    content: bytes,
) -> None:
    path = profile_path(counting_device, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    # pytest's log capture is off (see pyproject): collect the warnings by hand.
    records: list[logging.LogRecord] = []
    collector = logging.Handler(logging.WARNING)
    collector.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("agent.node_state")
    logger.addHandler(collector)
    try:
        profile = load_or_profile(counting_device, tmp_path, repeat=1)
    finally:
        logger.removeHandler(collector)
    assert counting_device.calls > 0
    assert any("profiling again" in r.getMessage() for r in records)
    assert HardwareProfile.model_validate_json(path.read_bytes()) == profile


def test_a_cache_of_an_older_probe_suite_is_not_used(
    counting_device: CountingDevice, tmp_path: Path
) -> None:
    old = load_or_profile(counting_device, tmp_path, repeat=1)
    stale = old.model_copy(
        update={"empirical": old.empirical.model_copy(update={"probe_suite_version": "0"})}
    )
    profile_path(counting_device, tmp_path).write_text(stale.model_dump_json())
    calls = counting_device.calls
    fresh = load_or_profile(counting_device, tmp_path, repeat=1)
    assert counting_device.calls > calls
    assert fresh.empirical.probe_suite_version == PROBE_SUITE_VERSION


# --------------------------------------------------------------------------- sim and CLI


def test_a_simulated_gpu_profile_is_labelled_simulated() -> None:
    device = SimulatedGPU.from_spec("t4")
    profile = profile_device(device, repeat=2)
    assert profile.simulated and profile.device_kind == "sim" and profile.device == "sim:t4"
    latencies = profile.empirical.probe_latency_us
    # a GPU: launch overhead of microseconds; bandwidth below the spec sheet's peak
    assert latencies["launch_tiny"] < latencies["matmul_tiled"]
    assert profile.empirical.bandwidth_gbs <= profile.analytical.mem_bandwidth_gbs * 1.05


def _cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """Run `simoe-agent ARGS` in this process: (exit code, stdout, stderr)."""
    from agent.cli import main

    monkeypatch.setattr(sys, "argv", ["simoe-agent", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    out = capsys.readouterr()
    return int(exited.value.code or 0), out.out, out.err


def test_cli_profile_json_is_a_hardware_profile_and_is_cached(
    simoe_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, stderr = _cli(monkeypatch, capsys, "profile", "--device", "sim:t4", "--json")
    assert code == 0, stderr
    profile = HardwareProfile.model_validate(json.loads(stdout))
    assert profile.simulated
    cached = simoe_home / "agent" / "profiles" / "sim-t4.json"
    assert HardwareProfile.model_validate_json(cached.read_text()) == profile

    code, stdout, stderr = _cli(monkeypatch, capsys, "profile", "--device", "sim:t4")
    assert code == 0, stderr
    assert "copy_stream" in stdout and "simulated" in stdout.lower()
    assert profile.profile_id in stdout  # the cached profile, not a new one


def test_cli_profile_of_an_unknown_device_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, stderr = _cli(monkeypatch, capsys, "profile", "--device", "tpu:0")
    assert code == 2
    assert stdout == ""
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def test_the_nodes_own_profile_is_refreshed_when_the_probe_suite_changed(
    counting_device: CountingDevice, tmp_path: Path
) -> None:
    """One cache reader: the profile the node trains and says hello with is the one
    `simoe-agent profile` would keep (it used to skip the probe-suite check)."""
    from agent.node_state import NodeState

    node = NodeState(tmp_path)
    old = load_or_profile(counting_device, tmp_path, repeat=1)
    assert node.cached_profile("cpu") == old
    stale = old.model_copy(
        update={"empirical": old.empirical.model_copy(update={"probe_suite_version": "0"})}
    )
    profile_path(counting_device, tmp_path).write_text(stale.model_dump_json())
    assert node.cached_profile("cpu") is None
    calls = counting_device.calls
    fresh = node.profile(counting_device)
    assert counting_device.calls > calls
    assert fresh.empirical.probe_suite_version == PROBE_SUITE_VERSION
    assert node.cached_profile("cpu") == fresh


def test_one_fingerprint_derivation_for_the_profiler_and_the_bundle_importer() -> None:
    from agent.bundle.importer import build_profile
    from agent.probes import fingerprint_from
    from schemas.bundle import ResultRow

    latencies = {probe.name: 1e-3 * (i + 1) for i, probe in enumerate(PROBES)}
    fingerprint = fingerprint_from(latencies, stream_bytes=2e9, fma_flops=4e9)
    assert fingerprint.probe_latency_us == {n: s * 1e6 for n, s in latencies.items()}
    assert fingerprint.bandwidth_gbs == pytest.approx(2 / latencies[BANDWIDTH_PROBE])
    assert fingerprint.fma_gflops == pytest.approx(4 / latencies[FMA_PROBE])
    assert fingerprint_from({**latencies, "p": 0.0}, stream_bytes=1, fma_flops=1).probe_latency_us[
        "p"
    ] == pytest.approx(1e-3)  # never 0: PositiveFloat holds
    entries = {
        str(i): {"group": probe.name, "kind": "probe", "bytes": 2e9, "flops": 4e9}
        for i, probe in enumerate(PROBES)
    }
    rows = [
        ResultRow(id=n, group=n, kind="probe", ok=True, run_secs=[s]) for n, s in latencies.items()
    ]
    profile = build_profile("sim:t4", True, {}, rows, entries, "t4")
    assert profile.empirical.model_dump() == fingerprint.model_dump()
