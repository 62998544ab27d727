"""The MetaSchedule-20K references of issue 12, computed resumably (TLM's protocol).

One (network, unit) reference = MetaSchedule as `tune_relax` runs it by default: every
task of the network, 20,000 measured trials for the whole network shared out by its
gradient task scheduler, the evolutionary search's default settings (population 512,
4 genetic iterations, 64 trials per search), the XGB cost model, on a simulated unit
(`sim:<unit>`: every latency here is SIMULATED).

A run stops at `--budget-s` (or on SIGTERM/SIGINT, after the batch in flight) and picks
up where the last one stopped:

- the tuning database (MetaSchedule's JSON database) is the state. It is kept in
  runs/references/<network>__<unit>/ while running and snapshotted, gzipped, to
  bench/reports/references/<network>__<unit>/ after every batch, so a fresh clone resumes
  from the committed snapshot;
- on resume the XGB model is retrained on every record of the database (what the
  uninterrupted run's model would have seen) and the search starts from the database's
  best schedules (MetaSchedule's own warm start);
- what a resume does NOT restore: the gradient scheduler's history. Each piece starts
  with its round-robin warm-up (one search per task), so run in few long pieces.

`summary.json` next to the snapshot: trials done, network latency so far (the best
record per task; tasks still without one at their default schedule), CPU seconds, the
modelled measurement time, and the projected CPU hours to finish at this run's CPU cost
per trial.

    python -m bench.compile.reference --network bert_layer --unit a30-u1 --trials 20000 \
        --budget-s 1800
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import math
import os
import resource
import shutil
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "runs" / "references"
REPORTS = ROOT / "bench" / "reports" / "references"
DB_FILES = ("database_workload.json", "database_tuning_record.json")


class _Stop(Exception):
    """Raised from the measure callback to end a run between batches."""


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (builder workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def pair_name(network: str, unit: str) -> str:
    return f"{network}__{unit}"


def restore(work: Path, report: Path) -> None:
    """Put the committed snapshot in the work dir unless the work dir holds more."""
    work.mkdir(parents=True, exist_ok=True)
    for name in DB_FILES:
        snap, live = report / f"{name}.gz", work / name
        if not snap.exists():
            continue
        with gzip.open(snap, "rb") as f:
            data = f.read()
        if not live.exists() or live.stat().st_size < len(data):
            live.write_bytes(data)


def snapshot(work: Path, report: Path) -> None:
    report.mkdir(parents=True, exist_ok=True)
    for name in DB_FILES:
        live = work / name
        if live.exists():
            tmp = report / f"{name}.gz.tmp"
            with live.open("rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst)
            os.replace(tmp, report / f"{name}.gz")  # never a half-written snapshot


def _records_by_task(database: Any, tasks: list[Any]) -> list[list[Any]]:
    """Every record of each task, failed runs included (a trial is a trial)."""
    import tvm_ffi

    index = {tvm_ffi.structural_hash(t.mod): i for i, t in enumerate(tasks)}
    out: list[list[Any]] = [[] for _ in tasks]
    for rec in database.get_all_tuning_records():
        i = index.get(tvm_ffi.structural_hash(rec.workload.mod))
        if i is not None:
            out[i].append(rec)
    return out


def _mean_ok(run_secs: Any) -> float:
    secs = [float(x) for x in run_secs]
    return math.inf if not secs or max(secs) >= 1e9 else sum(secs) / len(secs)


def retrain(model: Any, database: Any, tasks: list[Any], target: Any) -> int:
    """Train the XGB model on every record of the database; how many it saw."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    seen = 0
    for task, records in zip(tasks, _records_by_task(database, tasks), strict=True):
        if not records:
            continue
        ctx = ms.TuneContext(mod=task.mod, target=target, task_name=task.name)
        cands, results = [], []
        for rec in records:
            sch = s_tir.Schedule(task.mod)
            rec.trace.apply_to_schedule(sch, remove_postproc=False)
            cands.append(ms.MeasureCandidate(sch, rec.args_info))
            results.append(ms.runner.RunnerResult(run_secs=rec.run_secs, error_msg=None))
        model.update(ctx, cands, results)
        seen += len(records)
    return seen


def progress(database: Any, tasks: list[Any], default: list[float]) -> dict[str, Any]:
    """Trials in the database and the network latency they give (simulated seconds)."""
    per_task = _records_by_task(database, tasks)
    best = [min((_mean_ok(r.run_secs) for r in recs), default=math.inf) for recs in per_task]
    kept = [min(b, d) for b, d in zip(best, default, strict=True)]
    return {
        "in_database": sum(len(r) for r in per_task),
        "tasks_with_records": sum(1 for r in per_task if r),
        "tasks": len(tasks),
        "task_trials": {t.name: len(r) for t, r in zip(tasks, per_task, strict=True)},
        "task_best_s": {
            t.name: (b if math.isfinite(b) else None) for t, b in zip(tasks, best, strict=True)
        },
        # MetaSchedule's own answer: the best record of every task (None until each has one)
        "network_latency_s": (
            sum(t.weight * b for t, b in zip(tasks, best, strict=True))
            if all(math.isfinite(b) for b in best) else None
        ),
        # tasks with no record yet, or whose best loses to it, at their default schedule
        "network_latency_with_default_s": (
            sum(t.weight * k for t, k in zip(tasks, kept, strict=True))
            if all(math.isfinite(k) for k in kept) else None
        ),
    }  # fmt: skip


def _defaults(args: argparse.Namespace) -> bool:
    """Whether the search runs at MetaSchedule's defaults (the protocol's reference)."""
    return (args.population, args.genetic_iters, args.per_iter) == (512, 4, 64)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    from agent.devices import get_device
    from agent.tune_harness import evolutionary, run_tasks
    from bench.compile.compile_data import network_tasks
    from bench.compile.tuning_run import default_latencies
    from bench.protocol import device_of
    from schemas import RunFailure

    pair = pair_name(args.network, args.unit)
    work, report = args.work / pair, args.reports / pair
    summary_path = report / "summary.json"
    prior = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    started, cpu0, load0 = time.perf_counter(), _cpu_s(), _load()
    deadline = started + args.budget_s
    device = get_device(device_of(args.unit))
    target = device.target()
    tasks, _n, _share = network_tasks(args.network, target, None)
    default = default_latencies(tasks, get_device(device_of(args.unit)))  # not accounted here
    restore(work, report)
    database = ms.database.JSONDatabase(work_dir=str(work), module_equality="structural")
    before = progress(database, tasks, default)
    model = ms.cost_model.XGBModel(num_tuning_cores=args.cores)
    retrained = retrain(model, database, tasks, target) if before["in_database"] else 0
    # trials as MetaSchedule counts them (a failed build too; the database has no record
    # of those): the earlier runs' count, or the database's for a snapshot without one
    done0 = max(int(prior.get("trials", 0)), before["in_database"])
    ran = [0]
    setup_cpu = _cpu_s() - cpu0
    stop = {"why": None}

    def on_signal(signum: int, _frame: Any) -> None:
        stop["why"] = signal.Signals(signum).name

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    runs = list(prior.get("runs", []))
    this_run: dict[str, Any] = {
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.compile.reference", *sys.argv[1:]]),
        "trials_before": None,
        "retrained_on": retrained,
        "load_start": load0,
    }

    def write(now: dict[str, Any], stopped: str | None) -> dict[str, Any]:
        cpu = _cpu_s() - cpu0
        trials = done0 + ran[0]
        this_run.update(
            trials_before=done0, trials_after=trials, setup_cpu_s=round(setup_cpu, 1),
            cpu_s=round(cpu, 1),
            wall_s=round(time.perf_counter() - started, 1),
            modelled_measure_s=round(float(device.modelled_measure_seconds), 1),
            load_end=_load(), stopped=stopped,
        )  # fmt: skip
        # the search's own cost: setup (extraction, retraining) is paid once per piece
        per_trial = (cpu - setup_cpu) / ran[0] if ran[0] else None
        left = max(args.trials - trials, 0)
        summary = {
            "network": args.network, "unit": args.unit, "device": device_of(args.unit),
            "simulated": True, "target_trials": args.trials, "seed": args.seed,
            "settings": {
                "task_scheduler": "gradient", "cost_model": "xgb",
                "population": args.population, "genetic_iters": args.genetic_iters,
                "trials_per_search": args.per_iter, "cores": args.cores,
                "metaschedule_defaults": _defaults(args),
            },
            "trials": trials, **now,
            "cpu_s_total": round(sum(r["cpu_s"] for r in runs) + cpu, 1),
            "modelled_measure_s_total": round(
                sum(r["modelled_measure_s"] for r in runs) + device.modelled_measure_seconds, 1
            ),
            # search CPU per trial (this piece, setup excluded), and the projection from it
            "cpu_s_per_trial_this_run": round(per_trial, 3) if per_trial else None,
            "projected_cpu_h_to_finish": round(left * per_trial / 3600, 2) if per_trial else None,
            "finished": left == 0,
            "runs": [*runs, this_run],
        }  # fmt: skip
        report.mkdir(parents=True, exist_ok=True)
        tmp = summary_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, indent=1) + "\n")
        os.replace(tmp, summary_path)
        return summary

    left = args.trials - done0
    if left <= 0:
        return write(before, "finished")

    @derived_object
    class Checkpoint(PyMeasureCallback):
        """After each batch (after MetaSchedule's own callbacks put it in the database):
        snapshot, summary, and the end of the run when its time is up."""

        def apply(self, _scheduler: Any, _task_id: int, candidates: Any, *_rest: Any) -> None:
            ran[0] += len(candidates)
            snapshot(work, report)
            write(progress(database, tasks, default), None)
            if stop["why"] is None and time.perf_counter() > deadline:
                stop["why"] = "budget"
            if stop["why"]:
                raise _Stop(stop["why"])

    pop = args.population
    strategies = [
        evolutionary(pop, genetic_iters=args.genetic_iters, init_min_unmeasured=min(50, pop))
        for _ in tasks
    ]
    try:
        run_tasks(
            tasks, device, database, model, strategies, trials_per_task=left,
            trials_global=left, trials_per_iter=args.per_iter, seed=args.seed,
            file_logs=args.logs, work_dir=work / "logs", log_level=logging.INFO,
            callbacks=[Checkpoint()], num_threads=args.cores, task_scheduler="gradient",
        )  # fmt: skip
    except RunFailure:
        if stop["why"] is None:
            raise
    snapshot(work, report)
    return write(progress(database, tasks, default), stop["why"] or "done")


def main(argv: list[str] | None = None) -> int:
    from agent.networks import NETWORK_SUITE
    from bench import prepare
    from bench.protocol import split_of

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--network", required=True, choices=sorted(NETWORK_SUITE))
    p.add_argument("--unit", required=True, help="a protocol unit, e.g. a30-u1")
    p.add_argument("--trials", type=int, default=20000, help="measured trials per network")
    p.add_argument("--budget-s", type=float, default=1800.0, help="stop after this wall time")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cores", type=int, default=2, help="search and XGB threads")
    # not the protocol's: smaller searches, for tests (the summary says so)
    p.add_argument("--population", type=int, default=512, help=argparse.SUPPRESS)
    p.add_argument("--genetic-iters", type=int, default=4, help=argparse.SUPPRESS)
    p.add_argument("--per-iter", type=int, default=64, help=argparse.SUPPRESS)
    p.add_argument("--logs", action="store_true", help="MetaSchedule's logs in the work dir")
    p.add_argument("--work", type=Path, default=WORK)
    p.add_argument("--reports", type=Path, default=REPORTS)
    args = p.parse_args(argv)
    prepare()
    if split_of(args.unit) is None:
        print(f"error: {args.unit!r} is not a protocol unit (bench/protocol.py)", file=sys.stderr)
        return 2
    if min(args.trials, args.population, args.per_iter) < 1 or args.budget_s <= 0:
        print("error: --trials, --budget-s and the search sizes must be positive", file=sys.stderr)
        return 2
    try:
        s = run(args)
    except Exception as exc:  # noqa: BLE001 - one line; the database keeps what it had
        if os.environ.get("SIMOE_DEBUG"):
            raise
        print(f"error: reference run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    lat = s["network_latency_s"]
    where = f"{s['network']} on {s['device']} (simulated): {s['trials']}/{s['target_trials']}"
    if lat:
        print(f"{where} trials, network latency {lat * 1e3:.4f} ms")
    else:
        print(f"{where} trials; {s['tasks_with_records']}/{s['tasks']} tasks measured so far")
    print(
        f"CPU {s['cpu_s_total']:.0f} s in all; {s['cpu_s_per_trial_this_run']} CPU s/trial this "
        f"run; projected {s['projected_cpu_h_to_finish']} CPU h to finish; stopped: "
        f"{s['runs'][-1]['stopped']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
