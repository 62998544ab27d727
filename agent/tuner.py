"""Tune operators and whole networks with MetaSchedule on a device, into the node's store.

Every candidate MetaSchedule measures goes through the store's `PyDatabase`, so it lands in
SQLite at once. The cost model that guides the search is pluggable: MetaSchedule's own
("xgb", "mlp", "random") or any name of `agent.cost_models.COST_MODELS` ("simoe": a SiMoE
built from the node's state). After tuning, `compile_tir` /
`compile_relax` read the best schedules back from the same database, and the tuned result is
measured against the untuned default schedule (and, for a network, checked against PyTorch).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import numpy as np

from agent.cost_models import make_cost_model, model_used_by
from agent.ms_database import ms_database, workload_key_of
from agent.networks import Network, extract_network_tasks, load_network, one_line_of
from agent.progress import ProgressCallback
from agent.search_start import SharedSeeds, observe_stored, warm_start_seeds
from agent.task_selection import TaskChoice, select_tasks
from agent.tune_harness import (
    HEDGE_RANKING,
    HEDGE_SPEARMAN,
    SHARED_RESERVE,
    TuneTask,
    check_reserve,
    evolutionary,
    model_picks,
    run_tasks,
    seeded,
    task_flops,
)
from agent.workloads import TEWorkload, Workload, flops, prim_func
from schemas import BadInputError, RunFailure, SimoeError
from schemas.records import failed_run
from schemas.tuning import ModelUsed, NetworkCheck, TaskResult, TuneResult

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from typing_extensions import Unpack  # typing's own from Python 3.11 on

    from agent.devices.base import Device
    from agent.node_state import NodeState
    from agent.store import Store


def check_fits(workload: Workload, device: Device) -> None:
    """Refuse, in one line, an operator whose buffers the device's memory cannot hold.

    (The workload schema already refuses what no device holds; this is the device's own
    limit, where it knows it: host RAM for `cpu`, GPU memory for `cuda:N`.)"""
    memory = device.memory_bytes()
    if memory is None or isinstance(workload, TEWorkload):
        return  # MetaSchedule's te: shapes are its own benchmarks' and small
    need = workload.buffer_bytes
    if need > memory:
        raise BadInputError(
            f"workload {workload}: its buffers need {need / 2**30:.3g} GiB, more than the "
            f"{memory / 2**30:.3g} GiB memory of {device.name}; use smaller dimensions"
        )


def _progress_callback(
    task_names: list[str], budgets: list[int], hook: ProgressCallback | None, counts: list[int]
) -> ms.measure_callback.MeasureCallback:
    """A MeasureCallback that counts measured candidates per task and reports them."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class _Progress(PyMeasureCallback):
        def apply(
            self,
            task_scheduler: Any,
            task_id: int,
            measure_candidates: list[Any],
            builder_results: list[Any],
            runner_results: list[Any],
        ) -> None:
            counts[task_id] += len(runner_results)
            if hook is not None:
                hook(task_names[task_id], counts[task_id], budgets[task_id])

    return _Progress()


# MetaSchedule's own default population.
DEFAULT_POPULATION = 512


def search_population(population: int | None = None) -> int:
    """Candidates sampled, mutated and scored per search round: `population` if given, else
    MetaSchedule's default, 512, at every budget.

    Why not fewer at small budgets (8 per trial below 64 trials, as before): at 8 trials a
    task the best found at 512 was 1.185x faster than at 64 (95% interval [1.127, 1.285],
    clustered by GPU model; 66 tunes on the simulated validation units, sharing off 1.362x,
    on 1.031x), for about 6x the search's CPU time (bench/protocol.py SEARCH_BREADTH_RULE,
    docs/results/search_breadth/). Where search, not measurement, is the cost (a simulated
    GPU) and speed matters more: `--population`.
    """
    if population is not None:
        if population < 2:
            raise BadInputError(f"--population must be at least 2, got {population}")
        return population
    return DEFAULT_POPULATION


# A search whose population sampled no valid schedule for the GPU (a ViT patch embedding on
# a user-spec GPU at population 64: most random schedules exceed its limits) runs once more
# at MetaSchedule's own default population, which samples enough (issue 23); only a search
# given a smaller `--population` can need it.
RETRY_POPULATION = DEFAULT_POPULATION
# Fast mode's retry chains one model-only search, not `--model-rounds`: what the retry
# needs is the larger population's initial sampling, and five chained rounds at 512 cost the
# ViT patch embedding ~700 CPU s for a best 3.2x slower than the default (issue 23).
RETRY_MODEL_ROUNDS = 1


def _default_schedule(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """The untuned baseline: as is on a CPU; DLight's default GPU rules on a GPU target.

    On a copy: DLight's pass schedules a module it alone holds IN PLACE (copy-on-write), so
    the task's own module came back scheduled and every later search of that task searched
    the DLight schedule's one trivial design space instead of the task's."""
    if target.kind.name != "cuda":
        return mod
    import tvm
    from tvm.s_tir import dlight as dl

    mod = tvm.ir.load_json(tvm.ir.save_json(mod))
    rules = dl.ApplyDefaultSchedule(
        dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
        dl.gpu.Fallback(),
    )  # fmt: skip
    with target, tvm.transform.PassContext(opt_level=3):
        return rules(mod)


def _median_measure(device: Device, mod: tvm.IRModule, repeat: int) -> float | None:
    try:
        return statistics.median(device.measure(mod, repeat=repeat))
    except Exception:  # noqa: BLE001 - a baseline that cannot be built is reported as missing
        return None


class SearchReport(TypedDict):
    """The `TuneResult` fields that describe the search (see there)."""

    device: str
    simulated: bool
    cost_model: str
    search_wall_s: float
    modelled_measure_s: float | None
    model_used: ModelUsed
    shared_schedules: int
    shared_skipped: int
    population_retried: list[str]
    retry_population: int | None
    hedge_spearman: dict[str, float] | None
    hedge_below: float | None
    hedged: list[str]
    hedge_ranking: str | None


@dataclass(frozen=True)
class Searched:
    """What `_run_search` did: the database, the trials each task measured, and
    `report`, the `TuneResult` fields about the search that a workload's and a network's
    result share: the search wall seconds, (simulated devices only) the modelled seconds
    those measurements would have taken on the real GPU, the tasks searched again at
    `RETRY_POPULATION` because the first search measured nothing, the shared schedules and
    what fast mode's hedge did."""

    database: ms.database.Database
    counts: list[int]
    report: SearchReport


class SearchOptions(TypedDict, total=False):
    """How `_run_search` searches, each option and its default described there:
    `tune_workload` and `tune_network` take these as keywords and pass them on as they
    came, so the two take the same options with the same defaults."""

    cost_model: str
    node: NodeState | None
    progress: ProgressCallback | None
    seed: int | None
    work_dir: Path | None
    profile_id: str | None
    log_level: int
    population: int | None
    model_rounds: int
    warm_start: Path | None
    shared: SharedSeeds | None
    shared_reserve: float
    hedge_below: float | None
    hedge_ranking: str


def _run_search(
    tasks: list[TuneTask],
    device: Device,
    store: Store,
    *,
    trials_per_task: int,
    cost_model: str = "xgb",
    node: NodeState | None = None,
    progress: ProgressCallback | None = None,
    seed: int | None = 0,
    work_dir: Path | None = None,
    profile_id: str | None = None,
    log_level: int = logging.WARNING,
    population: int | None = None,
    model_rounds: int = 0,
    warm_start: Path | None = None,
    shared: SharedSeeds | None = None,
    shared_reserve: float = SHARED_RESERVE,
    hedge_below: float | None = HEDGE_SPEARMAN,
    hedge_ranking: str = HEDGE_RANKING,
) -> Searched:
    """Run MetaSchedule over `tasks` with `trials_per_task` measurements each.

    `cost_model`: the model that guides the search (see the module docstring); `node`: the
    node's state (a SiMoE is built from it); `progress`: called with each task's measured
    count; `seed` seeds the cost model and the search; `work_dir` and `log_level` go to
    MetaSchedule; `profile_id`: the device profile the stored records cite; `population`:
    see `search_population`.
    `model_rounds` > 0 is fast mode: per task, that many chained model-only searches
    (simoe_model.model_search), then the device measures only the model's top
    `trials_per_task`. `warm_start`: the fleet schedule warm start (fast mode only; see
    `warm_start_seeds`). `shared`: the most similar units' schedules the federation
    offered (schedule sharing, opt-in): per task, they join the candidates the cost model
    ranks before the first measurement, in fast mode (seeds of its model-only search, as
    `warm_start`) and in MetaSchedule's evolutionary search (`shared_reserve` of its first
    batch in offer order, default `SHARED_RESERVE`; the rest ranked with its own
    candidates); `shared.used` and `shared.skipped` count them. `hedge_below`: fast mode's
    hedge (`model_picks`; None: off), `hedge_ranking` what ranks its evolutionary search
    ("model" or "random"). Returns what it did as `Searched`.
    """
    check_reserve(shared_reserve)
    import tvm

    population = search_population(population)
    seeds = warm_start_seeds(tasks, warm_start, trials_per_task) if warm_start else None
    if shared is not None:
        shared.resolve(tasks)
        if node is not None:  # the next reply asks the federation about these workloads
            from agent.sharing import ask_for

            ask_for(node, [workload_key_of(t.mod) for t in tasks])
        seeds = [[*(seeds[i] if seeds else []), *shared.seeds[i]] for i in range(len(tasks))]
    for task in tasks:
        store.add_workload(
            workload_key_of(task.mod), task.name, tvm.ir.save_json(task.mod), task.spec
        )
    database = ms_database(
        store, device=device.name, profile_id=profile_id, simulated=device.simulated
    )
    model = make_cost_model(cost_model, device, node, seed=seed or 0)
    observe_stored(model, tasks, store, device.name)
    target = device.target()
    counts = [0] * len(tasks)
    hedge = Hedge()
    started = time.perf_counter()
    modelled_before = getattr(device, "modelled_measure_seconds", None)

    def search(picked: list[int], size: int, rounds: int) -> None:
        """Search the tasks `picked` (indices) with populations of `size` (fast mode:
        `rounds` chained model-only searches), into `counts`."""
        sub = [tasks[i] for i in picked]
        sub_counts = [0] * len(sub)
        budgets = [trials_per_task] * len(sub)
        callback = _progress_callback([t.name for t in sub], budgets, progress, sub_counts)
        try:
            strategies = (
                [model_picks(tasks[i], target, model, trials_per_task, rounds=rounds,
                             population=size, seed=seed or 0,
                             seeds=seeds[i] if seeds else (), hedge_below=hedge_below,
                             hedge_log=hedge.spearman, hedged=hedge.switched,
                             hedge_ranking=hedge_ranking)
                 for i in picked]
                if model_rounds > 0
                else [seeded(evolutionary(size), seeds[i] if seeds else (), shared_reserve)
                      for i in picked]
            )  # fmt: skip
        except SimoeError:
            raise
        except Exception as exc:  # noqa: BLE001 - MetaSchedule raises TVMError and friends
            raise RunFailure(f"model-only search failed: {one_line_of(exc)}") from exc
        if progress is not None:  # every task's bar shows from the start
            for task, budget in zip(sub, budgets, strict=True):
                progress(task.name, 0, budget)
        run_tasks(
            sub, device, database, model, strategies, trials_per_task=trials_per_task,
            seed=seed, work_dir=work_dir, log_level=log_level, callbacks=[callback],
        )  # fmt: skip
        for i, n in zip(picked, sub_counts, strict=True):
            counts[i] += n

    search(list(range(len(tasks))), population, model_rounds)
    empty = [i for i, n in enumerate(counts) if n == 0]
    if empty and population < RETRY_POPULATION:
        search(empty, RETRY_POPULATION, min(model_rounds, RETRY_MODEL_ROUNDS))
    else:
        empty = []
    wall = time.perf_counter() - started
    modelled = None
    if modelled_before is not None:
        modelled = float(device.modelled_measure_seconds) - float(modelled_before)
    report: SearchReport = {
        "device": device.name,
        "simulated": device.simulated,
        "cost_model": cost_model,
        "search_wall_s": wall,
        "modelled_measure_s": modelled,
        "model_used": model_used_by(model),
        "shared_schedules": shared.used if shared else 0,
        "shared_skipped": shared.skipped if shared else 0,
        "population_retried": [tasks[i].name for i in empty],
        "retry_population": RETRY_POPULATION if empty else None,
        "hedge_spearman": hedge.spearman if model_rounds > 0 else None,
        "hedge_below": hedge_below if model_rounds > 0 else None,
        "hedged": hedge.switched,
        "hedge_ranking": hedge_ranking if model_rounds > 0 else None,
    }
    return Searched(database, counts, report)


@dataclass
class Hedge:
    """What fast mode's hedge did: each task's first-batch Spearman rho (model scores
    against measured latencies) and the tasks whose rest of budget went to MetaSchedule's
    evolutionary search because it was below the threshold."""

    spearman: dict[str, float] = field(default_factory=dict)
    switched: list[str] = field(default_factory=list)


def _task_result(
    task: TuneTask,
    database: ms.database.Database,
    device: Device,
    trials: int,
    *,
    baseline: bool,
    repeat: int,
) -> TaskResult:
    """Best schedule from the database, re-measured the same way as the untuned baseline."""
    from tvm.s_tir import meta_schedule as ms

    target = device.target()
    best_db: float | None = None
    workload = database.commit_workload(task.mod)
    top = database.get_top_k(workload, 1)
    if top:
        secs = [float(s) for s in top[0].run_secs]
        if not failed_run(secs):
            best_db = sum(secs) / len(secs)
    tuned: float | None = None
    if best_db is not None:
        schedule = ms.tir_integration.compile_tir(database, task.mod, target)
        if schedule is not None:
            tuned = _median_measure(device, schedule.mod, repeat)
    tuned = tuned if tuned is not None else best_db
    # The default is measured once per task, the same way as the tuned schedule, so the two
    # compare like for like; the faster one is kept (issue 12: never worse than the default).
    untuned = (
        _median_measure(device, _default_schedule(task.mod, target), repeat) if baseline else None
    )
    kept = _keep(tuned, untuned)
    best = untuned if kept == "default" else tuned
    return TaskResult(
        task_name=task.name,
        workload_key=workload_key_of(task.mod),
        weight=task.weight,
        trials=trials,
        flops=task.flops,
        best_latency_s=best,
        best_measured_during_tuning_s=best_db,
        untuned_latency_s=untuned,
        tuned_latency_s=tuned,
        kept=kept,
        gflops=(task.flops / best / 1e9) if best and task.flops else None,
        speedup=(untuned / best) if best and untuned else None,
    )


def _keep(tuned: float | None, default: float | None) -> Literal["tuned", "default"] | None:
    """Which schedule a task keeps: the default where it ran and the tuned one did not win."""
    if default is not None and (tuned is None or default < tuned):
        return "default"
    return "tuned" if tuned is not None else None


def kept_database(
    tasks: list[tuple[tvm.IRModule, TaskResult]],
    database: ms.database.Database,
    target: tvm.target.Target,
) -> ms.database.Database:
    """The best tuned schedule of each task that keeps it, and nothing for the others.

    `compile_relax` schedules a function the database does not know the default way (as
    is on a CPU, DLight's rules on a GPU: what `_default_schedule` measured), so a network
    compiled from this database keeps the default exactly where the default was faster."""
    from tvm.s_tir import meta_schedule as ms

    kept = ms.database.MemoryDatabase()
    for mod, result in tasks:
        if result.kept != "tuned":
            continue
        top = database.get_top_k(database.commit_workload(mod), 1)
        if not top:
            continue
        record = top[0]
        kept.commit_tuning_record(
            ms.database.TuningRecord(
                record.trace, kept.commit_workload(mod), record.run_secs, target, record.args_info
            )
        )
    return kept


def tune_workload(
    workload: Workload,
    device: Device,
    store: Store,
    *,
    trials: int,
    baseline: bool = True,
    repeat: int = 5,
    **search: Unpack[SearchOptions],
) -> TuneResult:
    """Tune one operator for `trials` candidates; every measurement goes to `store`.

    `search`: how to search (`SearchOptions`: the cost model, fast mode's `model_rounds`,
    the federation's `shared` schedules, ...; see `_run_search`). `baseline`: measure the
    untuned default too, each `repeat` times."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    if trials < 1:
        raise BadInputError(f"--trials must be at least 1, got {trials}")
    check_fits(workload, device)
    mod = _normalize_mod(prim_func(workload))
    task = TuneTask(
        name=str(workload), mod=mod, weight=1.0, flops=flops(workload), spec=str(workload)
    )
    searched = _run_search([task], device, store, trials_per_task=trials, **search)
    result = _task_result(
        task, searched.database, device, searched.counts[0], baseline=baseline, repeat=repeat
    )
    return TuneResult(
        subject=str(workload),
        kind="workload",
        trials=searched.counts[0],
        tasks=[result],
        **searched.report,
    )


def tune_network(
    name_or_path: str | Network,
    device: Device,
    store: Store,
    *,
    trials_per_task: int,
    baseline: bool = True,
    verify: bool = True,
    repeat: int = 5,
    on_stage: Callable[[str], None] | None = None,
    choice: TaskChoice | None = None,
    **search: Unpack[SearchOptions],
) -> TuneResult:
    """Tune a network's tasks, compile it from the store's best schedules and check it.

    `choice`: only its largest tasks (the others keep TVM's default schedule).
    `search`: how to search, as `tune_workload`'s."""
    if trials_per_task < 1:
        raise BadInputError(f"--trials must be at least 1, got {trials_per_task}")
    stage = on_stage or (lambda _text: None)
    network = name_or_path if isinstance(name_or_path, Network) else load_network(name_or_path)
    stage(f"{network.name}: extracting tasks")
    target = device.target()
    extracted = extract_network_tasks(network, target)
    everything = [
        TuneTask(
            name=t.task_name,
            mod=t.dispatched[0],
            weight=float(t.weight),
            flops=task_flops(t.dispatched[0]),
            spec=None,
        )
        for t in extracted
    ]
    sizes = [t.weight * t.flops for t in everything]
    picked, selection = select_tasks([t.name for t in everything], sizes, choice or TaskChoice())
    tasks = [everything[i] for i in picked]
    stage(f"{network.name}: tuning {len(tasks)} of {len(everything)} tasks")
    searched = _run_search(tasks, device, store, trials_per_task=trials_per_task, **search)
    stage(f"{network.name}: measuring the best and the untuned schedules")
    results = [
        _task_result(t, searched.database, device, n, baseline=baseline, repeat=repeat)
        for t, n in zip(tasks, searched.counts, strict=True)
    ]
    stage(f"{network.name}: compiling and checking against the reference")
    pairs = [(t.mod, r) for t, r in zip(tasks, results, strict=True)]
    kept = kept_database(pairs, searched.database, target)
    check = verify_network(network, kept, device, repeat=repeat) if verify else None
    return TuneResult(
        subject=network.name,
        kind="network",
        trials=sum(searched.counts),
        tasks=results,
        network=check,
        selection=selection,
        **searched.report,
    )


def compile_network(
    network: Network, database: ms.database.Database, target: tvm.target.Target
) -> Any:
    """The network as a Relax VM executable, with the database's best schedules applied."""
    from tvm.s_tir import meta_schedule as ms

    try:
        return ms.relax_integration.compile_relax(
            database, network.mod, target, network.params or None
        )
    except Exception as exc:  # noqa: BLE001
        raise RunFailure(f"compiling {network.name} failed: {one_line_of(exc)}") from exc


def _outputs(value: Any) -> list[np.ndarray]:
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, (list, tuple)) or hasattr(value, "__len__"):
        return [o for v in value for o in _outputs(v)]
    return [np.asarray(value)]


def verify_network(
    network: Network,
    database: ms.database.Database,
    device: Device,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    repeat: int = 5,
) -> NetworkCheck:
    """Compile from the database, run on the example inputs, compare with the reference.

    `atol` is scaled by the largest reference magnitude (a deep network's outputs may be
    large). A simulated GPU cannot run anything: the check says so instead of passing.
    """
    import tvm
    from tvm import relax

    if device.simulated:
        return NetworkCheck(compiled=False, reason="simulated device: nothing can run")
    executable = compile_network(network, database, device.target())
    dev = tvm.cuda(int(device.name.split(":")[1])) if device.kind == "cuda" else tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    args = [tvm.runtime.tensor(x, dev) for x in network.inputs]
    got = _outputs(vm["main"](*args))
    expected = network.reference(network.inputs)
    if len(got) != len(expected):
        return NetworkCheck(
            compiled=True,
            matches=False,
            reference=network.reference_name,
            reason=f"{len(got)} outputs, expected {len(expected)}",
        )
    scale = max(float(np.max(np.abs(e))) for e in expected) if expected else 1.0
    max_err = max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected, strict=True))
    matches = all(
        g.shape == e.shape and np.allclose(g, e, rtol=rtol, atol=atol * max(1.0, scale))
        for g, e in zip(got, expected, strict=True)
    )
    timer = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=5)
    latency = statistics.median(timer(*args).results)
    return NetworkCheck(
        compiled=True,
        matches=matches,
        reference=network.reference_name,
        max_abs_error=max_err,
        reference_scale=scale,
        latency_s=float(latency),
    )
