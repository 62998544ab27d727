"""The protocol's reports: top-1 tables, paired bootstrap intervals, the ablations and the
probes-matter table, the selection grid and the validation|test side-by-side (Markdown from
bench.transfer.protocol_transfer's results, `bench.transfer.protocol_result.TransferResult`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from bench import protocol
from bench.transfer.protocol_diagnostics import markdown as gates_markdown
from bench.transfer.protocol_result import GridPoint, TransferResult


class PerTaskTop1(Protocol):
    """A protocol report's per-task top-1: seed -> method -> budget -> unit -> per task
    (TransferResult, and the sharing report of bench/transfer/protocol_sharing.py)."""

    @property
    def per_task_top1(self) -> Mapping[int, Mapping[str, Mapping[int, Mapping[str, Any]]]]: ...


def grid_table(grid_scores: dict[str, list[GridPoint]]) -> list[str]:
    """The selection grid: every point's validation score, the chosen one in bold."""
    if not grid_scores:
        return []
    lines = [
        "",
        "Selection on validation (bench/protocol_choices.json): mean top-1 over seeds, "
        "budgets, units and tasks; per seed in brackets; chosen point in bold.",
        "",
        "| method | grid point | validation top-1 | per seed |",
        "|---|---|---|---|",
    ]
    for method, points in grid_scores.items():
        best = max(p[1] for p in points if p[1] is not None)
        for hp, mean, *rest in points:
            cell = "unfinished" if mean is None else f"{mean:.4f}"
            if mean == best:
                cell = f"**{cell}**"
            seeds = ", ".join(f"{v:.4f}" for v in rest[0]) if rest else "seed 0 only"
            lines.append(f"| {method} | `{json.dumps(hp)}` | {cell} | {seeds} |")
    return lines


def budget_cells(result: TransferResult) -> list[tuple[str, list[str]]]:
    """Per method of a run: its mean top-1 at each budget (blank where it has none)."""
    methods = list(dict.fromkeys(m for r in result.per_task_top1.values() for m in r))
    rows = []
    for m in methods:
        cells = []
        for b in protocol.BUDGETS:
            got = seed_mean(result, m, b)
            cells.append(
                "" if got is None else f"{np.mean(np.concatenate(list(got.values()))):.3f}"
            )
        rows.append((m, cells))
    return rows


def seed_mean(result: PerTaskTop1, method: str, budget: int) -> dict[str, np.ndarray] | None:
    """Per unit: each task's top-1 averaged over the seeds (None if the method did not run)."""
    runs = [r.get(method, {}).get(budget) for r in result.per_task_top1.values()]
    runs = [r for r in runs if r is not None]  # a method may have fewer seeds (see seeds_of)
    if not runs:
        return None
    return {u: np.mean([np.asarray(r[u]) for r in runs], axis=0) for u in runs[0]}


def seeds_of(result: TransferResult, method: str) -> list[int]:
    return [s for s, r in result.per_task_top1.items() if method in r]


def model_of(unit: str) -> str:
    """The GPU model of a unit (agent/devices/sim/units.json), the unit itself where it is no
    catalog model's unit (a user's spec file, a synthetic GPU)."""
    from agent.devices.sim.catalog import resolve

    name = unit.removeprefix("sim:")
    try:
        spec = resolve(protocol.device_of(name).removeprefix("sim:"))
    except Exception:  # noqa: BLE001 - not a simulated unit: a cluster of its own
        return name
    return spec.model or spec.key


def paired_interval(
    ours: dict, theirs: dict, seed: int = 0, n: int = 4000
) -> tuple[float, float, float]:
    """Mean per-task difference and its 95 % paired bootstrap interval, clustered by GPU model.

    Units of one model rank alike, so their tasks are not independent draws (protocol rule
    4, ../shared/notes/evaluation.md): the bootstrap resamples GPU models with replacement,
    each with every task of every one of its units, and takes the mean over the drawn tasks.
    """
    clusters: dict[str, list[np.ndarray]] = {}
    for u in sorted(ours):
        clusters.setdefault(model_of(u), []).append(np.asarray(ours[u]) - np.asarray(theirs[u]))
    diffs = [np.concatenate(v) for v in clusters.values()]
    sums = np.array([d.sum() for d in diffs])
    counts = np.array([len(d) for d in diffs])
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(diffs), (n, len(diffs)))
    means = sums[draws].sum(1) / counts[draws].sum(1)
    mean = float(sums.sum() / counts.sum())
    return mean, float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def clusters_of(units: list[str]) -> int:
    """How many GPU models (bootstrap clusters) the units are."""
    return len({model_of(u) for u in units})


def same_model_pairs(units: list[str]) -> list[tuple[str, str]]:
    from agent.devices.sim.catalog import resolve

    model: dict[str, list[str]] = {}
    for u in units:
        spec = resolve(protocol.device_of(u.removeprefix("sim:")).removeprefix("sim:"))
        model.setdefault(spec.model or spec.key, []).append(u)
    return [(v[0], v[1]) for v in model.values() if len(v) >= 2]


def markdown(result: TransferResult) -> str:
    split = result.split
    lines = [
        f"# Offline transfer, {split} split (SIMULATED units)",
        "",
        f"Command: `{result.command}`  ",
        f"Split shown: **{split}** ({len(result.units)} units: "
        f"{', '.join(u.removeprefix('sim:') for u in result.units)}); seeds "
        f"{result.seeds}; protocol: bench/protocol.py; hyperparameters "
        f"({result.hyperparameters_source}): `{json.dumps(result.hyperparameters)}`.  ",
        f"Load average while it ran: {'?' if result.load is None else result.load}.",
        "",
        "Top-1 score on the held-out candidates (mean over units, tasks and seeds):",
        "",
        "| method | seeds | " + " | ".join(f"budget {b}" for b in protocol.BUDGETS) + " |",
        "|---|---|" + "---|" * len(protocol.BUDGETS),
    ]
    table = budget_cells(result)
    methods = [m for m, _ in table]
    lines += [f"| {m} | {len(seeds_of(result, m))} | " + " | ".join(c) + " |" for m, c in table]
    coverage = [v for by_unit in result.transfer_coverage.values() for v in by_unit.values()]
    if coverage:
        kept = "?" if result.train_per_task is None else result.train_per_task
        lines += [
            "",
            f"Training units keep {kept} candidates per task; "
            "schedule transfer can rank "
            f"{np.mean(coverage):.1%} of the test candidates (mean over units and seeds; "
            f"lowest {min(coverage):.1%}), every other method all of them.",
        ]
    lines += [
        "",
        "SiMoE minus each baseline: per-task top-1 (averaged over the seeds), mean and 95 % "
        "paired bootstrap interval clustered by GPU model (units of one model rank alike: "
        f"the {clusters_of(result.units)} models are resampled, each with all its units' "
        "tasks):",
        "",
        "| baseline | budget | difference | 95% interval | interval above 0 |",
        "|---|---|---|---|---|",
    ]
    lines += minus_rows(result, "simoe", [m for m in methods if m != "simoe"])
    # the other learned peers against the simple alternative too (rule 3: a method that does
    # not beat the trivial baselines has not shown anything)
    peers = [m for m in ("pooled", "mlp-finetune", "nearest-expert") if m in methods]
    if "schedule-transfer" in methods and peers:
        lines += [
            "",
            "Each learned peer minus schedule-transfer (the same bootstrap):",
            "",
            "| method | budget | difference | 95% interval | interval above 0 |",
            "|---|---|---|---|---|",
        ]
        for m in peers:
            lines += minus_rows(result, m, ["schedule-transfer"], label=m)
    lines += per_unit(result)
    if result.fidelity:
        lines += probes_matter(result)
    lines += gates_markdown(result.gates)
    lines += grid_table(result.grid_scores)
    lines += earlier_runs(result.earlier_runs)
    return "\n".join(lines) + "\n"


def minus_rows(
    result: PerTaskTop1,
    ours: str,
    others: list[str],
    label: str | None = None,
    budgets: Sequence[int] = protocol.BUDGETS,
    digits: int = 3,
) -> list[str]:
    """Table rows: `ours` minus each of `others` per budget, clustered paired interval (its
    ends to `digits` decimals); the first column is the other method (or `label`)."""
    rows = []
    for m in others:
        for b in budgets:
            mine, theirs = seed_mean(result, ours, b), seed_mean(result, m, b)
            if mine is None or theirs is None:
                continue
            mean, lo, hi = paired_interval(mine, theirs)
            rows.append(
                f"| {label or m} | {b} | {mean:+.3f} | [{lo:+.{digits}f}, {hi:+.{digits}f}] | "
                f"{'yes' if lo > 0 else 'no'} |"
            )
    return rows


def earlier_runs(runs: list[TransferResult]) -> list[str]:
    """The runs this report replaced, kept (a report adds runs, it never drops one): each
    one's command and mean top-1 per method and budget, as it reported them."""
    if not runs:
        return []
    lines = ["", "## Earlier runs of this report (replaced, kept in its JSON)", ""]
    for i, run in enumerate(runs, 1):
        kept = 48 if run.train_per_task is None else run.train_per_task  # before it was kept
        lines += [
            f"{i}. `{run.command or '?'}`: seeds {run.seeds}, hyperparameters "
            f"`{json.dumps(run.hyperparameters)}`, training units kept {kept} candidates per task.",
            "",
            "| method | " + " | ".join(f"budget {b}" for b in protocol.BUDGETS) + " |",
            "|---|" + "---|" * len(protocol.BUDGETS),
        ]
        lines += [f"| {m} | " + " | ".join(cells) + " |" for m, cells in budget_cells(run)]
        lines.append("")
    return lines


def per_unit(
    result: TransferResult, peers: tuple[str, ...] = ("nearest-expert", "schedule-transfer")
) -> list[str]:
    """Per target unit: SiMoE and its two closest peers at budgets 0 and 16 (seeds averaged)
    and the unit's measured twin agreement (gate table): where a mean difference comes from."""
    budgets = [b for b in protocol.BUDGETS if b in (0, 16)]
    got = {(m, b): seed_mean(result, m, b) for m in ("simoe", *peers) for b in budgets}
    if any(v is None for v in got.values()):
        return []
    gates = result.gates
    twin = {
        u: np.mean([g[u].twin_agreement for g in gates.values() if u in g])
        for u in result.units
        if any(u in g for g in gates.values())
    }
    cols = [(m, b) for b in budgets for m in ("simoe", *peers)]
    lines = [
        "",
        "Per unit (top-1, seeds averaged): SiMoE, " + ", ".join(peers) + " and SiMoE minus "
        f"{peers[-1]}, at budgets {budgets}; twin = the measured twin's agreement (gate table).",
        "",
        "| unit | "
        + " | ".join(f"{m} {b}" for m, b in cols)
        + " | "
        + " | ".join(f"SiMoE - {peers[-1]} {b}" for b in budgets)
        + " | twin |",
        "|---|" + "---|" * (len(cols) + len(budgets) + 1),
    ]
    for u in result.units:
        cells = [f"{got[c][u].mean():.3f}" for c in cols]
        cells += [
            f"{got[('simoe', b)][u].mean() - got[(peers[-1], b)][u].mean():+.3f}" for b in budgets
        ]
        cells.append(f"{twin[u]:.3f}" if u in twin else "")
        lines.append(f"| {u.removeprefix('sim:')} | " + " | ".join(cells) + " |")
    units = result.units
    ahead = ", ".join(
        f"{sum(got[('simoe', b)][u].mean() > got[(peers[-1], b)][u].mean() for u in units)} of "
        f"{len(units)} units at budget {b}"
        for b in budgets
    )
    same = sum(np.allclose(got[("simoe", budgets[-1])][u], got[("simoe", 0)][u]) for u in units)
    lines += [
        "",
        f"SiMoE is ahead of {peers[-1]} on {ahead}. Its per-task top-1 at budget "
        f"{budgets[-1]} equals budget 0's on {same} of {len(units)} units (the few-shot "
        "adaptation did not change its top choice there).",
    ]
    return lines


def probes_matter(result: TransferResult) -> list[str]:
    fidelity = result.fidelity
    first = fidelity[next(iter(fidelity))]
    ablations = list(first)  # simoe-hybrid first
    fid = {
        label: {u: np.mean([fidelity[s][label][u] for s in fidelity]) for u in first[label]}
        for label in ablations
    }
    lines = [
        "",
        "Ablations at budget 0: hybrid against both one-sided hardware representations "
        "(SiMoE minus the variant, paired bootstrap clustered by GPU model):",
        "",
        "| variant | top-1 | fidelity (mean over units) | hybrid minus variant | 95% interval |",
        "|---|---|---|---|---|",
    ]
    hybrid = seed_mean(result, "simoe-hybrid", 0)
    for label in ablations:
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
    for a, b in same_model_pairs(result.units):
        for u in (a, b):
            lines.append(
                f"| {u.removeprefix('sim:')} | {fid['simoe-hybrid'][u]:.3f} | "
                f"{fid['simoe-analytical-only'][u]:.3f} | {hybrid[u].mean():.3f} | "
                f"{an[u].mean():.3f} |"
            )
    return lines


def side_by_side(validation: TransferResult, test: TransferResult) -> str:
    """Top-1 per method and budget on the validation and the test split, next to each other."""
    lines = [
        "# Offline transfer: validation and test columns (SIMULATED units)",
        "",
        f"Validation: `{validation.command}`  ",
        f"Test: `{test.command}`  ",
        f"Seeds: validation {validation.seeds}, test {test.seeds}. Mean top-1 over "
        "units, tasks and seeds. Full reports: protocol_transfer_validation.md, "
        "protocol_transfer_test.md.",
        "",
        "| method | " + " | ".join(f"{b} val | {b} test" for b in protocol.BUDGETS) + " |",
        "|---|" + "---|---|" * len(protocol.BUDGETS),
    ]
    methods = list(dict.fromkeys(m for r in test.per_task_top1.values() for m in r))
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
