"""One tuning run of one method on one simulated GPU (SIMULATED: `sim:<gpu>`), as the
compile section (bench/compile/compile_time.py) runs each: the tasks tuned through the
tuner's harness (agent.tune_harness) with one cost model and search strategy, the curve
of best network latency against compile time, and the row it becomes (`method_row`);
SiMoE fast's chained model-only search (`simoe_fast`) and the untuned defaults
(`default_latencies`). What one run tunes and how it searches is one `TuningRun`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.report.report_model import CompileSettings, MethodRow
from schemas.records import failed_run

if TYPE_CHECKING:
    from agent.tune_harness import TuneTask


# -- one tuning run ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TuningRun:
    """One method's run over one network's tasks on one simulated GPU, and how it searches
    (the compile section makes one per run from its `CompileSettings`)."""

    tasks: list[TuneTask]
    network: str
    gpu: str  # the simulated GPU (`sim:<gpu>`)
    method: str  # the row's name
    trials: int  # measurements per task
    seed: int
    trials_per_iter: int = 64  # measurements per search
    work_dir: Path | None = None  # MetaSchedule's logs go below it (None: none kept)
    # the evolutionary search (`tune_method`); a strategy given to `tune_with_strategy`
    # has its own
    population: int = 0
    genetic_iters: int = 0
    init_min_unmeasured: int = 50
    # {method: k}: the run stopped after k measurements per task, also returned as a row
    snapshots: Mapping[str, int] = field(default_factory=dict)


def method_row(
    run: TuningRun,
    method: str,
    trials_per_task: int,
    best: list[float],
    *,
    measured: int,
    wall: float,
    modelled: float,
    curve: list[tuple[float, float]],
    default: list[float] | None = None,
    tuned: list[float] | None = None,
) -> MethodRow:
    """A run's row (`method`: the run's, or a snapshot's): network latency = sum of weight x
    best task latency (None until every task has one). `default`, `tuned`: each task's
    default-schedule and best tuned latency (`best` is the smaller), to say which one the
    task keeps."""
    tasks = run.tasks
    finite = all(math.isfinite(b) for b in best)
    default = default or [math.inf] * len(tasks)
    tuned = tuned or list(best)
    kept = [
        "default" if math.isfinite(d) and not t < d else "tuned" if math.isfinite(t) else None
        for d, t in zip(default, tuned, strict=True)
    ]
    return MethodRow(
        network=run.network,
        gpu=run.gpu,
        method=method,
        trials_per_task=trials_per_task,
        measured=measured,
        search_wall_s=wall,
        modelled_measure_s=modelled,
        compile_s=wall + modelled,
        network_latency_s=(
            sum(t.weight * b for t, b in zip(tasks, best, strict=True)) if finite else None
        ),
        task_best_s={
            t.name: (b if math.isfinite(b) else None) for t, b in zip(tasks, best, strict=True)
        },
        curve=list(curve),
        task_default_s={
            t.name: (d if math.isfinite(d) else None) for t, d in zip(tasks, default, strict=True)
        },
        task_kept={t.name: k for t, k in zip(tasks, kept, strict=True)},
    )


Strategy = Callable[[int, "TuneTask", Any], Any]  # (task index, task, target) -> strategy


def tune_method(
    run: TuningRun, cost_model: Any, *, start: tuple[MethodRow, Any] | None = None
) -> list[MethodRow]:
    """Tune every task for `run.trials` measurements with one cost model and MetaSchedule's
    evolutionary search; track the curve.

    `run.snapshots` {method: k}: the state after the first k // trials_per_iter searches (of
    up to trials_per_iter measurements) per task is also returned as a row of that method:
    the same run stopped at k (round-robin gives every task its searches before any task
    gets more). `start` (row, database): continue an earlier run of the same tasks: its
    measurements are in the database, its time and best latencies count toward this run's."""
    from agent.tune_harness import evolutionary

    def strategy(_i: int, _task: TuneTask, _target: Any) -> Any:
        return evolutionary(
            run.population,
            genetic_iters=run.genetic_iters,
            init_min_unmeasured=run.init_min_unmeasured,
        )

    rows, _database = tune_with_strategy(run, cost_model, strategy, start=start)
    return rows


def default_latencies(tasks: list[TuneTask], device: Any) -> list[float]:
    """Each task's default schedule (DLight's GPU rules, what `tune` measures as the
    untuned baseline) measured once on the simulated GPU; inf where it cannot run."""
    from agent.tuner import _default_schedule  # the untuned baseline `tune` reports

    out = []
    for task in tasks:
        try:
            [outcome] = device.simulate_batch([_default_schedule(task.mod, device.target())])
        except Exception:  # noqa: BLE001 - a default that cannot be built: no fallback
            outcome = "failed"
        if isinstance(outcome, str) or failed_run([float(x) for x in outcome]):
            out.append(math.inf)
            continue
        device.account_measurement(outcome)
        out.append(sum(outcome) / len(outcome))
    return out


def tune_with_strategy(
    run: TuningRun,
    cost_model: Any,
    strategy: Strategy,
    *,
    start: tuple[MethodRow, Any] | None = None,
) -> tuple[list[MethodRow], Any]:
    """One run through the tuner's harness (agent.tune_harness), the compile-time curve kept
    by a measure callback; the rows and the database of its measurements. `strategy` is
    made per task inside the timed run (fast mode's model-only search counts as search)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    from agent.devices import get_device
    from agent.devices.sim import modelled_cost_seconds
    from agent.tune_harness import run_tasks

    tasks, trials = run.tasks, run.trials
    device = get_device(f"sim:{run.gpu}")
    before, database = start if start else (None, ms.database.MemoryDatabase())
    best: list[float] = [math.inf] * len(tasks)
    measured = [0]
    curve: list[tuple[float, float]] = []
    wall0 = modelled0 = 0.0
    if before is not None:
        best = [math.inf if b is None else b for b in before.task_best_s.values()]
        default = [before.task_default_s.get(t.name) or math.inf for t in tasks]
        measured[0] = before.measured
        curve = list(before.curve)
        wall0, modelled0 = before.search_wall_s, before.modelled_measure_s
    else:  # never worse than the default: it is measured first and kept unless beaten
        default = default_latencies(tasks, device)
        best = list(default)
        if all(math.isfinite(d) for d in default):
            lat = sum(t.weight * d for t, d in zip(tasks, default, strict=True))
            curve.append((float(device.modelled_measure_seconds), lat))
    tuned: list[float] = [math.inf] * len(tasks)
    if before is not None:
        tuned = [
            b if b is not None and before.task_kept.get(t.name) == "tuned" else math.inf
            for t, b in zip(tasks, before.task_best_s.values(), strict=True)
        ]
    modelled_done = [float(device.modelled_measure_seconds)]
    taken: dict[str, MethodRow] = {}
    batches = [0]
    per_iter = min(run.trials_per_iter, trials)

    def row_now(name: str, k: int, wall: float, modelled: float) -> MethodRow:
        return method_row(
            run, name, k, best, measured=measured[0], wall=wall0 + wall,
            modelled=modelled0 + modelled, curve=curve, default=default, tuned=tuned,
        )  # fmt: skip

    @derived_object
    class Curve(PyMeasureCallback):
        def apply(
            self, _scheduler: Any, task_id: int, _cands: Any, _builds: Any, runs: Any
        ) -> None:
            # Measurements of a batch happen one after another on the GPU: each candidate's
            # point adds the modelled time of the measurements before it, not the whole batch.
            wall = time.perf_counter() - started
            modelled = modelled_done[0]
            for r in runs:
                measured[0] += 1
                secs = [float(s) for s in (r.run_secs or [])]
                modelled += modelled_cost_seconds(secs) if not failed_run(secs) else 0.0
                if r.error_msg is None and not failed_run(secs):
                    tuned[task_id] = min(tuned[task_id], sum(secs) / len(secs))
                    best[task_id] = min(best[task_id], tuned[task_id])
                if all(math.isfinite(b) for b in best):
                    lat = sum(t.weight * b for t, b in zip(tasks, best, strict=True))
                    curve.append((wall0 + modelled0 + wall + modelled, lat))
            modelled_done[0] = float(device.modelled_measure_seconds)
            batches[0] += 1
            for name, k in run.snapshots.items():  # after k // per_iter searches per task
                if name not in taken and batches[0] >= k // per_iter * len(tasks):
                    taken[name] = row_now(name, k, wall, modelled_done[0])

    log_dir = None
    if run.work_dir is not None:
        log_dir = run.work_dir / "logs" / f"{run.network}-{run.gpu}-{run.method}"
        log_dir.mkdir(parents=True, exist_ok=True)
    started, cpu0 = time.perf_counter(), time.process_time()
    strategies = [strategy(i, t, device.target()) for i, t in enumerate(tasks)]
    run_tasks(
        tasks, device, database, cost_model, strategies, trials_per_task=trials,
        trials_per_iter=per_iter, seed=run.seed, work_dir=log_dir, file_logs=False,
        callbacks=[Curve()], num_threads=2, task_scheduler="round-robin",
    )  # fmt: skip
    wall = time.perf_counter() - started
    rows = [
        row_now(run.method, trials, wall, float(device.modelled_measure_seconds)),
        *taken.values(),
    ]
    # process CPU (all threads); a continued run (`start`) adds the earlier run's
    rows[0].search_cpu_s = time.process_time() - cpu0 + ((before and before.search_cpu_s) or 0)
    return rows, database


def simoe_fast(
    tasks: list[TuneTask],
    gpu: str,
    make_model: Callable[[], Any],
    settings: CompileSettings,
    network: str,
    method: str = "simoe-fast",
    seeds: list[list[Any]] | None = None,
) -> tuple[MethodRow, Any]:
    """SiMoE fast mode, as `simoe-agent tune --model-rounds` runs it: per task, a chained
    model-only search (simoe_model.model_search), then the top `tlm_budget` candidates by
    the model measured on the device.

    Returns the row and a MetaSchedule database holding the measurements, for SiMoE full
    mode to continue from."""
    from agent.tune_harness import model_picks

    def strategy(i: int, task: TuneTask, target: Any) -> Any:
        model = make_model()
        return model_picks(
            task, target, model, settings.tlm_budget, rounds=settings.simoe_fast_rounds,
            per_round=settings.simoe_fast_per_round, population=settings.simoe_fast_population,
            genetic_iters=settings.simoe_fast_genetic_iters,
            init_min_unmeasured=settings.init_min(settings.simoe_fast_population),
            seed=settings.seed + i, num_threads=2,  # score=None: the model, frozen and cached
            seeds=seeds[i] if seeds else (),
        )  # fmt: skip

    run = TuningRun(
        tasks,
        network,
        gpu,
        method,
        trials=settings.tlm_budget,
        seed=settings.seed,
        trials_per_iter=settings.trials_per_iter,
    )
    [row], database = tune_with_strategy(run, make_model(), strategy)
    return row, database
