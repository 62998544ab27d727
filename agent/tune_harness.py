"""The one MetaSchedule tuning harness: tasks in, `tune_tasks` run on a device, wall time out.

`agent.tuner` (the `tune` command) and the benchmarks (bench/compile/compile_time.py) both tune
through `run_tasks`, so a change to how a search is set up (its strategy, builder, callbacks,
seeds) reaches both. What differs between them is passed in: the database (the node's store,
or a benchmark's in-memory one), the cost model, one search strategy per task
(`evolutionary` or fast mode's `model_picks`) and extra measure callbacks (the tuner's
progress bars, a benchmark's compile-time curve).
"""

from __future__ import annotations

import functools
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.networks import one_line_of
from agent.tuning_logs import close_loggers, task_loggers
from schemas import BadInputError, RunFailure, SimoeError
from schemas.tuning import HEDGE_RANKING as HEDGE_RANKING
from schemas.tuning import HEDGE_SPEARMAN as HEDGE_SPEARMAN
from simoe_model import tvm_compat

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from agent.devices.base import Device
    from simoe_model.model_search import Score


# MetaSchedule's search threads, as simoe_model.model_search.SEARCH_THREADS (why one: there);
# a copy, so that importing the harness does not import TVM.
SEARCH_THREADS = 1


@dataclass
class TuneTask:
    """One tuning task: its TIR module (as the database sees it), how often it runs in its
    network, its FLOPs and, for a single operator, the workload spec it came from."""

    name: str
    mod: tvm.IRModule
    weight: float
    flops: float
    spec: str | None = None


def task_flops(mod: tvm.IRModule) -> float:
    """TVM's FLOP estimate of a task; 0 for an opaque one."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001 - opaque ops count as 0 FLOPs
        return 0.0


def initial_samples(population: int) -> int:
    """Random valid schedules a search samples before it evolves: MetaSchedule's 50 for its
    population of 512, scaled with the population (at least 8), as the compile benchmark
    runs it (`bench/compile/presets.py` scale_init_min).

    Why scaled: a search given a small `--population` (8 per trial below 64 trials was the
    default until SEARCH_BREADTH_RULE) that cannot sample 50 valid schedules in its few
    tries fails ("Cannot sample enough initial population"): on operators whose random
    schedules are mostly invalid for the GPU (LLaMA projections and a ViT patch embedding on
    user-spec GPUs) fast mode at 8 trials measured nothing at all and kept the default."""
    return min(population, 50, max(8, round(50 * population / 512)))


def evolutionary(
    population: int, *, genetic_iters: int = 4, init_min_unmeasured: int | None = None
) -> ms.search_strategy.SearchStrategy:
    """MetaSchedule's evolutionary search with `population` candidates per round; it samples
    `init_min_unmeasured` random valid schedules first (default: `initial_samples`)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.search_strategy.EvolutionarySearch(
        population_size=population,
        genetic_num_iters=genetic_iters,
        init_min_unmeasured=(
            initial_samples(population) if init_min_unmeasured is None else init_min_unmeasured
        ),
    )


def seeded(strategy: Any, seeds: Sequence[Any], reserve: float | None = None) -> Any:
    """`strategy` with `seeds` (traces of known-good schedules, e.g. the most similar units'
    shared ones, in the order offered) put into its first batch (`SeededSearch`, `reserve`
    of it in offer order); the strategy itself when there are none."""
    return SeededSearch(strategy, list(seeds), reserve) if seeds else strategy


# Share of the first batch kept for the seeds, taken in offer order. Why not rank them by the
# cost model: the search's own candidates were chosen to maximise that model's score, so a
# trace it did not generate ranks below them (the demo's newcomer measured 0-1 of 8 offered,
# Spearman(score, speed) -0.106); the sharing units measured these, the model only guessed.
# Why 0.25: chosen on validation units by bench.protocol.SHARED_RESERVE_RULE over 0.25/0.5/1.0
# (docs/results/sharing_onoff.md: pooled geomean off/on 1.114 at 0.25, 1.076 at 0.5, 0.815
# at 1.0; intervals overlap, and no interval excludes 1 for 0.25 or 0.5).
SHARED_RESERVE = 0.25


def check_reserve(reserve: float) -> float:
    """`reserve` if it is a share of a batch (in [0, 1]); BadInputError otherwise."""
    if not 0.0 <= reserve <= 1.0:  # also catches NaN
        raise BadInputError(f"the shared reserve must be in [0, 1], got {reserve}")
    return reserve


def shared_reserve(applicable: int, batch: int, reserve: float | None = None) -> int:
    """How many of the first batch's `batch` slots go to seeds in offer order:
    min(`applicable`, ceil(`batch` x `reserve`)), `reserve` SHARED_RESERVE unless given."""
    share = SHARED_RESERVE if reserve is None else check_reserve(reserve)
    return min(applicable, math.ceil(batch * share))


@functools.cache
def _seeded_search_class() -> type:
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from simoe_model.model_search import DelegatingSearch

    @derived_object
    class _SeededSearch(DelegatingSearch):
        """MetaSchedule's search with seed traces put into its first batch.

        Of the first batch's slots, `shared_reserve` (min(applicable seeds,
        ceil(batch x reserve)), reserve SHARED_RESERVE unless given) go to the seeds in the
        order given (the offer's: the most similar unit's best first); the rest are the best
        of the remaining seeds and the inner search's batch by the cost model (ties keep the
        seeds first; no cost model: in that order). A seed that does not apply is left out;
        one the search proposed too is measured once (in the seed's place). Later batches are
        the inner search's."""

        def __init__(self, inner: Any, seeds: list[Any], reserve: float | None = None) -> None:
            super().__init__(inner)
            self.seeds = seeds
            self.reserve = reserve
            self.first = True

        def pre_tuning(self, *args: Any, **kwargs: Any) -> None:
            super().pre_tuning(*args, **kwargs)
            self.first = True

        def generate_measure_candidates(self) -> list[Any] | None:
            batch = self.inner.generate_measure_candidates()
            if not self.first or batch is None:
                return batch
            self.first = False
            import numpy as np
            import tvm
            import tvm_ffi

            args = ms.arg_info.ArgInfo.from_prim_func(self.context.mod["main"])
            seen: set[int] = set()
            seeds = []
            for trace in self.seeds:
                sch = tvm.s_tir.Schedule(self.context.mod)
                try:
                    trace.apply_to_schedule(sch, remove_postproc=False)
                except Exception:  # noqa: BLE001 - a seed that does not apply: left out
                    continue
                key = tvm_ffi.structural_hash(sch.mod)
                if key not in seen:
                    seen.add(key)
                    seeds.append(ms.MeasureCandidate(sch, args))
            # one the search proposed too is measured once, as the seed (its reserved place)
            own = [c for c in batch if tvm_ffi.structural_hash(c.sch.mod) not in seen]
            size = len(batch)
            reserved = seeds[: shared_reserve(len(seeds), size, self.reserve)]
            pool = [*seeds[len(reserved) :], *own]
            rest = size - len(reserved)
            if self.cost_model is None or not seeds or rest <= 0:
                return [*reserved, *pool[: max(rest, 0)]]
            scores = np.asarray(self.cost_model.predict(self.context, pool), dtype=np.float64)
            order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")
            return [*reserved, *(pool[i] for i in order[:rest])]

        def clone(self) -> Any:
            return _SeededSearch(self.inner.clone(), self.seeds, self.reserve)

    return _SeededSearch


def SeededSearch(inner: Any, seeds: list[Any], reserve: float | None = None) -> Any:  # noqa: N802 - a class, made lazily
    """A search strategy: `inner` with `seeds` put into its first batch, `reserve` of it
    (default SHARED_RESERVE) in their order, the rest ranked (TVM is imported only when one
    is made)."""
    return _seeded_search_class()(inner, seeds, reserve)


# Fast mode with the online gate: the device measures the model's picks in batches of this
# many, and the model ranks the rest again after each batch.
GATE_BATCH = 8


HEDGE_RANKINGS = ("model", "random")


def random_ranking(seed: int) -> ms.cost_model.CostModel:
    """Random scores: how MetaSchedule's XGB ranks before its warm-up of 100 measurements."""
    from tvm.s_tir import meta_schedule as ms

    return ms.cost_model.RandomModel(seed=seed)


def model_picks(
    task: TuneTask,
    target: tvm.target.Target,
    model: ms.cost_model.CostModel | str,
    trials: int,
    *,
    rounds: int,
    population: int,
    per_round: int | None = None,
    genetic_iters: int = 2,
    init_min_unmeasured: int | None = None,
    seed: int = 0,
    num_threads: int | str = SEARCH_THREADS,
    score: Score | None = None,
    seeds: Sequence[Any] = (),
    hedge_below: float | None = None,
    hedge_log: dict[str, float] | None = None,
    hedged: list[str] | None = None,
    hedge_ranking: str = "model",
) -> ms.search_strategy.SearchStrategy:
    """Fast mode's strategy for one task: `rounds` chained model-only searches of `per_round`
    (default: min(64, trials)), then the device measures the model's top `trials` (a
    strategy that proposes exactly those).

    With the online gate on (`model.sharpness` > 0, simoe_model.online_gate), the device
    measures the model's top candidates in batches of `GATE_BATCH`, and before each later
    batch the model ranks the rest of its top 4 x `trials` again with the measurements
    so far moving its gate (`ProposedCandidates(rerank=model)`).

    `score` None: the search scores with `model` itself, frozen and cached (one prediction
    per distinct candidate; it learns from real measurements only, after the search).

    `hedge_below` (the hedge, e.g. HEDGE_SPEARMAN): the first batch is `GATE_BATCH` picks;
    if the Spearman rho of their scores against their measured latencies is below it, the
    rest of the budget goes to MetaSchedule's evolutionary search at `population`
    (`ProposedCandidates`), ranked by `model` (`hedge_ranking` "model") or by random scores
    ("random": MetaSchedule's own ranking at such budgets, its XGB before its warm-up of
    100); `hedge_log` and `hedged` collect each task's rho and the tasks that switched."""
    from simoe_model.model_search import ProposedCandidates, model_only_search

    if isinstance(model, str):
        raise BadInputError(
            f"--model-rounds needs a trained cost model to search with (--cost-model simoe), "
            f"not {model!r}"
        )
    found = model_only_search(
        task.mod, target, score, cost_model=model,
        rounds=rounds, per_round=per_round or min(64, trials), population=population,
        genetic_iters=genetic_iters,
        init_min_unmeasured=initial_samples(population) if init_min_unmeasured is None
        else init_min_unmeasured,
        seed=seed, task_name=task.name, num_threads=num_threads, seeds=seeds,
    )  # fmt: skip
    first = max(1, min(GATE_BATCH, trials))
    hedge = {}
    if hedge_below is not None and trials > first:
        hedge = {
            "fallback": evolutionary(population), "hedge_below": hedge_below,
            "hedge_log": hedge_log, "hedged": hedged,
            "fallback_model": random_ranking(seed) if hedge_ranking == "random" else None,
        }  # fmt: skip
    if getattr(model, "sharpness", 0.0) > 0:  # measurements move the gate: re-rank
        return ProposedCandidates(found[: 4 * trials], rerank=model, first=first, **hedge)
    return ProposedCandidates(found[:trials], first=first, **hedge)


def warm_worker() -> None:
    """Builder worker initializer: the inspect patch, then TVM's slow imports, done up front.

    A worker's initializer runs without a timeout, but its first build does not: on a busy
    machine, importing TVM's tensor intrinsics inside the first build (tens of seconds) made
    every candidate of a batch time out.
    """
    tvm_compat.install()
    import tvm.s_tir.tensor_intrin  # noqa: F401
    from tvm.s_tir.meta_schedule.builder import local_builder  # noqa: F401


def _builder(device: Device) -> ms.builder.Builder:
    """The device's builder, with workers that import TVM before their first timed build."""
    builder = device.builder()
    if getattr(builder, "initializer", None) is tvm_compat.install:
        builder.initializer = warm_worker
    return builder


def _measure_callbacks(device: Device, extra: Sequence[Any]) -> list[Any]:
    from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback, RemoveBuildArtifact

    callbacks = list(MeasureCallback.create("default"))
    if device.simulated:  # its "artifacts" are keys, not files
        callbacks = [c for c in callbacks if not isinstance(c, RemoveBuildArtifact)]
    return [*callbacks, *extra]


def _quiet_loggers(names: list[str]) -> list[logging.Logger]:
    """Warnings only, kept out of the root logger: a benchmark's many runs write no logs."""
    loggers = []
    for name in names:
        logger = logging.getLogger(f"simoe.tune.{name}")
        logger.propagate = False
        logger.setLevel(logging.WARNING)
        loggers.append(logger)
    return loggers


def run_tasks(
    tasks: list[TuneTask],
    device: Device,
    database: ms.database.Database,
    cost_model: ms.cost_model.CostModel | str,
    strategies: list[ms.search_strategy.SearchStrategy],
    *,
    trials_per_task: int,
    trials_per_iter: int = 64,
    seed: int | None,
    work_dir: Path | None = None,
    log_level: int = logging.WARNING,
    file_logs: bool = True,
    callbacks: Sequence[Any] = (),
    num_threads: int | str = SEARCH_THREADS,
    task_scheduler: str | None = None,
    trials_global: int | None = None,
) -> float:
    """Tune `tasks` on `device` for `trials_per_task` measurements each; the wall seconds.

    Every measurement goes to `database` (and to `callbacks` after MetaSchedule's default
    ones). `strategies`: one search strategy per task. `file_logs`: MetaSchedule's full
    logs under `work_dir`/logs (a temporary directory when None), with console output at
    `log_level`; otherwise warnings only, nothing written. `task_scheduler`: MetaSchedule's
    gradient scheduler for a network, round-robin for one task, unless given.
    `trials_global`: measurements for the whole network, shared out by the task scheduler
    (MetaSchedule's own budget, as `tune_relax` takes it); `trials_per_task` then caps a
    task. Errors of TVM come out as one-line `RunFailure`s."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import fork_seed

    names = [t.name for t in tasks]
    if seed is not None:
        # MetaSchedule's XGB cost model scores candidates with numpy's global random state
        # until it has num_warmup_samples (100) measurements, so at the budgets users run
        # (8-64 a task) a seeded MetaSchedule search did not repeat; this makes it repeat
        import numpy as np

        np.random.seed(seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="simoe-tune-") as tmp:
        logs = str(work_dir or tmp)
        loggers = task_loggers(logs, names, log_level) if file_logs else _quiet_loggers(names)
        contexts = [
            ms.TuneContext(
                mod=task.mod,
                target=device.target(),
                space_generator="post-order-apply",
                search_strategy=strategy,
                task_name=task.name,
                logger=logger,
                rand_state=rand_state,
                num_threads=num_threads,
            ).clone()
            for task, logger, rand_state, strategy in zip(
                tasks, loggers, fork_seed(seed, n=len(tasks)), strategies, strict=True
            )
        ]
        try:
            ms.tune_tasks(
                tasks=contexts,
                task_weights=[t.weight for t in tasks],
                work_dir=logs,
                max_trials_global=trials_global or trials_per_task * len(tasks),
                max_trials_per_task=trials_per_task,
                num_trials_per_iter=min(trials_per_iter, trials_per_task),
                builder=_builder(device),
                runner=device.runner(),
                database=database,
                cost_model=cost_model,
                measure_callbacks=_measure_callbacks(device, callbacks),
                task_scheduler=task_scheduler or ("gradient" if len(tasks) > 1 else "round-robin"),
            )
        except SimoeError:
            raise  # already one line with the right exit code (e.g. from a cost model)
        except Exception as exc:  # noqa: BLE001 - MetaSchedule raises TVMError and friends
            raise RunFailure(f"tuning failed: {one_line_of(exc)}") from exc
        finally:
            if file_logs:
                close_loggers(loggers)
        return time.perf_counter() - started
