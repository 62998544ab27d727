"""The physical anchor: operators tuned on this machine's real CPU, against numpy and PyTorch.

Each operator of the list is tuned with MetaSchedule (XGB cost model) on `cpu` through the
agent's tuner (`agent.tuner.tune_workload`, real measurements), then the best schedule is
re-measured; numpy and PyTorch compute the same operator on the same inputs' shapes with
the same number of threads. The share of peak is achieved GFLOP/s over the CPU's FP32 peak
from `bench.compile.cpu_peak`: the larger of the analytical peak (cores x SIMD lanes x 2 FLOPs per
FMA x FMA pipes x the OS clock) and a measured all-core FMA loop, because the OS clock is
often the base clock and the cores boost above it.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

QUICK_OPS = ["matmul:512,512,512", "batch_matmul:12,128,128,64", "dense:128,3072,768"]
FULL_OPS = [
    "matmul:512,512,512",
    "matmul:1024,1024,1024",
    "dense:128,3072,768",
    "dense:128,768,3072",
    "batch_matmul:12,128,128,64",
    "conv2d_bias_relu:1,64,56,56,64,3,3,1,1",
    "conv2d:1,256,56,56,64,1,1,1,0",
    "depthwise_conv2d:1,144,56,56,3,3,1,1",
]


def _best_seconds(fn: Callable[[], Any], min_time: float = 0.2, repeat: int = 5) -> float:
    """Best of `repeat` timings, each averaging enough calls to last `min_time`.

    The best, not the median: on a machine shared with other jobs, threads that lose their
    core make a BLAS call many times slower, and the best is the least disturbed.
    """
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    number = max(1, int(min_time / one))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return float(np.min(samples))


def reference_callables(text: str) -> dict[str, Callable[[], Any]]:
    """numpy and PyTorch versions of the operator (numpy only where it has one)."""
    import torch

    from agent.workloads import parse_workload

    spec = parse_workload(text)
    d = spec.named_dims
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> np.ndarray:
        return rng.random(shape, dtype=np.float32)

    out: dict[str, Callable[[], Any]] = {}
    if spec.op == "matmul":
        a, b = rand(d["M"], d["K"]), rand(d["K"], d["N"])
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["numpy"] = lambda: a @ b
        out["pytorch"] = lambda: torch.matmul(ta, tb)
    elif spec.op == "dense":
        x, w = rand(d["M"], d["K"]), rand(d["N"], d["K"])
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        out["numpy"] = lambda: x @ w.T
        out["pytorch"] = lambda: torch.nn.functional.linear(tx, tw)
    elif spec.op == "batch_matmul":
        a, b = rand(d["B"], d["M"], d["K"]), rand(d["B"], d["K"], d["N"])
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["numpy"] = lambda: np.matmul(a, b)
        out["pytorch"] = lambda: torch.bmm(ta, tb)
    elif spec.op in ("conv2d", "conv2d_bias_relu", "depthwise_conv2d"):
        groups = d["C"] if spec.op == "depthwise_conv2d" else 1
        cout = d["C"] if spec.op == "depthwise_conv2d" else d["K"]
        tx = torch.from_numpy(rand(d["N"], d["C"], d["H"], d["W"]))
        tw = torch.from_numpy(rand(cout, d["C"] // groups, d["R"], d["S"]))
        tbias = torch.from_numpy(rand(cout)) if spec.op == "conv2d_bias_relu" else None

        def conv() -> Any:
            y = torch.nn.functional.conv2d(tx, tw, tbias, d["stride"], d["pad"], 1, groups)
            return torch.relu(y) if spec.op == "conv2d_bias_relu" else y

        out["pytorch"] = conv
    elif spec.op == "softmax":
        x = rand(d["rows"], d["cols"])
        tx = torch.from_numpy(x)
        out["pytorch"] = lambda: torch.softmax(tx, dim=1)
    return out


def run_section(ops: list[str], trials: int, *, say: Callable[[str], None]) -> dict[str, Any]:
    import torch

    from agent.devices import get_device
    from agent.store import Store
    from agent.tuner import tune_workload
    from agent.workloads import flops, parse_workload
    from bench.compile.cpu_peak import cpu_peak

    device = get_device("cpu")
    specs = device.analytical_specs()
    threads = int(getattr(device, "num_cores", os.cpu_count() or 1))
    say("cpu: measuring the FP32 peak (FMA loop on every core)")
    peak = cpu_peak(threads, device.mcpu, specs.clock_mhz)
    peak_gflops = float(peak["peak_gflops"])
    torch.set_num_threads(threads)
    rows: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    with (
        tempfile.TemporaryDirectory(prefix="simoe-cpu-bench-") as tmp,
        Store(Path(tmp) / "store.sqlite") as store,
    ):
        for text in ops:
            say(f"cpu: tuning {text} ({trials} trials)")
            workload = parse_workload(text)
            t0 = time.perf_counter()
            try:
                result = tune_workload(workload, device, store, trials=trials, baseline=True)
            except Exception as exc:  # noqa: BLE001 - one failed op must not lose the rest
                failed.append({"op": text, "error": f"{type(exc).__name__}: {exc}"[:300]})
                continue
            tune_s = time.perf_counter() - t0
            task = result.tasks[0]
            fl = flops(workload)
            refs = {k: _best_seconds(f) for k, f in reference_callables(text).items()}
            best = task.best_latency_s
            gflops = fl / best / 1e9 if best else None
            rows.append(
                {
                    "op": text,
                    "trials": task.trials,
                    "tune_wall_s": tune_s,
                    "search_wall_s": result.search_wall_s,
                    "tvm_tuned_s": best,
                    "tvm_untuned_s": task.untuned_latency_s,
                    "numpy_s": refs.get("numpy"),
                    "pytorch_s": refs.get("pytorch"),
                    "gflop": fl / 1e9,
                    "tvm_gflops": gflops,
                    "peak_share": gflops / peak_gflops if gflops else None,
                    "pytorch_peak_share": (
                        fl / refs["pytorch"] / 1e9 / peak_gflops if "pytorch" in refs else None
                    ),
                }
            )
    return {
        "device": device.name,
        "hardware": device.hardware_name,
        "target": str(device.target()),
        "threads": threads,
        "peak_fp32_gflops": peak_gflops,
        "peak_from": peak["peak_from"],
        "peak": peak,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "rows": rows,
        "failed": failed,
    }
