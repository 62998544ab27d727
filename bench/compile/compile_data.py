"""The compile section's data (its presets, QUICK, QUICK_BUDGET and FULL, are in
bench/compile/presets.py): the networks' tasks, their candidates sampled once and labelled
on every simulated GPU, the fleet stores, and the SiMoE model and MLP peer trained on the
training GPUs only (bench/compile/compile_time.py runs the section on them).

Training data: the networks' own tasks: candidates sampled once (ReplayTrace,
`agent.fleet_dataset.sample_candidates`) plus the training GPUs' tuning records
(`fleet_tuning_records`: a chained search steered by their simulated latencies), labelled by
the latency model on the *training* GPUs only, as the federation's other nodes would have
measured them. The unseen GPUs' labels are written to the fleet stores for the
offline-transfer section but never used to train anything here.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.compile.presets import TEST_UNITS_COMPILE
from bench.protocol import SAMPLE_SEED, UnitLabels
from bench.report.report_model import CompileSettings, NetworkInfo, TunedTask
from simoe_model.task_data import DeviceDataset, TaskData
from simoe_model.tvm_compat import step_lr_accepts_verbose

if TYPE_CHECKING:
    from agent.tune_harness import TuneTask

Say = Callable[[str], None]


@dataclass
class Sampled:
    """One task's distinct candidates: traces, features, and simulated labels per GPU."""

    task: TuneTask
    traces: list[Any]
    features: list[np.ndarray]
    latency: dict[str, np.ndarray]  # gpu -> mean seconds per candidate (inf = fails there)


# -- data ------------------------------------------------------------------------------------
def network_tasks(
    network: str, target: Any, max_tasks: int | None, flops_share: float | None = None
) -> tuple[list[TuneTask], int, float | None]:
    """The network's top tasks by weight x FLOPs (the fewest covering `flops_share` of its
    FLOPs, at most `max_tasks`), how many it has, and the share of its FLOPs (weight x FLOPs)
    the kept tasks carry: one extraction (~5-30 s each)."""
    from agent.networks import extract_network_tasks, load_network
    from agent.tune_harness import TuneTask, task_flops

    extracted = extract_network_tasks(load_network(network), target)
    tasks = [
        TuneTask(t.task_name, t.dispatched[0], float(t.weight), task_flops(t.dispatched[0]))
        for t in extracted
    ]
    tasks.sort(key=lambda t: -t.weight * t.flops)
    whole = sum(t.weight * t.flops for t in tasks)
    kept = tasks[:max_tasks] if max_tasks else tasks
    if flops_share is not None and whole:
        covered, n = 0.0, 0
        while n < len(kept) and covered < flops_share * whole:
            covered += kept[n].weight * kept[n].flops
            n += 1
        kept = kept[:n]
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
    # one thread (the default): with several, the sample depends on thread timing
    cands, _ctx = sample_candidates(task.mod, target, per_task, seed=seed, task_name=task.name)
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
        init_min_unmeasured=settings.init_min(settings.population), seed=seed,
        task_name=task.name, num_threads=2,
    )  # fmt: skip
    return _labelled(task, [f.mod for f in found], [f.trace for f in found], target, gpus)


CACHE_VERSION = "c1"  # bump when sampling, the fleet search or the latency model changes


def _cache_key(task: TuneTask, gpus: list[str], settings: CompileSettings, seed: int) -> str:
    """What a task's training candidates depend on: the task, the GPUs, the sampling and
    fleet-search settings, the seed and the simulator's code version (CACHE_VERSION)."""
    import tvm

    parts = {
        "v": CACHE_VERSION, "mod": tvm.ir.save_json(task.mod), "gpus": gpus,
        "train": settings.train_gpus, "seed": seed, "samples": settings.samples_per_task,
        "fleet": [settings.fleet_rounds, settings.fleet_per_round, settings.population,
                  settings.genetic_iters, settings.init_min(settings.population)],
    }  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def training_candidates(
    task: TuneTask, gpus: list[str], settings: CompileSettings, seed: int, cache: Path | None
) -> Sampled:
    """A task's random sample plus the training GPUs' tuning records, labelled on every GPU,
    kept in `cache` (traces as JSON, features, latencies): sampling and the fleet search are
    most of the section's preparation, and the same settings always give the same data."""
    import pickle

    from tvm import s_tir
    from tvm.s_tir.schedule import Trace

    from agent.ms_database import plain_json

    path = cache / f"{task.name}-{_cache_key(task, gpus, settings, seed)}.pkl" if cache else None
    if path is not None and path.exists():
        try:
            blob = pickle.loads(path.read_bytes())
            traces = []
            for js in blob["traces"]:
                sch = s_tir.Schedule(task.mod)
                Trace.apply_json_to_schedule(json.loads(js), sch)
                traces.append(sch.trace)
            return Sampled(task, traces, blob["features"], blob["latency"])
        except Exception:  # noqa: BLE001 - a damaged cache entry is sampled again
            path.unlink(missing_ok=True)
    part = sample_task(task, gpus, settings.samples_per_task, seed)
    if settings.fleet_rounds > 0:
        part = merged(part, fleet_tuning_records(task, gpus, settings.train_gpus, settings, seed))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = {
            "traces": [json.dumps(plain_json(t.as_json())) for t in part.traces],
            "features": part.features,
            "latency": part.latency,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(blob))
        tmp.replace(path)  # never half an entry
    return part


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
    """One store per GPU (DIR/<gpu>.sqlite) for bench/transfer/offline_transfer.py --data DIR."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from agent.devices.sim import cuda_target
    from agent.devices.sim.catalog import lookup
    from agent.ms_database import plain_json, workload_key_of
    from agent.store import Store
    from schemas import FAILED_RUN_SECS, TuningRecord

    out.mkdir(parents=True, exist_ok=True)
    (out / "profiles").mkdir(exist_ok=True)
    # what every GPU's store repeats: each task's key, arguments and traces, made once
    shared = []
    for s in sampled:
        args = [
            plain_json(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(s.task.mod["main"])
        ]
        traces = [plain_json(t.as_json()) for t in s.traces]
        shared.append((workload_key_of(s.task.mod), tvm.ir.save_json(s.task.mod), args, traces))
    for gpu in gpus:
        (out / "profiles" / f"{gpu}.json").write_text(profiles[gpu].model_dump_json(indent=1))
        path = out / f"{gpu}.sqlite"
        if path.exists():
            path.unlink()
        gpu_target = plain_json(cuda_target(lookup(gpu)).export())
        with Store(path) as store:
            for s, (wkey, mod_json, args, traces) in zip(sampled, shared, strict=True):
                store.add_workload(wkey, s.task.name, mod_json, None)
                records = []
                for trace, lat in zip(traces, s.latency[gpu], strict=True):
                    ok = bool(np.isfinite(lat))
                    records.append(
                        TuningRecord(
                            workload_key=wkey,
                            task_name=s.task.name,
                            trace=trace,
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
def pretrained_mlp_trainer(
    train: list[DeviceDataset], epochs: int, seed: int, cache: Path | None = None
) -> Any:
    """MetaSchedule's SegmentSumMLP trainer pre-trained on the training GPUs (164 features).

    `cache`: a file for the trained weights; when it exists they are loaded instead of
    training again (the same data, epochs and seed give the same model; the weights are
    all `train_full` leaves behind that the tuning uses: `train_incremental` makes its own
    optimizer). Its 50 validated epochs on 23 units are most of the section's preparation."""
    import torch
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.cost_model import mlp_model as mm

    from bench.transfer.offline_transfer import add_training_groups

    state = mm.State(
        model_config=mm.SegmentSumMLPConfig(input_dim=164),
        extractor=ms.feature_extractor.PerStoreFeature(),
    )
    add_training_groups(state, train)
    config = mm.TrainerConfig(num_epoch_full=epochs, num_epoch_incremental=5)
    trainer = mm.SegmentSumMLPTrainer(train_config=config, state=state)
    mm.logger.setLevel("WARNING")
    if cache is not None and cache.exists():
        try:
            state.model.load_state_dict(torch.load(cache, weights_only=True))
            state.untrained_size = 0
            return trainer
        except Exception:  # noqa: BLE001 - a damaged entry: train again
            cache.unlink(missing_ok=True)
    mm.random.seed(seed)
    with step_lr_accepts_verbose():
        trainer.train_full()
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        torch.save(state.model.state_dict(), tmp)
        tmp.replace(cache)
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


@dataclass
class Prepared:
    """What every method of the section starts from."""

    networks: dict[str, NetworkInfo]
    prep_seconds: dict[str, float]
    tasks: dict[str, list[TuneTask]]  # network -> its tuned tasks
    simoe: Any  # SiMoE trained on the training GPUs
    mlp: Any  # MetaSchedule's MLP trainer pre-trained on them
    hv: dict[str, np.ndarray]  # gpu -> hardware vector
    sampled: dict[str, list[Sampled]] = field(default_factory=dict)  # network -> per task
    train_gpus: list[str] = field(default_factory=list)


def transfer_k() -> int:
    """Fleet schedule transfer's k most similar units, as chosen on validation."""
    chosen = json.loads(
        (Path(__file__).resolve().parents[1] / "protocol_choices.json").read_text()
    )["chosen"]
    return int(chosen["schedule-transfer"]["k"])


def fleet_best(data: Prepared, network: str, gpu: str, n: int) -> list[list[Any]]:
    """Per task of `network`: the traces of the `n` fleet records with the best mean log
    latency over the k training GPUs most similar to `gpu` by hardware vector (fleet
    schedule transfer, TopHub-style; never `gpu`'s own latencies)."""
    from bench.transfer.baselines import ScheduleTransfer
    from simoe_model.task_data import DeviceDataset

    stub = [DeviceDataset(device=g, hardware_vector=data.hv[g], tasks=[]) for g in data.train_gpus]
    neighbours = ScheduleTransfer(stub, transfer_k()).neighbours_by_profile(data.hv[gpu])
    out = []
    for part in data.sampled[network]:
        secs = np.stack([part.latency[data.train_gpus[j]] for j in neighbours], axis=1)
        ok = np.isfinite(secs) & (secs > 0)
        logs = np.where(ok, np.log(np.where(ok, secs, 1.0)), 0.0).sum(1) / np.maximum(ok.sum(1), 1)
        logs = np.where(ok.any(1), logs, np.inf)  # failed on every neighbour: never picked
        order = [int(i) for i in np.argsort(logs, kind="stable") if np.isfinite(logs[i])]
        out.append([part.traces[i] for i in order[:n]])
    return out


def prepare(
    settings: CompileSettings,
    work_dir: Path,
    say: Say,
    max_tasks: int | None,
    fleet_stores: bool = True,
) -> Prepared:
    """Tasks of every network, their candidates labelled on the training GPUs, and the SiMoE
    model and MLP peer trained once on all of them (the federation's other nodes' data).
    `fleet_stores`: also write them as one store per GPU (the offline section's data)."""
    import torch

    from agent.devices import get_device
    from simoe_model.hardware import hardware_vector

    torch.set_num_threads(2)
    cpu0 = time.process_time()
    # the training GPUs' labels (the models' data, the fleet search's steer, schedule
    # transfer's tables) pass the protocol's reader: a test unit among them is refused
    UnitLabels().allow_all({g: "train" for g in settings.train_gpus})
    # every run labels the same GPUs (the sample's generic target depends on them), so a run
    # on one test unit and a run on three share their cached candidates
    labelled = [*TEST_UNITS_COMPILE, *settings.unseen_gpus]
    all_gpus = settings.train_gpus + [
        g for g in dict.fromkeys(labelled) if g not in settings.train_gpus
    ]
    t0 = time.perf_counter()
    say(f"profiling {len(all_gpus)} simulated GPUs (cached)")
    profiles = profile_vectors(all_gpus, work_dir / "profiles")
    hv = {g: hardware_vector(p) for g, p in profiles.items()}
    networks: dict[str, NetworkInfo] = {}
    prep_seconds = {"profiles": time.perf_counter() - t0}
    target = get_device(f"sim:{settings.unseen_gpus[0]}").target()
    net_tasks: dict[str, list[TuneTask]] = {}
    net_sampled: dict[str, list[Sampled]] = {}
    sampled: list[Sampled] = []
    data_keys: list[str] = []  # the training candidates' cache keys: what the models saw
    for network in settings.networks:
        t0 = time.perf_counter()
        say(f"{network}: extracting tasks")
        tasks, total_tasks, share = network_tasks(network, target, max_tasks, settings.flops_share)
        held_out = network in settings.held_out_networks
        records = (
            f" and {settings.fleet_rounds} x {settings.fleet_per_round} from the training "
            "GPUs' tuning"
            if settings.fleet_rounds > 0
            else ""
        )
        say(
            f"{network}: {len(tasks)} task(s), held out of all training data"
            if held_out
            else f"{network}: {len(tasks)} task(s): {settings.samples_per_task} random "
            f"candidates{records}, labelled on every GPU (cached)"
        )
        t1 = time.perf_counter()
        mine = []
        for i, t in enumerate([] if held_out else tasks):
            # the candidates are the protocol's fixed sample (bench/protocol.SAMPLE_SEED), on
            # every --seed: a seed changes the models' training and every method's search
            seed = SAMPLE_SEED + len(sampled) + i
            mine.append(training_candidates(t, all_gpus, settings, seed, work_dir / "samples"))
            data_keys.append(_cache_key(t, all_gpus, settings, seed))
        sampled += mine
        net_sampled[network] = mine
        net_tasks[network] = tasks
        networks[network] = NetworkInfo(
            tasks_total=total_tasks,
            tasks_tuned=[
                TunedTask(name=t.name, weight=t.weight, gflops=t.flops / 1e9) for t in tasks
            ],
            flops_share_tuned=share,
            candidates_per_task=[len(s.traces) for s in mine],
            seconds={"extract": t1 - t0, "sample_and_label": time.perf_counter() - t1},
        )
    if fleet_stores:
        t0 = time.perf_counter()
        write_fleet_stores(sampled, all_gpus, profiles, work_dir / "fleet" / "suite")
        prep_seconds["write_fleet_stores"] = time.perf_counter() - t0
    train = [device_dataset(g, hv[g], sampled) for g in settings.train_gpus]
    say(f"training SiMoE and the MLP peer on {len(train)} GPUs x {len(sampled)} tasks")
    t0 = time.perf_counter()
    simoe = train_simoe(train, settings)
    t1 = time.perf_counter()
    mlp_key = json.dumps([CACHE_VERSION, data_keys, settings.mlp_epochs, settings.seed])
    mlp_file = work_dir / "models" / f"mlp-{hashlib.sha256(mlp_key.encode()).hexdigest()[:16]}.pt"
    # trained only when a method of the run uses it (e.g. not for `--methods simoe-fast`)
    uses_mlp = settings.runs("mlp-fast") or settings.runs(
        f"ms-mlp-pretrained-{settings.tlm_budget}"
    )
    mlp = (
        pretrained_mlp_trainer(train, settings.mlp_epochs, settings.seed, mlp_file)
        if uses_mlp
        else None
    )
    prep_seconds["simoe_train_offline"] = t1 - t0
    prep_seconds["mlp_pretrain_offline"] = time.perf_counter() - t1
    prep_seconds["cpu_s"] = time.process_time() - cpu0  # all of the above, CPU
    return Prepared(
        networks, prep_seconds, net_tasks, simoe, mlp, hv, net_sampled, list(settings.train_gpus)
    )
