"""SiMoE fast mode's model-only search: MetaSchedule's evolutionary search, chained over
rounds, with a scoring function standing in for the device.

MetaSchedule gets deep by seeding each evolutionary search with the best *measured*
candidates so far (its database's top k): a 1,000-trial run is ~16 chained searches. A
model-only search gets the same chaining without a device by "measuring" with the model: a
builder that scores each candidate and a runner that hands the score back as seconds.
After `rounds` searches of `per_round` candidates, the best distinct candidates by score
are what the real device measures (fast mode: TLM's budget, 32 per task). Whether chaining
beats one longer search is not settled (docs/model.md, bench/compile/search_depth.py).

The builder-to-runner hand-off mirrors agent/devices/sim/measure.py's; simoe_model does
not import agent, so it is not shared.

`score(task_mod, scheduled_mods)` returns seconds-like numbers (lower = better; inf =
invalid). `cost_model_scorer` wraps any MetaSchedule cost model (SiMoE's among them) into
one; the benchmarks also steer it with simulated latencies (bench/compile/compile_time.py).
"""

from __future__ import annotations

import itertools
import logging
import math
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from simoe_model.score_cache import CachedModel

Score = Callable[[tvm.IRModule, Sequence[tvm.IRModule]], np.ndarray]

# MetaSchedule's search threads. One: with several, its evolutionary search hands sampling
# and mutation to whichever thread is free, each drawing from its own random state, so the
# same seed gave other candidates on every run (fast mode on a 4096x1024 projection, 8
# trials, seed 0: no candidate in common between two runs). One thread also cost less CPU
# there (34.6 against 39.2 CPU s); agent.fleet_dataset samples with one for the same reason.
SEARCH_THREADS = 1


@dataclass
class Scored:
    """One distinct candidate the search proposed, and its score (seconds-like, lower wins)."""

    mod: tvm.IRModule
    trace: Any
    score: float
    order: int  # how many candidates had been scored before it (search effort to find it)


@derived_object
class _Collect(ms.measure_callback.PyMeasureCallback):
    """Keeps every scored candidate: its scheduled module, its trace and its score."""

    def __init__(self) -> None:
        super().__init__()
        self.scored: list[Scored] = []

    def apply(self, _scheduler: Any, _task: int, candidates: Any, _builds: Any, runs: Any) -> None:
        for cand, run in zip(candidates, runs, strict=True):
            if run.error_msg is None and run.run_secs:
                value = float(run.run_secs[0])
                self.scored.append(Scored(cand.sch.mod, cand.sch.trace, value, len(self.scored)))


@derived_object
class _ScoringBuilder(ms.builder.PyBuilder):
    """'Builds' a batch by scoring it; the score waits for the runner under a key."""

    def __init__(self, task_mod: tvm.IRModule, score: Score) -> None:
        super().__init__()
        self.task_mod = task_mod
        self.score = score
        self.table: dict[str, float] = {}
        self.counter = itertools.count()
        self.lock = threading.Lock()

    def build(self, build_inputs: list[ms.builder.BuilderInput]) -> list[ms.builder.BuilderResult]:
        if not build_inputs:  # a search that ran out of new candidates
            return []
        mods = [inp.mod for inp in build_inputs]
        values = np.asarray(self.score(self.task_mod, mods), dtype=np.float64)
        out = []
        with self.lock:
            for value in values:
                if not math.isfinite(value):
                    out.append(ms.builder.BuilderResult(None, "invalid by the scorer"))
                    continue
                key = f"score:{next(self.counter)}"
                self.table[key] = float(value)
                out.append(ms.builder.BuilderResult(key, None))
        return out


@derived_object
class _ScoreRunner(ms.runner.PyRunner):
    """Hands the builder's score back as the 'measured' seconds (positive, order kept)."""

    def __init__(self, builder: _ScoringBuilder) -> None:
        super().__init__()
        self.builder = builder

    def run(self, runner_inputs: list[ms.runner.RunnerInput]) -> list[ms.runner.RunnerFuture]:
        futures = []
        for inp in runner_inputs:
            value = self.builder.table.pop(str(inp.artifact_path), None)
            result = (
                ms.runner.RunnerResult(None, "unknown artifact")
                if value is None
                else ms.runner.RunnerResult([value], None)
            )
            futures.append(ms.runner.RunnerFuture(f_done=lambda: True, f_result=lambda r=result: r))
        return futures


def model_only_search(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    score: Score | None,
    *,
    cost_model: Any,
    rounds: int,
    per_round: int,
    population: int,
    genetic_iters: int = 2,
    init_min_unmeasured: int = 16,
    seed: int = 0,
    task_name: str = "task",
    num_threads: int | str = SEARCH_THREADS,
    cache: bool = True,
    seeds: Sequence[Any] = (),
    stop: StopRule | None = None,
) -> list[Scored]:
    """Every distinct candidate `rounds` chained searches scored, best first.

    `cost_model` guides each search's evolution (usually the model behind `score`);
    `score` plays the device, so the next search starts from the best scored so far
    (None: score with `cost_model` itself). `num_threads`: MetaSchedule's search threads
    (more than one: faster on many cores, but not reproducible at a fixed seed).

    Search cost (issue 12: the search must cost less than the measurements it saves):
    `cache` freezes `cost_model` and predicts each distinct scheduled module once
    (simoe_model.score_cache), so the builder's scoring of the picked candidates is free when
    `score` is None. `seeds`: traces of known-good schedules (say, the fleet's best for this
    workload), scored and put in the database first, so the first search starts from them
    and mutates them. `stop`: end the chain early once a round no longer improves the best
    scores (`StopRule`).
    """
    if min(rounds, per_round, population) < 1:
        raise ValueError("rounds, per_round and population must be at least 1")
    wrap = cache and cost_model is not None and not isinstance(cost_model, (str, CachedModel))
    search_model = CachedModel(cost_model) if wrap else cost_model
    if score is None:
        if isinstance(search_model, str) or search_model is None:
            raise ValueError("score=None needs a cost model object to score with")
        score = cost_model_scorer(search_model, target)
    builder = _ScoringBuilder(mod, score)
    collect = _Collect()
    database = ms.database.MemoryDatabase()
    _seed_database(database, mod, target, score, seeds, collect)
    logger = logging.getLogger(f"simoe.model_search.{task_name}")
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    strategy: Any = ms.search_strategy.EvolutionarySearch(
        population_size=population,
        genetic_num_iters=genetic_iters,
        init_min_unmeasured=min(init_min_unmeasured, population),
    )
    if stop is not None:
        strategy = _StoppingSearch(strategy, stop, [c.score for c in collect.scored])
    context = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name=task_name,
        logger=logger,
        rand_state=rand_state_of(seed),
        num_threads=num_threads,
    ).clone()
    with tempfile.TemporaryDirectory(prefix="simoe-model-search-") as work_dir:
        ms.tune_tasks(
            tasks=[context],
            task_weights=[1.0],
            work_dir=work_dir,
            max_trials_global=rounds * per_round,
            max_trials_per_task=rounds * per_round,
            num_trials_per_iter=per_round,
            builder=builder,
            runner=_ScoreRunner(builder),
            database=database,
            cost_model=search_model,
            # AddToDatabase: the next search starts from the best scored so far
            measure_callbacks=[ms.measure_callback.AddToDatabase(), collect],
            task_scheduler="round-robin",
        )
    best: dict[int, Scored] = {}
    for cand in collect.scored:
        key = int(tvm_ffi.structural_hash(cand.mod))
        if key not in best or cand.score < best[key].score:
            best[key] = cand
    return sorted(best.values(), key=lambda s: s.score)


def rand_state_of(seed: int) -> int:
    """MetaSchedule's random state for a search at `seed`, distinct for every seed.

    MetaSchedule takes a state in [1, 2^31 - 1] and turns 0 into 1, so seeds 0 and 1 were
    the same model-only search (issue 23: fast mode's seed-0 and seed-1 runs measured the
    same first 8 picks). Seed 0 keeps its state (1), so its earlier runs repeat."""
    return seed % (2**31 - 1) + 1


def _seed_database(
    database: Any,
    mod: tvm.IRModule,
    target: tvm.target.Target,
    score: Score,
    seeds: Sequence[Any],
    collect: _Collect,
) -> None:
    """Score the seed traces that apply to `mod` and record them as scored so far."""
    if not seeds:
        return
    schedules = []
    for trace in seeds:
        sch = tvm.s_tir.Schedule(mod)
        try:
            trace.apply_to_schedule(sch, remove_postproc=False)
        except Exception:  # noqa: BLE001 - a seed from another workload or TVM: skipped
            continue
        schedules.append((trace, sch.mod))
    if not schedules:
        return
    values = np.asarray(score(mod, [m for _, m in schedules]), dtype=np.float64)
    workload = database.commit_workload(mod)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    for (trace, scheduled), value in zip(schedules, values, strict=True):
        if not math.isfinite(value):
            continue
        database.commit_tuning_record(
            ms.database.TuningRecord(trace, workload, [float(value)], target, args)
        )
        collect.scored.append(Scored(scheduled, trace, float(value), len(collect.scored)))


@dataclass(frozen=True)
class StopRule:
    """When a chain of model-only searches has converged: after at least `min_rounds`
    rounds, a round that improved the mean score of the best `top` so far by less than
    `min_gain` (relative) ends the chain. The model has then stopped finding candidates it
    rates better than those it already holds, so more rounds mostly cost search time."""

    top: int = 32
    min_gain: float = 0.02
    min_rounds: int = 2

    def done(self, before: Sequence[float], after: Sequence[float], rounds: int) -> bool:
        if rounds < self.min_rounds or len(after) < self.top or not before:
            return False
        old = float(np.mean(sorted(before)[: self.top]))
        new = float(np.mean(sorted(after)[: self.top]))
        return new > old * (1.0 - self.min_gain)


class DelegatingSearch(ms.search_strategy.PySearchStrategy):
    """A MetaSchedule search strategy that hands every call to `inner` and keeps the tune
    context and cost model it was given; a subclass changes only what it must (the
    stopping search below; the node's seeded search, agent.tune_harness). Not registered
    itself: decorate the subclass with `derived_object`."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.context: Any = None
        self.cost_model: Any = None

    def _initialize_with_tune_context(self, context: Any) -> None:
        self.context = context
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(
        self,
        max_trials: int,
        num_trials_per_iter: int,
        design_spaces: Any,
        database: Any = None,
        cost_model: Any = None,
    ) -> None:
        self.cost_model = cost_model
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self) -> list[Any] | None:
        return self.inner.generate_measure_candidates()

    def notify_runner_results(self, candidates: Any, results: Any) -> None:
        self.inner.notify_runner_results(candidates, results)


@derived_object
class _StoppingSearch(DelegatingSearch):
    """MetaSchedule's search strategy, ended early by a `StopRule` on the scores so far."""

    def __init__(self, inner: Any, rule: StopRule, scores: list[float]) -> None:
        super().__init__(inner)
        self.rule = rule
        self.scores = list(scores)
        self.rounds = 0
        self.stopped = False

    def generate_measure_candidates(self) -> list[Any] | None:
        return None if self.stopped else self.inner.generate_measure_candidates()

    def notify_runner_results(self, candidates: Any, results: Any) -> None:
        self.inner.notify_runner_results(candidates, results)
        new = [float(r.run_secs[0]) for r in results if r.error_msg is None and r.run_secs]
        before = list(self.scores)
        self.scores.extend(new)
        self.rounds += 1
        self.stopped = self.rule.done(before, self.scores, self.rounds)

    def clone(self) -> _StoppingSearch:
        return _StoppingSearch(self.inner.clone(), self.rule, self.scores)


@derived_object
class ScoreCostModel(ms.cost_model.PyCostModel):
    """A score as a MetaSchedule cost model (predicts -log score), to steer a search with
    something other than a learned model (the benchmarks steer with simulated latencies)."""

    def __init__(self, score: Score) -> None:
        super().__init__()
        self.score = score

    def load(self, path: str) -> None:
        pass

    def save(self, path: str) -> None:
        pass

    def update(self, context: Any, candidates: Any, results: Any) -> None:
        pass

    def predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
        values = np.asarray(self.score(context.mod, [c.sch.mod for c in candidates]), np.float64)
        ok = np.isfinite(values) & (values > 0)
        return np.where(ok, -np.log(np.where(ok, values, 1.0)), -1e3)


def cost_model_scorer(cost_model: Any, target: tvm.target.Target) -> Score:
    """A MetaSchedule cost model's predictions as seconds-like scores (exp(-prediction))."""

    def score(task_mod: tvm.IRModule, mods: Sequence[tvm.IRModule]) -> np.ndarray:
        if not mods:  # MetaSchedule hands an empty batch's predictions back as a NULL pointer
            return np.zeros(0, dtype=np.float64)
        context = ms.TuneContext(mod=task_mod, target=target)
        args = ms.arg_info.ArgInfo.from_prim_func(task_mod["main"])
        candidates = [ms.MeasureCandidate(tvm.s_tir.Schedule(m), args) for m in mods]
        predicted = np.asarray(cost_model.predict(context, candidates), dtype=np.float64)
        return np.exp(-np.clip(predicted, -50.0, 50.0))

    return score


def first_batch_spearman(scores: Sequence[float], latencies: Sequence[float]) -> float:
    """How well the model's scores (seconds-like, lower = better) ordered the latencies
    measured for them: Spearman's rho, +1 a perfect order. A candidate that failed to run
    counts as the slowest; NaN (no order to judge: fewer than 3 candidates, or every score
    or every latency the same) is returned as -1, the model told the device nothing."""
    from scipy.stats import spearmanr

    lat = np.asarray(latencies, dtype=np.float64)
    if len(lat) < 3:
        return -1.0
    finite = np.isfinite(lat)
    worst = lat[finite].max() if finite.any() else 1.0
    lat = np.where(finite, lat, 2.0 * worst)
    rho = float(spearmanr(np.asarray(scores, dtype=np.float64), lat).statistic)
    return rho if math.isfinite(rho) else -1.0


@derived_object
class ProposedCandidates(ms.search_strategy.PySearchStrategy):
    """A search strategy that proposes given candidates, best first, then stops: how fast
    mode has the device measure the model's top picks through MetaSchedule's usual
    builder, runner, database and callbacks.

    `rerank` (a cost model that learns from the measurements, e.g. SiMoE's with the online
    gate on: simoe_model.online_gate): the first `first` candidates are measured as given;
    before each later batch (of `first`), the candidates not yet measured are ranked again
    by `rerank`, which has seen the measurements so far, so a model whose measurements
    contradict its nearest expert stops following it within the search's own picks.

    `fallback` (a MetaSchedule search strategy, e.g. its evolutionary search) with
    `hedge_below` (the hedge): after the first batch, if the Spearman rho of the model's
    scores against the latencies measured for them (`first_batch_spearman`) is below
    `hedge_below`, the model is contradicted and the rest of the budget goes to `fallback`,
    which starts from the database (the measured batch's best among its seeds) and ranks
    with the run's cost model (`fallback_model`, if given, instead: e.g. random scores, as
    MetaSchedule's XGB gives before its warm-up). `hedge_log` (shared by clones) gets task
    name -> rho, and `hedged` the names of the tasks that switched."""

    def __init__(
        self,
        candidates: list[Scored],
        rerank: Any = None,
        first: int = 8,
        fallback: Any = None,
        hedge_below: float | None = None,
        hedge_log: dict[str, float] | None = None,
        hedged: list[str] | None = None,
        fallback_model: Any = None,
    ) -> None:
        super().__init__()
        self.candidates = candidates
        self.rerank = rerank
        self.first = max(1, first)
        self.fallback = fallback
        self.hedge_below = hedge_below
        self.hedge_log = {} if hedge_log is None else hedge_log
        self.hedged = [] if hedged is None else hedged
        self.fallback_model = fallback_model
        self.schedules: list[Any] = []
        self.args: list[Any] = []
        self.context: Any = None
        self.next = 0
        self.stop = 0
        self.per_iter = 1
        self.tuning: tuple[Any, ...] = ()
        self.judged = False
        self.switched = False
        self.seen: set[int] = set()
        self.left = 0  # trials the fallback may still measure

    @property
    def hedging(self) -> bool:
        return self.fallback is not None and self.hedge_below is not None

    def _initialize_with_tune_context(self, context: Any) -> None:
        self.context = context
        self.args = ms.arg_info.ArgInfo.from_prim_func(context.mod["main"])
        self.schedules = []
        for cand in self.candidates:
            sch = tvm.s_tir.Schedule(context.mod)
            cand.trace.apply_to_schedule(sch, remove_postproc=False)
            self.schedules.append(sch)
        if self.hedging:
            self.fallback._initialize_with_tune_context(context)

    def pre_tuning(
        self,
        max_trials: int,
        num_trials_per_iter: int,
        design_spaces: Any,
        database: Any = None,
        cost_model: Any = None,
    ) -> None:
        self.tuning = (max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.judged = self.switched = False
        self.next, self.stop = 0, min(max_trials, len(self.schedules))
        self.per_iter = max(1, num_trials_per_iter)
        if self.rerank is not None or self.hedging:
            self.per_iter = min(self.per_iter, self.first)

    def post_tuning(self) -> None:
        if self.switched:
            self.fallback.post_tuning()

    def generate_measure_candidates(self) -> list[Any] | None:
        if self.switched:
            return self._fallback_batch()
        if self.next >= self.stop:
            return None
        if self.rerank is not None and self.next > 0:  # the rest, ranked by what was measured
            rest = self.schedules[self.next :]
            predicted = np.asarray(
                self.rerank.predict(
                    self.context, [ms.MeasureCandidate(sch, self.args) for sch in rest]
                ),
                dtype=np.float64,
            )
            order = np.argsort(-predicted, kind="stable")
            self.schedules[self.next :] = [rest[i] for i in order]
        batch = self.schedules[self.next : min(self.stop, self.next + self.per_iter)]
        self.next += len(batch)
        return [ms.MeasureCandidate(sch, self.args) for sch in batch]

    def _fallback_batch(self) -> list[Any] | None:
        """The evolutionary search's next batch without what was measured already: it starts
        from the database's best, and its own record of what it measured does not hold the
        first batch (on a 64^3 matmul 3 of its 8 picks were re-measurements). At most the
        trials left: MetaSchedule's search handed back a full batch of 10 where 2 were left
        (--trials 10: 18 measured)."""
        if self.left <= 0:
            return None
        for _ in range(4):  # a batch of nothing but re-measurements: ask again, a few times
            batch = self.fallback.generate_measure_candidates()
            if batch is None:
                return None
            fresh = [c for c in batch if int(tvm_ffi.structural_hash(c.sch.mod)) not in self.seen]
            fresh = fresh[: self.left]
            self.seen.update(int(tvm_ffi.structural_hash(c.sch.mod)) for c in fresh)
            if fresh:
                return fresh
        return None

    def notify_runner_results(self, candidates: Any, results: Any) -> None:
        if self.switched:
            self.left -= len(results)
            self.fallback.notify_runner_results(candidates, results)
            return
        if not self.hedging or self.judged:
            return
        self.judged = True  # the first batch: the model's top picks, in its order
        scores = [c.score for c in self.candidates[: len(results)]]
        latencies = [
            float(np.mean([float(x) for x in r.run_secs]))
            if r.error_msg is None and r.run_secs
            else math.inf
            for r in results
        ]
        rho = first_batch_spearman(scores, latencies)
        name = str(self.context.task_name) if self.context is not None else "task"
        self.hedge_log[name] = rho
        assert self.hedge_below is not None
        max_trials, per_iter, spaces, database, cost_model = self.tuning
        left = int(max_trials) - len(results)
        if rho < self.hedge_below and left > 0:
            self.switched, self.left = True, left
            self.seen = {int(tvm_ffi.structural_hash(c.sch.mod)) for c in candidates}
            self.hedged.append(name)
            ranking = cost_model if self.fallback_model is None else self.fallback_model
            self.fallback.pre_tuning(left, per_iter, spaces, database, ranking)

    def clone(self) -> ProposedCandidates:
        return ProposedCandidates(
            self.candidates, self.rerank, self.first, self.fallback.clone()
            if self.fallback is not None else None, self.hedge_below, self.hedge_log,
            self.hedged, self.fallback_model,
        )  # fmt: skip
