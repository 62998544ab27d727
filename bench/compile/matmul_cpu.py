"""512^3 float32 matmul on this CPU: MetaSchedule-tuned vs untuned vs numpy (a benchmark).

Tunes `matmul:512,512,512` for 64 trials through the agent's tuner (the store's database,
XGB cost model), then times, on the same inputs:
- the best schedule from the store (compiled with `compile_tir`, result checked vs numpy),
- the untuned default schedule of the TE function,
- `np.matmul` (BLAS, all cores), best of several runs.
Targets: tuned >= 10x faster than untuned, and within 1.5x of numpy. The load average is
recorded with the figures: on a shared machine the timings are only as good as it is quiet.

    python -m bench.compile.matmul_cpu [--size 512] [--trials 64] [--cost-model xgb]

Writes bench/reports/matmul_cpu.json and bench/reports/matmul_cpu.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import timeit
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench import prepare

REPORTS = Path(__file__).resolve().parents[1] / "reports"
SPEEDUP_TARGET = 10.0
NUMPY_RATIO_TARGET = 1.5


def _time_tvm(
    executable: Any, inputs: list[np.ndarray], out_shape: tuple[int, ...], repeat: int
) -> float:
    """Median seconds per call of a compiled `main(A, B, C)`."""
    import tvm

    dev = tvm.cpu()
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    args.append(tvm.runtime.tensor(np.zeros(out_shape, "float32"), dev))
    timer = executable.mod.time_evaluator("main", dev, number=3, repeat=repeat, min_repeat_ms=50)
    return float(statistics.median(timer(*args).results))


def _run_tvm(
    executable: object, inputs: list[np.ndarray], out_shape: tuple[int, int]
) -> np.ndarray:
    import tvm

    dev = tvm.cpu()
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"), dev)
    executable["main"](*args, out)
    return out.numpy()


def run(size: int, trials: int, cost_model: str, repeat: int) -> dict:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    prepare()
    from agent.devices import get_device
    from agent.ms_database import ms_database
    from agent.store import Store
    from agent.tuner import tune_workload
    from agent.workloads import flops, parse_workload, prim_func

    spec = parse_workload(f"matmul:{size},{size},{size}")
    device = get_device("cpu")
    target = device.target()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype("float32")
    b = rng.standard_normal((size, size)).astype("float32")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "store.sqlite") as store:
        started = time.perf_counter()
        result = tune_workload(
            spec, device, store, trials=trials, cost_model=cost_model, seed=0, baseline=False
        )
        tune_wall = time.perf_counter() - started
        database = ms_database(store, device=device.name)
        mod = tvm.IRModule({"main": prim_func(spec)})
        schedule = ms.tir_integration.compile_tir(database, mod, target)
        if schedule is None:
            raise SystemExit("no successful candidate in the store: nothing to compare")
        tuned_exe = tvm.compile(schedule.mod, target=target)
        untuned_exe = tvm.compile(mod, target=target)
    expected = a @ b
    tuned_out = _run_tvm(tuned_exe, [a, b], (size, size))
    max_error = float(np.max(np.abs(tuned_out - expected)))
    np.testing.assert_allclose(tuned_out, expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())
    tuned_s = _time_tvm(tuned_exe, [a, b], (size, size), repeat)
    untuned_s = _time_tvm(untuned_exe, [a, b], (size, size), max(3, repeat // 4))
    numpy_s = min(timeit.repeat(lambda: np.matmul(a, b), number=10, repeat=repeat)) / 10
    load_after = os.getloadavg()
    work = flops(spec)
    return {
        "benchmark": "matmul_cpu",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": f"python -m bench.compile.matmul_cpu --size {size} --trials {trials} "
        f"--cost-model {cost_model}",
        "workload": str(spec),
        "cpu": device.hardware_name,
        "target_mcpu": target.attrs.get("mcpu", ""),
        "num_cores": target.attrs.get("num-cores", None),
        "python": platform.python_version(),
        "numpy_blas": _blas_name(),
        "load_average_before": list(load_before),
        "load_average_after": list(load_after),
        "trials": result.trials,
        "cost_model": cost_model,
        "tune_wall_s": tune_wall,
        "search_wall_s": result.search_wall_s,
        "tuned_s": tuned_s,
        "untuned_s": untuned_s,
        "numpy_s": numpy_s,
        "tuned_gflops": work / tuned_s / 1e9,
        "untuned_gflops": work / untuned_s / 1e9,
        "numpy_gflops": work / numpy_s / 1e9,
        "speedup_vs_untuned": untuned_s / tuned_s,
        "tuned_over_numpy": tuned_s / numpy_s,
        "tuned_max_abs_error_vs_numpy": max_error,
        "meets_speedup_target": untuned_s / tuned_s >= SPEEDUP_TARGET,
        "meets_numpy_target": tuned_s / numpy_s <= NUMPY_RATIO_TARGET,
    }


def _blas_name() -> str:
    try:
        config = np.show_config(mode="dicts")
        return str(config["Build Dependencies"]["blas"]["name"])
    except Exception:  # noqa: BLE001 - older numpy
        return "unknown"


def markdown(report: dict) -> str:
    ms_ = 1e3
    ok = {True: "yes", False: "NO"}
    return "\n".join(
        [
            f"# {report['workload']} on CPU ({report['when']})",
            "",
            f"`{report['command']}` — {report['cpu']} (mcpu {report['target_mcpu']}, "
            f"{report['num_cores']} cores), numpy BLAS {report['numpy_blas']}; load average "
            f"{report['load_average_before'][0]:.1f} before, "
            f"{report['load_average_after'][0]:.1f} after.",
            "",
            "| | latency (ms) | GFLOP/s |",
            "|---|---|---|",
            f"| tuned ({report['trials']} trials, {report['cost_model']}) | "
            f"{report['tuned_s'] * ms_:.3f} | {report['tuned_gflops']:.1f} |",
            f"| untuned default schedule | {report['untuned_s'] * ms_:.3f} | "
            f"{report['untuned_gflops']:.1f} |",
            f"| numpy (np.matmul, best of several) | {report['numpy_s'] * ms_:.3f} | "
            f"{report['numpy_gflops']:.1f} |",
            "",
            f"- speedup over untuned: {report['speedup_vs_untuned']:.1f}x "
            f"(target >= {SPEEDUP_TARGET:g}x: {ok[report['meets_speedup_target']]})",
            f"- tuned / numpy: {report['tuned_over_numpy']:.2f} "
            f"(target <= {NUMPY_RATIO_TARGET:g}: {ok[report['meets_numpy_target']]})",
            f"- tuning wall time {report['tune_wall_s']:.0f} s (search "
            f"{report['search_wall_s']:.0f} s); tuned result vs numpy max abs error "
            f"{report['tuned_max_abs_error_vs_numpy']:.1e}",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--cost-model", default="xgb")
    parser.add_argument("--repeat", type=int, default=20, help="timed repeats of each method")
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args()
    report = run(args.size, args.trials, args.cost_model, args.repeat)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "matmul_cpu.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "matmul_cpu.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    prepare()
    main()
