"""Where a MetaSchedule-20K reference trial's CPU time goes (bench/compile/reference.py's settings).

One task (the network's top one by weight x FLOPs) on a simulated unit, MetaSchedule's
default evolutionary search (population 512, 4 genetic iterations, 64 trials per search),
XGB, under cProfile. Written to bench/reports/references/trial_cost.json, which
BENCHMARKS.md's section 6 reads: CPU seconds per trial, and the share of the profiled wall
time in MetaSchedule's C++ search (the task scheduler's own time), in XGB, in the
simulator (our builder: the latency model) and in the one-off TVM import.

    python -m bench.compile.reference_cost --network bert_layer --unit a30-u1 --trials 128
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "reports" / "references" / "trial_cost.json"


def _cpu_s() -> float:
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _seconds(stats: pstats.Stats, where: str, name: str, total: bool) -> float:
    """Own (total=False) or cumulative time of the profiled functions matching."""
    out = 0.0
    for (path, _line, func), (_cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if where in path and name in func:
            out = max(out, ct) if total else out + tt
    return out


def measure(network: str, unit: str, trials: int) -> dict:
    from tvm.s_tir import meta_schedule as ms

    from agent.devices import get_device
    from agent.tune_harness import evolutionary, run_tasks
    from bench.compile.compile_data import network_tasks
    from bench.protocol import device_of

    device = get_device(device_of(unit))
    tasks, _n, _share = network_tasks(network, device.target(), 1)
    database = ms.database.MemoryDatabase()
    model = ms.cost_model.XGBModel(num_tuning_cores=2)
    load0, cpu0, wall0 = [round(x, 2) for x in os.getloadavg()], _cpu_s(), time.perf_counter()
    profile = cProfile.Profile()
    profile.enable()
    search = evolutionary(512, genetic_iters=4, init_min_unmeasured=50)  # MetaSchedule's
    run_tasks(
        tasks, device, database, model, [search], trials_per_task=trials, trials_per_iter=64,
        seed=0, work_dir=None, file_logs=False, num_threads=2, task_scheduler="round-robin",
    )  # fmt: skip
    profile.disable()
    cpu, wall = _cpu_s() - cpu0, time.perf_counter() - wall0
    n = len(database.get_all_tuning_records())
    stats = pstats.Stats(profile)
    profiled = sum(tt for (_c, _n, tt, _ct, _cl) in stats.stats.values())  # type: ignore[attr-defined]
    parts = {
        "metaschedule_cpp_search": _seconds(stats, "task_scheduler.py", "tune", False),
        # called back from the C++ search: training and scoring, with xgboost's own C++
        "xgb": _seconds(stats, "xgb_model.py", "update", True)
        + _seconds(stats, "xgb_model.py", "predict", True),
        "simulator": float(device.model_wall_seconds),
        "tvm_import_once": _seconds(stats, "tensor_intrin/__init__.py", "<module>", True),
    }
    return {
        "command": " ".join(["python -m bench.compile.reference_cost", *sys.argv[1:]]),
        "network": network, "unit": unit, "task": tasks[0].name, "trials": n,
        "cpu_s": round(cpu, 1), "cpu_s_per_trial": round(cpu / n, 3) if n else None,
        "wall_s": round(wall, 1), "profiled_wall_s": round(profiled, 1),
        "share_of_profiled_wall": {k: round(v / profiled, 3) for k, v in parts.items()},
        "load_start": load0, "load_end": [round(x, 2) for x in os.getloadavg()],
        "note": "under cProfile (Python-side parts are slowed by it); the simulator's share "
        "is its own wall clock",
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="bert_layer")
    parser.add_argument("--unit", default="a30-u1")
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    from bench.protocol import units

    if args.unit not in units("test") or args.trials < 64:
        parser.error("--unit: a test unit of bench/protocol.py; --trials: at least 64")
    result = measure(args.network, args.unit, args.trials)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    from bench import prepare

    prepare()
    sys.exit(main())
