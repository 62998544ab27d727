"""Offline transfer to unseen GPUs: SiMoE against the baselines, on one fixed split.

    python -m bench.transfer.offline_transfer --data DIR   # the fleet dataset (DIR/<gpu>.sqlite)
    python -m bench.transfer.offline_transfer --synthetic  # synthetic fleet, for development

The held-out GPUs are left out of all training; labels are read through the protocol's
reader (bench/protocol.py `UnitLabels`), which refuses a test unit of the protocol in the
training set (`--train` names the training GPUs). For each held-out GPU and each
task, the candidates are shuffled once (fixed seed): the first 64 (half of a task
with fewer than 72) are the pool a budget of N measurements takes its first N from;
the rest are the test set that every method and every budget is scored on (top-1,
top-5, pairwise accuracy, average peak score; simoe_model.metrics).

Methods (budget N = measurements per task on the held-out GPU):
- xgb: MetaSchedule's XGBModel (its own PackSum objective and config), trained on
  the held-out GPU's N measurements only; below its 100-sample warm-up it scores at
  random, as it does inside MetaSchedule.
- mlp-finetune: MetaSchedule's SegmentSumMLP and its trainer (train_full on all
  training GPUs, grouped by GPU and task; train_incremental on the N measurements,
  TenSet-style; shimmed for torch 2.13's StepLR and its 1-candidate-batch squeeze). Inputs are
  the 164 PerStoreFeature columns the stores keep (its default 172 adds workload
  features the stores do not have).
- pooled: one SiMoE program encoder + one head on all training GPUs, no hardware input;
  fine-tuned on the N measurements.
- nearest-expert: the expert of the most similar training GPU (cosine in z), no gate;
  a copy of it fine-tuned alone on the N measurements.
- simoe: the gate's mixture over the training GPUs' experts (zero-shot); with N > 0,
  plus the target's own expert started from the nearest one and trained through the
  mixture (`train.adapt`).
Ablations of SiMoE: analytical-only, empirical-only hardware vectors; no similarity prior.

Writes DIR_OUT/offline_transfer.json, DIR_OUT/offline_transfer.md and figures.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.reporting import add_render_option, render  # noqa: E402
from bench.transfer.offline_transfer_report import (  # noqa: E402
    AblationSeeds,
    MetricRow,
    OfflineTransferReport,
    TrainSeconds,
    markdown,
    merge,
    write_report,
)
from simoe_model import synthetic  # noqa: E402
from simoe_model.metrics import task_metrics, top_k_score  # noqa: E402
from simoe_model.model import SiMoE, SiMoEConfig, save_model  # noqa: E402
from simoe_model.task_data import DeviceDataset, TaskData  # noqa: E402
from simoe_model.train import (  # noqa: E402
    adapt,
    nearest_expert,
    predict,
    predict_expert,
    train_experts,
    train_shared,
)
from simoe_model.tvm_compat import step_lr_accepts_verbose  # noqa: E402

POOL = 64
DEFAULT_HELD_OUT = ["k80", "titanxp", "2080ti", "a30", "4090", "h100-pcie", "xavier"]


@dataclass
class Split:
    """One held-out GPU: the measurement pool and the test set of each task."""

    device: str
    hardware_vector: np.ndarray
    pool: list[TaskData]
    test: list[TaskData]

    def budget(self, n: int) -> DeviceDataset:
        tasks = [t.subset(range(min(n, len(t)))) for t in self.pool]
        return DeviceDataset(self.device, self.hardware_vector, [t for t in tasks if len(t) >= 2])


def split_device(ds: DeviceDataset, seed: int) -> Split:
    """Shuffle each task once: a pool of 64 (half of a task too small for that), the rest test."""
    rng = np.random.default_rng(seed)
    pool, test = [], []
    for task in ds.tasks:
        if len(task) < 8:
            continue
        size = POOL if len(task) >= POOL + 8 else len(task) // 2
        order = rng.permutation(len(task))
        pool.append(task.subset(order[:size]))
        test.append(task.subset(order[size:]))
    return Split(ds.device, ds.hardware_vector, pool, test)


# -- data ------------------------------------------------------------------------------
def load_fleet(
    directories: list[Path], held: list[str], train: list[str] | None = None
) -> tuple[dict[str, DeviceDataset], list[str]]:
    """One DeviceDataset per GPU (its stores in all directories) through the protocol's label
    reader (bench/protocol.py `UnitLabels`), and the training GPUs: `train`, or every other
    GPU of the directories. A test unit of the protocol in the training set is refused
    (LeakageError) before any label is read; held-out GPUs are read for scoring only."""
    from bench import protocol

    labels = protocol.UnitLabels(directories[0], more_dirs=tuple(directories[1:]))
    present = labels.available()
    train = [g for g in present if g not in held] if train is None else list(train)
    purposes: dict[str, protocol.Purpose] = {g: "train" for g in train}
    for g in held:
        purposes[g] = "test" if protocol.split_of(g) == "test" else "select"
    return labels.load_set(purposes), train  # a refused set reads nothing


def synthetic_fleet(n_devices: int, n_tasks: int, per_task: int) -> dict[str, DeviceDataset]:
    devices = synthetic.make_devices(n_devices, seed=0)
    tasks = synthetic.make_tasks(n_tasks, per_task, seed=0)
    return {d.name: synthetic.device_dataset(d, tasks, seed=i) for i, d in enumerate(devices)}


# -- methods -----------------------------------------------------------------------------
def scores_table(predict_fn, split: Split) -> dict:  # noqa: ANN001
    """Mean metrics over the split's test tasks, plus each task's top-1 (key 'top1_tasks')."""
    scored = [(predict_fn(t.features), t.latencies) for t in split.test]
    return {**task_metrics(scored), "top1_tasks": [top_k_score(s, lat, 1) for s, lat in scored]}


class SiMoEFamily:
    """SiMoE and the methods that share its trained experts (nearest expert) or code (pooled)."""

    def __init__(self, config: SiMoEConfig, train: list[DeviceDataset], args: argparse.Namespace):
        self.args = args
        self.base = SiMoE(config)
        t0 = time.perf_counter()
        train_experts(
            self.base, [(d.device, d) for d in train], epochs=args.expert_epochs, seed=args.seed
        )
        self.expert_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        train_shared(self.base, train, epochs=args.shared_epochs, seed=args.seed)
        self.shared_seconds = time.perf_counter() - t0

    def variant(self, train: list[DeviceDataset], seed: int, **changes: object) -> SiMoE:
        """Same experts and program encoder, a fresh hardware encoder and gate trained anew."""
        import torch

        torch.manual_seed(seed)  # the fresh encoder's and gate's initial weights
        model = SiMoE(self.base.config.model_copy(update=changes))
        for name in self.base.expert_names:
            model.ensure_expert(name, self.base.expert(name).hardware)
        state = {
            k: v
            for k, v in self.base.state_dict().items()
            if k.startswith(("program_encoder", "experts"))
        }
        model.load_state_dict(state, strict=False)
        train_shared(model, train, epochs=self.args.shared_epochs, seed=seed)
        return model

    def evaluate(self, model: SiMoE, split: Split, budget: int) -> tuple[dict, dict]:
        """(mixture, nearest expert alone) at a budget."""
        hv = split.hardware_vector
        if budget == 0:
            near = nearest_expert(model, hv)
            return (
                scores_table(lambda f: predict(model, f, hv), split),
                scores_table(lambda f: predict_expert(model, near, f), split),
            )
        adapted = copy.deepcopy(model)
        few = split.budget(budget)
        adapt(adapted, split.device, few, epochs=self.args.adapt_epochs)
        # the baseline: the nearest expert alone, fine-tuned on the same measurements
        alone = copy.deepcopy(model)
        near = nearest_expert(alone, split.hardware_vector)
        own = alone.ensure_expert(split.device, split.hardware_vector)
        own.head.load_state_dict(alone.expert(near).head.state_dict())
        train_experts(
            alone,
            [(split.device, few)],
            epochs=self.args.adapt_epochs,
            seed=self.args.seed,
            lr=3e-3,
            train_encoder=False,
            tasks_per_step=2,
        )
        return (
            scores_table(lambda f: predict(adapted, f, hv), split),
            scores_table(lambda f: predict_expert(alone, split.device, f), split),
        )


class Pooled:
    """One encoder and one head on every training GPU's data; no hardware input."""

    def __init__(self, config: SiMoEConfig, train: list[DeviceDataset], args: argparse.Namespace):
        self.args = args
        self.model = SiMoE(config.model_copy(update={"hardware_input": "none"}))
        train_experts(
            self.model, [("pooled", d) for d in train], epochs=args.expert_epochs, seed=args.seed
        )

    def evaluate(self, split: Split, budget: int) -> dict:
        model = self.model
        if budget:
            model = copy.deepcopy(self.model)
            few = split.budget(budget)
            train_experts(
                model,
                [("pooled", few)],
                epochs=self.args.adapt_epochs,
                seed=self.args.seed,
                lr=3e-3,
                train_encoder=False,
                tasks_per_step=2,
            )
        return scores_table(lambda f: predict_expert(model, "pooled", f), split)


def xgb_evaluate(split: Split, budget: int, seed: int) -> dict:
    """MetaSchedule's XGBModel on the held-out GPU's own measurements only."""
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig, XGBModel

    model = XGBModel(config=XGBConfig(nthread=1, seed=seed), verbose_eval=0)
    few = split.budget(budget)
    n = few.num_candidates
    rng = np.random.default_rng(seed)
    if n < model.num_warmup_samples:  # MetaSchedule scores at random until then
        return scores_table(lambda f: rng.uniform(size=len(f)), split)
    xs = [x for t in few.tasks for x in t.features]
    ys = np.concatenate([t.latencies.min() / t.latencies for t in few.tasks]).astype("float32")
    model._train(xs=xs, ys=ys)  # noqa: SLF001 - the model's own training on given features
    return scores_table(lambda f: model._predict(xs=list(f)), split)  # noqa: SLF001


def add_training_groups(state: object, train: list[DeviceDataset]) -> None:
    """Every training GPU's tasks into an MLP trainer's state, one group per GPU and task.

    (Here, not in bench/compile/compile_data.py: that module reads the protocol's validated
    choices when imported, and the protocol's selection must run before they exist.)"""
    for ds in train:
        for task in ds.tasks:
            state.add_to_group(  # type: ignore[attr-defined]
                list(task.features),
                task.latencies.astype("float64"),
                f"{ds.device}/{task.task_name}",
            )


def _FlatSegmentSumMLP(base: type, config: object) -> object:  # noqa: N802
    """TVM's SegmentSumMLP squeezes a batch of one candidate to a 0-d tensor, which its own
    loss then cannot index; the same model with the output kept 1-d."""

    class FlatSegmentSumMLP(base):  # type: ignore[misc,valid-type]
        def forward(self, segment_sizes: object, features: object) -> object:
            return super().forward(segment_sizes, features).reshape(-1)

    return FlatSegmentSumMLP(**config.to_dict())  # type: ignore[attr-defined]


class MetaScheduleMLP:
    """MetaSchedule's SegmentSumMLP trainer: pre-train on all training GPUs, then fine-tune."""

    def __init__(self, train: list[DeviceDataset], args: argparse.Namespace):
        from tvm.s_tir.meta_schedule.cost_model import mlp_model as mm

        self.mm = mm
        model_config = mm.SegmentSumMLPConfig(input_dim=164)
        state = mm.State(model_config=model_config)
        state.model = _FlatSegmentSumMLP(mm.SegmentSumMLP, model_config)
        add_training_groups(state, train)
        config = mm.TrainerConfig(num_epoch_full=args.mlp_epochs, num_epoch_incremental=5)
        self.trainer = mm.SegmentSumMLPTrainer(train_config=config, state=state)
        mm.logger.setLevel("WARNING")
        mm.random.seed(args.seed)
        with step_lr_accepts_verbose():
            self.trainer.train_full()

    def evaluate(self, split: Split, budget: int) -> dict:
        trainer = self.trainer
        if budget:
            trainer = copy.deepcopy(self.trainer)
            for task in split.budget(budget).tasks:
                trainer.train_incremental(list(task.features), task.latencies.astype("float64"))
        # trained on best/latency, so its output is already a score (higher = faster)
        return scores_table(lambda f: trainer.predict_incremental(list(f)), split)


# -- diagnostics ------------------------------------------------------------------------------
def held_out_agreements(
    fleet: dict[str, DeviceDataset], held: list[str], train: list[DeviceDataset]
) -> dict[str, dict[str, float]]:
    """Measured rank agreement (mean Spearman over shared candidates) of each held-out GPU
    with each training GPU: what the hardware encoder's similarity should reproduce."""
    from simoe_model.train import _agreements

    out: dict[str, dict[str, float]] = {}
    for gpu in held:
        pairs, values = _agreements([fleet[gpu], *train])
        out[gpu] = {
            train[j - 1].device: float(v)
            for (i, j), v in zip(pairs.tolist(), values.tolist(), strict=True)
            if i == 0
        }
    return out


def similarity_fidelity(
    model: SiMoE, fleet: dict[str, DeviceDataset], agreements: dict[str, dict[str, float]]
) -> float:
    """Spearman correlation, over the training GPUs, between the model's similarity to a
    held-out GPU (cos in z) and their measured rank agreement; mean over held-out GPUs."""
    from scipy.stats import spearmanr

    rhos = []
    for gpu, agree in agreements.items():
        names = sorted(agree)
        sims = [
            model.similarity(fleet[gpu].hardware_vector, model.expert(n).hardware.numpy())
            for n in names
        ]
        rhos.append(spearmanr([agree[n] for n in names], sims).statistic)
    return float(np.mean(rhos))


def reference_scores(
    fleet: dict[str, DeviceDataset], splits: list[Split], train: list[DeviceDataset], seed: int
) -> dict[str, float]:
    """Two references for the top-1 score on the held-out test sets (not methods).

    - noise-ceiling: ranking by the recorded latency, scored against a fresh draw of the
      simulator's run-to-run noise (uniform +-noise per run, mean of 3 runs): what a perfect
      predictor of the noiseless latency would get (expected over 20 draws).
    - best-training-gpu-oracle: ranking by the measured latencies of the one training GPU
      that does best on that held-out GPU (chosen with the test labels: an upper reference
      for transfer from a single similar GPU, which no method can pick).
    """
    from agent.devices.sim.catalog import lookup
    from agent.devices.sim.latency import GpuParams

    rng = np.random.default_rng(seed)
    ceiling, oracle = [], []
    for split in splits:
        noise = float(GpuParams.from_specs([lookup(split.device.split(":", 1)[1])]).noise[0, 0])
        for _ in range(20):
            for t in split.test:
                drawn = t.latencies * (1 + noise * (2 * rng.random((len(t), 3)) - 1)).mean(1)
                ceiling.append(top_k_score(-t.latencies, drawn, 1))
        best = 0.0
        for other in train:
            table = {
                (t.task_name, c): lat
                for t in other.tasks
                for c, lat in zip(t.candidate_ids or [], t.latencies, strict=True)
            }
            score = np.mean(
                [
                    top_k_score(
                        np.array([-table.get((t.task_name, c), np.inf) for c in t.candidate_ids]),
                        t.latencies,
                        1,
                    )
                    for t in split.test
                ]
            )
            best = max(best, float(score))
        oracle.append(best)
    return {
        "noise-ceiling": float(np.mean(ceiling)),
        "best-training-gpu-oracle": float(np.mean(oracle)),
    }


# -- the run --------------------------------------------------------------------------------
def mean_rows(rows: list[dict]) -> dict[str, float]:
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, nargs="+", help="fleet dataset directories (DIR/<gpu>.sqlite)"
    )
    parser.add_argument("--synthetic", action="store_true", help="use the synthetic fleet")
    parser.add_argument(
        "--synthetic-size", default="24,28,160", help="devices,tasks,candidates per task"
    )
    parser.add_argument("--held-out", default=",".join(DEFAULT_HELD_OUT))
    parser.add_argument(
        "--train",
        default="",
        help="the training GPUs, comma-separated (default: every other GPU of --data); a "
        "test unit of bench/protocol.py is refused in it",
    )
    parser.add_argument("--budgets", default="0,16,64")
    parser.add_argument("--expert-epochs", type=int, default=15)
    parser.add_argument("--shared-epochs", type=int, default=15)
    parser.add_argument("--adapt-epochs", type=int, default=30)
    parser.add_argument("--mlp-epochs", type=int, default=10)
    parser.add_argument("--methods", default="simoe,nearest-expert,pooled,xgb,mlp-finetune")
    parser.add_argument("--ablations", action="store_true", help="also run the ablations")
    parser.add_argument("--ablation-budgets", default="0")
    parser.add_argument(
        "--ablation-seeds",
        type=int,
        default=1,
        help="train each ablation's hardware encoder and gate with this many seeds (mean reported)",
    )
    parser.add_argument(
        "--references",
        action="store_true",
        help="also score two references: the simulator's noise ceiling and the best training "
        "GPU's own measured latencies (an oracle no method has)",
    )
    parser.add_argument("--tag", default="", help="suffix of the output files")
    parser.add_argument(
        "--save-model",
        type=Path,
        help="save the SiMoE trained on the training GPUs (e.g. as a node's federation/model.pt)",
    )
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="merge reports of parallel runs, then exit"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    add_render_option(parser)
    args = parser.parse_args(argv)

    if args.render:
        render(args.render, OfflineTransferReport, markdown)
        return
    if args.merge:
        merge(args.merge, args.out, args.tag or "offline_transfer")
        return

    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    if args.synthetic and args.references:
        parser.error("--references needs the simulated fleet (--data), not --synthetic")
    if args.synthetic:
        n_dev, n_tasks, per_task = (int(x) for x in args.synthetic_size.split(","))
        fleet = synthetic_fleet(n_dev, n_tasks, per_task)
        held = [f"gpu{i:02d}" for i in range(0, n_dev, 4)]
    elif args.data:
        from bench.protocol import LeakageError

        held = [g for g in args.held_out.split(",") if g]
        wanted = [g for g in args.train.split(",") if g] if args.train else None
        try:
            fleet, train_names = load_fleet(args.data, held, wanted)
        except (LeakageError, FileNotFoundError) as exc:
            parser.error(f"{exc} (--train names the training GPUs)")
    else:
        parser.error("give --data DIR or --synthetic")
    missing = [g for g in held if g not in fleet]
    if missing:
        parser.error(f"held-out GPUs not in the fleet: {missing}")
    if args.synthetic:
        train_names = [name for name in fleet if name not in held]
    train = [fleet[name] for name in train_names]
    splits = [split_device(fleet[g], args.seed) for g in held]
    budgets = [int(b) for b in args.budgets.split(",")]
    methods = args.methods.split(",")
    ablation_budgets = [int(b) for b in args.ablation_budgets.split(",")]
    print(f"train GPUs {len(train)}, held out {held}, tasks/GPU {len(splits[0].test)}", flush=True)

    config = SiMoEConfig()
    results: dict[str, dict[int, MetricRow]] = {}
    per_gpu: dict[str, dict[int, dict[str, MetricRow]]] = {}
    per_task: dict[str, dict[int, dict[str, list[float]]]] = {}
    timings: dict[str, float] = {}
    ablation_seeds: dict[str, AblationSeeds] = {}

    def record(method: str, budget: int, gpu: str, row: dict) -> None:
        row = dict(row)
        per_task.setdefault(method, {}).setdefault(budget, {})[gpu] = row.pop("top1_tasks")
        per_gpu.setdefault(method, {}).setdefault(budget, {})[gpu] = MetricRow(**row)

    family = None
    if "simoe" in methods or args.ablations:
        t0 = time.perf_counter()
        torch.manual_seed(args.seed)  # the model's initial weights: a run repeats with its seed
        family = SiMoEFamily(config, train, args)
        timings["simoe-train"] = time.perf_counter() - t0
        print(f"simoe trained in {timings['simoe-train']:.0f} s", flush=True)
        if args.save_model:
            save_model(family.base, args.save_model)
    if "simoe" in methods:
        for split in splits:
            for b in budgets:
                mix, near = family.evaluate(family.base, split, b)
                record("simoe", b, split.device, mix)
                record("nearest-expert", b, split.device, near)
            print(
                f"simoe {split.device}: {per_gpu['simoe'][0][split.device].model_dump()}",
                flush=True,
            )
    if "pooled" in methods:
        t0 = time.perf_counter()
        torch.manual_seed(args.seed)
        pooled = Pooled(config, train, args)
        for split in splits:
            for b in budgets:
                record("pooled", b, split.device, pooled.evaluate(split, b))
        timings["pooled"] = time.perf_counter() - t0
    if "xgb" in methods:
        t0 = time.perf_counter()
        for split in splits:
            for b in budgets:
                record("xgb", b, split.device, xgb_evaluate(split, b, args.seed))
        timings["xgb"] = time.perf_counter() - t0
    if "mlp-finetune" in methods:
        t0 = time.perf_counter()
        mlp = MetaScheduleMLP(train, args)
        for split in splits:
            for b in budgets:
                record("mlp-finetune", b, split.device, mlp.evaluate(split, b))
        timings["mlp-finetune"] = time.perf_counter() - t0
    if args.ablations:
        agreements = held_out_agreements(fleet, held, train)
        for label, changes in [
            ("simoe-hybrid", {}),
            ("simoe-analytical-only", {"hardware_input": "analytical"}),
            ("simoe-empirical-only", {"hardware_input": "empirical"}),
            ("simoe-no-prior", {"use_similarity_prior": False}),
        ]:
            t0 = time.perf_counter()
            runs: dict[int, list[dict[str, dict]]] = {b: [] for b in ablation_budgets}
            fidelity = []
            for k in range(args.ablation_seeds):
                model = family.variant(train, seed=args.seed + k, **changes)
                fidelity.append(similarity_fidelity(model, fleet, agreements))
                for b in ablation_budgets:
                    runs[b].append({s.device: family.evaluate(model, s, b)[0] for s in splits})
            for b, seeds in runs.items():
                for split in splits:
                    rows = [r[split.device] for r in seeds]
                    row = mean_rows(
                        [{k: v for k, v in r.items() if k != "top1_tasks"} for r in rows]
                    )
                    row["top1_tasks"] = np.mean([r["top1_tasks"] for r in rows], 0).tolist()
                    record(label, b, split.device, row)
            ablation_seeds[label] = AblationSeeds(
                top1_per_seed=[
                    float(np.mean([row["top1"] for row in r.values()]))
                    for r in runs[ablation_budgets[0]]
                ],
                similarity_fidelity_per_seed=fidelity,
            )
            timings[label] = time.perf_counter() - t0
            print(f"{label}: {ablation_seeds[label].model_dump()}", flush=True)
    references: dict[str, float] = {}
    if args.references:
        references = reference_scores(fleet, splits, train, args.seed)

    for method, by_budget in per_gpu.items():
        results[method] = {
            b: MetricRow(**mean_rows([r.model_dump() for r in rows.values()]))
            for b, rows in by_budget.items()
        }
    report = OfflineTransferReport(
        command=" ".join(["python", "-m", "bench.transfer.offline_transfer", *sys.argv[1:]]),
        data="synthetic" if args.synthetic else "fleet dataset (simulated GPUs)",
        held_out=held,
        train_gpus=[d.device for d in train],
        tasks_per_gpu=len(splits[0].test),
        test_candidates_per_task=float(np.mean([len(t) for t in splits[0].test])),
        budgets=budgets,
        results=results,
        per_gpu=per_gpu,
        per_task_top1=per_task,
        ablation_seeds=ablation_seeds,
        references=references,
        seconds={**timings, "total": time.perf_counter() - started},
        simoe_train_seconds=TrainSeconds(
            experts=family.expert_seconds if family else None,
            shared=family.shared_seconds if family else None,
        ),
    )
    stem = "offline_transfer_synthetic" if args.synthetic else "offline_transfer"
    write_report(report, args.out, stem + (f"_{args.tag}" if args.tag else ""))


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
