"""The online gate's sharpness selection, reported (`python -m bench.transfer.protocol_transfer
--select-sharpness` writes docs/results/protocol_online_gate_validation.md with it): the
mean top-1 per sharpness, how often the top pick moves from budget 0, and the paired
interval of the chosen sharpness against the gate off."""

from __future__ import annotations

import numpy as np

from bench.transfer.protocol_result import OnlineGateReport


def pick_changes(
    result: OnlineGateReport, sharpness: float, budget: int, key: str = "pick"
) -> dict[int, dict[str, float]]:
    """Per seed: units whose top pick at `budget` differs from the budget-0 pick on any
    task, unit-tasks that differ, and the mean top-1 gain over budget 0."""
    out = {}
    for seed, by_unit in result.runs.items():
        units = tasks = 0
        gains = []
        for got in (by_unit[u][budget] for u in by_unit):
            picks = getattr(got, key)[sharpness]
            moved = sum(int(a != b) for a, b in zip(picks, got.pick0, strict=True))
            units += int(moved > 0)
            tasks += moved
            top = getattr(got, "top1" + key[4:])[sharpness]
            gains.extend(np.asarray(top) - np.asarray(got.top1_0))
        out[seed] = {"units": units, "unit_tasks": tasks, "gain": float(np.mean(gains))}
    return out


def online_gate_markdown(result: OnlineGateReport) -> str:
    grid, chosen = result.grid, result.chosen
    n_units = len(result.units)
    lines = [
        "# The online gate's sharpness, on the validation split (SIMULATED units)",
        "",
        f"Command: `{result.command}`; seeds {result.seeds}; budgets "
        f"{result.budgets}; {n_units} validation units: {', '.join(result.units)}; "
        f"SiMoE's training budget {result.simoe_hyperparameters} (protocol_choices.json); "
        f"load {'?' if result.load is None else result.load}; {result.total_seconds:.0f} s. "
        "Units whose per-task hashes equal the recorded fleet's (protocol_fleet_hash.json): "
        f"{result.units_equal_to_recorded_fleet}.",
        "",
        f"Rule (bench/protocol.py, written before the run): {result.rule}",
        "",
        "| sharpness | mean top-1 (adapted + online gate) | mean top-1 (gate only, no "
        "fine-tuning) |",
        "|---|---|---|",
    ]
    for s in grid:
        mark = "**" if s == chosen else ""
        lines.append(
            f"| {mark}{s}{mark} | {mark}{result.mean_top1[s]:.4f}{mark} | "
            f"{result.mean_top1_nofinetune[s]:.4f} |"
        )
    lines += [
        "",
        f"Chosen: sharpness **{chosen}**. Sharpness 0 is `simoe` exactly (today's scores).",
        "",
        "Top pick at each budget against the budget-0 pick, per seed: units (of "
        f"{n_units}) where it differs on at least one task, unit-tasks where it differs, "
        "mean top-1 gain over budget 0 (all unit-tasks).",
        "",
        "| budget | variant | seed | units moved | unit-tasks moved | top-1 gain over budget 0 |",
        "|---|---|---|---|---|---|",
    ]
    # with the gate: the chosen sharpness, or (0 chosen) the best other one, said so
    shown = chosen
    if chosen == 0.0:
        shown = max(grid[1:], key=lambda v: result.mean_top1[v])
        lines.insert(-4, f"With the gate on below: sharpness {shown}, the best of the others "
                     "(NOT chosen).\n")  # fmt: skip
    variants = [
        ("simoe (gate off, sharpness 0)", 0.0, "pick"),
        (f"simoe-online (sharpness {shown})", shown, "pick"),
        (f"online gate only, no fine-tuning (sharpness {shown})", shown, "pick_nofinetune"),
    ]
    for b in result.budgets:
        for label, s, key in variants:
            per_seed = pick_changes(result, s, b, key)
            for seed, got in per_seed.items():
                lines.append(
                    f"| {b} | {label} | {seed} | {got['units']} | {got['unit_tasks']} | "
                    f"{got['gain']:+.4f} |"
                )
            lines.append(
                f"| {b} | {label} | mean | "
                f"{np.mean([g['units'] for g in per_seed.values()]):.1f} | "
                f"{np.mean([g['unit_tasks'] for g in per_seed.values()]):.1f} | "
                f"{np.mean([g['gain'] for g in per_seed.values()]):+.4f} |"
            )
    lines += [
        "",
        "Every sharpness: mean over seeds of units moved / unit-tasks moved / top-1 gain over "
        "budget 0, adapted + online gate | online gate only (no fine-tuning):",
        "",
        "| sharpness | " + " | ".join(f"budget {b}" for b in result.budgets) + " |",
        "|---|" + "---|" * len(result.budgets),
    ]
    for s in grid:
        cells = []
        for b in result.budgets:
            parts = []
            for key in ("pick", "pick_nofinetune"):
                got = list(pick_changes(result, s, b, key).values())
                parts.append(
                    f"{np.mean([g['units'] for g in got]):.1f} / "
                    f"{np.mean([g['unit_tasks'] for g in got]):.1f} / "
                    f"{np.mean([g['gain'] for g in got]):+.4f}"
                )
            cells.append(" ; ".join(parts))
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    if grid[1:]:
        from bench.transfer.protocol_report import clusters_of, paired_interval

        lines += [
            "",
            f"simoe-online (sharpness {shown}) minus simoe (gate off), per unit-task top-1 "
            "averaged over the seeds; 95 % paired bootstrap clustered by GPU model "
            f"({clusters_of(result.units)} models resampled, each with all its units' tasks):",
            "",
            "| budget | difference | 95 % interval |",
            "|---|---|---|",
        ]
        for b in result.budgets:
            ours, theirs = seed_averaged(result, b, shown), seed_averaged(result, b, 0.0)
            mean, low, high = paired_interval(ours, theirs)
            lines.append(f"| {b} | {mean:+.4f} | [{low:+.4f}, {high:+.4f}] |")
    lines += earlier_gate_runs(result.earlier_runs)
    return "\n".join(lines) + "\n"


def earlier_gate_runs(runs: list[OnlineGateReport]) -> list[str]:
    """The runs this report replaced, kept: each one's command, fleet, choice and mean top-1
    per sharpness, as it reported them."""
    if not runs:
        return []
    lines = ["", "## Earlier runs of this report (replaced, kept in its JSON)", ""]
    for i, run in enumerate(runs, 1):
        lines += [
            f"{i}. `{run.command or '?'}`: fleet {run.fleet[:8]}..., {len(run.units)} "
            f"validation units, seeds {run.seeds}, SiMoE's budget "
            f"{run.simoe_hyperparameters}, training units kept "
            f"{run.train_per_task or 'all'} candidates per task; chosen **{run.chosen}**.",
            "",
            "| sharpness | " + " | ".join(str(s) for s in run.grid) + " |",
            "|---|" + "---|" * len(run.grid),
            "| mean top-1 | " + " | ".join(f"{run.mean_top1[s]:.4f}" for s in run.grid) + " |",
            "",
        ]
    return lines


def seed_averaged(result: OnlineGateReport, budget: int, sharpness: float) -> dict[str, np.ndarray]:
    """Per unit: each task's top-1 at `budget` and `sharpness`, averaged over the seeds."""
    out: dict[str, list] = {}
    for by_unit in result.runs.values():
        for unit, by_budget in by_unit.items():
            out.setdefault(unit, []).append(by_budget[budget].top1[sharpness])
    return {u: np.mean(np.asarray(v, dtype=float), axis=0) for u, v in out.items()}
