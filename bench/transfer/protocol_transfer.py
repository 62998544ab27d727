"""Offline transfer to unseen units under the protocol (bench/protocol.py), with seeds.

    python -m bench.transfer.protocol_transfer --select              # choose budgets on validation
    python -m bench.transfer.protocol_transfer --split validation    # report the validation split
    python -m bench.transfer.protocol_transfer --split test          # score the test split (once)
    python -m bench.transfer.protocol_transfer --select-sharpness    # the online gate's sharpness,
                                                            # on validation (issue 23)

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

simoe-online (issue 23, item 1): SiMoE at budgets 4 and 16 (protocol.ONLINE_GATE_BUDGETS)
with its measurements moving the gate (simoe_model.online_gate); `--select-sharpness`
scores every sharpness of protocol.ONLINE_GATE_SHARPNESS on validation and applies
protocol.ONLINE_GATE_RULE (bench/protocol_online_gate.json, docs/results/
protocol_online_gate_validation.md), with how often the top pick moves from budget 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench import protocol
from bench.reporting import add_render_option, read_report, render
from bench.transfer.offline_transfer import SiMoEFamily, Split, held_out_agreements, split_device
from bench.transfer.online_gate_report import online_gate_markdown
from bench.transfer.protocol_diagnostics import unit_diagnostics
from bench.transfer.protocol_methods import (
    METHODS,
    TopOne,
    namespace,
    online_gate_scores,
    run_ablations,
    run_method,
)
from bench.transfer.protocol_report import markdown, side_by_side
from bench.transfer.protocol_result import (
    OnlineGateReport,
    OnlineGateScores,
    TransferResult,
    UnitGate,
    write_keeping_earlier,
)
from simoe_model.model import SiMoEConfig
from simoe_model.task_data import DeviceDataset

CHOICES = Path(__file__).resolve().parents[1] / "protocol_choices.json"
ONLINE_GATE_CHOICE = Path(__file__).resolve().parents[1] / "protocol_online_gate.json"
# The grid --select searches, per method (small: 2 shared cores).
GRID: dict[str, list[dict[str, int]]] = {
    # s20: each grid widened at the edge its s19 choice sat on (SiMoE low; pooled, MLP high)
    "simoe": [
        {"expert_epochs": 4, "shared_epochs": 12, "adapt_epochs": 10},
        {"expert_epochs": 8, "shared_epochs": 12, "adapt_epochs": 10},
        {"expert_epochs": 15, "shared_epochs": 12, "adapt_epochs": 10},
        # 40/12/30 (the costliest point, last on fleet b52deee2's validation) left out on fleet
        # da10b0fa (issue 24): its 3 seeds would not fit 2 shared cores before the test split
    ],
    "pooled": [
        {"expert_epochs": 15, "adapt_epochs": 10},
        {"expert_epochs": 40, "adapt_epochs": 30},
        {"expert_epochs": 80, "adapt_epochs": 60},
    ],
    "mlp-finetune": [{"mlp_epochs": 10}, {"mlp_epochs": 50}, {"mlp_epochs": 100}],
    "schedule-transfer": [{"k": 1}, {"k": 3}, {"k": 5}],
}


def select_sharpness(
    labels: protocol.UnitLabels, seeds: list[int], train_per_task: int | None
) -> OnlineGateReport:
    """Every sharpness of protocol.ONLINE_GATE_SHARPNESS on the validation units, seeds,
    budgets 4 and 16; the choice by protocol.ONLINE_GATE_RULE. Also: per unit and seed,
    whether SiMoE's top pick at each budget differs from its budget-0 pick (on any task;
    and on how many unit-tasks), with and without the online gate."""
    import torch

    choices = json.loads(CHOICES.read_text())
    hp = choices["chosen"]["simoe"]
    train, targets = load_split("validation", labels)
    keep_per_task(train, train_per_task)
    grid = list(protocol.ONLINE_GATE_SHARPNESS)
    runs: dict[int, dict[str, dict[int, OnlineGateScores]]] = {}
    for seed in seeds:
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        family = SiMoEFamily(SiMoEConfig(), train, namespace(seed, **hp))
        per_seed: dict[str, dict[int, OnlineGateScores]] = {}
        for split in (split_device(d, seed) for d in targets):
            per_seed[split.device] = {
                b: online_gate_scores(family.base, split, b, grid, family.args.adapt_epochs)
                for b in protocol.ONLINE_GATE_BUDGETS
            }
        runs[seed] = per_seed
        print(f"seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)

    def mean_top1(s: float, key: str = "top1") -> float:
        return float(
            np.mean(
                [
                    v
                    for by_unit in runs.values()
                    for by_budget in by_unit.values()
                    for got in by_budget.values()
                    for v in getattr(got, key)[s]
                ]
            )
        )

    means = {s: mean_top1(s) for s in grid}
    chosen = grid[0]
    for s in grid[1:]:  # ONLINE_GATE_RULE: a larger value only if higher by more than 0.001
        if means[s] > means[chosen] + 0.001:
            chosen = s
    return OnlineGateReport(
        split="validation",
        simulated=True,
        units=[d.device for d in targets],
        seeds=seeds,
        budgets=list(protocol.ONLINE_GATE_BUDGETS),
        grid=grid,
        rule=protocol.ONLINE_GATE_RULE,
        simoe_hyperparameters=hp,
        train_per_task=train_per_task,
        **fleet_check(labels.data_dir, [*protocol.units("train"), *protocol.units("validation")]),
        mean_top1={s: means[s] for s in grid},
        mean_top1_nofinetune={s: mean_top1(s, "top1_nofinetune") for s in grid},
        chosen=chosen,
        runs=runs,
    )


def fleet_check(data_dir: Path, names: list[str]) -> dict[str, str]:
    """Which fleet this run read: the recorded fleet's digest
    (docs/results/protocol_fleet_hash.json) when each unit read has that fleet's per-task
    hashes, otherwise "unrecorded:" and the digest of the units read; and how many matched.
    (The digest of a subset of units names no fleet, so it is never reported as one.)"""
    built = protocol.fleet_hashes(data_dir, names)
    report = json.loads(protocol.HASHES.read_text()) if protocol.HASHES.exists() else {}
    recorded = report.get("build", {}).get("units", {})
    same = [u for u in names if recorded.get(u) == built["units"][u]]
    fleet = (
        report["build"]["digest"] if len(same) == len(names) else f"unrecorded:{built['digest']}"
    )
    return {"fleet": fleet, "units_equal_to_recorded_fleet": f"{len(same)}/{len(names)}"}


def load_split(split: str, labels: protocol.UnitLabels) -> tuple[list, list]:
    """Training units' labels (purpose train) and the split's target units' labels."""
    train = labels.load_many(protocol.units("train"), "train")
    purpose = "test" if split == "test" else "select"
    targets = labels.load_many(protocol.units(split), purpose)  # type: ignore[arg-type]
    return train, targets


def keep_per_task(train: list[DeviceDataset], per_task: int | None) -> None:
    """Scale the training units down to `per_task` candidates per task (the same candidates,
    smallest ids, on every unit); None or 0 keeps them all (the protocol's default)."""
    if not per_task:
        return
    for ds in train:
        n = per_task
        ds.tasks = [
            t.subset(sorted(range(len(t)), key=lambda i, t=t: (t.candidate_ids or [])[i])[:n])
            for t in ds.tasks
        ]


def transfer_coverage(train: list[DeviceDataset], splits: list[Split]) -> dict[str, float]:
    """Per target unit: the fraction of its test candidates that some training unit measured,
    i.e. that schedule transfer can rank at all (SiMoE and the models rank every one)."""
    measured = {
        (t.task_name, c)
        for ds in train
        for t in ds.tasks
        for c, lat in zip(t.candidate_ids or [], t.latencies, strict=True)
        if np.isfinite(lat)
    }
    out = {}
    for split in splits:
        ids = [(t.task_name, c) for t in split.test for c in t.candidate_ids or []]
        out[split.device] = sum(k in measured for k in ids) / len(ids) if ids else 0.0
    return out


def evaluate(
    split: str,
    hps: dict[str, dict[str, int]],
    seeds: list[int],
    methods: list[str],
    ablations: bool,
    labels: protocol.UnitLabels,
    train_tasks_per_unit: int | None = None,
) -> TransferResult:
    train, targets = load_split(split, labels)
    keep_per_task(train, train_tasks_per_unit)
    per_task: dict[int, TopOne] = {}
    fidelity: dict[int, dict[str, dict[str, float]]] = {}
    gates: dict[int, dict[str, UnitGate]] = {}
    seconds: dict[str, float] = {}
    agreements = None
    if "simoe" in methods:  # measured rank agreement target ~ training unit (diagnostics)
        fleet = {d.device: d for d in [*train, *targets]}
        agreements = held_out_agreements(fleet, [d.device for d in targets], train)
    same_budget = hps.get("nearest-expert", hps.get("simoe")) == hps.get("simoe")
    coverage: dict[int, dict[str, float]] = {}
    for seed in seeds:
        splits = [split_device(d, seed) for d in targets]
        coverage[seed] = transfer_coverage(train, splits)
        out: TopOne = {}
        family = None
        for method in methods:
            if method == "nearest-expert" and "simoe" in methods and same_budget:
                continue  # scored with simoe (same experts, same budget)
            t0 = time.perf_counter()
            family = run_method(method, hps.get(method, {}), train, splits, seed, out, family)
            seconds[f"{method}/{seed}"] = time.perf_counter() - t0
            print(f"seed {seed} {method}: {time.perf_counter() - t0:.0f} s", flush=True)
        if family is not None and agreements is not None:
            gates[seed] = {
                sp.device: unit_diagnostics(family.base, sp, agreements[sp.device]) for sp in splits
            }
        if ablations:
            if family is None:
                family = SiMoEFamily(SiMoEConfig(), train, namespace(seed, **hps.get("simoe", {})))
            fidelity[seed] = run_ablations(family, train, targets, splits, seed, out)
        per_task[seed] = out
    return TransferResult(
        split=split,
        units=[d.device for d in targets],
        seeds=seeds,
        hyperparameters=hps,
        per_task_top1=per_task,
        fidelity=fidelity,
        gates=gates,
        seconds=seconds,
        train_per_task=train_tasks_per_unit or "all",
        transfer_coverage=coverage,
    )


def _mean_top1(result: TransferResult, method: str) -> tuple[float, list[float]]:
    """Mean top-1 over seeds, budgets, units and tasks, and the mean of each seed."""
    per_seed = [
        float(np.mean([v for by_unit in r[method].values() for t in by_unit.values() for v in t]))
        for r in result.per_task_top1.values()
    ]
    return float(np.mean(per_seed)), per_seed


def select(
    labels: protocol.UnitLabels,
    seeds: list[int],
    train_per_task: int | None = None,
    methods: list[str] | None = None,
) -> TransferResult | None:
    """Each method's budget: the grid point with the best mean top-1 on validation (over the
    seeds, budgets, units and tasks). Nearest expert is scored in SiMoE's runs (the same
    experts) and takes its own best point. XGB and random have no training budget and are
    scored once. Returns the validation result of every method at its chosen point (the
    report's validation columns; None: no method selected); the choices go to CHOICES
    (merged with methods not selected in this run)."""
    fleet = protocol.fleet_hashes(labels.data_dir)["digest"]
    chosen: dict[str, dict[str, int]] = {}  # this run's; merged into CHOICES at the end
    scores: dict[str, list] = {}
    wanted = [m for m in METHODS if methods is None or m in methods]
    kept: dict[str, TransferResult] = {}  # method -> its chosen point's validation result

    def run(method: str, hp: dict[str, int]) -> TransferResult:
        return evaluate("validation", {method: hp}, seeds, [method], False, labels, train_per_task)

    for method, grid in GRID.items():
        if method not in wanted:
            continue
        tried = [(hp, run(method, hp)) for hp in grid]
        names = (method, "nearest-expert") if method == "simoe" else (method,)
        for name in names:
            scores[name] = []
            for hp, result in tried:
                mean, per_seed = _mean_top1(result, name)
                scores[name].append((hp, mean, per_seed))
                print(f"select {name} {hp}: {mean:.4f} (seeds {per_seed})", flush=True)
            best = max(range(len(tried)), key=lambda i, n=name: scores[n][i][1])
            chosen[name] = tried[best][0]
            kept[name] = tried[best][1]
    for method in ("xgb", "random"):
        if method in wanted:
            kept[method] = run(method, {})
    save_choices(CHOICES, fleet, seeds, train_per_task, chosen, scores)
    if not kept:
        return None
    return next(iter(kept.values())).model_copy(
        update={
            "hyperparameters": {m: chosen.get(m, {}) for m in kept},
            "per_task_top1": {
                seed: {m: r.per_task_top1[seed][m] for m, r in kept.items()} for seed in seeds
            },
            "gates": kept["simoe"].gates if "simoe" in kept else {},
            "seconds": {k: v for r in kept.values() for k, v in r.seconds.items()},
            "grid_scores": {m: v for m, v in scores.items() if m in kept},
        }
    )


def save_choices(
    path: Path,
    fleet: str,
    seeds: list[int],
    train_per_task: int | None,
    chosen: dict[str, dict[str, int]],
    scores: dict[str, list],
) -> None:
    """Merge one selection run's choices into `path`. Method parts run in parallel each
    select their own methods, so the read-modify-write holds a lock and the file is replaced
    whole (os.replace): no part overwrites another's choices, no reader sees half a file.
    Choices made on another fleet or with another training scale are never kept."""
    import os

    from filelock import FileLock

    with FileLock(f"{path}.lock"):
        previous = json.loads(path.read_text()) if path.exists() else {}
        made_on = (previous.get("fleet"), previous.get("train_per_task") or 0)
        if made_on != (fleet, train_per_task or 0):  # 0 and None: every candidate kept
            previous = {}
        merged = {
            "chosen_on": "validation",
            "fleet": fleet,
            "seeds": seeds,
            "train_per_task": train_per_task,
            "rule": "the grid point with the best mean top-1 over seeds, budgets "
            f"{list(protocol.BUDGETS)}, validation units and tasks",
            "chosen": {**previous.get("chosen", {}), **chosen},
            "grid_scores": {**previous.get("grid_scores", {}), **scores},
        }
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(merged, indent=1))
        os.replace(partial, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["validation", "test"], default="validation")
    parser.add_argument("--select", action="store_true", help="choose budgets on validation")
    parser.add_argument(
        "--select-sharpness",
        action="store_true",
        help="choose the online gate's sharpness on validation (protocol.ONLINE_GATE_RULE)",
    )
    parser.add_argument("--seeds", default=",".join(str(s) for s in protocol.SEEDS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--no-ablations", action="store_true")
    parser.add_argument("--data", type=Path, default=protocol.DATA_DIR)
    parser.add_argument(
        "--train-per-task",
        type=int,
        default=protocol.TRAIN_PER_TASK,
        help="scale down: this many candidates per task of each training unit (0: all, the "
        "protocol's; fewer leaves schedule transfer unable to rank some test candidates)",
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
    add_render_option(parser)
    args = parser.parse_args()
    if args.render:  # a split's report, or the online gate's (protocol_online_gate_*.json)
        if args.render.name.startswith("protocol_online_gate"):
            render(args.render, OnlineGateReport, online_gate_markdown)
        else:
            render(args.render, TransferResult, markdown)
        return
    if args.side_by_side:
        pair = [
            read_report(args.out / f"protocol_transfer_{s}.json", TransferResult)
            for s in ("validation", "test")
        ]
        (args.out / "protocol_transfer.md").write_text(side_by_side(*pair))
        print(side_by_side(*pair))
        return
    if args.merge:
        result = merge(args.merge)
        write_result(result, args.out, f"protocol_transfer_{result.split}")
        print(markdown(result))
        return
    import torch

    torch.set_num_threads(args.threads)
    protocol.require_fleet(args.data)
    labels = protocol.UnitLabels(args.data)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.select_sharpness:
        started = time.perf_counter()
        gate = select_sharpness(labels, seeds, args.train_per_task).model_copy(
            update=run_facts(labels, started)
        )
        args.out.mkdir(parents=True, exist_ok=True)
        stem = "protocol_online_gate_validation" + (f"_{args.tag}" if args.tag else "")
        gate = write_gate_report(gate, args.out, stem)
        if not args.tag:
            keep = ("split", "seeds", "budgets", "grid", "rule", "fleet", "mean_top1", "chosen")
            keep += ("units_equal_to_recorded_fleet",)
            dumped = gate.model_dump()
            ONLINE_GATE_CHOICE.write_text(json.dumps({k: dumped[k] for k in keep}, indent=1))
        print(online_gate_markdown(gate))
        return
    if args.select:
        started = time.perf_counter()
        selected = select(labels, seeds, args.train_per_task, args.methods.split(","))
        if selected is None:
            parser.exit(2, f"error: no method of {args.methods} has a budget to select\n")
        source = "chosen on validation by this run, " + CHOICES.name
        facts = {**run_facts(labels, started), "hyperparameters_source": source}
        result = selected.model_copy(update=facts)  # the JSON's key order: the model's
        stem = "protocol_transfer_validation" + (f"_{args.tag}" if args.tag else "")
        write_result(result, args.out, stem)
        print(markdown(result))
        return
    choices = json.loads(CHOICES.read_text()) if CHOICES.exists() else {}
    if args.split == "test" and choices.get("fleet") != protocol.fleet_hashes(args.data)["digest"]:
        parser.exit(2, f"error: {CHOICES.name} was chosen on another fleet: run --select\n")
    if args.split == "test" and (choices.get("train_per_task") or 0) != (args.train_per_task or 0):
        parser.exit(
            2,
            f"error: {CHOICES.name} was chosen with {choices.get('train_per_task') or 'all'} "
            f"training candidates per task, this run keeps {args.train_per_task or 'all'}: "
            "run --select\n",
        )
    chosen = choices.get("chosen", {})
    if ONLINE_GATE_CHOICE.exists() and "simoe" in chosen:  # SiMoE's budget + the sharpness
        gate = json.loads(ONLINE_GATE_CHOICE.read_text())["chosen"]
        chosen["simoe-online"] = {**chosen["simoe"], "sharpness": gate}
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
    facts = {**run_facts(labels, started), "hyperparameters_source": source}
    result = result.model_copy(update=facts)
    stem = f"protocol_transfer_{args.split}" + (f"_{args.tag}" if args.tag else "")
    write_result(result, args.out, stem)
    print(markdown(result))


def run_facts(labels: protocol.UnitLabels, started: float) -> dict[str, object]:
    """What every report says about the run that made it: its command, the load while it
    ran, its wall time and the labels it read."""
    import os

    return {
        "command": "python -m bench.transfer.protocol_transfer " + " ".join(sys.argv[1:]),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "total_seconds": time.perf_counter() - started,
        "label_reads": sorted({f"{u}:{p}" for u, p in labels.reads}),
    }


def write_result(result: TransferResult, out: Path, stem: str) -> None:
    """OUT/STEM.json and .md. A report adds runs and never drops one: the run the file held
    before (if another) is kept in the new one's `earlier_runs`, which the Markdown lists."""
    write_keeping_earlier(result, out, stem, markdown, lambda r: (r.command, r.per_task_top1))


def write_gate_report(gate: OnlineGateReport, out: Path, stem: str) -> OnlineGateReport:
    """OUT/STEM.json and .md for the online gate's selection, keeping the run the file held
    before (another fleet's, say) in `earlier_runs`, as write_result does for a split."""
    return write_keeping_earlier(
        gate, out, stem, online_gate_markdown, lambda g: (g.command, g.fleet, g.runs)
    )


def merge(paths: list[Path]) -> TransferResult:
    """One result from parallel runs (disjoint methods or seeds) on the same split and units."""
    runs = [read_report(p, TransferResult) for p in paths]
    first = runs[0]
    for other in runs[1:]:
        if (other.split, other.units) != (first.split, first.units):
            raise SystemExit(f"cannot merge: different split or units in {paths}")
    seeds = sorted({s for r in runs for s in r.per_task_top1})
    earlier = {e.command: e for r in runs for e in r.earlier_runs}
    merged = {
        "command": " && ".join(r.command for r in runs),
        "seeds": seeds,
        "per_task_top1": {
            seed: {m: v for r in runs for m, v in r.per_task_top1.get(seed, {}).items()}
            for seed in seeds
        },
        "fidelity": {k: v for r in runs for k, v in r.fidelity.items()},
        "seconds": {k: v for r in runs for k, v in r.seconds.items()},
        "load": " / ".join(str(r.load) for r in runs),
        "label_reads": sorted({x for r in runs for x in r.label_reads}),
        "hyperparameters": {k: v for r in runs for k, v in r.hyperparameters.items()},
        "grid_scores": {  # a run's grid counts only for the methods it ran
            k: v
            for r in runs
            for k, v in r.grid_scores.items()
            if any(k in by_method for by_method in r.per_task_top1.values())
        },
        "gates": {k: v for r in runs for k, v in r.gates.items()},
        "total_seconds": sum(r.total_seconds or 0.0 for r in runs),
        "earlier_runs": list(earlier.values()),  # the parts' earlier runs, once each
        "transfer_coverage": {k: v for r in runs for k, v in r.transfer_coverage.items()},
    }
    return first.model_copy(update=merged)


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
