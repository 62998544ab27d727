"""Compile time and network performance on simulated GPUs the federation has never seen.

For each network and each unseen GPU, every method tunes the same tasks on the same
simulated GPU (`sim:<gpu>`, the analytical latency model: everything here is SIMULATED):

- ms-xgb-full: MetaSchedule's default (XGB cost model) at the full budget.
- ms-xgb-<k>: the same at TLM's budget (k = 32 measurements per task) and other small ones,
  in `xgb_small_rounds` searches of k / rounds with a warm-up of one search, so that XGB is
  fitted after the first search and ranks the candidates of the others within the budget.
- ms-random-<k> (k = TLM's budget): MetaSchedule's search with random scores, one search of
  k: what ms-xgb-<k> was before issue 24 (XGB's warm-up outlasted the budget).
- ms-mlp-pretrained-<k>: MetaSchedule's segment-sum MLP pre-trained on the other GPUs'
  data (TenSet-style transfer, as bench/transfer/offline_transfer.py does), fine-tuned while tuning.
- simoe-fast: SiMoE zero-shot (trained on the other GPUs only), chained model-only
  evolutionary searches (simoe_model.model_search), then the model's top k per task
  measured (TLM's budget).
- simoe-full: simoe-fast's measurements continued by MetaSchedule's search with SiMoE
  learning online (few-shot own expert) up to the full budget.

Training data and the offline-trained models: bench/compile/compile_data.py. Every run tunes
through the tuner's harness (agent.tune_harness). The rows, the section and its settings are
typed in bench/report/report_model.py; the claims are computed in bench/report/claims.py.

Compile time = real search wall time here (evolutionary search, cost-model training and
prediction, the simulator's analysis) + modelled measurement time (what each measurement
would cost on the real GPU: a CUDA compile plus the runs; agent.devices.sim). Both are
reported separately and summed. Network latency = sum over tasks of weight x best
measured task latency (simulated).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.compile.compile_data import Say, prepare
from bench.compile.tuning_run import TuningRun, simoe_fast, tune_method, tune_with_strategy
from bench.report.claims import summarize
from bench.report.report_model import CompileSection, CompileSettings, FailedRun, MethodRow
from simoe_model.tvm_compat import single_candidate_safe, step_lr_accepts_verbose

if TYPE_CHECKING:
    from agent.tune_harness import TuneTask

OnRow = Callable[[CompileSection], None]  # gets the partial section after each run


@dataclass(frozen=True)
class Case:
    """One network on one unseen GPU: the tasks every method tunes there."""

    network: str
    gpu: str
    tasks: list[TuneTask]

    def __str__(self) -> str:
        return f"{self.network} on sim:{self.gpu}"


@dataclass(frozen=True)
class SectionOut:
    """The section being filled: each run's rows go in (a failed run as its error), `on_row`
    gets the partial section after each, `say` tells what runs."""

    section: CompileSection
    say: Say
    on_row: OnRow

    def add(self, rows: list[MethodRow]) -> None:
        self.section.rows += rows
        self.on_row(self.section)

    def failed(self, case: Case, method: str, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
        run = FailedRun(network=case.network, gpu=case.gpu, method=method, error=error)
        self.section.failed.append(run)
        self.on_row(self.section)


# -- the section -------------------------------------------------------------------------------
# (method, cost model factory, trials, population, genetic iterations, snapshots,
#  measurements per search)
Plan = tuple[str, Callable[[], Any], int, int, int, dict[str, int], int]


def _run_plans(
    plans: list[Plan], case: Case, settings: CompileSettings, work_dir: Path, out: SectionOut
) -> None:
    for method, make_model, trials, pop, iters, snapshots, per_iter in plans:
        also = f", snapshot {', '.join(snapshots)}" if snapshots else ""
        out.say(f"{case}: {method} ({trials} trials/task in searches of {per_iter}{also})")
        run = TuningRun(
            case.tasks,
            case.network,
            case.gpu,
            method,
            trials=trials,
            seed=settings.seed,
            trials_per_iter=per_iter,
            work_dir=work_dir,
            population=pop,
            genetic_iters=iters,
            init_min_unmeasured=settings.init_min(pop),
            snapshots=snapshots,
        )
        try:
            with step_lr_accepts_verbose():
                rows = tune_method(run, make_model())
        except Exception as exc:  # noqa: BLE001 - one failed method must not lose the rest
            out.failed(case, method, exc)
            continue
        out.add(rows)


def _xgb_model(warmup: int) -> Callable[[], Any]:
    """MetaSchedule's XGB model as tune_tasks makes it ("xgb"), with the given warm-up."""

    def make() -> Any:
        from tvm.s_tir.meta_schedule.cost_model import XGBModel

        return XGBModel(num_warmup_samples=warmup, num_tuning_cores=2, tree_method="auto")

    return make


def _random_model() -> Any:
    """MetaSchedule's random cost model: the search's candidates in random order."""
    from tvm.s_tir.meta_schedule.cost_model import RandomModel

    return RandomModel()


def small_xgb_plan(settings: CompileSettings, budget: int) -> Plan:
    """The XGB peer at a small budget: `xgb_small_rounds` searches of budget / rounds
    measurements, XGB's warm-up one search, so its model is fitted after the first search and
    ranks every later one within the budget (one search of the whole budget never used it)."""
    rounds = settings.xgb_small_rounds or 1
    per_iter = max(1, budget // rounds)
    warmup = min(settings.xgb_warmup, per_iter) if rounds > 1 else settings.xgb_warmup
    return (f"ms-xgb-{budget}", _xgb_model(warmup), budget, settings.population,
            settings.genetic_iters, {}, per_iter)  # fmt: skip


def _mlp_model(trainer: Any) -> Any:
    from tvm.s_tir.meta_schedule.cost_model.mlp_model import MLPModel

    return MLPModel(trainer=single_candidate_safe(copy.deepcopy(trainer)))


def _simoe_model(base: Any, hv: np.ndarray, online: bool) -> Any:
    from simoe_model.cost_model import SiMoECostModel

    return SiMoECostModel(copy.deepcopy(base), hv, online=online)


def _run_simoe(
    case: Case,
    model: Any,
    hv: np.ndarray,
    settings: CompileSettings,
    work_dir: Path,
    out: SectionOut,
    *,
    full: CompileSettings | None,
) -> None:
    """SiMoE fast mode, then full mode (when `full`, its settings): fast mode's measurements
    continued by MetaSchedule's search with SiMoE learning online, up to the full budget."""
    k = settings.tlm_budget
    out.say(
        f"{case}: simoe-fast ({settings.simoe_fast_rounds} model-only searches "
        f"of {settings.simoe_fast_per_round}, then {k} measured per task)"
    )
    try:
        fast, database = simoe_fast(
            case.tasks, case.gpu, lambda: _simoe_model(model, hv, False), settings, case.network
        )
    except Exception as exc:  # noqa: BLE001 - one failed method must not lose the rest
        out.failed(case, "simoe-fast", exc)
        return
    out.add([fast])
    if full is None or full.full_budget <= k:
        return
    out.say(f"{case}: simoe-full (continues to {full.full_budget} trials/task)")
    run = TuningRun(
        case.tasks,
        case.network,
        case.gpu,
        "simoe-full",
        trials=full.full_budget - k,
        seed=full.seed,
        trials_per_iter=full.trials_per_iter,
        work_dir=work_dir,
        population=full.population,
        genetic_iters=full.genetic_iters,
        init_min_unmeasured=full.init_min(full.population),
    )
    try:
        with step_lr_accepts_verbose():
            [row] = tune_method(run, _simoe_model(model, hv, True), start=(fast, database))
    except Exception as exc:  # noqa: BLE001
        out.failed(case, "simoe-full", exc)
        return
    row.trials_per_task = full.full_budget
    out.add([row])


def _run_mlp_fast(case: Case, mlp: Any, settings: CompileSettings, out: SectionOut) -> None:
    """The fair peer of SiMoE fast (issue 12, item 4): the pre-trained MLP (the same training
    data) searching exactly as SiMoE fast does, then its top `tlm_budget` measured."""
    out.say(f"{case}: mlp-fast (SiMoE fast's search with the pre-trained MLP)")
    try:
        with step_lr_accepts_verbose():
            make_model = partial(_mlp_model, mlp)
            row, _db = simoe_fast(
                case.tasks, case.gpu, make_model, settings, case.network, method="mlp-fast"
            )
    except Exception as exc:  # noqa: BLE001 - one failed method must not lose the rest
        out.failed(case, "mlp-fast", exc)
        return
    out.add([row])


def schedule_transfer(
    tasks: list[TuneTask],
    gpu: str,
    best: list[list[Any]],
    settings: CompileSettings,
    network: str,
) -> MethodRow:
    """Fleet schedule transfer: each task's given known-good traces measured, best first."""
    from tvm import s_tir

    from simoe_model.model_search import ProposedCandidates, Scored

    def strategy(i: int, task: TuneTask, _target: Any) -> Any:
        picks = []
        for order, trace in enumerate(best[i][: settings.tlm_budget]):
            sch = s_tir.Schedule(task.mod)
            trace.apply_to_schedule(sch, remove_postproc=False)
            picks.append(Scored(sch.mod, trace, float(order), order))
        return ProposedCandidates(picks)

    run = TuningRun(
        tasks,
        network,
        gpu,
        "schedule-transfer",
        trials=settings.tlm_budget,
        seed=settings.seed,
        trials_per_iter=settings.trials_per_iter,
    )
    [row], _db = tune_with_strategy(run, "random", strategy)
    return row


def _run_fleet_methods(
    data: Any,
    case: Case,
    settings: CompileSettings,
    out: SectionOut,
    have: set[tuple[str, str, str]],
) -> None:
    """Fleet schedule transfer (a peer: at least its performance is the target) and SiMoE
    fast with the fleet schedule warm start (the same schedules seed its first search)."""
    from bench.compile.compile_data import fleet_best

    network, gpu, tasks = case.network, case.gpu, case.tasks
    if network in settings.held_out_networks:
        return  # no fleet record of its operators: nothing to transfer or to seed with
    best = fleet_best(data, network, gpu, settings.tlm_budget)
    runs = {
        "schedule-transfer": lambda: schedule_transfer(tasks, gpu, best, settings, network),
        "simoe-fast-warm": lambda: simoe_fast(
            tasks, gpu, lambda: _simoe_model(data.simoe, data.hv[gpu], False), settings,
            network, method="simoe-fast-warm", seeds=best,
        )[0],
    }  # fmt: skip
    for method, run in runs.items():
        if (network, gpu, method) in have or not settings.runs(method):
            continue
        out.say(f"{case}: {method}")
        try:
            row = run()
        except Exception as exc:  # noqa: BLE001 - one failed method must not lose the rest
            out.failed(case, method, exc)
            continue
        out.add([row])


def run_section(
    settings: CompileSettings,
    work_dir: Path,
    *,
    say: Say,
    on_row: OnRow,
    done: list[MethodRow] | None = None,
    fleet_stores: bool = True,
) -> CompileSection:
    """Every network x unseen GPU x method; `on_row` gets the partial result after each run.

    `done`: rows of an interrupted run with the same settings, kept and not run again (a
    simoe-fast row without its simoe-full is run again: full mode continues fast's search).
    `fleet_stores`: write the fleet stores the offline section reads (not needed without it)."""
    data = prepare(settings, work_dir, say, settings.max_tasks, fleet_stores)
    kept = _resumable(done or [], settings)
    section = CompileSection(
        settings=settings, networks=data.networks, prep_seconds=data.prep_seconds, rows=kept
    )
    have = {(r.network, r.gpu, r.method) for r in kept}
    out = SectionOut(section, say, on_row)
    on_row(section)
    k = settings.tlm_budget
    per_iter = settings.trials_per_iter
    xgb = _xgb_model(settings.xgb_warmup)
    # a small budget that is a whole number of searches, past XGB's warm-up, is the full run
    # stopped there
    xgb_snaps = {f"ms-xgb-{b}": b for b in settings.xgb_snapshot_budgets()}
    plans: list[Plan] = []
    if settings.runs("ms-xgb-full"):
        plans.append(
            ("ms-xgb-full", xgb, settings.full_budget, settings.population,
             settings.genetic_iters, xgb_snaps, per_iter)
        )  # fmt: skip
    else:  # no full run to take snapshots of: each small budget is its own run
        xgb_snaps = {}
    for budget in sorted({k, *settings.small_budgets} - set(xgb_snaps.values())):
        plans.append(small_xgb_plan(settings, budget))
    plans.append(
        (f"ms-random-{k}", _random_model, k, settings.population, settings.genetic_iters, {},
         min(per_iter, k))
    )  # fmt: skip
    plans.append(
        (f"ms-mlp-pretrained-{k}", lambda: _mlp_model(data.mlp), k, settings.population,
         settings.genetic_iters, {}, min(per_iter, k))
    )  # fmt: skip
    plans = [p for p in plans if settings.runs(p[0])]
    plans.sort(key=lambda p: (p[2], p[0]))  # cheap runs first: a timeout keeps the comparison
    for gpu in settings.unseen_gpus:
        for network, tasks in data.tasks.items():
            case = Case(network, gpu, tasks)
            # SiMoE first, then the peers
            full = settings if settings.runs("simoe-full") else None
            if (network, gpu, "simoe-full" if full else "simoe-fast") not in have:
                _run_simoe(case, data.simoe, data.hv[gpu], settings, work_dir, out, full=full)
            # the same search, the MLP's scores
            if (network, gpu, "mlp-fast") not in have and settings.runs("mlp-fast"):
                _run_mlp_fast(case, data.mlp, settings, out)
            _run_fleet_methods(data, case, settings, out, have)
            todo = [p for p in plans if (network, gpu, p[0]) not in have]
            _run_plans(todo, case, settings, work_dir, out)
    section.summary = summarize(section.rows, settings.tlm_budget)
    return section


def _resumable(rows: list[MethodRow], settings: CompileSettings) -> list[MethodRow]:
    """Rows of an earlier run worth keeping: all but a simoe-fast without its simoe-full, and
    a snapshot (ms-xgb-k) without the run it was taken from."""
    have = {(r.network, r.gpu, r.method) for r in rows}

    def keep(r: MethodRow) -> bool:
        if r.method == "simoe-fast" and not settings.runs("simoe-full"):
            return True
        if r.method == "simoe-fast":
            return (r.network, r.gpu, "simoe-full") in have
        snapshots = {f"ms-xgb-{b}" for b in settings.xgb_snapshot_budgets()}
        if r.method in snapshots and settings.runs("ms-xgb-full"):
            return (r.network, r.gpu, "ms-xgb-full") in have
        return True

    return [r for r in rows if keep(r)]


def run_budget_section(
    settings: CompileSettings,
    work_dir: Path,
    *,
    say: Say,
    on_row: OnRow,
) -> CompileSection:
    """The paper's compile-time claim at a realistic MetaSchedule budget, on one task: the top
    task of the first network on each unseen GPU (one per run in practice: `--units`),
    MetaSchedule (XGB) for `long_budget` trials against SiMoE fast's `tlm_budget`
    measurements, SiMoE full, and fleet schedule transfer (its `tlm_budget` best schedules
    from the same training units' records SiMoE trains on: equal information)."""
    one = settings.model_copy(update={"networks": settings.networks[:1]})
    data = prepare(one, work_dir / "budget", say, 1)
    section = CompileSection(settings=one, networks=data.networks, prep_seconds=data.prep_seconds)
    out = SectionOut(section, say, on_row)
    on_row(section)
    [(network, tasks)] = data.tasks.items()
    # MetaSchedule's own defaults here: 64 measurements per search, XGB warm-up 100
    default_iter = settings.model_copy(
        update={"trials_per_iter": 64, "scale_init_min": False,
                "full_budget": settings.long_simoe_budget}
    )  # fmt: skip
    long = f"ms-xgb-{settings.long_budget}"
    for gpu in settings.unseen_gpus:
        case = Case(network, gpu, tasks)
        full = default_iter if settings.runs("simoe-full") else None
        _run_simoe(case, data.simoe, data.hv[gpu], settings, work_dir / "budget", out, full=full)
        if settings.runs("schedule-transfer"):
            _run_budget_transfer(data, case, settings, out)
        plans: list[Plan] = [
            (long, _xgb_model(100), settings.long_budget, settings.population,
             settings.genetic_iters, {}, default_iter.trials_per_iter),
        ]  # fmt: skip
        plans = [p for p in plans if settings.runs(p[0])]
        _run_plans(plans, case, default_iter, work_dir / "budget", out)
    section.summary = summarize(section.rows, settings.tlm_budget, full_method=long)
    return section


def _run_budget_transfer(data: Any, case: Case, settings: CompileSettings, out: SectionOut) -> None:
    """Schedule transfer in the budget section: the task's `tlm_budget` fleet records with
    the best mean log latency on the k training units most similar to the case's GPU (the
    records SiMoE trained on), measured."""
    from bench.compile.compile_data import fleet_best

    out.say(f"{case}: schedule-transfer ({settings.tlm_budget} fleet schedules)")
    try:
        best = fleet_best(data, case.network, case.gpu, settings.tlm_budget)
        row = schedule_transfer(case.tasks, case.gpu, best, settings, case.network)
    except Exception as exc:  # noqa: BLE001 - one failed method must not lose the rest
        out.failed(case, "schedule-transfer", exc)
        return
    out.add([row])
