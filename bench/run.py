"""The one entry point of the benchmarks: runs every section, writes the report and BENCHMARKS.md.

    python -m bench.run --quick      # scaled down: minutes on 2 cores
    python -m bench.run --full       # the paper-sized settings: weeks on 2 cores (--resume)

Sections (each writes its part of bench/reports/report.json as soon as it is done, so a
timeout still leaves the finished ones; BENCHMARKS.md is regenerated from that JSON after
every step, never written by hand):
1. compile: compile time and network performance on unseen simulated GPUs
   (bench/compile/compile_time.py)
2. offline: the offline transfer table (bench/transfer/offline_transfer.py, on the same fleet data)
3. federation: round time and bytes per node for 4, 16, 64 nodes
   (bench/federation/federation_overhead.py)
4. cpu: tuned kernels on this machine's CPU against numpy and PyTorch (bench/compile/cpu_kernels.py)
5. budget: one task, MetaSchedule at a realistic budget (1,000 trials) against SiMoE fast's 32
   (bench/compile/compile_time.py; in --full, or on request: --quick --sections budget)

This module runs the sections and writes the JSON. The report's typed rows are
bench/report/report_model.py; BENCHMARKS.md is rendered from them by bench/report/report_md.py
(`--render-only` re-renders without running anything).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench import prepare
from bench.report.claims import summarize
from bench.report.report_md import markdown
from bench.report.report_model import (
    BenchReport,
    CompileSection,
    CompileSettings,
    CpuSection,
    EarlierRun,
    FederationSection,
    Machine,
    MethodRow,
    OfflineResult,
    OfflineSection,
    OtherRun,
    Repeat,
    Sections,
)
from bench.report.report_refs import attach

ROOT = Path(__file__).resolve().parent.parent
REPORTS = Path("bench") / "reports"
SECTIONS = ("compile", "offline", "federation", "cpu", "budget")
QUICK_SECTIONS = ("compile", "offline", "federation", "cpu")  # budget (~15 min): on request
CPU_QUICK_TRIALS = 16


# -- machine -----------------------------------------------------------------------------------
def machine_info() -> Machine:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return Machine(
        cpu_model=model,
        logical_cores=os.cpu_count(),
        python=platform.python_version(),
        system=platform.system(),
        load_average_at_start=[round(x, 2) for x in load],
    )


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (section subprocesses)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


# -- report ------------------------------------------------------------------------------------
def load_report(path: Path) -> BenchReport:
    """A report.json, validated; an old one that does not validate is regenerated, not read."""
    return BenchReport.model_validate_json(path.read_text())


def write_report(report: BenchReport, path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(report.model_dump_json(indent=1))
    tmp.replace(path)


class Report:
    """The report JSON and the markdown rendered from it, rewritten after every step."""

    def __init__(self, out: Path, markdown_path: Path, mode: str, argv: list[str]) -> None:
        self.out = out
        self.markdown_path = markdown_path
        self.started = time.perf_counter()
        self.data = BenchReport(
            mode=mode,
            command=" ".join(["python", "-m", "bench.run", *argv]),
            machine=machine_info(),
            started_utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        )
        out.mkdir(parents=True, exist_ok=True)

    def save(self) -> None:
        self.data.elapsed_s = time.perf_counter() - self.started
        self.data.cpu_s = _cpu_s()
        attach(self.data)
        self.data.machine.load_average_now = [round(x, 2) for x in os.getloadavg()]
        write_report(self.data, self.out / "report.json")
        self.markdown_path.write_text(markdown(self.data))


# -- sections ----------------------------------------------------------------------------------
def section_compile(report: Report, args: argparse.Namespace, say: Callable[[str], None]) -> None:
    from bench.compile import compile_time, presets

    settings = (presets.FULL if args.full else presets.QUICK).model_copy(update={"seed": args.seed})
    if args.units:
        settings = settings.model_copy(update={"unseen_gpus": args.units})
    if args.trials is not None:
        settings = with_trials(settings, args.trials)
    if args.methods:
        settings = settings.model_copy(
            update={"methods": None if args.methods == ["all"] else args.methods}
        )

    def on_row(partial: CompileSection) -> None:
        partial.summary = summarize(partial.rows, settings.tlm_budget)
        report.data.sections.compile = partial
        report.save()

    done: list[MethodRow] = []
    if args.previous is not None:
        section = args.previous.sections.compile
        if section is not None and section.settings == settings:
            done = section.rows
            say(f"resuming: {len(done)} finished run(s) of the compile section kept")
        else:
            say("--resume: the earlier compile section has other settings; starting afresh")
    result = compile_time.run_section(
        settings, args.work, say=say, on_row=on_row, done=done,
        fleet_stores="offline" in args.sections_run,
    )  # fmt: skip
    report.data.sections.compile = result


def with_trials(settings: CompileSettings, trials: int) -> CompileSettings:
    """The compile section at `trials` measurements per task for every method (SiMoE fast,
    its peers, the small-budget MetaSchedule runs) instead of TLM's 32: the preset's methods
    named for that budget (ms-xgb-32 -> ms-xgb-<trials>) are renamed with it."""
    old = f"-{settings.tlm_budget}"

    def rename(method: str) -> str:
        return method.removesuffix(old) + f"-{trials}" if method.endswith(old) else method

    methods = None if settings.methods is None else [rename(m) for m in settings.methods]
    return settings.model_copy(
        update={"tlm_budget": trials, "small_budgets": [trials], "methods": methods}
    )


def section_budget(report: Report, args: argparse.Namespace, say: Callable[[str], None]) -> None:
    """One task, MetaSchedule at a realistic budget (1,000 trials) against SiMoE fast's 32."""
    from bench.compile import compile_time, presets

    settings = (presets.FULL if args.full else presets.QUICK_BUDGET).model_copy(
        update={"seed": args.seed}
    )
    if args.units:  # one (unit, seed) per run: issue 24's claim over seeds and units
        settings = settings.model_copy(update={"unseen_gpus": args.units})
    if args.methods:
        settings = settings.model_copy(
            update={"methods": None if args.methods == ["all"] else args.methods}
        )
    full_method = f"ms-xgb-{settings.long_budget}"

    def on_row(partial: CompileSection) -> None:
        partial.summary = summarize(partial.rows, settings.tlm_budget, full_method=full_method)
        report.data.sections.budget = partial
        report.save()

    result = compile_time.run_budget_section(settings, args.work, say=say, on_row=on_row)
    report.data.sections.budget = result


def section_offline(report: Report, args: argparse.Namespace, say: Callable[[str], None]) -> None:
    """bench/transfer/offline_transfer.py on the compile section's fleet stores (synthetic
    otherwise)."""
    from bench.compile import presets

    settings = presets.FULL if args.full else presets.QUICK
    fleet = args.work / "fleet" / "suite"
    out = report.out / "offline"
    command = [sys.executable, "-m", "bench.transfer.offline_transfer", "--out", str(out)]
    if fleet.exists() and any(fleet.glob("*.sqlite")):
        # the training GPUs: the section's (the protocol's training split), never the other
        # test units whose stores the fleet directory also holds
        train = [g for g in settings.train_gpus if (fleet / f"{g}.sqlite").exists()]
        command += ["--data", str(fleet), "--held-out", ",".join(settings.unseen_gpus)]
        command += ["--train", ",".join(train)]
        data = f"fleet stores of the tuned tasks of {', '.join(settings.networks)} (simulated GPUs)"
    else:
        command += ["--synthetic", "--synthetic-size", "12,8,120"]
        data = "synthetic fleet (the compile section's stores were missing)"
    if not args.full:
        command += ["--budgets", "0,16,64", "--expert-epochs", "10", "--shared-epochs", "10"]
        command += ["--adapt-epochs", "10", "--mlp-epochs", "10"]
    else:
        command += ["--ablations"]
    say(f"offline transfer: {data}")
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"offline_transfer exited {proc.returncode}: {' | '.join(tail)}")
    stem = "offline_transfer_synthetic" if "--synthetic" in command else "offline_transfer"
    result = json.loads((out / f"{stem}.json").read_text())
    shown = [
        c if not c.startswith(str(args.work)) else "<work>" + c[len(str(args.work)) :]
        for c in command[1:]
    ]
    report.data.sections.offline = OfflineSection(
        command=" ".join(["python", *shown]).replace(str(ROOT) + os.sep, ""),
        data=data,
        wall_s=time.perf_counter() - started,
        markdown=(out / f"{stem}.md").read_text(),
        plot=f"offline/{stem}.png",
        result=OfflineResult.model_validate(
            {k: result[k] for k in ("held_out", "train_gpus", "budgets", "results")}
        ),
    )


def section_federation(
    report: Report, args: argparse.Namespace, say: Callable[[str], None]
) -> None:
    from bench.compile import compile_data, presets
    from bench.federation import federation_overhead

    settings = presets.FULL if args.full else presets.QUICK
    gpus = settings.train_gpus[:6]
    profiles = list(compile_data.profile_vectors(gpus, args.work / "profiles").values())
    counts = [4, 16, 64]
    rounds = 5 if args.full else 3
    say(f"federation overhead: {counts} nodes, {rounds} rounds each")
    report.data.sections.federation = FederationSection.model_validate(
        federation_overhead.run_section(counts, rounds, profiles)
    )


def section_cpu(report: Report, args: argparse.Namespace, say: Callable[[str], None]) -> None:
    from bench.compile import cpu_kernels

    ops = cpu_kernels.FULL_OPS if args.full else cpu_kernels.QUICK_OPS
    trials = 256 if args.full else CPU_QUICK_TRIALS
    report.data.sections.cpu = CpuSection.model_validate(
        cpu_kernels.run_section(ops, trials, say=say)
    )


RUNNERS = {
    "compile": section_compile,
    "offline": section_offline,
    "federation": section_federation,
    "cpu": section_cpu,
    "budget": section_budget,
}


# -- merging and rendering -----------------------------------------------------------------------
def _origin(data: BenchReport, name: str) -> str:
    """The invocation that ran the report's section `name`."""
    for o in data.other_runs:
        if name in o.sections:
            return o.command
    return data.command


def _keep_earlier(data: BenchReport, name: str, replaced_by: str) -> None:
    """The report's section `name` (and its repeats) into earlier_runs, before a merge puts
    another run in its place: a report adds runs, it never drops one."""
    section = getattr(data.sections, name)
    if section is None:
        return
    repeats = list(getattr(data, f"{name}_repeats", []))
    data.earlier_runs.append(
        EarlierRun(
            section=name, command=_origin(data, name), replaced_by=replaced_by,
            sections=Sections(**{name: section}), repeats=repeats,
            wall_s=data.section_seconds.get(name), cpu_s=data.section_cpu_s.get(name),
        )
    )  # fmt: skip


def merge_reports(
    out: Path, others: list[Path], replace: list[str] | None = None, command: str = ""
) -> None:
    """Sections run by other invocations (e.g. in parallel) join the main report; a compile
    or budget section this report already has joins as a repeat (the run-to-run spread).
    `replace`: these sections (and their repeats) make way, so the first of `others` that has
    one supplies it and the rest join as its repeats. Nothing is dropped: a section that makes
    way (replaced, or a federation or CPU section a merged run supplies again) and an offline
    section a merged run brings beside the report's own are kept in `earlier_runs`, which
    the report lists. `command`: the merge's own command line, for the record."""
    path = out / "report.json"
    data = load_report(path)
    by = command or "python -m bench.run --merge " + " ".join(str(o) for o in others)
    for name in replace or []:
        _keep_earlier(data, name, by)
    for o in data.other_runs:  # the invocations that supplied a replaced section
        o.sections = [x for x in o.sections if x not in (replace or [])]
    data.other_runs = [o for o in data.other_runs if o.sections]
    for name in replace or []:
        setattr(data.sections, name, None)
        data.section_seconds.pop(name, None)
        data.section_cpu_s.pop(name, None)
        if name in ("compile", "budget"):
            setattr(data, f"{name}_repeats", [])
    for other in others:
        extra = load_report(other)
        merged = []
        for name in Sections.model_fields:
            section = getattr(extra.sections, name)
            if section is None:
                continue
            if name in ("compile", "offline", "budget") and getattr(data.sections, name):
                if isinstance(section, CompileSection):  # a repeat: kept to show the spread
                    repeats = data.compile_repeats if name == "compile" else data.budget_repeats
                    repeats.append(
                        Repeat(command=extra.command, rows=section.rows, settings=section.settings,
                               load_average_at_start=extra.machine.load_average_at_start,
                               cpu_s=extra.section_cpu_s.get(name))
                    )  # fmt: skip
                else:  # a second offline run: kept beside the shown one, not dropped
                    data.earlier_runs.append(
                        EarlierRun(
                            section=name, command=extra.command,
                            replaced_by=f"not shown: the report's own run of it stays ({by})",
                            sections=Sections(**{name: section}),
                            wall_s=extra.section_seconds.get(name),
                            cpu_s=extra.section_cpu_s.get(name),
                        )
                    )  # fmt: skip
                continue
            _keep_earlier(data, name, by)  # a federation or CPU section supplied again
            for o in data.other_runs:
                o.sections = [x for x in o.sections if x != name]
            data.other_runs = [o for o in data.other_runs if o.sections]
            merged.append(name)
            setattr(data.sections, name, section)
            data.section_seconds[name] = extra.section_seconds.get(name)
            data.section_cpu_s[name] = extra.section_cpu_s.get(name)
            if data.section_cpu_s[name] is None and set(extra.section_seconds) == {name}:
                data.section_cpu_s[name] = extra.cpu_s  # its only section: all its CPU
            data.errors.pop(name, None)
            if name in extra.errors:
                data.errors[name] = extra.errors[name]
        if merged:
            data.other_runs.append(
                OtherRun(command=extra.command, sections=sorted(merged), elapsed_s=extra.elapsed_s,
                         load_average_at_start=extra.machine.load_average_at_start)
            )  # fmt: skip
        data.earlier_runs += [  # what the merged report itself kept
            e for e in extra.earlier_runs if e not in data.earlier_runs
        ]
    write_report(data, path)


def render_only(out: Path, markdown_path: Path) -> int:
    """Regenerate the markdown (and the compile summary) from the numbers in report.json."""
    data = load_report(out / "report.json")
    c = data.sections.compile
    if c:
        c.summary = summarize(c.rows, c.settings.tlm_budget)
    attach(data)
    plot_curves(data, out)
    write_report(data, out / "report.json")
    markdown_path.write_text(markdown(data))
    return 0


def plot_curves(report: BenchReport, out: Path) -> None:
    """The one curve figure (bench.report.curves) of the compile and budget sections."""
    from bench.report.curves import plot

    data = report.model_dump(mode="json")
    data["sections"] = {k: v for k, v in data["sections"].items() if v is not None}
    path = plot(data, out / "curves.png")
    if path is None:
        return
    path = path.resolve()
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for section in (report.sections.compile, report.sections.budget):
        if section is not None:
            section.curves_png = shown.as_posix()


# -- main --------------------------------------------------------------------------------------
def _names(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name")
    return names


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a positive whole number, not {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from bench.compile.presets import QUICK_METHODS, TEST_UNITS_COMPILE
    from bench.protocol import units

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="scaled-down settings (default)")
    mode.add_argument(
        "--full", action="store_true", help="the paper-sized settings (weeks on 2 cores)"
    )
    parser.add_argument(
        "--sections",
        default=None,
        help=f"comma list of sections of {','.join(SECTIONS)} (default: {','.join(QUICK_SECTIONS)} "
        "in --quick, all in --full)",
    )
    parser.add_argument("--out", type=Path, default=REPORTS, help="report directory")
    parser.add_argument("--markdown", type=Path, default=Path("BENCHMARKS.md"))
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(".simoe") / "bench-work",
        help="scratch directory (fleet stores, cached profiles, MetaSchedule logs)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the compile and budget sections' seed (sampling, training, search); a run at "
        "another seed merged with --merge joins as a repeat",
    )
    parser.add_argument(
        "--units",
        type=_names,
        default=None,
        help="the compile section's test units, comma-separated (default: --quick's one, "
        f"--full's {','.join(TEST_UNITS_COMPILE)}; bench/protocol.py's test split)",
    )
    parser.add_argument(
        "--methods",
        type=_names,
        default=None,
        help="the compile section's methods, comma-separated, or 'all' (default: --quick's "
        f"{','.join(QUICK_METHODS)}; all in --full)",
    )
    parser.add_argument(
        "--trials",
        type=_positive,
        default=None,
        help="the compile section's measurements per task for every method (SiMoE fast, its "
        "peers, MetaSchedule's small-budget runs; default: TLM's 32); the other sections keep "
        "their presets",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="only regenerate the markdown from an existing report.json (no benchmark runs)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        help="add the sections of these report.json files (runs of other --sections) to the "
        "report in --out, then regenerate the markdown",
    )
    parser.add_argument(
        "--replace",
        type=_names,
        default=None,
        help=f"with --merge: these sections of {','.join(SECTIONS)} (and their repeats) make "
        "way, so the merged runs supply them; the report keeps them as earlier runs",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the compile section's finished runs from --out's report.json (same "
        "settings) and run only the rest: --full takes weeks on 2 cores",
    )
    args = parser.parse_args(argv)
    if args.units and (bad := [u for u in args.units if u not in units("test")]):
        parser.error(f"--units: {', '.join(bad)} not in the protocol's test split")
    if args.replace and not args.merge:
        parser.error("--replace goes with --merge")
    if args.merge:
        merge_reports(
            ROOT / args.out, [ROOT / p for p in args.merge], args.replace,
            command=" ".join(["python -m bench.run", *argv]),
        )  # fmt: skip
        data = load_report(ROOT / args.out / "report.json")  # the merge itself, recorded
        data.merge_commands.append(" ".join(["python -m bench.run", *argv]))
        write_report(data, ROOT / args.out / "report.json")
    if args.render_only or args.merge:
        return render_only(ROOT / args.out, ROOT / args.markdown)
    chosen = args.sections or ",".join(SECTIONS if args.full else QUICK_SECTIONS)
    sections = [x.strip() for x in chosen.split(",") if x.strip()]
    unknown = [x for x in sections if x not in RUNNERS]
    if unknown:
        parser.error(f"unknown sections {unknown}; known: {', '.join(SECTIONS)}")
    args.sections_run = sections
    os.chdir(ROOT)

    args.work.mkdir(parents=True, exist_ok=True)
    args.previous = None  # read before the new report overwrites it
    if args.resume:
        path = args.out / "report.json"
        if not path.exists():
            parser.error(f"--resume: no {path} to resume from")
        args.previous = load_report(path)
    console = Console(stderr=True)
    report = Report(args.out, args.markdown, "full" if args.full else "quick", argv)
    report.save()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} sections"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        bar = progress.add_task("benchmarks", total=len(sections))

        def say(text: str) -> None:
            progress.console.log(text)
            progress.update(bar, description=text[:60])

        for name in sections:
            started, cpu0 = time.perf_counter(), _cpu_s()
            try:
                RUNNERS[name](report, args, say)
            except Exception as exc:  # noqa: BLE001 - one failed section must not lose the rest
                report.data.errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                console.print(traceback.format_exc(limit=5))
            report.data.section_seconds[name] = time.perf_counter() - started
            report.data.section_cpu_s[name] = _cpu_s() - cpu0
            report.save()
            progress.advance(bar)
    plot_curves(report.data, report.out)
    report.save()
    console.print(f"report: {args.out / 'report.json'}, {args.markdown}")
    return 1 if report.data.errors else 0


if __name__ == "__main__":
    prepare()
    sys.exit(main())
