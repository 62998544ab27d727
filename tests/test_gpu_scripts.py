"""bench/simulator/gpu_check.py and bench/simulator/gpu_evidence.py on a machine without a GPU:
the preflight,
the self-check's abort, partial reports, and the evidence run end to end with a simulated
stand-in for the GPU."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from agent.devices.cuda_env import nvcc_path

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = Path("/dev/nvidia0").exists()


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
@pytest.mark.slow  # a TVM import in a subprocess: about 20 s on a loaded 2-core machine
def test_gpu_check_runs_from_anywhere_with_a_preflight_and_a_partial_report(
    tmp_path: Path,
) -> None:
    """`python bench/simulator/gpu_check.py`: the repo is on the path; no GPU is one line,
    exit 2."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/simulator/gpu_check.py"), "--out", str(out), "--quick"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        line for line in done.stderr.strip().splitlines() if line.startswith("gpu_check: error:")
    ]
    assert "gpu_check: preflight: tvm_cuda_enabled: " in done.stdout
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["steps_done"] == ["preflight"]  # saved before it stopped
    for key in ("driver", "nvcc", "nvrtc", "libraries", "tvm_cuda_enabled", "cuda_root"):
        assert key in report["preflight"]


@pytest.mark.slow
def test_self_check_reports_a_failure_and_a_hang_within_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sys.path.insert(0, str(ROOT))
    from agent.devices import get_device
    from bench.simulator import gpu_check

    target = get_device("sim:h200").target()

    def failing(mod: object, repeat: int = 5) -> list[float]:
        raise RuntimeError("CUDA_ERROR_NO_BINARY_FOR_GPU\ndetails")

    device = types.SimpleNamespace(target=lambda: target, measure=failing)
    outcome = gpu_check.self_check(device)
    assert outcome["error"] == "RuntimeError: CUDA_ERROR_NO_BINARY_FOR_GPU"

    monkeypatch.setattr(gpu_check, "SELF_CHECK_LIMIT_S", 0.5)
    device.measure = lambda mod, repeat=5: time.sleep(30)  # a hung compile or kernel
    started = time.perf_counter()
    outcome = gpu_check.self_check(device)
    assert outcome["error"] == "no result within 0.5 s" and time.perf_counter() - started < 5


@pytest.mark.skipif(nvcc_path() is None, reason="no nvcc on this machine")
@pytest.mark.slow
def test_gpu_evidence_dry_run_end_to_end(tmp_path: Path) -> None:
    """prepare (real lowering and nvcc), run with the twin standing in, analyze: labelled."""
    from bench.simulator import gpu_evidence

    out = tmp_path / "evidence"
    assert gpu_evidence.main(["dry-run", "--quick", "--out", str(out), "--per-workload", "4",
                              "--training-gpus", "t4,a100", "--epochs", "2"]) == 0  # fmt: skip
    report = json.loads((out / "report" / "gpu_evidence.json").read_text())
    assert report["simulated"] and report["label"].startswith("SIMULATED")
    assert report["import"]["device"] == "sim:h200" and report["import"]["profile_id"]
    assert set(report["workloads"]) == set(gpu_evidence.QUICK_WORKLOADS)
    for w in report["workloads"].values():
        if w["measured"] >= 3:
            # the twin stood in for the GPU: it agrees with itself, and the report says so
            assert w["twin_spearman"] == pytest.approx(1.0)
            assert w["twin_median_rel_error"] < 0.05  # its first repeat against its median
            assert 0 < w["simoe_zero_shot"]["top1"] <= 1
            assert set(w["replay_random"]) == {"4"} and 0 < w["replay_random"]["4"] <= 1
    assert "SIMULATED" in (out / "report" / "gpu_evidence.md").read_text()
    prepared = json.loads((out / "prepared.json").read_text())
    assert len(prepared["device_command"]) < 2000
    assert prepared["model"]["training_gpus"] == ["sim:t4", "sim:a100-40gb"]
