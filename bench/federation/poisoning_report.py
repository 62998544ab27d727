"""The poisoning benchmark's report: one row per federation run, the report's model, its
Markdown (deltas against the clean FedAvg run of the same seed, with bootstrap intervals over
seeds) and the merge of reports that differ only in their seeds. The runs:
bench/federation/poisoning.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from bench import reporting
from bench.reporting import load_text
from schemas import BadInputError

GOAL = 0.02  # the most a robust rule may cost the nodes' or the newcomers' top-1


class RunRow(BaseModel):
    """One federation: an attack (or none) under one aggregation rule, one seed."""

    model_config = ConfigDict(extra="forbid")

    attack: str  # none | signflip | random | stale
    rule: str  # fedavg | trimmed | median | krum
    expert_check: bool
    seed: int
    nodes_top1: float  # mean over the honest nodes' held-out tasks
    node_top1: dict[str, float]
    newcomer_top1: float  # mean zero-shot over the newcomers (test split)
    newcomer_zero_shot: dict[str, float]
    newcomer_experts: dict[str, list[str]]
    backwards_receivers: dict[str, dict[str, float]]  # newcomer -> {without, with check}
    set_aside: dict[str, int]  # node -> rounds its update was left out (krum)
    experts_dropped: dict[str, int]  # node -> delivered experts its check dropped, last round
    failed: int
    rejected: int
    wall_s: float


class PoisoningReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    simulated: bool = True
    command: str
    data: str
    grid: str = (
        "in-process Grid: ServerApp round loop + the --aggregation strategy + registry, "
        "agent ClientApp"
    )
    nodes: list[str]
    liars: list[str]
    backwards: str
    newcomers: list[str]
    rounds: int
    epochs: int
    k_experts: int
    seeds: list[int]
    trim: float
    krum_f: int
    clip: float | None
    check_measurements: int
    runs: list[RunRow]
    total_wall_s: float
    load_average_start: list[float]
    load_average_end: list[float]


# -- the report -----------------------------------------------------------------------------------
def _mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and a 95% bootstrap interval over seeds (the mean itself with one seed)."""
    arr = np.asarray(values, dtype=np.float64)
    if len(arr) < 2:
        return float(arr.mean()), float(arr.mean()), float(arr.mean())
    rng = np.random.default_rng(0)
    boots = rng.choice(arr, size=(2000, len(arr)), replace=True).mean(axis=1)
    return float(arr.mean()), float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))


def _paired(report: PoisoningReport, attack: str, rule: str, field: str) -> list[float]:
    """Per seed: this row's figure minus the clean reference's (same seed, paired)."""
    ref = {
        r.seed: getattr(r, field)
        for r in report.runs
        if r.attack == "none" and r.rule == "fedavg" and not r.expert_check
    }
    return [
        getattr(r, field) - ref[r.seed]
        for r in report.runs
        if r.attack == attack and r.rule == rule and r.seed in ref
    ]


def markdown(report: PoisoningReport) -> str:
    seeds = len(report.seeds)
    lines = [
        "# Poisoned nodes (SIMULATED GPUs)",
        "",
        f"Command: `{report.command}`  ",
        f"Data: {report.data}. All latencies are SIMULATED (analytical GPU model).  ",
        f"Federation: {report.grid}; {len(report.nodes)} nodes ({', '.join(report.nodes)}), "
        f"{report.rounds} rounds, {report.epochs} epochs per round, k = {report.k_experts} "
        f"experts per node; seeds {', '.join(map(str, report.seeds))}.  ",
        f"Liars (bad shared update every round): {', '.join(report.liars)}; backwards expert: "
        f"{report.backwards}; newcomers (join at the last round): "
        f"{', '.join(report.newcomers)}.  ",
        f"Robust rules: trimmed mean cutting {report.trim:g} at each end, median, multi-Krum "
        f"with f = {report.krum_f}"
        + (f", every change clipped to L2 norm {report.clip:g}" if report.clip else "")
        + "; with a robust rule the nodes' expert check is on.  ",
        f"Wall time {report.total_wall_s:.0f} s; load average at start "
        f"{load_text(report.load_average_start)}, at end {load_text(report.load_average_end)}.",
        "",
        "nodes = mean top-1 over the 9 honest nodes' held-out tasks; newcomers = mean "
        "zero-shot top-1 of the newcomers on the offline benchmark's test split. Δ = this "
        "row minus the clean FedAvg run of the same seed"
        + (
            f", mean over {seeds} seeds with a 95% bootstrap interval."
            if seeds > 1
            else ", one seed."
        ),
        "",
        "| attack | rule | expert check | nodes top-1 | Δ nodes | newcomers top-1 | Δ newcomers "
        "| goal met | updates set aside | newcomers sent the backwards expert | failed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = []
    for r in report.runs:
        key = (r.attack, r.rule, r.expert_check)
        if key not in keys:
            keys.append(key)
    for attack, rule, check in keys:
        rows = [
            r for r in report.runs if (r.attack, r.rule, r.expert_check) == (attack, rule, check)
        ]
        nodes = _mean_ci([r.nodes_top1 for r in rows])
        new = _mean_ci([r.newcomer_top1 for r in rows])
        if attack == "none" and rule == "fedavg":
            d_nodes = d_new = "(reference)"
            within = ""
        else:
            dn = _mean_ci(_paired(report, attack, rule, "nodes_top1"))
            dw = _mean_ci(_paired(report, attack, rule, "newcomer_top1"))
            d_nodes, d_new = _delta(dn, seeds), _delta(dw, seeds)
            within = "yes" if dn[0] >= -GOAL and dw[0] >= -GOAL else "no"
        aside = sum(sum(r.set_aside.values()) for r in rows)
        sent = sum(
            report.backwards in experts for r in rows for experts in r.newcomer_experts.values()
        )
        sent_text = "" if attack == "none" else f"{sent} of {len(report.newcomers) * len(rows)}"
        lines.append(
            f"| {attack} | {rule} | {'on' if check else 'off'} | {nodes[0]:.3f} | {d_nodes} | "
            f"{new[0]:.3f} | {d_new} | {within} | {aside} | {sent_text} | "
            f"{sum(r.failed for r in rows)} |"
        )
    lines += [
        "",
        "## The backwards expert and the newcomers that received it",
        "",
        f"Zero-shot top-1 of each newcomer that the server sent {report.backwards}'s "
        "(backwards) expert: as delivered (no measurements: only the gate can weigh it down), "
        f"and after the node's expert check given its first {report.check_measurements} "
        "measurements per task (from the offline benchmark's pool, never the test split): "
        "delivered experts whose rank correlation with those measurements is negative are "
        "left out.",
        "",
        "| attack | rule | seed | newcomer | as delivered | after the check | backwards dropped "
        "| honest experts dropped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report.runs:
        for name, v in r.backwards_receivers.items():
            lines.append(
                f"| {r.attack} | {r.rule} | {r.seed} | {name} | {v['without_check']:.3f} | "
                f"{v['with_check']:.3f} | {'yes' if v['dropped_backwards'] else 'no'} | "
                f"{int(v['dropped_other'])} |"
            )
    clean = {r.seed: r for r in report.runs if r.attack == "none" and r.rule == "fedavg"}
    refs = [
        (name, clean[r.seed].newcomer_zero_shot.get(name))
        for r in report.runs
        for name in r.backwards_receivers
        if r.seed in clean
    ]
    if refs:
        lines += [
            "",
            "Clean run, same newcomers: "
            + ", ".join(f"{n} {v:.3f}" for n, v in dict(refs).items() if v is not None)
            + ".",
        ]
    lines += [
        "",
        "## Experts the honest nodes' check dropped (last round, summed over nodes)",
        "",
        "| attack | rule | seed | dropped |",
        "|---|---|---|---|",
    ]
    for r in report.runs:
        if r.expert_check:
            lines.append(
                f"| {r.attack} | {r.rule} | {r.seed} | {sum(r.experts_dropped.values())} |"
            )
    return "\n".join(lines) + "\n"


def merge_reports(reports: Sequence[PoisoningReport]) -> PoisoningReport:
    """One report of several runs that differ only in their seeds (run in parallel)."""
    first = reports[0]
    fixed = ("nodes", "liars", "backwards", "newcomers", "rounds", "epochs", "k_experts", "trim")
    for other in reports[1:]:
        for name in (*fixed, "krum_f", "clip", "check_measurements"):
            if getattr(other, name) != getattr(first, name):
                raise BadInputError(f"--merge: the reports differ in {name}")
    seeds = [s for r in reports for s in r.seeds]
    if len(set(seeds)) != len(seeds):
        raise BadInputError(f"--merge: a seed appears twice ({seeds})")
    return first.model_copy(
        update={
            "command": " && ".join(r.command for r in reports),
            "seeds": seeds,
            "runs": [run for r in reports for run in r.runs],
            "total_wall_s": sum(r.total_wall_s for r in reports),
            "load_average_end": reports[-1].load_average_end,
        }
    )


def _delta(values: tuple[float, float, float], seeds: int) -> str:
    if seeds < 2:
        return f"{values[0]:+.3f}"
    return f"{values[0]:+.3f} [{values[1]:+.3f}, {values[2]:+.3f}]"


def write_report(report: PoisoningReport, out: Path, stem: str = "poisoning") -> None:
    reporting.write_report(report, markdown, out, stem)
