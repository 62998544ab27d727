"""SiMoE with opt-in schedule sharing against best-schedule transfer (issue 23, Must-show 1).

    python -m bench.transfer.protocol_sharing --split validation   # the grid; SHARING_RULE picks
    python -m bench.transfer.protocol_sharing --split test         # once, the chosen point only
    python -m bench.transfer.protocol_sharing --render docs/results/protocol_sharing_test.json

On the protocol's fleet (bench/protocol.py; SIMULATED units), at protocol.SHARING_BUDGETS:

- simoe: exactly protocol_transfer's `simoe` (the same model, adapted on the same
  measurements, SiMoE's training budget from bench/protocol_choices.json);
- simoe-sharing: the same scores, standardized per task, plus share_weight x the gate-weighted
  shares: every training unit shares its protocol.SHARE_TOP best candidates per task by its own
  measured latency (training labels only; `training_shares` refuses any other unit), weighted
  1 / (1 + rank / 4) as the real-GPU variant (simoe_model.kernel_model.shared_matrix);
- schedule-transfer: the k most similar training units' measured latencies (TopHub-style), k
  from bench/protocol_choices.json.

`--split validation` scores every point of SHARE_WEIGHTS x SHARE_SHARPNESS and keeps the one
protocol.SHARING_RULE picks in bench/protocol_sharing.json; `--split test` refuses to run
without that choice and scores the chosen point only.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from bench import protocol
from bench.reporting import add_render_option, render
from bench.transfer.baselines import ScheduleTransfer
from bench.transfer.offline_transfer import SiMoEFamily, Split, split_device
from bench.transfer.protocol_methods import namespace, top1_tasks
from bench.transfer.protocol_report import clusters_of, minus_rows, seed_mean
from bench.transfer.protocol_result import Scores, write_keeping_earlier
from simoe_model.kernel_model import shared_matrix
from simoe_model.metrics import top_k_score
from simoe_model.model import SiMoEConfig
from simoe_model.online_gate import expert_table, measured_evidence, standardize
from simoe_model.task_data import DeviceDataset, TaskData
from simoe_model.train import adapt, predict

CHOICE = Path(__file__).resolve().parents[1] / "protocol_sharing.json"
SHARING = "simoe-sharing"
# a diagnostic, not a protocol method: the gate-weighted shares alone, without SiMoE's scores
# (ties in the test set's shuffled order), so a report shows what SiMoE adds inside sharing
VOTE = "shares-vote"

# task name -> a unit's shared candidate ids, best first
Shares = dict[str, list[str]]


def point_label(share_weight: float, share_sharpness: float) -> str:
    """A grid point's method name in a validation report."""
    return f"{SHARING}[w={share_weight:g},s={share_sharpness:g}]"


def training_shares(train: list[DeviceDataset], top: int = protocol.SHARE_TOP) -> dict[str, Shares]:
    """Per training unit (its device name): per task, its `top` best candidates by its own
    measured latency, best first. Only the protocol's training units share: any other unit's
    labels here are refused (LeakageError), whatever purpose they were read for."""
    out: dict[str, Shares] = {}
    for ds in train:
        if protocol.split_of(ds.device.removeprefix("sim:")) != "train":
            raise protocol.LeakageError(f"shares built from {ds.device}, not a training unit")
        out[ds.device] = {}
        for task in ds.tasks:
            ids = task.candidate_ids or []
            ok = [i for i in range(len(ids)) if np.isfinite(task.latencies[i])]
            best = sorted(ok, key=lambda i, t=task: (t.latencies[i], ids[i]))[:top]
            out[ds.device][task.task_name] = [ids[i] for i in best]
    return out


def shared_of(test: TaskData, names: list[str], shares: dict[str, Shares]) -> np.ndarray:
    """[n, K]: 1 / (1 + rank / 4) where training unit k shared the test candidate, 0 elsewhere."""
    best = [shares.get(n, {}).get(test.task_name, []) for n in names]
    return shared_matrix(test.candidate_ids or [], best)


def sharing_scores(
    mixture: np.ndarray, shared: np.ndarray, weights: np.ndarray, share_weight: float
) -> np.ndarray:
    """SiMoE's scores of one task's candidates [n], standardized over them, plus share_weight
    x the gate-weighted shares (`weights` [n, K] over the experts of `shared`'s columns)."""
    z = standardize(np.asarray(mixture, dtype=np.float64)[:, None])[:, 0]
    return z + share_weight * (np.asarray(weights) * np.asarray(shared)).sum(1)


def share_weights(
    prior: np.ndarray,
    measured_scores: np.ndarray | None,
    times: np.ndarray | None,
    sharpness: float,
) -> np.ndarray:
    """The gate's prior [n, K] over the training experts, times the measured evidence of the
    task's measurements (none, or sharpness 0: the prior), normalized per row."""
    if measured_scores is None or times is None or sharpness <= 0:
        return prior
    weights = prior * measured_evidence(measured_scores, times, sharpness)[None, :]
    return weights / weights.sum(1, keepdims=True)


class SeedFacts(BaseModel):
    """What sharing reached on one target unit for one seed, per budget (means over tasks)."""

    model_config = ConfigDict(extra="forbid")

    shared_per_task: float  # test candidates some training unit shared
    test_per_task: float  # test candidates
    pick_shared: dict[str, dict[int, float]]  # method -> budget -> tasks whose top pick is shared


def score_seed(
    family: SiMoEFamily,
    train: list[DeviceDataset],
    splits: list[Split],
    points: list[tuple[float, float]],
    k: int,
    budgets: tuple[int, ...],
) -> tuple[Scores, dict[str, SeedFacts]]:
    """simoe, simoe-sharing at every point of `points` (share_weight, share_sharpness) and
    schedule transfer, at every budget on every target unit, for one trained family."""
    names = [d.device for d in train]
    shares = training_shares(train)
    transfer = ScheduleTransfer(train, k=k)
    base = family.base
    labels = {p: point_label(*p) for p in points}
    scores: Scores = {}
    facts: dict[str, SeedFacts] = {}

    def put(method: str, b: int, unit: str, value: float) -> None:
        scores.setdefault(method, {}).setdefault(b, {}).setdefault(unit, []).append(value)

    for split in splits:
        hv, unit = split.hardware_vector, split.device
        picks: dict[str, dict[int, list[float]]] = {}
        shared_all = [shared_of(t, names, shares) for t in split.test]
        shared_counts = [int((m.sum(1) > 0).sum()) for m in shared_all]
        priors = [expert_table(base, t.features, hv, names)[2] for t in split.test]  # any budget
        for b in budgets:
            model = base
            few = split.budget(b)
            if b > 0:  # as SiMoEFamily.evaluate and online_gate_scores adapt: `simoe` exactly
                model = copy.deepcopy(base)
                adapt(model, unit, few, epochs=family.args.adapt_epochs)
            measured = {t.task_name: t for t in few.tasks} if b > 0 else {}
            for test, shared, prior in zip(split.test, shared_all, priors, strict=True):
                mix = predict(model, test.features, hv)
                put("simoe", b, unit, top_k_score(mix, test.latencies, 1))
                vote = sharing_scores(np.zeros(len(mix)), shared, prior, 1.0)
                put(VOTE, b, unit, top_k_score(vote, test.latencies, 1))
                is_shared = shared.sum(1) > 0
                picks.setdefault("simoe", {}).setdefault(b, []).append(
                    float(is_shared[int(np.argmax(mix))])
                )
                got = measured.get(test.task_name)
                m_scores = expert_table(base, got.features, hv, names)[1] if got else None
                for sharpness in sorted({s for _, s in points}):
                    w = share_weights(prior, m_scores, got.latencies if got else None, sharpness)
                    for weight in sorted({w_ for w_, s in points if s == sharpness}):
                        label = labels[(weight, sharpness)]
                        score = sharing_scores(mix, shared, w, weight)
                        put(label, b, unit, top_k_score(score, test.latencies, 1))
                        top = np.argsort(-score, kind="stable")[0]
                        picks.setdefault(label, {}).setdefault(b, []).append(float(is_shared[top]))
            score = transfer.at_budget(hv, few.tasks if b else [])
            scores.setdefault("schedule-transfer", {}).setdefault(b, {})[unit] = top1_tasks(
                score, split
            )
        facts[unit] = SeedFacts(
            shared_per_task=float(np.mean(shared_counts)),
            test_per_task=float(np.mean([len(t) for t in split.test])),
            pick_shared={
                m: {b: float(np.mean(v)) for b, v in by.items()} for m, by in picks.items()
            },
        )
    return scores, facts


class SharingReport(BaseModel):
    """One split's run: every method at every budget on every target unit and seed."""

    model_config = ConfigDict(extra="forbid")

    split: str
    simulated: bool = True
    units: list[str]
    seeds: list[int]
    budgets: list[int]
    select_budgets: list[int]
    share_top: int
    points: list[tuple[float, float]]  # (share_weight, share_sharpness) scored
    rule: str
    simoe_hyperparameters: dict[str, int | float]
    transfer_k: int
    fleet: str
    units_equal_to_recorded_fleet: str
    per_task_top1: dict[int, Scores]  # seed -> method -> budget -> unit -> per task
    facts: dict[int, dict[str, SeedFacts]]  # seed -> unit -> sharing's reach
    grid_means: dict[str, float] = {}  # validation: point label -> the rule's mean
    chosen: tuple[float, float] | None = None
    chosen_source: str = ""
    seconds: dict[int, float] = {}  # seed -> wall seconds
    command: str = ""
    load: str | None = None
    total_seconds: float = 0.0
    label_reads: list[str] = []
    earlier_runs: list[SharingReport] = []


def rule_mean(per_task: dict[int, Scores], method: str, budgets: list[int]) -> float:
    """The mean of SHARING_RULE: every (seed, budget, unit, task) weighing equally."""
    values = [
        v
        for by_method in per_task.values()
        for b in budgets
        for tasks in by_method[method][b].values()
        for v in tasks
    ]
    return float(np.mean(values))


def choose(means: dict[tuple[float, float], float]) -> tuple[float, float]:
    """SHARING_RULE: weight ascending, then sharpness; a later point only if higher by >0.001."""
    order = sorted(means)
    chosen = order[0]
    for point in order[1:]:
        if means[point] > means[chosen] + 0.001:
            chosen = point
    return chosen


def run(
    split: str,
    seeds: list[int],
    labels: protocol.UnitLabels,
    points: list[tuple[float, float]],
) -> SharingReport:
    import torch

    from bench.transfer.protocol_transfer import CHOICES, fleet_check, load_split

    choices = json.loads(CHOICES.read_text())["chosen"]
    hp, k = choices["simoe"], int(choices["schedule-transfer"]["k"])
    train, targets = load_split(split, labels)
    per_task: dict[int, Scores] = {}
    facts: dict[int, dict[str, SeedFacts]] = {}
    seconds: dict[int, float] = {}
    for seed in seeds:
        t0 = time.perf_counter()
        torch.manual_seed(seed)  # as run_method before SiMoEFamily: `simoe` exactly
        family = SiMoEFamily(SiMoEConfig(), train, namespace(seed, **hp))
        splits = [split_device(d, seed) for d in targets]
        per_task[seed], facts[seed] = score_seed(
            family, train, splits, points, k, protocol.SHARING_BUDGETS
        )
        seconds[seed] = time.perf_counter() - t0
        print(f"seed {seed}: {seconds[seed]:.0f} s", flush=True)
    names = [*protocol.units("train"), *protocol.units(split)]  # type: ignore[arg-type]
    return SharingReport(
        split=split,
        units=[d.device for d in targets],
        seeds=seeds,
        budgets=list(protocol.SHARING_BUDGETS),
        select_budgets=list(protocol.SHARING_SELECT_BUDGETS),
        share_top=protocol.SHARE_TOP,
        points=points,
        rule=protocol.SHARING_RULE,
        simoe_hyperparameters=hp,
        transfer_k=k,
        **fleet_check(labels.data_dir, names),
        per_task_top1=per_task,
        facts=facts,
        seconds=seconds,
    )


# -- the report --------------------------------------------------------------------------
def shown_sharing(report: SharingReport) -> str:
    """The simoe-sharing method the report compares: the chosen point's."""
    if report.chosen is None:
        return SHARING
    return point_label(*report.chosen)


def markdown(report: SharingReport) -> str:
    sharing = shown_sharing(report)
    budgets = report.budgets
    methods = ["simoe", sharing, "schedule-transfer"]
    has_vote = any(VOTE in by_method for by_method in report.per_task_top1.values())
    methods += [VOTE] if has_vote else []
    chosen = report.chosen
    lines = [
        f"# SiMoE with schedule sharing against schedule transfer, {report.split} split "
        "(SIMULATED units)",
        "",
        f"Command: `{report.command}`  ",
        f"Split shown: **{report.split}** ({len(report.units)} units: "
        f"{', '.join(u.removeprefix('sim:') for u in report.units)}); seeds {report.seeds}; "
        f"fleet {report.fleet[:8]} ({report.units_equal_to_recorded_fleet} units read "
        "equal, task by task, to the recorded fleet's: docs/results/protocol_fleet_hash.json); "
        "protocol bench/protocol.py. SiMoE's training budget "
        f"`{json.dumps(report.simoe_hyperparameters)}`, schedule transfer k = {report.transfer_k} "
        f"(bench/protocol_choices.json); each training unit shares its {report.share_top} best "
        "candidates per task.  ",
        f"simoe-sharing: share_weight, share_sharpness = "
        f"{'?' if chosen is None else f'{chosen[0]:g}, {chosen[1]:g}'} ({report.chosen_source}).  ",
        f"Load average while it ran: {report.load}; wall {report.total_seconds:.0f} s "
        f"(per seed: {', '.join(f'{s}: {v:.0f} s' for s, v in report.seconds.items())}).",
        "",
        "Top-1 on the held-out candidates (mean over units, tasks and seeds):",
        "",
        "| method | " + " | ".join(f"budget {b}" for b in budgets) + " |",
        "|---|" + "---|" * len(budgets),
    ]
    for m in methods:
        cells = []
        for b in budgets:
            got = seed_mean(report, m, b)
            cells.append(
                "" if got is None else f"{np.mean(np.concatenate(list(got.values()))):.3f}"
            )
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Paired differences: per-task top-1 averaged over the seeds, mean and 95 % bootstrap "
        f"interval clustered by GPU model ({clusters_of(report.units)} models resampled, each "
        "with all its units' tasks; bench/transfer/protocol_report.paired_interval):",
        "",
        "| difference | budget | mean | 95% interval | interval above 0 |",
        "|---|---|---|---|---|",
    ]
    for ours, theirs in (
        (sharing, "schedule-transfer"),
        (sharing, "simoe"),
        ("simoe", "schedule-transfer"),
        *([(sharing, VOTE)] if has_vote else []),
    ):
        lines += minus_rows(
            report, ours, [theirs], label=f"{ours} - {theirs}", budgets=budgets, digits=4
        )
    lines += coverage_lines(report, sharing)
    if report.grid_means:
        lines += grid_lines(report)
    for earlier in report.earlier_runs:
        lines += ["", f"Earlier run kept: `{earlier.command}` (chosen {earlier.chosen})."]
    return "\n".join(lines) + "\n"


def coverage_lines(report: SharingReport, sharing: str) -> list[str]:
    rows = [f for by_unit in report.facts.values() for f in by_unit.values()]
    shared = np.mean([f.shared_per_task for f in rows])
    total = np.mean([f.test_per_task for f in rows])
    lines = [
        "",
        f"Coverage: on average {shared:.1f} of a target task's {total:.1f} test candidates were "
        "shared by at least one training unit (mean over units, tasks and seeds). Tasks whose "
        "top pick is a shared candidate:",
        "",
        "| method | " + " | ".join(f"budget {b}" for b in report.budgets) + " |",
        "|---|" + "---|" * len(report.budgets),
    ]
    for m in ("simoe", sharing):
        cells = []
        for b in report.budgets:
            got = [f.pick_shared.get(m, {}).get(b) for f in rows]
            got = [g for g in got if g is not None]
            cells.append(f"{np.mean(got):.1%}" if got else "")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def grid_lines(report: SharingReport) -> list[str]:
    lines = [
        "",
        f"Every grid point on this split (the rule's mean: budgets {report.select_budgets}, "
        "seeds, units and tasks; the chosen one in bold). Rule: " + report.rule,
        "",
        "| share_weight | share_sharpness | rule's mean | "
        + " | ".join(f"budget {b}" for b in report.budgets)
        + " |",
        "|---|---|---|" + "---|" * len(report.budgets),
    ]
    off = rule_mean(report.per_task_top1, "simoe", report.select_budgets)
    cells = [f"{_budget_mean(report, 'simoe', b):.4f}" for b in report.budgets]
    lines.append(f"| 0 (simoe) | - | {off:.4f} | " + " | ".join(cells) + " |")
    for w, s in report.points:
        label = point_label(w, s)
        mark = "**" if report.chosen == (w, s) else ""
        cells = [f"{_budget_mean(report, label, b):.4f}" for b in report.budgets]
        lines.append(
            f"| {mark}{w:g}{mark} | {mark}{s:g}{mark} | {report.grid_means[label]:.4f} | "
            + " | ".join(cells)
            + " |"
        )
    return lines


def _budget_mean(report: SharingReport, method: str, budget: int) -> float:
    return rule_mean(report.per_task_top1, method, [budget])


def write(report: SharingReport, out: Path, stem: str) -> SharingReport:
    """OUT/STEM.json and .md; the run the file held before (if another) kept in earlier_runs."""
    return write_keeping_earlier(
        report, out, stem, markdown, lambda r: (r.command, r.per_task_top1)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["validation", "test"], default="validation")
    parser.add_argument("--seeds", default=",".join(str(s) for s in protocol.SEEDS))
    parser.add_argument("--data", type=Path, default=protocol.DATA_DIR)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument(
        "--tag", default="", help="suffix of the report files; with it no choice is written"
    )
    add_render_option(parser)
    args = parser.parse_args()
    if args.render:
        render(args.render, SharingReport, markdown)
        return
    import torch

    from bench.transfer.protocol_transfer import CHOICES, run_facts

    torch.set_num_threads(args.threads)
    protocol.require_fleet(args.data)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.exit(2, f"error: --seeds takes integers separated by commas, not {args.seeds!r}\n")
    fleet = protocol.fleet_hashes(args.data)["digest"]
    choices = json.loads(CHOICES.read_text()) if CHOICES.exists() else {}
    if choices.get("fleet") != fleet or not {"simoe", "schedule-transfer"} <= set(
        choices.get("chosen", {})
    ):
        parser.exit(
            2,
            f"error: {CHOICES.name} has no simoe and schedule-transfer choice on this "
            "fleet: run `python -m bench.transfer.protocol_transfer --select`\n",
        )
    labels = protocol.UnitLabels(args.data)
    if args.split == "validation":
        points = [(w, s) for w in protocol.SHARE_WEIGHTS for s in protocol.SHARE_SHARPNESS]
    else:
        chosen = json.loads(CHOICE.read_text()) if CHOICE.exists() else {}
        if chosen.get("fleet") != fleet:
            parser.exit(
                2,
                f"error: no simoe-sharing choice on this fleet in {CHOICE.name}: run "
                "`python -m bench.transfer.protocol_sharing --split validation`\n",
            )
        points = [tuple(chosen["chosen"])]
    started = time.perf_counter()
    report = run(args.split, seeds, labels, points)
    means = {
        point_label(*p): rule_mean(report.per_task_top1, point_label(*p), report.select_budgets)
        for p in points
    }
    if args.split == "validation":
        picked = choose({p: means[point_label(*p)] for p in points})
        source = "chosen on validation by SHARING_RULE, this run"
    else:
        picked, source = points[0], f"chosen on validation, {CHOICE.name}"
    facts = run_facts(labels, started)
    facts["command"] = facts["command"].replace("protocol_transfer", "protocol_sharing")
    report = report.model_copy(
        update={"grid_means": means, "chosen": picked, "chosen_source": source, **facts}
    )
    report = write(
        report, args.out, f"protocol_sharing_{args.split}" + (f"_{args.tag}" if args.tag else "")
    )
    if args.split == "validation" and not args.tag:
        keep = {
            "split": "validation",
            "fleet": fleet,
            "seeds": seeds,
            "rule": report.rule,
            "grid_means": means,
            "chosen": list(picked),
        }
        CHOICE.write_text(json.dumps(keep, indent=1) + "\n")
    print(markdown(report))


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
