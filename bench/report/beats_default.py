"""How often does tuning beat TVM's default schedule, and by how much?

    python -m bench.report.beats_default bench/reports/compile_seed*/report.json \
        bench/reports/compile_t8_seed0/report.json bench/reports/compile_t16_seed0/report.json \
        --user-spec bench/reports/user_spec/user_spec_seed0.json \
        --long bench/reports/budget_seeds/*/report.json --out docs/results   # beats_default.*
    python -m bench.report.beats_default --render docs/results/beats_default.json

Reads the compile-section rows of `bench.run` reports (SIMULATED GPUs; `--trials K` runs
give the rows at K trials per task) and, as a separate group, the rows of
bench/compile/user_spec_tune.py (`simoe-agent tune` on user spec files, operators of networks
outside the suite). Every method measures each task's default schedule (DLight's GPU rules)
once and keeps it unless a tuned schedule beat it (`MethodRow.task_kept` / the CLI's `kept`:
"tuned" or "default"); this counts, per group, trials per task and method, the tasks where
the tuned schedule won, and the speedup over the default: default latency / kept latency
(1.0 where the default was kept), geometric mean over all tasks and over the tasks it beat.
Intervals: 95 % bootstrap resampling (GPU, network) cells, the seeds of a cell staying
together. A task no run beat is listed with the most trials any run spent on it and what the
long searches (`--long`: budget-section reports, 1,000 MetaSchedule trials) found there.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from bench.report.report_model import BenchReport, CompileSettings, MethodRow, UserSpecReport
from bench.reporting import add_render_option, public_command, render, write_report

STEM = "beats_default"
BOOTSTRAP = 2000
TEST_GROUP = "test units, suite networks"
USER_GROUP = "user-spec GPUs outside the catalog, operators of networks outside the suite"


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
    group: str = TEST_GROUP
    measured: int | None = None  # candidates measured for the task (None: not recorded)
    tuned_s: float | None = None  # the best tuned schedule where recorded, won or not


class MethodShare(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: str = TEST_GROUP
    method: str
    trials: int
    tasks: int
    beaten: int
    share: float
    share_interval: tuple[float, float]
    speedup_all: float  # geometric mean of default / kept over every task
    speedup_beaten: float | None  # the same over the tasks where the tuned schedule won
    by_network: dict[str, tuple[int, int]]  # network -> (beaten, tasks)
    unmeasured: int = 0  # runs that measured no candidate of the task (the search failed)


class NeverBeaten(BaseModel):
    """A task whose default no run of any method beat, at any trials per task."""

    model_config = ConfigDict(extra="forbid")

    group: str
    gpu: str
    network: str
    task: str
    runs: int
    most_trials: int  # the most measurements one run spent on the task
    methods: list[str]
    # budget-section runs on the same task (gpu, network, task): "method (seed s): kept"
    long_runs: list[str] = []


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
    user_spec_sources: list[str] = []  # bench/compile/user_spec_tune.py reports
    user_spec_note: str | None = None
    user_spec_commands: list[str] = []  # the invocations that wrote those reports
    long_sources: list[str] = []
    never_beaten: list[NeverBeaten] = []


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
    # a one-task row's measurements are its task's
    measured = row.measured if len(row.task_kept) == 1 else None
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
                measured=measured,
                tuned_s=best if kept == "tuned" else None,
            )
        )
    return out


def user_spec_outcomes(report: UserSpecReport, label: str | None = None) -> list[TaskOutcome]:
    """The CLI runs of bench/compile/user_spec_tune.py with a measured default: the network
    column is the operator, the task the CLI's task name. `label` (default: the report's own)
    follows the method's name, `simoe-fast [range fix]`, so runs of different code stay apart."""
    label = label or report.label
    out = []
    for r in report.rows:
        if r.error is not None or r.kept is None or r.default_s is None or not r.default_s > 0:
            continue
        won = r.kept == "tuned" and r.tuned_s is not None
        out.append(
            TaskOutcome(
                method=f"{r.method} [{label}]" if label else r.method,
                trials=r.trials,
                gpu=r.gpu,
                network=r.operator,
                task=r.task or r.operator,
                seed=r.seed,
                default_s=r.default_s,
                kept_s=r.tuned_s if won and r.tuned_s is not None else r.default_s,
                tuned_won=won,
                group=USER_GROUP,
                measured=r.measured,
                tuned_s=r.tuned_s,
            )
        )
    return out


def never_beaten(outcomes: list[TaskOutcome], long_rows: list[TaskOutcome]) -> list[NeverBeaten]:
    """Tasks (group, GPU, network, task) that no run beat, with the long searches there."""
    tasks: dict[tuple[str, str, str, str], list[TaskOutcome]] = defaultdict(list)
    for o in outcomes:
        tasks[(o.group, o.gpu, o.network, o.task)].append(o)
    out = []
    for (group, gpu, network, task), rows in sorted(tasks.items()):
        if any(o.tuned_won for o in rows):
            continue
        long = [
            f"{o.method} (seed {o.seed}): "
            + (f"beat it {o.default_s / o.kept_s:.2f}x" if o.tuned_won else "did not beat it")
            for o in long_rows
            if (o.gpu, o.network, o.task) == (gpu, network, task)
        ]
        out.append(
            NeverBeaten(
                group=group, gpu=gpu, network=network, task=task, runs=len(rows),
                most_trials=max(o.measured if o.measured is not None else o.trials
                                for o in rows),
                methods=sorted({o.method for o in rows}), long_runs=long,
            )
        )  # fmt: skip
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(float(np.mean(np.log(values))))


def summarize(outcomes: list[TaskOutcome], seed: int = 0) -> list[MethodShare]:
    """Per (method, trials): the share of tasks beaten, its interval, the speedups."""
    groups: dict[tuple[str, int, str], list[TaskOutcome]] = defaultdict(list)
    for o in outcomes:
        groups[(o.group, o.trials, o.method)].append(o)
    rng = np.random.default_rng(seed)
    shares = []
    for (group, trials, method), rows in sorted(groups.items()):
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
                group=group,
                method=method,
                trials=trials,
                tasks=len(rows),
                beaten=len(beaten),
                share=len(beaten) / len(rows),
                share_interval=(float(low), float(high)),
                speedup_all=_geomean([o.default_s / o.kept_s for o in rows]),
                speedup_beaten=_geomean(beaten) if beaten else None,
                by_network={k: (v[0], v[1]) for k, v in sorted(by_network.items())},
                unmeasured=sum(1 for o in rows if o.measured == 0),
            )
        )
    return shares


def xgb_search(settings: CompileSettings) -> str:
    """How a source's ms-xgb-<k> searched: whether XGB ever ranked a candidate in it."""
    k = settings.tlm_budget
    rounds = settings.xgb_small_rounds
    if rounds and rounds > 1:
        per = max(1, k // rounds)
        return (
            f"ms-xgb-{k}: {rounds} searches of {per}, XGB warm-up {min(settings.xgb_warmup, per)}"
            f" (XGB fitted after the first search, ranks the other {rounds - 1})"
        )
    per = min(settings.trials_per_iter, k)
    trained = "never trained" if settings.xgb_warmup >= k or per >= k else "trained"
    return f"ms-xgb-{k}: one search of {per}, XGB warm-up {settings.xgb_warmup} (XGB {trained})"


def _share_table(shares: list[MethodShare], held: set[str], unmeasured: bool) -> list[str]:
    networks = sorted({n for m in shares for n in m.by_network})
    head = [f"{n} (held out)" if n in held else n for n in networks]
    extra = " no candidate measured |" if unmeasured else ""
    lines = [
        "| method | trials/task | tasks beaten | share | interval | speedup, all tasks "
        "| speedup, beaten tasks |" + extra + " " + " | ".join(head) + " |",
        "|---|---|---|---|---|---|---|" + ("---|" if unmeasured else "") + "---|" * len(networks),
    ]
    for m in shares:
        per = [
            f"{m.by_network[n][0]}/{m.by_network[n][1]}" if n in m.by_network else ""
            for n in networks
        ]
        beaten = f"{m.speedup_beaten:.2f}x" if m.speedup_beaten is not None else "none"
        cell = f" {m.unmeasured}/{m.tasks} |" if unmeasured else ""
        lines.append(
            f"| {m.method} | {m.trials} | {m.beaten}/{m.tasks} | {m.share:.2f} | "
            f"[{m.share_interval[0]:.2f}, {m.share_interval[1]:.2f}] | {m.speedup_all:.2f}x | "
            f"{beaten} |{cell} " + " | ".join(per) + " |"
        )
    return lines


def _us(seconds: float | None) -> str:
    return f"{seconds * 1e6:.1f}" if seconds is not None else "none"


def markdown(report: BeatsDefaultReport) -> str:
    held = set(report.held_out_networks)
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
        "Held-out networks were in no training set. Every latency is modelled by the "
        "simulator, none is a measurement.",
    ]
    for group in (TEST_GROUP, USER_GROUP):
        shares = [m for m in report.methods if m.group == group]
        if not shares:
            continue
        lines += ["", f"## {group[0].upper()}{group[1:]}", ""]
        if group == TEST_GROUP:
            lines += [
                "Search settings per source: " + "; ".join(report.search_settings) + ". Where "
                "XGB never trained, the ms-xgb row is MetaSchedule's search without a model "
                "(what MetaSchedule does at such budgets: its warm-up is 100 measurements); "
                "ms-random-<k> is that search with random scores.",
            ]
        else:
            lines += [
                (report.user_spec_note or "")
                + ". Sources: "
                + "; ".join(f"`{s}`" for s in report.user_spec_sources)
                + ", written by "
                + "; ".join(f"`{c}`" for c in report.user_spec_commands)
                + ". simoe-fast = "
                "`--cost-model simoe --model-rounds 5` (the shipped starter model, fast mode); "
                "simoe (where run) = `--cost-model simoe`, the same model scoring "
                "MetaSchedule's own search; ms-xgb = "
                "`--cost-model xgb`, MetaSchedule's default: one search of the trials with "
                "XGB's warm-up of 100 not reached, so XGB never ranked a candidate. "
                '"No candidate measured": the CLI\'s search could not sample its initial '
                "population and measured nothing, so the default was kept by default. "
                "A [label] after a method names the code its runs came from (the label after "
                "its source above); runs of different code are never pooled.",
            ]
        for trials in sorted({m.trials for m in shares}):
            at = [m for m in shares if m.trials == trials]
            lines += ["", f"### {trials} trials per task", ""]
            lines += _share_table(at, held, group == USER_GROUP)
        if group == USER_GROUP:
            runs = [o for o in report.outcomes if o.group == USER_GROUP]
            lines += [
                "",
                "Every run (latencies in µs; tuned = the best tuned schedule, re-measured; "
                "kept by the never-worse rule):",
                "",
                "| GPU | operator | task | method | trials | measured | default | tuned "
                "| kept | default / tuned |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for o in sorted(runs, key=lambda o: (o.gpu, o.network, o.method, o.trials)):
                ratio = f"{o.default_s / o.tuned_s:.2f}" if o.tuned_s else "none"
                lines.append(
                    f"| {o.gpu} | {o.network} | {o.task} | {o.method} | {o.trials} | "
                    f"{o.measured} | {_us(o.default_s)} | {_us(o.tuned_s)} | "
                    f"{'tuned' if o.tuned_won else 'default'} | {ratio} |"
                )
    lines += ["", "## Can the default be beaten at all?", ""]
    if not report.never_beaten:
        lines.append("Every task's default was beaten by at least one run.")
    else:
        lines += [
            "Tasks whose default no run of any method beat, at any trials per task. "
            '"Not beaten within N trials" is what was tried, not a proof that the design '
            "space holds nothing faster. Long searches: "
            + ("; ".join(f"`{s}`" for s in report.long_sources) or "none given")
            + ".",
            "",
        ]
        for t in report.never_beaten:
            long = (
                "; long searches on this task: " + "; ".join(t.long_runs)
                if t.long_runs
                else "; no long search ran on this task"
            )
            within = (
                f"was not beaten within {t.most_trials} trials of the design space"
                if t.most_trials > 0
                else "was never challenged: no run measured a candidate"
            )
            lines.append(
                f"- {t.gpu}, {t.network}, `{t.task}` ({t.group}): the default {within} "
                f"({t.runs} runs of {', '.join(t.methods)}){long}."
            )
    return "\n".join(lines) + "\n"


def _read(path: Path, model: type[Any]) -> Any:
    try:
        return model.model_validate_json(path.read_text())
    except (OSError, ValidationError, ValueError) as exc:
        kind = "bench.run" if model is BenchReport else "user_spec_tune"
        sys.exit(f"error: {path} is not a readable {kind} report ({type(exc).__name__})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", type=Path, help="bench.run report.json files")
    parser.add_argument(
        "--user-spec",
        type=Path,
        nargs="+",
        default=[],
        help="bench/compile/user_spec_tune.py reports (the user-spec group)",
    )
    parser.add_argument(
        "--user-spec-labels",
        nargs="+",
        default=[],
        help="one per --user-spec report: which code its rows come from, shown after the "
        "method's name ('-': the report's own label, or none)",
    )
    parser.add_argument(
        "--long",
        type=Path,
        nargs="+",
        default=[],
        help="bench.run reports with a budget section (long searches on the same tasks)",
    )
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    add_render_option(parser)
    args = parser.parse_args(argv)
    if args.render:
        render(args.render, BeatsDefaultReport, markdown)
        return
    if not args.reports and not args.user_spec:
        parser.error("give at least one bench.run report.json or --user-spec report")
    outcomes, sources, search_settings, held = [], [], [], set()
    for path in args.reports:
        report = _read(path, BenchReport)
        if report.sections.compile is None:
            sys.exit(f"error: {path} has no compile section")
        outcomes.extend(outcomes_of(report))
        sources.append(str(path))
        settings = report.sections.compile.settings
        search_settings.append(
            f"{path.parent.name}: {settings.tlm_budget} trials/task, "
            f"{min(settings.trials_per_iter, settings.tlm_budget)} per search, "
            f"{xgb_search(settings)}, SiMoE "
            f"{settings.expert_epochs}/{settings.shared_epochs} expert/shared epochs, MLP "
            f"{settings.mlp_epochs} epochs"
        )
        held.update(report.sections.compile.settings.held_out_networks)
    if args.user_spec_labels and len(args.user_spec_labels) != len(args.user_spec):
        parser.error("--user-spec-labels: give one label per --user-spec report ('-': none)")
    labels = args.user_spec_labels or ["-"] * len(args.user_spec)
    note, user_commands, user_sources = None, [], []
    for path, label in zip(args.user_spec, labels, strict=True):
        user = _read(path, UserSpecReport)
        shown = user.label if label == "-" else label
        outcomes.extend(user_spec_outcomes(user, shown))
        user_sources.append(f"{path} [{shown}]" if shown else str(path))
        note = user.note
        user_commands.extend(user.commands)
    long_rows = []
    for path in args.long:
        report = _read(path, BenchReport)
        if report.sections.budget is None:
            sys.exit(f"error: {path} has no budget section")
        for row in report.sections.budget.rows:
            long_rows.extend(_row_outcomes(row, report.sections.budget.settings.seed))
    result = BeatsDefaultReport(
        command=public_command("report.beats_default", sys.argv[1:] if argv is None else argv),
        sources=sources,
        search_settings=search_settings,
        held_out_networks=sorted(held),
        outcomes=outcomes,
        methods=summarize(outcomes),
        user_spec_sources=user_sources,
        user_spec_note=note,
        user_spec_commands=user_commands,
        long_sources=[str(p) for p in args.long],
        never_beaten=never_beaten(outcomes, long_rows),
    )
    write_report(result, markdown, args.out, STEM)
    print(markdown(result))


if __name__ == "__main__":
    main()
