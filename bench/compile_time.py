"""Compile time and network performance on simulated GPUs the federation has never seen.

For each network and each unseen GPU, every method tunes the same tasks on the same
simulated GPU (`sim:<gpu>`, the analytical latency model: everything here is SIMULATED):

- ms-xgb-full: MetaSchedule's default (XGB cost model) at the full budget.
- ms-xgb-<k>: the same at TLM's budget (k = 32 measurements per task) and other small ones.
- ms-mlp-pretrained-<k>: MetaSchedule's segment-sum MLP pre-trained on the other GPUs'
  data (TenSet-style transfer, as bench/offline_transfer.py does), fine-tuned while tuning.
- simoe-fast: SiMoE zero-shot (trained on the other GPUs only), chained model-only
  evolutionary searches (simoe_model.model_search), then the model's top k per task
  measured (TLM's budget).
- simoe-full: simoe-fast's measurements continued by MetaSchedule's search with SiMoE
  learning online (few-shot own expert) up to the full budget.

Training data: the networks' own tasks: candidates sampled once (ReplayTrace) plus the
training GPUs' tuning records (`fleet_tuning_records`: a chained search steered by their
simulated latencies), labelled by the latency model on the *training* GPUs only, as the
federation's other nodes would have measured them. The unseen GPUs' labels are written to
the fleet stores for the offline-transfer section but never used to train anything here.

Compile time = real search wall time here (evolutionary search, cost-model training and
prediction, the simulator's analysis) + modelled measurement time (what each measurement
would cost on the real GPU: a CUDA compile plus the runs; agent.devices.sim). Both are
reported separately and summed. Network latency = sum over tasks of weight x best
measured task latency (simulated).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from schemas.records import failed_run
from simoe_model.task_data import DeviceDataset, TaskData
from simoe_model.tvm_compat import single_candidate_safe, step_lr_accepts_verbose

if TYPE_CHECKING:
    from agent.tune_harness import TuneTask

Say = Callable[[str], None]


class CompileSettings(BaseModel):
    """What one run of the section does (the --quick and --full presets below)."""

    model_config = ConfigDict(extra="forbid")

    networks: list[str]
    max_tasks: int | None  # top tasks by FLOPs share (weight x FLOPs); None = all
    train_gpus: list[str]
    unseen_gpus: list[str]
    samples_per_task: int
    full_budget: int  # trials per task of MetaSchedule-full and SiMoE-full
    small_budgets: list[int]  # trials per task of the small-budget peers
    tlm_budget: int = 32
    population: int  # MetaSchedule's evolutionary search population
    genetic_iters: int
    simoe_fast_population: int  # SiMoE fast mode's model-only search (simoe_model.model_search)
    simoe_fast_genetic_iters: int
    simoe_fast_rounds: int = 5  # chained model-only searches of simoe_fast_per_round each
    simoe_fast_per_round: int = 32
    # the training GPUs' tuning records: a chained search steered by their simulated latencies
    fleet_rounds: int = 6
    fleet_per_round: int = 32
    expert_epochs: int
    shared_epochs: int
    mlp_epochs: int
    long_budget: int = 1000  # the budget section: MetaSchedule's trials on one task
    # ... and SiMoE full mode's there: a quarter of it (64-trial searches, as MetaSchedule's)
    long_simoe_budget: int = 256
    trials_per_iter: int = 64  # measurements per evolutionary search (MetaSchedule: 64)
    xgb_warmup: int = 100  # measurements before XGB's scores are used (MetaSchedule: 100)
    # random valid schedules each search samples before evolving: MetaSchedule's 50 for its
    # default population of 512; scaled with the population when True (the same share)
    scale_init_min: bool = False
    seed: int = 0


def validated_epochs() -> dict[str, int]:
    """SiMoE's and the MLP peer's training budgets as chosen on the protocol's validation
    units (bench/protocol_choices.json, bench/protocol_transfer.py's grid, seed 0): every
    model compared trains for the budget its own validation score chose."""
    chosen = json.loads(Path(__file__).with_name("protocol_choices.json").read_text())["chosen"]
    return {
        "expert_epochs": int(chosen["simoe"]["expert_epochs"]),
        "shared_epochs": int(chosen["simoe"]["shared_epochs"]),
        "mlp_epochs": int(chosen["mlp-finetune"]["mlp_epochs"]),
    }


# Quick: the top task (weight x FLOPs) of each network on two unseen GPUs of different
# generations (Ampere, Pascal), sized to fit the 15-minute quick run on 2 cores. Search, not
# measurement, is the cost of a simulated GPU: each evolutionary search first samples random
# valid CUDA schedules (~5% pass VerifyGPUCode) until it holds 50 for MetaSchedule's
# population of 512, then mutates its population. Here every search, of every method, uses a
# population of 64 and samples 8 first (50 scaled with the population). 32 measurements per
# search (TLM's budget): MetaSchedule-full's 64 trials are two searches with its model updated
# in between, and ms-xgb-32 is the first of them (the same computation, taken as a snapshot).
# XGB's warm-up is cut from 100 to 32 so that MetaSchedule-full's second search uses its model
# (a stronger peer, not a weaker one). SiMoE fast: 3 chained model-only searches, then 32
# measured; SiMoE full: one more search of 32 with online updates.
QUICK = CompileSettings(
    networks=["resnet50", "mobilenet_v2", "bert_layer"],
    max_tasks=1,
    train_gpus=["k80", "p100", "v100", "t4", "2080ti", "a100-40gb", "3090", "h100-sxm"],
    unseen_gpus=["a10", "titanxp"],
    samples_per_task=64,
    full_budget=64,
    small_budgets=[32],
    population=64,
    genetic_iters=2,
    simoe_fast_population=64,
    simoe_fast_genetic_iters=2,
    simoe_fast_rounds=3,
    fleet_rounds=4,
    trials_per_iter=32,
    xgb_warmup=32,
    scale_init_min=True,
    **validated_epochs(),
)

# The budget section in --quick: one task, so each search can be larger (population 128).
QUICK_BUDGET = QUICK.model_copy(
    update={"population": 128, "simoe_fast_population": 128, "simoe_fast_rounds": 5,
            "fleet_rounds": 6}
)  # fmt: skip

FULL = CompileSettings(
    networks=["resnet50", "mobilenet_v2", "bert_layer"],
    max_tasks=None,
    train_gpus=[
        "k80",
        "m40",
        "p100",
        "1080ti",
        "v100",
        "t4",
        "2080ti",
        "a100-40gb",
        "a30",
        "3090",
        "4090",
        "h100-sxm",
        "xavier",
    ],  # fmt: skip
    unseen_gpus=["a10", "l4", "titanxp"],
    samples_per_task=512,
    full_budget=1000,
    small_budgets=[32, 64, 128],
    population=512,
    genetic_iters=4,
    simoe_fast_population=512,
    simoe_fast_genetic_iters=4,
    simoe_fast_rounds=8,
    simoe_fast_per_round=64,
    fleet_rounds=16,
    fleet_per_round=64,
    expert_epochs=30,
    shared_epochs=30,
    mlp_epochs=30,
)


@dataclass
class Sampled:
    """One task's distinct candidates: traces, features, and simulated labels per GPU."""

    task: TuneTask
    traces: list[Any]
    features: list[np.ndarray]
    latency: dict[str, np.ndarray]  # gpu -> mean seconds per candidate (inf = fails there)


# -- data ------------------------------------------------------------------------------------
def network_tasks(
    network: str, target: Any, max_tasks: int | None
) -> tuple[list[TuneTask], int, float | None]:
    """The network's top `max_tasks` tasks by weight x FLOPs, how many it has, and the share
    of its FLOPs (weight x FLOPs) the kept tasks carry: one extraction (~10-30 s each)."""
    from agent.networks import extract_network_tasks, load_network
    from agent.tune_harness import TuneTask, task_flops

    extracted = extract_network_tasks(load_network(network), target)
    tasks = [
        TuneTask(t.task_name, t.dispatched[0], float(t.weight), task_flops(t.dispatched[0]))
        for t in extracted
    ]
    tasks.sort(key=lambda t: -t.weight * t.flops)
    kept = tasks[:max_tasks] if max_tasks else tasks
    whole = sum(t.weight * t.flops for t in tasks)
    share = sum(t.weight * t.flops for t in kept) / whole if whole else None
    return kept, len(tasks), share


def profile_vectors(gpus: list[str], cache: Path) -> dict[str, Any]:
    """Hardware profiles of the simulated GPUs (profiled once, cached as JSON)."""
    from agent.devices import get_device
    from agent.profiler import profile_device
    from schemas import HardwareProfile

    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for gpu in gpus:
        path = cache / f"{gpu}.json"
        if path.exists():
            out[gpu] = HardwareProfile.model_validate_json(path.read_text())
        else:
            out[gpu] = profile_device(get_device(f"sim:{gpu}"))
            path.write_text(out[gpu].model_dump_json(indent=1))
    return out


def simulate_on(mods: list[Any], target: Any, gpus: list[str]) -> np.ndarray:
    """Mean simulated seconds of each scheduled module on each GPU, [n, gpus] (inf = fails)."""
    from agent.devices.sim import candidate_key, latency, tir_analysis
    from agent.devices.sim.catalog import lookup

    kernels = []
    for mod in mods:
        try:
            kernels.append(tir_analysis.analyse(mod, target))
        except Exception:  # noqa: BLE001 - unreadable by the model: fails everywhere
            kernels.append([])
    keys = np.asarray([candidate_key(m) for m in mods], np.uint64)
    matrix, owner = latency.kernel_matrix(kernels)
    params = latency.GpuParams.from_specs([lookup(g) for g in gpus])
    return latency.simulate(matrix, owner, keys, params, repeats=3).mean(axis=2)


def _labelled(
    task: TuneTask, mods: list[Any], traces: list[Any], target: Any, gpus: list[str]
) -> Sampled:
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(mod=task.mod, target=target)
    args = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
    cands = [ms.MeasureCandidate(s_tir.Schedule(m), args) for m in mods]
    feats = ms.feature_extractor.PerStoreFeature().extract_from(ctx, cands)
    secs = simulate_on(mods, target, gpus)
    return Sampled(
        task,
        traces,
        [np.asarray(f.numpy(), dtype=np.float32) for f in feats],
        {g: secs[:, i] for i, g in enumerate(gpus)},
    )


def sample_task(task: TuneTask, gpus: list[str], per_task: int, seed: int) -> Sampled:
    """Sample candidates once for a generic target, featurize, label on every GPU."""
    from agent.devices.sim.catalog import lookup
    from agent.fleet_dataset import generic_target, sample_candidates

    target = generic_target([lookup(g) for g in gpus])
    cands, _ctx = sample_candidates(
        task.mod, target, per_task, seed=seed, task_name=task.name, num_threads=2
    )
    return _labelled(task, [c.sch.mod for c in cands], [c.sch.trace for c in cands], target, gpus)


def fleet_steered_score(target: Any, all_gpus: list[str], steer_gpus: list[str]) -> Any:
    """Geometric-mean simulated latency over `steer_gpus` (inf where most of them fail)."""
    cols = [all_gpus.index(g) for g in steer_gpus]

    def score(_task_mod: Any, mods: Any) -> np.ndarray:
        secs = simulate_on(list(mods), target, all_gpus)[:, cols]
        ok = np.isfinite(secs)
        logs = np.log(np.where(ok, secs, 1.0))
        mean = logs.sum(axis=1) / np.maximum(ok.sum(axis=1), 1)
        return np.where(ok.sum(axis=1) * 2 >= len(cols), np.exp(mean), np.inf)

    return score


def fleet_tuning_records(
    task: TuneTask, gpus: list[str], train_gpus: list[str], settings: CompileSettings, seed: int
) -> Sampled:
    """What the training GPUs' own tuning runs would have measured, labelled on every GPU.

    A node's tuning records are biased toward its good schedules, and that is what the
    federation's experts learn from (as TenSet's and TLM's models learn from tuning logs).
    To save time one chained search stands in for the training nodes' separate runs: it is
    steered by their geometric-mean simulated latency and never by an unseen GPU's."""
    from agent.devices.sim.catalog import lookup
    from agent.fleet_dataset import generic_target
    from simoe_model.model_search import ScoreCostModel, model_only_search

    target = generic_target([lookup(g) for g in gpus])
    score = fleet_steered_score(target, gpus, train_gpus)
    found = model_only_search(
        task.mod, target, score, cost_model=ScoreCostModel(score),
        rounds=settings.fleet_rounds, per_round=settings.fleet_per_round,
        population=settings.population, genetic_iters=settings.genetic_iters,
        init_min_unmeasured=init_min(settings, settings.population), seed=seed,
        task_name=task.name, num_threads=2,
    )  # fmt: skip
    return _labelled(task, [f.mod for f in found], [f.trace for f in found], target, gpus)


def merged(a: Sampled, b: Sampled) -> Sampled:
    """One task's candidates from two sources (the same task, the same GPUs)."""
    return Sampled(
        a.task,
        a.traces + b.traces,
        a.features + b.features,
        {g: np.concatenate([a.latency[g], b.latency[g]]) for g in a.latency},
    )


def device_dataset(gpu: str, hv: np.ndarray, sampled: list[Sampled]) -> DeviceDataset:
    tasks = []
    for s in sampled:
        ok = np.isfinite(s.latency[gpu])
        idx = np.flatnonzero(ok)
        if len(idx) >= 2:
            tasks.append(
                TaskData(
                    s.task.name,
                    [s.features[i] for i in idx],
                    s.latency[gpu][idx].astype(np.float64),
                    [f"{s.task.name}/{i}" for i in idx],
                )
            )
    return DeviceDataset(f"sim:{gpu}", hv, tasks)


def write_fleet_stores(sampled: list[Sampled], gpus: list[str], profiles: dict, out: Path) -> None:
    """One store per GPU (DIR/<gpu>.sqlite) for bench/offline_transfer.py --data DIR."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from agent.devices.sim import cuda_target
    from agent.devices.sim.catalog import lookup
    from agent.ms_database import plain_json, workload_key_of
    from agent.store import Store
    from schemas import FAILED_RUN_SECS, TuningRecord

    out.mkdir(parents=True, exist_ok=True)
    (out / "profiles").mkdir(exist_ok=True)
    for gpu in gpus:
        (out / "profiles" / f"{gpu}.json").write_text(profiles[gpu].model_dump_json(indent=1))
        path = out / f"{gpu}.sqlite"
        if path.exists():
            path.unlink()
        gpu_target = plain_json(cuda_target(lookup(gpu)).export())
        with Store(path) as store:
            for s in sampled:
                wkey = workload_key_of(s.task.mod)
                store.add_workload(wkey, s.task.name, tvm.ir.save_json(s.task.mod), None)
                args = [
                    plain_json(a.as_json())
                    for a in ms.arg_info.ArgInfo.from_prim_func(s.task.mod["main"])
                ]
                records = []
                for trace, lat in zip(s.traces, s.latency[gpu], strict=True):
                    ok = bool(np.isfinite(lat))
                    records.append(
                        TuningRecord(
                            workload_key=wkey,
                            task_name=s.task.name,
                            trace=plain_json(trace.as_json()),
                            run_secs=[float(lat)] if ok else [FAILED_RUN_SECS],
                            target=gpu_target,
                            args_info=args,
                            device=f"sim:{gpu}",
                            simulated=True,
                        )
                    )
                ids = store.add_records(records)
                store.put_features(dict(zip(ids, s.features, strict=True)))


# -- cost models -------------------------------------------------------------------------------
def add_training_groups(state: Any, train: list[DeviceDataset]) -> None:
    """Every training GPU's tasks into an MLP trainer's state, one group per GPU and task."""
    for ds in train:
        for task in ds.tasks:
            state.add_to_group(
                list(task.features),
                task.latencies.astype("float64"),
                f"{ds.device}/{task.task_name}",
            )


def pretrained_mlp_trainer(train: list[DeviceDataset], epochs: int, seed: int) -> Any:
    """MetaSchedule's SegmentSumMLP trainer pre-trained on the training GPUs (164 features)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.cost_model import mlp_model as mm

    state = mm.State(
        model_config=mm.SegmentSumMLPConfig(input_dim=164),
        extractor=ms.feature_extractor.PerStoreFeature(),
    )
    add_training_groups(state, train)
    config = mm.TrainerConfig(num_epoch_full=epochs, num_epoch_incremental=5)
    trainer = mm.SegmentSumMLPTrainer(train_config=config, state=state)
    mm.logger.setLevel("WARNING")
    mm.random.seed(seed)
    with step_lr_accepts_verbose():
        trainer.train_full()
    return trainer


def train_simoe(train: list[DeviceDataset], settings: CompileSettings) -> Any:
    """SiMoE on the training GPUs only: one expert each, then the shared encoder and gate."""
    from simoe_model.model import SiMoE, SiMoEConfig
    from simoe_model.train import train_experts, train_shared

    model = SiMoE(SiMoEConfig())
    train_experts(
        model, [(d.device, d) for d in train], epochs=settings.expert_epochs, seed=settings.seed
    )
    train_shared(model, train, epochs=settings.shared_epochs, seed=settings.seed)
    return model


# -- one tuning run ----------------------------------------------------------------------------
class MethodRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    network: str
    gpu: str
    method: str
    trials_per_task: int
    measured: int
    search_wall_s: float
    modelled_measure_s: float
    compile_s: float
    network_latency_s: float | None
    task_best_s: dict[str, float | None]
    curve: list[tuple[float, float]]  # (compile seconds so far, best network latency so far)
    simulated: bool = True
    # never worse than the default (issue 12, as `tune` does it: TaskResult.kept): each task's
    # default schedule is measured once, and the task keeps it unless a tuned one beat it
    task_default_s: dict[str, float | None] = {}
    task_kept: dict[str, str | None] = {}


def method_row(
    network: str,
    gpu: str,
    method: str,
    trials_per_task: int,
    tasks: list[TuneTask],
    best: list[float],
    *,
    measured: int,
    wall: float,
    modelled: float,
    curve: list[tuple[float, float]],
    default: list[float] | None = None,
    tuned: list[float] | None = None,
) -> MethodRow:
    """A run's row: network latency = sum of weight x best task latency (None until every
    task has one). `default`, `tuned`: each task's default-schedule and best tuned latency
    (`best` is the smaller), to say which one the task keeps."""
    finite = all(math.isfinite(b) for b in best)
    default = default or [math.inf] * len(tasks)
    tuned = tuned or list(best)
    kept = [
        "default" if math.isfinite(d) and not t < d else "tuned" if math.isfinite(t) else None
        for d, t in zip(default, tuned, strict=True)
    ]
    return MethodRow(
        network=network,
        gpu=gpu,
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
    tasks: list[TuneTask],
    gpu: str,
    method: str,
    cost_model: Any,
    *,
    trials: int,
    population: int,
    genetic_iters: int,
    seed: int,
    network: str,
    work_dir: Path,
    trials_per_iter: int = 64,
    snapshots: dict[str, int] | None = None,
    init_min_unmeasured: int = 50,
    start: tuple[MethodRow, Any] | None = None,
) -> list[MethodRow]:
    """Tune every task for `trials` measurements with one cost model; track the curve.

    `snapshots` {method: k}: the state after the first k // trials_per_iter searches (of up to
    trials_per_iter measurements) per task is also returned as a row of that method: the same
    run stopped at k (round-robin gives every task its searches before any task gets more).
    `start` (row, database): continue an earlier run of the same tasks: its measurements are
    in the database, its time and best latencies count toward this run's."""
    from agent.tune_harness import evolutionary

    def strategy(_i: int, _task: TuneTask, _target: Any) -> Any:
        return evolutionary(
            population, genetic_iters=genetic_iters, init_min_unmeasured=init_min_unmeasured
        )

    rows, _database = _tune(
        tasks, gpu, method, cost_model, strategy, trials=trials, seed=seed, network=network,
        work_dir=work_dir, trials_per_iter=trials_per_iter, snapshots=snapshots, start=start,
    )  # fmt: skip
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


def _tune(
    tasks: list[TuneTask],
    gpu: str,
    method: str,
    cost_model: Any,
    strategy: Strategy,
    *,
    trials: int,
    seed: int,
    network: str,
    work_dir: Path | None,
    trials_per_iter: int,
    snapshots: dict[str, int] | None = None,
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

    device = get_device(f"sim:{gpu}")
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
    per_iter = min(trials_per_iter, trials)

    def row_now(name: str, k: int, wall: float, modelled: float) -> MethodRow:
        return method_row(
            network, gpu, name, k, tasks, best, measured=measured[0], wall=wall0 + wall,
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
            for name, k in (snapshots or {}).items():  # after k // per_iter searches per task
                if name not in taken and batches[0] >= k // per_iter * len(tasks):
                    taken[name] = row_now(name, k, wall, modelled_done[0])

    log_dir = None
    if work_dir is not None:
        log_dir = work_dir / "logs" / f"{network}-{gpu}-{method}"
        log_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    strategies = [strategy(i, t, device.target()) for i, t in enumerate(tasks)]
    run_tasks(
        tasks, device, database, cost_model, strategies, trials_per_task=trials,
        trials_per_iter=per_iter, seed=seed, work_dir=log_dir, file_logs=False,
        callbacks=[Curve()], num_threads=2, task_scheduler="round-robin",
    )  # fmt: skip
    wall = time.perf_counter() - started
    rows = [row_now(method, trials, wall, float(device.modelled_measure_seconds)), *taken.values()]
    return rows, database


def simoe_fast(
    tasks: list[TuneTask],
    gpu: str,
    make_model: Callable[[], Any],
    settings: CompileSettings,
    network: str,
    method: str = "simoe-fast",
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
            init_min_unmeasured=init_min(settings, settings.simoe_fast_population),
            seed=settings.seed + i, num_threads=2,  # score=None: the model, frozen and cached
        )  # fmt: skip

    [row], database = _tune(
        tasks, gpu, method, make_model(), strategy, trials=settings.tlm_budget,
        seed=settings.seed, network=network, work_dir=None,
        trials_per_iter=settings.trials_per_iter,
    )  # fmt: skip
    return row, database


# -- the section -------------------------------------------------------------------------------
def _prepare(
    settings: CompileSettings, work_dir: Path, say: Say, max_tasks: int | None
) -> tuple[dict[str, Any], dict[str, list[TuneTask]], Any, Any, dict[str, np.ndarray]]:
    """Tasks of every network, their candidates labelled on the training GPUs, and the SiMoE
    model and MLP peer trained once on all of them (the federation's other nodes' data)."""
    import torch

    from agent.devices import get_device
    from simoe_model.hardware import hardware_vector

    torch.set_num_threads(2)
    all_gpus = settings.train_gpus + [
        g for g in settings.unseen_gpus if g not in settings.train_gpus
    ]
    t0 = time.perf_counter()
    say(f"profiling {len(all_gpus)} simulated GPUs (cached)")
    profiles = profile_vectors(all_gpus, work_dir / "profiles")
    hv = {g: hardware_vector(p) for g, p in profiles.items()}
    info: dict[str, Any] = {"networks": {}, "prep_seconds": {"profiles": time.perf_counter() - t0}}
    target = get_device(f"sim:{settings.unseen_gpus[0]}").target()
    net_tasks: dict[str, list[TuneTask]] = {}
    sampled: list[Sampled] = []
    for network in settings.networks:
        t0 = time.perf_counter()
        say(f"{network}: extracting tasks")
        tasks, total_tasks, share = network_tasks(network, target, max_tasks)
        records = (
            f" and {settings.fleet_rounds} x {settings.fleet_per_round} from the training "
            "GPUs' tuning"
            if settings.fleet_rounds > 0
            else ""
        )
        say(
            f"{network}: {len(tasks)} task(s): {settings.samples_per_task} random "
            f"candidates{records}, labelled on every GPU"
        )
        t1 = time.perf_counter()
        mine = []
        for i, t in enumerate(tasks):
            seed = settings.seed + len(sampled) + i
            part = sample_task(t, all_gpus, settings.samples_per_task, seed)
            if settings.fleet_rounds > 0:
                tuned = fleet_tuning_records(t, all_gpus, settings.train_gpus, settings, seed)
                part = merged(part, tuned)
            mine.append(part)
        sampled += mine
        net_tasks[network] = tasks
        info["networks"][network] = {
            "tasks_total": total_tasks,
            "tasks_tuned": [
                {"name": t.name, "weight": t.weight, "gflops": t.flops / 1e9} for t in tasks
            ],
            "flops_share_tuned": share,
            "candidates_per_task": [len(s.traces) for s in mine],
            "seconds": {"extract": t1 - t0, "sample_and_label": time.perf_counter() - t1},
        }
    t0 = time.perf_counter()
    write_fleet_stores(sampled, all_gpus, profiles, work_dir / "fleet" / "suite")
    info["prep_seconds"]["write_fleet_stores"] = time.perf_counter() - t0
    train = [device_dataset(g, hv[g], sampled) for g in settings.train_gpus]
    say(f"training SiMoE and the MLP peer on {len(train)} GPUs x {len(sampled)} tasks")
    t0 = time.perf_counter()
    simoe = train_simoe(train, settings)
    t1 = time.perf_counter()
    mlp = pretrained_mlp_trainer(train, settings.mlp_epochs, settings.seed)
    info["prep_seconds"]["simoe_train_offline"] = t1 - t0
    info["prep_seconds"]["mlp_pretrain_offline"] = time.perf_counter() - t1
    return info, net_tasks, simoe, mlp, hv


def init_min(settings: CompileSettings, population: int) -> int:
    """Random valid schedules a search samples first: 50 (MetaSchedule's), or scaled."""
    return min(50, max(8, round(50 * population / 512))) if settings.scale_init_min else 50


Plan = tuple[str, Callable[[], Any], int, int, int, dict[str, int]]


def _run_plans(
    plans: list[Plan],
    tasks: list[TuneTask],
    network: str,
    gpu: str,
    settings: CompileSettings,
    work_dir: Path,
    result: dict[str, Any],
    say: Say,
    on_row: Callable[[dict[str, Any]], None],
) -> None:
    for method, make_model, trials, pop, iters, snapshots in plans:
        also = f", snapshot {', '.join(snapshots)}" if snapshots else ""
        say(f"{network} on sim:{gpu}: {method} ({trials} trials/task{also})")
        try:
            with step_lr_accepts_verbose():
                rows = tune_method(
                    tasks, gpu, method, make_model(), trials=trials, population=pop,
                    genetic_iters=iters, seed=settings.seed, network=network,
                    work_dir=work_dir, trials_per_iter=settings.trials_per_iter,
                    snapshots=snapshots, init_min_unmeasured=init_min(settings, pop),
                )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - one failed method must not lose the rest
            _failed(result, network, gpu, method, exc, on_row)
            continue
        result["rows"] += [r.model_dump() for r in rows]
        on_row(result)


def _xgb_model(warmup: int) -> Callable[[], Any]:
    """MetaSchedule's XGB model as tune_tasks makes it ("xgb"), with the given warm-up."""

    def make() -> Any:
        from tvm.s_tir.meta_schedule.cost_model import XGBModel

        return XGBModel(num_warmup_samples=warmup, num_tuning_cores=2, tree_method="auto")

    return make


def _mlp_model(trainer: Any) -> Any:
    from tvm.s_tir.meta_schedule.cost_model.mlp_model import MLPModel

    return MLPModel(trainer=single_candidate_safe(copy.deepcopy(trainer)))


def _simoe_model(base: Any, hv: np.ndarray, online: bool) -> Any:
    from simoe_model.cost_model import SiMoECostModel

    return SiMoECostModel(copy.deepcopy(base), hv, online=online)


def _run_simoe(
    tasks: list[TuneTask],
    network: str,
    gpu: str,
    model: Any,
    hv: np.ndarray,
    settings: CompileSettings,
    work_dir: Path,
    result: dict[str, Any],
    say: Say,
    on_row: Callable[[dict[str, Any]], None],
    *,
    full: CompileSettings | None,
) -> None:
    """SiMoE fast mode, then full mode (when `full`, its settings): fast mode's measurements
    continued by MetaSchedule's search with SiMoE learning online, up to the full budget."""
    k = settings.tlm_budget
    say(
        f"{network} on sim:{gpu}: simoe-fast ({settings.simoe_fast_rounds} model-only searches "
        f"of {settings.simoe_fast_per_round}, then {k} measured per task)"
    )
    try:
        fast, database = simoe_fast(
            tasks, gpu, lambda: _simoe_model(model, hv, False), settings, network
        )
    except Exception as exc:  # noqa: BLE001 - one failed method must not lose the rest
        _failed(result, network, gpu, "simoe-fast", exc, on_row)
        return
    result["rows"].append(fast.model_dump())
    on_row(result)
    if full is None or full.full_budget <= k:
        return
    say(f"{network} on sim:{gpu}: simoe-full (continues to {full.full_budget} trials/task)")
    try:
        with step_lr_accepts_verbose():
            [row] = tune_method(
                tasks, gpu, "simoe-full", _simoe_model(model, hv, True),
                trials=full.full_budget - k, population=full.population,
                genetic_iters=full.genetic_iters, seed=full.seed, network=network,
                work_dir=work_dir, trials_per_iter=full.trials_per_iter,
                init_min_unmeasured=init_min(full, full.population),
                start=(fast, database),
            )  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        _failed(result, network, gpu, "simoe-full", exc, on_row)
        return
    row.trials_per_task = full.full_budget
    result["rows"].append(row.model_dump())
    on_row(result)


def _run_mlp_fast(
    tasks: list[TuneTask],
    network: str,
    gpu: str,
    mlp: Any,
    settings: CompileSettings,
    result: dict[str, Any],
    say: Say,
    on_row: Callable[[dict[str, Any]], None],
) -> None:
    """The fair peer of SiMoE fast (issue 12, item 4): the pre-trained MLP (the same training
    data) searching exactly as SiMoE fast does, then its top `tlm_budget` measured."""
    say(f"{network} on sim:{gpu}: mlp-fast (SiMoE fast's search with the pre-trained MLP)")
    try:
        with step_lr_accepts_verbose():
            row, _db = simoe_fast(
                tasks, gpu, lambda: _mlp_model(mlp), settings, network, method="mlp-fast"
            )
    except Exception as exc:  # noqa: BLE001 - one failed method must not lose the rest
        _failed(result, network, gpu, "mlp-fast", exc, on_row)
        return
    result["rows"].append(row.model_dump())
    on_row(result)


def _failed(
    result: dict[str, Any],
    network: str,
    gpu: str,
    method: str,
    exc: Exception,
    on_row: Callable[[dict[str, Any]], None],
) -> None:
    result.setdefault("failed", []).append(
        {"network": network, "gpu": gpu, "method": method,
         "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    )  # fmt: skip
    on_row(result)


def run_section(
    settings: CompileSettings,
    work_dir: Path,
    *,
    say: Say,
    on_row: Callable[[dict[str, Any]], None],
    done: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every network x unseen GPU x method; `on_row` gets the partial result after each run.

    `done`: rows of an interrupted run with the same settings, kept and not run again (a
    simoe-fast row without its simoe-full is run again: full mode continues fast's search)."""
    info, net_tasks, simoe, mlp, hv = _prepare(settings, work_dir, say, settings.max_tasks)
    kept = _resumable(done or [])
    result: dict[str, Any] = {"settings": settings.model_dump(), **info, "rows": kept}
    have = {(r["network"], r["gpu"], r["method"]) for r in kept}
    on_row(result)
    k = settings.tlm_budget
    per_iter = settings.trials_per_iter
    xgb = _xgb_model(settings.xgb_warmup)
    # a small budget that is a whole number of searches is the full run stopped there
    xgb_snaps = {
        f"ms-xgb-{b}": b for b in sorted({k, *settings.small_budgets}) if b % per_iter == 0
    }
    plans: list[Plan] = [
        ("ms-xgb-full", xgb, settings.full_budget, settings.population,
         settings.genetic_iters, xgb_snaps),
    ]  # fmt: skip
    for budget in sorted({k, *settings.small_budgets} - set(xgb_snaps.values())):
        plans.append(
            (f"ms-xgb-{budget}", xgb, budget, settings.population, settings.genetic_iters, {})
        )
    plans.append(
        (f"ms-mlp-pretrained-{k}", lambda: _mlp_model(mlp), k, settings.population,
         settings.genetic_iters, {})
    )  # fmt: skip
    plans.sort(key=lambda p: (p[2], p[0]))  # cheap runs first: a timeout keeps the comparison
    for gpu in settings.unseen_gpus:
        for network, tasks in net_tasks.items():
            # SiMoE first, then the peers
            if (network, gpu, "simoe-full") not in have:
                _run_simoe(tasks, network, gpu, simoe, hv[gpu], settings, work_dir, result,
                           say, on_row, full=settings)  # fmt: skip
            if (network, gpu, "mlp-fast") not in have:  # the same search, the MLP's scores
                _run_mlp_fast(tasks, network, gpu, mlp, settings, result, say, on_row)
            todo = [p for p in plans if (network, gpu, p[0]) not in have]
            _run_plans(todo, tasks, network, gpu, settings, work_dir, result, say, on_row)
    result["summary"] = summarize(result["rows"], settings.tlm_budget)
    return result


def _resumable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of an earlier run worth keeping: all but a simoe-fast without its simoe-full, and
    a snapshot (ms-xgb-k) without the run it was taken from."""
    have = {(r["network"], r["gpu"], r["method"]) for r in rows}

    def keep(r: dict[str, Any]) -> bool:
        if r["method"] == "simoe-fast":
            return (r["network"], r["gpu"], "simoe-full") in have
        if r["method"].startswith("ms-xgb-") and r["method"] != "ms-xgb-full":
            return (r["network"], r["gpu"], "ms-xgb-full") in have
        return True

    return [r for r in rows if keep(r)]


def run_budget_section(
    settings: CompileSettings,
    work_dir: Path,
    *,
    say: Say,
    on_row: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """The paper's compile-time claim at a realistic MetaSchedule budget, on one task: the top
    task of the first network on the first unseen GPU, MetaSchedule (XGB) for `long_budget`
    trials against SiMoE fast's `tlm_budget` measurements."""
    one = settings.model_copy(update={"networks": settings.networks[:1]})
    info, net_tasks, simoe, _mlp, hv = _prepare(one, work_dir / "budget", say, 1)
    result: dict[str, Any] = {"settings": one.model_dump(), **info, "rows": []}
    on_row(result)
    [(network, tasks)] = net_tasks.items()
    gpu = settings.unseen_gpus[0]
    # MetaSchedule's own defaults here: 64 measurements per search, XGB warm-up 100
    default_iter = settings.model_copy(
        update={"trials_per_iter": 64, "scale_init_min": False,
                "full_budget": settings.long_simoe_budget}
    )  # fmt: skip
    _run_simoe(tasks, network, gpu, simoe, hv[gpu], settings, work_dir / "budget", result,
               say, on_row, full=default_iter)  # fmt: skip
    plans: list[Plan] = [
        (f"ms-xgb-{settings.long_budget}", _xgb_model(100), settings.long_budget,
         settings.population, settings.genetic_iters, {}),
    ]  # fmt: skip
    _run_plans(plans, tasks, network, gpu, default_iter, work_dir / "budget", result, say, on_row)
    result["summary"] = summarize(
        result["rows"], settings.tlm_budget, full_method=f"ms-xgb-{settings.long_budget}"
    )
    return result


def _crossing(curve: list[tuple[float, float]], threshold: float) -> float | None:
    """Compile seconds at which the best network latency first reaches `threshold`."""
    for seconds, lat in curve:
        if lat <= threshold:
            return seconds
    return None


def summarize(
    rows: list[dict[str, Any]], tlm_budget: int, full_method: str = "ms-xgb-full"
) -> list[dict[str, Any]]:
    """Per network and GPU: the paper's two claims, computed from the rows."""
    out = []
    keys = sorted({(r["network"], r["gpu"]) for r in rows})
    for network, gpu in keys:
        by = {r["method"]: r for r in rows if r["network"] == network and r["gpu"] == gpu}
        full = by.get(full_method)
        fast = by.get("simoe-fast")
        entry: dict[str, Any] = {"network": network, "gpu": gpu}
        if full and full["network_latency_s"]:
            ref = full["network_latency_s"]
            entry["ms_full_latency_s"] = ref
            entry["ms_full_compile_s"] = full["compile_s"]
            # 95% of MetaSchedule-full's performance = latency <= ref / 0.95
            for name in ("simoe-fast", "simoe-full"):
                r = by.get(name)
                if not r or not r["network_latency_s"]:
                    continue
                entry[f"{name}_perf_vs_ms_full"] = ref / r["network_latency_s"]
                reach = _crossing(r["curve"], ref / 0.95)
                entry[f"{name}_compile_s_to_95pct"] = reach
                entry[f"{name}_speedup_to_95pct"] = full["compile_s"] / reach if reach else None
            if fast and fast["network_latency_s"]:
                entry["simoe_fast_compile_speedup"] = full["compile_s"] / fast["compile_s"]
            for label, r in (("ms_full", full), ("simoe_fast", fast)):
                if r:
                    entry[f"{label}_measured"] = r["measured"]
                    entry[f"{label}_search_wall_s"] = r["search_wall_s"]
                    entry[f"{label}_modelled_measure_s"] = r["modelled_measure_s"]
        if fast and fast["network_latency_s"]:
            for peer in (f"ms-xgb-{tlm_budget}", f"ms-mlp-pretrained-{tlm_budget}", "mlp-fast"):
                r = by.get(peer)
                if r and r["network_latency_s"]:
                    entry[f"speedup_vs_{peer}"] = r["network_latency_s"] / fast["network_latency_s"]
        out.append(entry)
    return out
