"""One prepared check for a machine with an NVIDIA GPU: profile, tune, compare with PyTorch.

    python -m bench.simulator.gpu_check [--trials 64] [--out DIR] [--quick] [--deadline SECONDS]

This check runs the whole TVM toolchain ON the GPU machine (compiler included). Where
the GPU machine is lean (no room for TVM, no compiler), use a thin bundle instead:
docs/gpu.md and bench/simulator/gpu_evidence.py.

0. preflight: prints the driver, the CUDA toolkit and NVRTC, the libraries TVM loads
   and `tvm.runtime.enabled("cuda")`; then a self-check compiles and runs one probe
   and aborts (exit 1) within a minute when that fails;

1. profiles cuda:0 with the probe suite (agent.profiler), compares the measured
   bandwidth and FMA rate with the spec sheet derived from NVML;
2. tunes a 1024^3 matmul and a ResNet-50 3x3 conv2d (64 channels, 56x56) on cuda:0
   with MetaSchedule, `--trials` candidates each (agent.tuner), every measurement in
   a throwaway node store;
3. times the same operators in PyTorch on the GPU (cuBLAS / cuDNN, TF32 off so both
   sides do FP32 arithmetic) and reports tuned / PyTorch.

Writes `gpu_check.json` under $OUT if set, else under bench/reports/, after every step
(a killed or timed-out run keeps what it did), with the first builder and runner error
and MetaSchedule's logs in OUT/gpu-check-state/tune-logs. Fails fast, with one line and
exit code 2, when there is no GPU or no way to compile CUDA (TVM needs NVRTC from the
`cuda-bindings` package with libnvrtc loadable, or `nvcc`).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import typer

# The prepared GPU check also runs as a script from anywhere (`python PATH/bench/gpu_check.py`
# on the GPU machine): put the repo on the path. `python -m bench.simulator.gpu_check` needs no
# help.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SELF_CHECK_LIMIT_S = 60

# (label, workload spec as `simoe-agent tune --workload` takes it, PyTorch reference)
MATMUL = "matmul:1024,1024,1024"
CONV2D = "conv2d:1,64,56,56,64,3,3,1,1"  # N,C,H,W,K,R,S,stride,pad: ResNet-50 conv2_x 3x3


def fail(message: str, code: int = 2) -> None:
    print(f"gpu_check: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def check_gpu_present() -> dict[str, Any]:
    """Cheap checks before importing TVM: a driver and a GPU through NVML."""
    try:
        import pynvml
    except ImportError:
        fail("no NVIDIA GPU found (the nvidia-ml-py package is not installed)")
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        driver = pynvml.nvmlSystemGetDriverVersion()
    except pynvml.NVMLError as exc:
        fail(f"no NVIDIA GPU found (NVML: {exc})")
    if count < 1:
        fail("no NVIDIA GPU found (NVML sees 0 GPUs)")
    driver = driver.decode() if isinstance(driver, bytes) else str(driver)
    return {"gpus": count, "driver": driver}


def choose_cuda_compiler() -> str:
    """TVM compiles CUDA with NVRTC (cuda-bindings) by default, else nvcc if asked.

    NVRTC counts only when libnvrtc really loads (the import alone succeeds without it);
    nvcc counts with its real toolkit root (CUDA_PATH is set to it for TVM).
    """
    from agent.devices.cuda_env import export_cuda_root, nvcc_version, nvrtc_status

    root = export_cuda_root()
    mode = os.environ.get("TVM_CUDA_COMPILE_MODE", "").lower()
    has_nvrtc, why_not = nvrtc_status()
    has_nvcc = root is not None and nvcc_version() is not None
    if mode == "nvcc" and has_nvcc:
        return "nvcc"
    if has_nvrtc and mode != "nvcc":
        return "nvrtc"
    if has_nvcc:
        os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
        return "nvcc"
    fail(f"cannot compile CUDA: NVRTC: {why_not}; nvcc: not found (set CUDA_PATH)")
    return ""  # unreachable


def self_check(device: Any) -> dict[str, Any]:
    """Compile and run one probe on the GPU, within SELF_CHECK_LIMIT_S; abort on failure."""
    from agent.probes import PROBES_BY_NAME

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            mod = PROBES_BY_NAME["launch_tiny"].build(device.target())
            outcome["latency_s"] = statistics.median(device.measure(mod, repeat=3))
        except Exception as exc:  # noqa: BLE001 - reported, then the check aborts
            outcome["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]

    started = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(SELF_CHECK_LIMIT_S)
    outcome["seconds"] = time.perf_counter() - started
    if thread.is_alive():
        outcome["error"] = f"no result within {SELF_CHECK_LIMIT_S} s"
    return outcome


def torch_reference(spec: str, index: int, repeat: int = 50) -> dict[str, Any]:
    """Median seconds of the operator in PyTorch on GPU `index` (CUDA events), FP32, no TF32."""
    try:
        import torch
    except ImportError:
        return {"available": False, "reason": "torch is not installed"}
    if not torch.cuda.is_available():
        return {"available": False, "reason": f"torch {torch.__version__} has no CUDA"}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest algorithm, as tuning does
    dev = torch.device(f"cuda:{index}")
    if spec == MATMUL:
        a = torch.rand(1024, 1024, device=dev)
        b = torch.rand(1024, 1024, device=dev)

        def run() -> Any:
            return a @ b

        library = "cuBLAS"
    elif spec == CONV2D:
        x = torch.rand(1, 64, 56, 56, device=dev)
        w = torch.rand(64, 64, 3, 3, device=dev)

        def run() -> Any:
            return torch.nn.functional.conv2d(x, w, stride=1, padding=1)

        library = "cuDNN"
    else:
        raise ValueError(spec)
    for _ in range(10):  # warm-up, and cuDNN's algorithm search
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return {
        "available": True,
        "library": library,
        "torch_version": torch.__version__,
        "latency_s": statistics.median(times),
    }


def main(
    trials: int = typer.Option(64, "--trials", min=1, help="candidates per operator"),
    out: Path | None = typer.Option(None, "--out", help="report directory (default $OUT)"),
    skip_tune: bool = typer.Option(False, "--skip-tune", help="profile and PyTorch only"),
    device_name: str = typer.Option("cuda:0", "--device", help="the GPU to check"),
    quick: bool = typer.Option(False, "--quick", help="8 trials, the matmul only"),
    deadline: float | None = typer.Option(None, "--deadline", help="skip steps after SECONDS"),
    preflight_only: bool = typer.Option(False, "--preflight-only", help="print it and stop"),
) -> None:
    """Profile the GPU, tune a matmul and a conv2d on it, compare with PyTorch."""
    started = time.perf_counter()
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # NVML's numbering, before CUDA
    out_dir = out or Path(os.environ.get("OUT") or Path(__file__).resolve().parents[1] / "reports")
    out_dir.mkdir(parents=True, exist_ok=True)
    report_path = out_dir / "gpu_check.json"
    report: dict[str, Any] = {
        "created_at": datetime.now(timezone.utc).isoformat(),
        "host": platform.node(),
        "simulated": False,
        "steps_done": [],
    }

    def save(step: str | None = None) -> None:
        if step:
            report["steps_done"].append(step)
        report["wall_s"] = time.perf_counter() - started
        report_path.write_text(json.dumps(report, indent=2, default=str))

    def out_of_time(step: str) -> bool:
        if deadline is not None and time.perf_counter() - started > deadline:
            report.setdefault("skipped_for_deadline", []).append(step)
            save()
            return True
        return False

    from agent.devices.cuda_env import preflight

    report["preflight"] = preflight()
    for key, value in report["preflight"].items():
        print(f"gpu_check: preflight: {key}: {value}", flush=True)
    save("preflight")
    if preflight_only:
        return
    report["nvml"] = check_gpu_present()
    report["cuda_compiler"] = compiler = choose_cuda_compiler()
    trials = 8 if quick else trials
    report["trials_per_operator"] = trials
    try:
        from bench import prepare

        prepare()
        from agent.devices import get_device
        from agent.node_state import load_or_profile
        from agent.workloads import parse_workload
        from schemas import SimoeError
    except ImportError as exc:
        fail(f"SiMoE is not installed in this Python ({exc}): run ./install.sh first")
    state_dir = out_dir / "gpu-check-state"
    try:
        device = get_device(device_name)
    except SimoeError as exc:
        report["error"] = str(exc)
        save()
        fail(str(exc))
    print(f"gpu_check: {device.name} = {device.hardware_name} (CUDA via {compiler})", flush=True)

    def errors() -> None:  # the first builder/runner error, kept in every partial report
        failures = getattr(device, "failures", None)
        if failures is not None:
            report["first_build_error"] = failures.first_build_error
            report["first_run_error"] = failures.first_run_error

    # 0. self-check: one probe compiled and run, or stop here (within a minute)
    report["self_check"] = check = self_check(device)
    errors()
    save("self_check")
    if "error" in check:
        fail(f"self-check failed after {check['seconds']:.0f} s: {check['error']}", code=1)
    print(f"gpu_check: self-check ok ({check['latency_s'] * 1e6:.1f} us)", flush=True)

    # 1. profile
    profile = None
    if not out_of_time("profile"):
        step = time.perf_counter()
        try:
            profile = load_or_profile(device, state_dir, refresh=True)
        except Exception as exc:  # noqa: BLE001 - report what failed, keep going
            report["profile"] = {"error": f"{type(exc).__name__}: {exc}"}
            traceback.print_exc()
        else:
            specs, fingerprint = profile.analytical, profile.empirical
            report["profile"] = {
                "seconds": time.perf_counter() - step,
                "hardware_profile": profile.model_dump(mode="json"),
                "bandwidth_measured_over_spec": fingerprint.bandwidth_gbs / specs.mem_bandwidth_gbs,
                "fma_measured_over_spec": fingerprint.fma_gflops / specs.fp32_gflops,
            }
            print(
                f"gpu_check: profile: {fingerprint.bandwidth_gbs:.0f} GB/s of "
                f"{specs.mem_bandwidth_gbs:.0f}, {fingerprint.fma_gflops:.0f} GFLOP/s FMA of "
                f"{specs.fp32_gflops:.0f}",
                flush=True,
            )
        errors()
        save("profile")

    # 2. and 3. tune each operator, time it in PyTorch
    report["operators"] = {}
    for spec in (MATMUL,) if quick else (MATMUL, CONV2D):
        if out_of_time(spec):
            continue
        entry: dict[str, Any] = {"torch": torch_reference(spec, device.index)}
        report["operators"][spec] = entry
        if not skip_tune:
            entry.update(tune_one(spec, device, state_dir, trials, profile, parse_workload))
        tuned = entry.get("tuned_latency_s")
        reference = entry["torch"].get("latency_s")
        if tuned and reference:
            entry["tuned_over_torch"] = tuned / reference  # < 1: the tuned kernel is faster
        print(f"gpu_check: {spec}: {json.dumps(entry, default=str)}", flush=True)
        errors()
        save(spec)
    save()
    print(f"gpu_check: report written to {report_path}", flush=True)


def tune_one(
    spec: str, device: Any, state_dir: Path, trials: int, profile: Any, parse_workload: Any
) -> dict[str, Any]:
    """Tune one operator into the check's node store; never raises."""
    try:
        from agent.store import Store
        from agent.tuner import tune_workload
    except ImportError as exc:
        return {"tune_error": f"agent.tuner unavailable: {exc}"}
    step = time.perf_counter()
    try:
        with Store(state_dir / "store.sqlite") as store:
            result = tune_workload(
                parse_workload(spec),
                device,
                store,
                trials=trials,
                cost_model="xgb",
                profile_id=profile.profile_id if profile is not None else None,
                work_dir=state_dir / "tune-logs",  # kept: MetaSchedule's logs survive the run
            )
    except Exception as exc:  # noqa: BLE001 - report what failed, keep going
        traceback.print_exc()
        return {"tune_error": f"{type(exc).__name__}: {exc}", "tune_s": time.perf_counter() - step}
    (task,) = result.tasks
    return {
        "tune_s": time.perf_counter() - step,
        "search_wall_s": result.search_wall_s,
        "trials": result.trials,
        "tuned_latency_s": task.best_latency_s,
        "best_during_tuning_s": task.best_measured_during_tuning_s,
        "untuned_dlight_latency_s": task.untuned_latency_s,
        "gflops": task.gflops,
    }


if __name__ == "__main__":
    typer.run(main)
