"""Offline transfer to unseen units under the protocol (bench/protocol.py), with seeds.

    python -m bench.protocol_transfer --select              # choose budgets on validation
    python -m bench.protocol_transfer --split validation    # report the validation split
    python -m bench.protocol_transfer --split test          # score the test split (once)

Every method ranks the same candidates: for each target unit, task and seed, the
candidates are shuffled; the first 64 are the pool a budget of N measurements takes its
first N from, the rest are the test set every method and budget is scored on (top-1).

Methods: simoe (gate over the training units' experts; adapted at N > 0), nearest-expert,
pooled (no hardware input), xgb (MetaSchedule's XGB on the target alone), mlp-finetune
(TVM's segment-sum MLP pre-trained on the fleet, fine-tuned), schedule-transfer (the k
most similar units' measured latencies, as TopHub), random. Ablations: hybrid,
analytical-only, empirical-only, no similarity prior (hardware encoder and gate trained
anew per seed on the same experts), with similarity fidelity and top-1 per unit.

Each method's training budget is chosen on validation by `--select` and kept in
bench/protocol_choices.json; `--split test` refuses to run without it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench import protocol  # noqa: E402
from bench.baselines import ScheduleTransfer, random_scorer  # noqa: E402
from bench.offline_transfer import (  # noqa: E402
    MetaScheduleMLP,
    Pooled,
    SiMoEFamily,
    Split,
    held_out_agreements,
    split_device,
    xgb_evaluate,
)
from simoe_model.metrics import top_k_score  # noqa: E402
from simoe_model.model import SiMoEConfig  # noqa: E402
from simoe_model.task_data import DeviceDataset  # noqa: E402
from simoe_model.train import predict  # noqa: E402

CHOICES = Path(__file__).with_name("protocol_choices.json")
# The grid --select searches, per method (small: 2 shared cores).
GRID: dict[str, list[dict[str, int]]] = {
    "simoe": [
        {"expert_epochs": 15, "shared_epochs": 12, "adapt_epochs": 10},
        {"expert_epochs": 40, "shared_epochs": 12, "adapt_epochs": 30},
    ],
    "pooled": [
        {"expert_epochs": 15, "adapt_epochs": 10},
        {"expert_epochs": 40, "adapt_epochs": 30},
    ],
    "mlp-finetune": [{"mlp_epochs": 10}, {"mlp_epochs": 50}],
    "schedule-transfer": [{"k": 1}, {"k": 3}, {"k": 5}],
}
METHODS = (
    "simoe",
    "nearest-expert",
    "pooled",
    "xgb",
    "mlp-finetune",
    "schedule-transfer",
    "random",
)
ABLATIONS: dict[str, dict[str, object]] = {
    "simoe-hybrid": {},
    "simoe-analytical-only": {"hardware_input": "analytical"},
    "simoe-empirical-only": {"hardware_input": "empirical"},
    "simoe-no-prior": {"use_similarity_prior": False},
}

TopOne = dict[str, dict[int, dict[str, list[float]]]]  # method -> budget -> unit -> per task


def top1_tasks(score, split: Split) -> list[float]:  # noqa: ANN001 - TaskData -> scores
    return [top_k_score(score(t), t.latencies, 1) for t in split.test]


def features_only(fn):  # noqa: ANN001, ANN201
    return lambda task: fn(task.features)


def namespace(seed: int, **hp: int) -> argparse.Namespace:
    defaults = {"expert_epochs": 15, "shared_epochs": 12, "adapt_epochs": 10, "mlp_epochs": 10}
    return argparse.Namespace(seed=seed, **{**defaults, **hp})


def run_method(
    method: str,
    hp: dict[str, int],
    train: list[DeviceDataset],
    splits: list[Split],
    seed: int,
    out: TopOne,
    family: SiMoEFamily | None = None,
) -> SiMoEFamily | None:
    """Score one method (all budgets, all target units) for one seed into `out`."""
    import torch

    torch.manual_seed(seed)
    record = out.setdefault(method, {})
    if method in ("simoe", "nearest-expert"):
        if family is None:
            family = SiMoEFamily(SiMoEConfig(), train, namespace(seed, **hp))
        for split in splits:
            for b in protocol.BUDGETS:
                mix, near = family.evaluate(family.base, split, b)
                key = "top1_tasks"
                out.setdefault("simoe", {}).setdefault(b, {})[split.device] = mix[key]
                out.setdefault("nearest-expert", {}).setdefault(b, {})[split.device] = near[key]
        return family
    if method == "pooled":
        pooled = Pooled(SiMoEConfig(), train, namespace(seed, **hp))
        for split in splits:
            for b in protocol.BUDGETS:
                record.setdefault(b, {})[split.device] = pooled.evaluate(split, b)["top1_tasks"]
    elif method == "xgb":
        for split in splits:
            for b in protocol.BUDGETS:
                record.setdefault(b, {})[split.device] = xgb_evaluate(split, b, seed)["top1_tasks"]
    elif method == "mlp-finetune":
        mlp = MetaScheduleMLP(train, namespace(seed, **hp))
        for split in splits:
            for b in protocol.BUDGETS:
                record.setdefault(b, {})[split.device] = mlp.evaluate(split, b)["top1_tasks"]
    elif method == "schedule-transfer":
        transfer = ScheduleTransfer(train, k=hp["k"])
        for split in splits:
            for b in protocol.BUDGETS:
                score = transfer.at_budget(
                    split.hardware_vector, split.budget(b).tasks if b else []
                )
                record.setdefault(b, {})[split.device] = top1_tasks(score, split)
    elif method == "random":
        for split in splits:
            for b in protocol.BUDGETS:
                record.setdefault(b, {})[split.device] = top1_tasks(random_scorer(seed + b), split)
    else:
        raise ValueError(f"unknown method {method}")
    return family


def run_ablations(
    family: SiMoEFamily,
    train: list[DeviceDataset],
    targets: list[DeviceDataset],
    splits: list[Split],
    seed: int,
    out: TopOne,
) -> dict[str, dict[str, float]]:
    """Each ablation at budget 0: top-1 per unit (into out) and similarity fidelity per unit."""
    from scipy.stats import spearmanr

    fleet = {d.device: d for d in [*train, *targets]}
    agreements = held_out_agreements(fleet, [d.device for d in targets], train)
    fidelity: dict[str, dict[str, float]] = {}
    for label, changes in ABLATIONS.items():
        model = family.variant(train, seed=seed, **changes)
        for split in splits:
            score = features_only(lambda f, m=model, hv=split.hardware_vector: predict(m, f, hv))
            out.setdefault(label, {}).setdefault(0, {})[split.device] = top1_tasks(score, split)
        per_unit = {}
        for unit, agree in agreements.items():
            names = sorted(agree)
            sims = [
                model.similarity(fleet[unit].hardware_vector, model.expert(n).hardware.numpy())
                for n in names
            ]
            rho = spearmanr([agree[n] for n in names], sims).statistic
            per_unit[unit] = float(rho) if np.isfinite(rho) else 0.0
        fidelity[label] = per_unit
    return fidelity


def load_split(split: str, labels: protocol.UnitLabels) -> tuple[list, list]:
    """Training units' labels (purpose train) and the split's target units' labels."""
    train = labels.load_many(protocol.units("train"), "train")
    purpose = "test" if split == "test" else "select"
    targets = labels.load_many(protocol.units(split), purpose)  # type: ignore[arg-type]
    return train, targets


def evaluate(
    split: str,
    hps: dict[str, dict[str, int]],
    seeds: list[int],
    methods: list[str],
    ablations: bool,
    labels: protocol.UnitLabels,
    train_tasks_per_unit: int | None = None,
) -> dict:
    train, targets = load_split(split, labels)
    if train_tasks_per_unit:  # scaled down: the same candidates (smallest ids) on every unit
        for ds in train:
            ds.tasks = [
                t.subset(
                    sorted(range(len(t)), key=lambda i, t=t: (t.candidate_ids or [])[i])[
                        :train_tasks_per_unit
                    ]
                )
                for t in ds.tasks
            ]
    per_task: dict[int, TopOne] = {}
    fidelity: dict[int, dict] = {}
    seconds: dict[str, float] = {}
    for seed in seeds:
        splits = [split_device(d, seed) for d in targets]
        out: TopOne = {}
        family = None
        for method in methods:
            if method == "nearest-expert" and "simoe" in methods:
                continue  # scored with simoe (same experts)
            t0 = time.perf_counter()
            family = run_method(method, hps.get(method, {}), train, splits, seed, out, family)
            seconds[f"{method}/{seed}"] = time.perf_counter() - t0
            print(f"seed {seed} {method}: {time.perf_counter() - t0:.0f} s", flush=True)
        if ablations:
            if family is None:
                family = SiMoEFamily(SiMoEConfig(), train, namespace(seed, **hps.get("simoe", {})))
            fidelity[seed] = run_ablations(family, train, targets, splits, seed, out)
        per_task[seed] = out
    return {
        "split": split,
        "units": [d.device for d in targets],
        "seeds": seeds,
        "hyperparameters": hps,
        "per_task_top1": per_task,
        "fidelity": fidelity,
        "seconds": seconds,
    }


def select(
    labels: protocol.UnitLabels,
    seeds: list[int],
    train_per_task: int | None = None,
    methods: list[str] | None = None,
) -> dict[str, dict[str, int]]:
    """Each method's budget: the grid point with the best mean top-1 on validation.

    Merged into CHOICES (methods may be selected by separate, parallel runs).
    """
    previous = json.loads(CHOICES.read_text()) if CHOICES.exists() else {}
    chosen: dict[str, dict[str, int]] = dict(previous.get("chosen", {}))
    scores: dict[str, list[tuple[dict[str, int], float]]] = {
        m: [(hp, s) for hp, s in v] for m, v in previous.get("grid_scores", {}).items()
    }
    for method, grid in GRID.items():
        if methods is not None and method not in methods:
            continue
        scores[method] = []
        for hp in grid:
            result = evaluate(
                "validation", {method: hp}, seeds, [method], False, labels, train_per_task
            )
            values = [
                v
                for seed in result["per_task_top1"].values()
                for by_unit in seed[method].values()
                for tasks in by_unit.values()
                for v in tasks
            ]
            scores.setdefault(method, []).append((hp, float(np.mean(values))))
            print(f"select {method} {hp}: {np.mean(values):.4f}", flush=True)
        chosen[method] = max(scores[method], key=lambda kv: kv[1])[0]
    if "simoe" in chosen:
        chosen["nearest-expert"] = chosen["simoe"]  # the same experts, the same fine-tuning
    # parallel runs select other methods: merge with what they wrote meanwhile
    latest = json.loads(CHOICES.read_text()) if CHOICES.exists() else {}
    mine = {m for m in GRID if methods is None or m in methods}
    merged_chosen = {**latest.get("chosen", {}), **{m: chosen[m] for m in chosen if m in mine}}
    if "simoe" in mine and "simoe" in chosen:
        merged_chosen["nearest-expert"] = chosen["simoe"]
    merged_scores = {
        **latest.get("grid_scores", {}),
        **{m: [[hp, s] for hp, s in v] for m, v in scores.items() if m in mine},
    }
    CHOICES.write_text(
        json.dumps(
            {
                "chosen_on": "validation",
                "seeds": seeds,
                "train_per_task": train_per_task,
                "chosen": merged_chosen,
                "grid_scores": merged_scores,
            },
            indent=1,
        )
    )
    return merged_chosen


# -- report ---------------------------------------------------------------------------------
def seed_mean(result: dict, method: str, budget: int) -> dict[str, np.ndarray] | None:
    """Per unit: each task's top-1 averaged over the seeds (None if the method did not run)."""
    runs = [
        r.get(method, {}).get(budget, r.get(method, {}).get(str(budget)))  # JSON: str keys
        for r in result["per_task_top1"].values()
    ]
    runs = [r for r in runs if r is not None]  # a method may have fewer seeds (see seeds_of)
    if not runs:
        return None
    return {u: np.mean([np.asarray(r[u]) for r in runs], axis=0) for u in runs[0]}


def seeds_of(result: dict, method: str) -> list[str]:
    return [s for s, r in result["per_task_top1"].items() if method in r]


def paired_interval(ours: dict, theirs: dict, seed: int = 0) -> tuple[float, float, float]:
    """Mean per-task difference and its 95 % paired bootstrap interval (tasks resampled)."""
    diff = np.concatenate([ours[u] - theirs[u] for u in sorted(ours)])
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (4000, len(diff)))].mean(1)
    return float(diff.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def same_model_pairs(units: list[str]) -> list[tuple[str, str]]:
    from agent.devices.sim.catalog import resolve

    model: dict[str, list[str]] = {}
    for u in units:
        spec = resolve(protocol.device_of(u.removeprefix("sim:")).removeprefix("sim:"))
        model.setdefault(spec.model or spec.key, []).append(u)
    return [(v[0], v[1]) for v in model.values() if len(v) >= 2]


def markdown(result: dict) -> str:
    split = result["split"]
    lines = [
        f"# Offline transfer, {split} split (SIMULATED units)",
        "",
        f"Command: `{result['command']}`  ",
        f"Split shown: **{split}** ({len(result['units'])} units: "
        f"{', '.join(u.removeprefix('sim:') for u in result['units'])}); seeds "
        f"{result['seeds']}; protocol: bench/protocol.py; hyperparameters "
        f"({result['hyperparameters_source']}): `{json.dumps(result['hyperparameters'])}`.  ",
        f"Load average while it ran: {result.get('load', '?')}.",
        "",
        "Top-1 score on the held-out candidates (mean over units, tasks and seeds):",
        "",
        "| method | seeds | " + " | ".join(f"budget {b}" for b in protocol.BUDGETS) + " |",
        "|---|---|" + "---|" * len(protocol.BUDGETS),
    ]
    methods = list(dict.fromkeys(m for r in result["per_task_top1"].values() for m in r))
    for m in methods:
        cells = []
        for b in protocol.BUDGETS:
            got = seed_mean(result, m, b)
            cells.append(
                "" if got is None else f"{np.mean(np.concatenate(list(got.values()))):.3f}"
            )
        lines.append(f"| {m} | {len(seeds_of(result, m))} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "SiMoE minus each baseline: per-task top-1 (averaged over the seeds), mean and 95 % "
        "paired bootstrap interval over the units' tasks:",
        "",
        "| baseline | budget | difference | 95% interval | interval above 0 |",
        "|---|---|---|---|---|",
    ]
    for m in methods:
        if m == "simoe":
            continue
        for b in protocol.BUDGETS:
            ours, theirs = seed_mean(result, "simoe", b), seed_mean(result, m, b)
            if ours is None or theirs is None:
                continue
            mean, lo, hi = paired_interval(ours, theirs)
            lines.append(
                f"| {m} | {b} | {mean:+.3f} | [{lo:+.3f}, {hi:+.3f}] | "
                f"{'yes' if lo > 0 else 'no'} |"
            )
    if result["fidelity"]:
        lines += probes_matter(result)
    return "\n".join(lines) + "\n"


def probes_matter(result: dict) -> list[str]:
    fid = {
        label: {
            u: np.mean([result["fidelity"][s][label][u] for s in result["fidelity"]])
            for u in result["fidelity"][next(iter(result["fidelity"]))][label]
        }
        for label in ABLATIONS
    }
    lines = [
        "",
        "Ablations at budget 0: hybrid against both one-sided hardware representations "
        "(SiMoE minus the variant, per-task paired bootstrap):",
        "",
        "| variant | top-1 | fidelity (mean over units) | hybrid minus variant | 95% interval |",
        "|---|---|---|---|---|",
    ]
    hybrid = seed_mean(result, "simoe-hybrid", 0)
    for label in ABLATIONS:
        got = seed_mean(result, label, 0)
        mean, lo, hi = paired_interval(hybrid, got)
        lines.append(
            f"| {label} | {np.mean(np.concatenate(list(got.values()))):.3f} | "
            f"{np.mean(list(fid[label].values())):.3f} | {mean:+.3f} | [{lo:+.3f}, {hi:+.3f}] |"
        )
    lines += [
        "",
        "Probes matter: units of one model (same spec sheet, different unit state). "
        "Fidelity = Spearman over the training units between cos(z) to the unit and the "
        "measured rank agreement with it; top-1 at budget 0; seeds averaged.",
        "",
        "| unit | fidelity hybrid | fidelity analytical-only | top-1 hybrid "
        "| top-1 analytical-only |",
        "|---|---|---|---|---|",
    ]
    an = seed_mean(result, "simoe-analytical-only", 0)
    for a, b in same_model_pairs(result["units"]):
        for u in (a, b):
            lines.append(
                f"| {u.removeprefix('sim:')} | {fid['simoe-hybrid'][u]:.3f} | "
                f"{fid['simoe-analytical-only'][u]:.3f} | {hybrid[u].mean():.3f} | "
                f"{an[u].mean():.3f} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["validation", "test"], default="validation")
    parser.add_argument("--select", action="store_true", help="choose budgets on validation")
    parser.add_argument("--seeds", default=",".join(str(s) for s in protocol.SEEDS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--no-ablations", action="store_true")
    parser.add_argument("--data", type=Path, default=protocol.DATA_DIR)
    parser.add_argument(
        "--train-per-task",
        type=int,
        default=protocol.TRAIN_PER_TASK,
        help="scale down: this many candidates per task of each training unit (0: all)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--override", default="", help='JSON {"method": {...}}: budgets not from validation'
    )
    parser.add_argument("--tag", default="", help="suffix of the report files (parallel runs)")
    parser.add_argument("--merge", type=Path, nargs="+", help="merge parallel runs' JSON, exit")
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument(
        "--side-by-side", action="store_true", help="write the validation|test table, exit"
    )
    args = parser.parse_args()
    if args.side_by_side:
        pair = [
            json.loads((args.out / f"protocol_transfer_{s}.json").read_text())
            for s in ("validation", "test")
        ]
        (args.out / "protocol_transfer.md").write_text(side_by_side(*pair))
        print(side_by_side(*pair))
        return
    if args.merge:
        result = merge(args.merge)
        stem = f"protocol_transfer_{result['split']}"
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=float))
        (args.out / f"{stem}.md").write_text(markdown(result))
        print(markdown(result))
        return
    import os

    import torch

    torch.set_num_threads(args.threads)
    if not (args.data / f"{protocol.TRAIN_UNITS[0]}.sqlite").exists():
        parser.exit(
            2,
            f"error: no protocol fleet dataset in {args.data}: run "
            "`python -m bench.protocol --build-data`\n",
        )
    labels = protocol.UnitLabels(args.data)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.select:
        select(labels, seeds, args.train_per_task, args.methods.split(","))
        print(CHOICES.read_text())
        return
    chosen = json.loads(CHOICES.read_text())["chosen"] if CHOICES.exists() else {}
    overridden = json.loads(args.override) if args.override else {}
    chosen = {**chosen, **overridden}
    if "simoe" in overridden:
        chosen["nearest-expert"] = overridden["simoe"]
    needed = [m for m in args.methods.split(",") if m in {*GRID, "nearest-expert"}]
    if not args.no_ablations:
        needed.append("simoe")
    missing = [m for m in needed if m not in chosen]
    if missing and args.split == "test":
        parser.exit(2, f"error: no budget chosen on validation for {missing}: run --select\n")
    hps = {**{m: g[0] for m, g in GRID.items() if m in missing}, **chosen}
    source = (
        "chosen on validation, " + CHOICES.name
        if not missing
        else f"chosen on validation where chosen; first grid point for {missing}"
    )
    if overridden:
        source += f"; NOT chosen on validation (set by --override): {sorted(overridden)}"
    started = time.perf_counter()
    result = evaluate(
        args.split,
        hps,
        seeds,
        args.methods.split(","),
        not args.no_ablations,
        labels,
        args.train_per_task,
    )
    result.update(
        command="python -m bench.protocol_transfer " + " ".join(sys.argv[1:]),
        hyperparameters_source=source,
        load=" ".join(f"{x:.1f}" for x in os.getloadavg()),
        total_seconds=time.perf_counter() - started,
        label_reads=sorted({f"{u}:{p}" for u, p in labels.reads}),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"protocol_transfer_{args.split}" + (f"_{args.tag}" if args.tag else "")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=float))
    (args.out / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))


def merge(paths: list[Path]) -> dict:
    """One result from parallel runs (disjoint methods or seeds) on the same split and units."""
    runs = [json.loads(p.read_text()) for p in paths]
    first = runs[0]
    for other in runs[1:]:
        if (other["split"], other["units"]) != (first["split"], first["units"]):
            raise SystemExit(f"cannot merge: different split or units in {paths}")
    merged = {**first, "command": " && ".join(r["command"] for r in runs)}
    seeds = sorted({int(s) for r in runs for s in r["per_task_top1"]})
    merged["seeds"] = seeds
    merged["per_task_top1"] = {
        str(seed): {m: v for r in runs for m, v in r["per_task_top1"].get(str(seed), {}).items()}
        for seed in seeds
    }
    merged["fidelity"] = {str(k): v for r in runs for k, v in r["fidelity"].items()}
    merged["seconds"] = {k: v for r in runs for k, v in r["seconds"].items()}
    merged["load"] = " / ".join(r["load"] for r in runs)
    merged["label_reads"] = sorted({x for r in runs for x in r["label_reads"]})
    return merged


def side_by_side(validation: dict, test: dict) -> str:
    """Top-1 per method and budget on the validation and the test split, next to each other."""
    lines = [
        "# Offline transfer: validation and test columns (SIMULATED units)",
        "",
        f"Validation: `{validation['command']}`  ",
        f"Test: `{test['command']}`  ",
        f"Seeds: validation {validation['seeds']}, test {test['seeds']}. Mean top-1 over "
        "units, tasks and seeds. Full reports: protocol_transfer_validation.md, "
        "protocol_transfer_test.md.",
        "",
        "| method | " + " | ".join(f"{b} val | {b} test" for b in protocol.BUDGETS) + " |",
        "|---|" + "---|---|" * len(protocol.BUDGETS),
    ]
    methods = list(dict.fromkeys(m for r in test["per_task_top1"].values() for m in r))
    for m in methods:
        cells = []
        for b in protocol.BUDGETS:
            for result in (validation, test):
                got = seed_mean(result, m, b)
                cells.append(
                    "" if got is None else f"{np.mean(np.concatenate(list(got.values()))):.3f}"
                )
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
