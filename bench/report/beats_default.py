"""How often does tuning beat TVM's default schedule, and by how much?

    python -m bench.report.beats_default bench/reports/compile_seed*/report.json \
        --out docs/results                       # beats_default.{json,md}
    python -m bench.report.beats_default --render docs/results/beats_default.json

Reads the compile-section rows of `bench.run` reports (SIMULATED GPUs). Every method
measures each task's default schedule (DLight's GPU rules) once and keeps it unless a
tuned schedule beat it (`MethodRow.task_kept`: "tuned" or "default"); this counts, per
method and trials per task, the tasks where the tuned schedule won, and the speedup
over the default: default latency / kept latency (1.0 where the default was kept),
geometric mean over all tasks and over the tasks it beat. Intervals: 95 % bootstrap
resampling (GPU, network) cells, the seeds of a cell staying together.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from bench.report.report_model import BenchReport, MethodRow
from bench.reporting import add_render_option, public_command, render, write_report

STEM = "beats_default"
BOOTSTRAP = 2000


class TaskOutcome(BaseModel):
    """One task of one run: its default and what the method kept."""

    model_config = ConfigDict(extra="forbid")

    method: str
    trials: int
    gpu: str
    network: str
    task: str
    seed: int
    default_s: float
    kept_s: float
    tuned_won: bool


class MethodShare(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: str
    trials: int
    tasks: int
    beaten: int
    share: float
    share_interval: tuple[float, float]
    speedup_all: float  # geometric mean of default / kept over every task
    speedup_beaten: float | None  # the same over the tasks where the tuned schedule won
    by_network: dict[str, tuple[int, int]]  # network -> (beaten, tasks)


class BeatsDefaultReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    simulated: bool = True
    command: str
    sources: list[str]  # the bench.run reports read (each names its own command)
    # per source: measurements per search and XGB warm-up (with both at the trials per task,
    # MetaSchedule's XGB never trains: its "ms-xgb-32" row is then a search without a model)
    search_settings: list[str] = []
    held_out_networks: list[str]
    outcomes: list[TaskOutcome]
    methods: list[MethodShare]


def outcomes_of(report: BenchReport) -> list[TaskOutcome]:
    """Every (run, task) of the report's compile section with a measured default."""
    section = report.sections.compile
    if section is None:
        return []
    out = []
    for row in section.rows:
        out.extend(_row_outcomes(row, section.settings.seed))
    return out


def _row_outcomes(row: MethodRow, seed: int) -> list[TaskOutcome]:
    out = []
    for task, kept in row.task_kept.items():
        default, best = row.task_default_s.get(task), row.task_best_s.get(task)
        if kept is None or default is None or not default > 0:
            continue
        kept_s = best if kept == "tuned" and best is not None else default
        out.append(
            TaskOutcome(
                method=row.method,
                trials=row.trials_per_task,
                gpu=row.gpu,
                network=row.network,
                task=task,
                seed=seed,
                default_s=default,
                kept_s=kept_s,
                tuned_won=kept == "tuned",
            )
        )
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(float(np.mean(np.log(values))))


def summarize(outcomes: list[TaskOutcome], seed: int = 0) -> list[MethodShare]:
    """Per (method, trials): the share of tasks beaten, its interval, the speedups."""
    groups: dict[tuple[str, int], list[TaskOutcome]] = defaultdict(list)
    for o in outcomes:
        groups[(o.method, o.trials)].append(o)
    rng = np.random.default_rng(seed)
    shares = []
    for (method, trials), rows in sorted(groups.items()):
        cells: dict[tuple[str, str], list[bool]] = defaultdict(list)
        by_network: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for o in rows:
            cells[(o.gpu, o.network)].append(o.tuned_won)
            by_network[o.network][0] += int(o.tuned_won)
            by_network[o.network][1] += 1
        wins = [(sum(v), len(v)) for _, v in sorted(cells.items())]
        draws = rng.integers(0, len(wins), size=(BOOTSTRAP, len(wins)))
        won = np.array([w for w, _ in wins])[draws].sum(1)
        total = np.array([n for _, n in wins])[draws].sum(1)
        low, high = np.percentile(won / total, [2.5, 97.5])
        beaten = [o.default_s / o.kept_s for o in rows if o.tuned_won]
        shares.append(
            MethodShare(
                method=method,
                trials=trials,
                tasks=len(rows),
                beaten=len(beaten),
                share=len(beaten) / len(rows),
                share_interval=(float(low), float(high)),
                speedup_all=_geomean([o.default_s / o.kept_s for o in rows]),
                speedup_beaten=_geomean(beaten) if beaten else None,
                by_network={k: (v[0], v[1]) for k, v in sorted(by_network.items())},
            )
        )
    return shares


def markdown(report: BeatsDefaultReport) -> str:
    networks = sorted({o.network for o in report.outcomes})
    held = set(report.held_out_networks)
    head = [f"{n} (held out)" if n in held else n for n in networks]
    lines = [
        "# Does tuning beat TVM's default schedule? (SIMULATED GPUs)",
        "",
        f"Command: `{report.command}`. Read from the compile sections of: "
        + "; ".join(f"`{s}`" for s in report.sources)
        + ".",
        "",
        "Each method measures every task's default schedule (DLight's GPU rules) once and "
        "keeps it unless a tuned schedule beat it. Share = tasks where the tuned schedule "
        "won; 95 % bootstrap interval resampling (GPU, network) cells. Speedup = default "
        "latency / kept latency, geometric mean (1.0 where the default was kept). "
        "Held-out networks were in no training set.",
        "",
        "Search settings per source: " + "; ".join(report.search_settings) + ". Where the "
        "measurements per search and the XGB warm-up reach the trials per task, MetaSchedule's "
        "XGB never trained in the run: its row is MetaSchedule's search without a model.",
        "",
        "| method | trials/task | tasks beaten | share | interval | speedup, all tasks "
        "| speedup, beaten tasks | " + " | ".join(head) + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(networks),
    ]
    for m in report.methods:
        per = [
            f"{m.by_network[n][0]}/{m.by_network[n][1]}" if n in m.by_network else ""
            for n in networks
        ]
        beaten = f"{m.speedup_beaten:.2f}x" if m.speedup_beaten is not None else "none"
        lines.append(
            f"| {m.method} | {m.trials} | {m.beaten}/{m.tasks} | {m.share:.2f} | "
            f"[{m.share_interval[0]:.2f}, {m.share_interval[1]:.2f}] | {m.speedup_all:.2f}x | "
            f"{beaten} | " + " | ".join(per) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", type=Path, help="bench.run report.json files")
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    add_render_option(parser)
    args = parser.parse_args(argv)
    if args.render:
        render(args.render, BeatsDefaultReport, markdown)
        return
    if not args.reports:
        parser.error("give at least one bench.run report.json")
    outcomes, sources, search_settings, held = [], [], [], set()
    for path in args.reports:
        try:
            report = BenchReport.model_validate_json(path.read_text())
        except (OSError, ValidationError, ValueError) as exc:
            sys.exit(f"error: {path} is not a readable bench.run report ({type(exc).__name__})")
        if report.sections.compile is None:
            sys.exit(f"error: {path} has no compile section")
        outcomes.extend(outcomes_of(report))
        sources.append(str(path))
        settings = report.sections.compile.settings
        search_settings.append(
            f"{path.parent.name}: {settings.trials_per_iter} per search, XGB warm-up "
            f"{settings.xgb_warmup}, small budgets {settings.small_budgets}"
        )
        held.update(report.sections.compile.settings.held_out_networks)
    result = BeatsDefaultReport(
        command=public_command("report.beats_default", sys.argv[1:] if argv is None else argv),
        sources=sources,
        search_settings=search_settings,
        held_out_networks=sorted(held),
        outcomes=outcomes,
        methods=summarize(outcomes),
    )
    write_report(result, markdown, args.out, STEM)
    print(markdown(result))


if __name__ == "__main__":
    main()
