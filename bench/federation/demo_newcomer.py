"""The demo's newcomer over several seeds, from one saved fleet state.

`simoe-server demo` ends with one search per method, one seed. This reruns that last
phase, the newcomer's three tunes (`server.demo.newcomer_tunes`: SiMoE zero-shot at
`--budget` trials/task with the model the newcomer received, MetaSchedule's xgb at the
same budget and at the larger one), once per seed, from the same demo run (`--data`: a
`simoe-server demo --out` directory). Each seed starts from a fresh copy of the
newcomer's state as enrolment left it (its store is MetaSchedule's database: an earlier
seed's records would seed the next search) and fresh baseline directories.

Reported: each seed's latencies (SIMULATED on a `sim:` GPU), the geometric mean over the
seeds per method, and the ratios MetaSchedule / SiMoE per seed (>1: SiMoE faster) with
their geometric mean and a 95% bootstrap interval over seeds. MetaSchedule's own spread
across seeds is in the same table.

    python -m bench.federation.demo_newcomer --data runs/demo --seeds 0,1,2,3,4 --out docs/results

`--work WORK` keeps each seed's states; `python -m bench.federation.demo_shared_ranking
--seeds WORK` then lists what each seed's SiMoE tune measured, the offered traces marked.

`--served global` replays the same state with the plain global model of the version the
newcomer received (read from the demo's registry) in place of its shared parts: with the
opt-in newcomer copy (`--newcomer-distill-steps`), what it would have tuned with without the
copy, so one fleet state measures the copy against its absence, seed for seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from bench import reporting
from schemas import BadInputError
from server.demo import DemoPlan, newcomer_tunes
from server.demo_report import DemoReport, DemoRow
from server.processes import cli


class SeedRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int
    rows: list[DemoRow]
    model_used: str  # what the SiMoE tune says it searched with
    cpu_s: float  # the three tunes' processes (user + system)
    wall_s: float
    # schedule sharing (opt-in): schedules the newcomer was offered, its SiMoE tune's
    # measured candidates, and how many of those were offered ones (None: sharing off)
    shared_offered: int | None = None
    shared_tried: int | None = None  # measured candidates of the offered workloads
    shared_measured: int | None = None


class NewcomerReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str
    demo: dict[str, Any]  # the demo run: its plan, fleet, experts delivered, rounds
    network: str
    tuned_tasks: list[str]
    new_gpu: str
    budget: int
    full_budget: int
    seeds: list[int]
    runs: list[SeedRun]
    # what SiMoE tuned with: the model the newcomer received, or the plain global of that
    # version (`--served global`), and the shared arrays that replay changed
    served: Literal["received", "global"] = "received"
    replaced_arrays: list[str] = []
    total_wall_s: float
    load_average_start: list[float]
    load_average_end: list[float]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class _Quiet:
    def event(self, text: str) -> None:
        print(f"  {text}", flush=True)

    def status(self, text: str) -> None:
        pass

    def show(self, text: str) -> None:
        pass


def run_seed(plan: DemoPlan, newcomer_dir: Path, device: str, work: Path) -> SeedRun:
    """The newcomer's three tunes at `plan.seed`, from a fresh copy of its state."""
    seed_dir = work / f"seed-{plan.seed}"
    shutil.rmtree(seed_dir, ignore_errors=True)
    state = seed_dir / "newcomer"
    # not its store: the demo's own SiMoE tune wrote its records there after enrolment
    # (the newcomer enrolled with none), and MetaSchedule would start from them
    shutil.copytree(newcomer_dir, state, ignore=shutil.ignore_patterns("logs", "store.sqlite*"))
    results: list[dict[str, Any]] = []

    def run_tune(args: list[str]) -> dict[str, Any]:
        result = cli("simoe-agent", args, timeout=3600, log=seed_dir / "tune.log")
        results.append(result)
        return result

    cpu, started = _children_cpu_s(), time.perf_counter()
    rows, _selection = newcomer_tunes(
        plan, state, device, seed_dir / "baselines", run_tune, _Quiet()
    )
    used = (results[0].get("model_used") or {}).get("label", "?")
    cpu_s, wall_s = _children_cpu_s() - cpu, time.perf_counter() - started
    offered = tried = measured = None
    if plan.share_schedules:  # the offer came with the copied state (federation/)
        from agent.node_state import NodeState
        from agent.sharing import measured_shared

        offered, tried, measured = measured_shared(NodeState(state))
        print(f"  sharing: offered {offered}; {measured} of {tried} measured were offered ones")
    return SeedRun(
        seed=plan.seed, rows=rows, model_used=used, cpu_s=cpu_s, wall_s=wall_s,
        shared_offered=offered, shared_tried=tried, shared_measured=measured,
    )  # fmt: skip


def serve_plain_global(state: Path, registry_path: Path) -> list[str]:
    """Give the newcomer state `state` the shared parts of the global model of the version it
    received, as the server serves them without the newcomer copy; the names of the arrays
    that changed (none: it had received the plain global). BadInputError, one line, when the
    registry holds no such version."""
    from agent.node_state import NodeState
    from server.registry import Registry
    from simoe_model.model import load_shared_arrays, shared_arrays

    node = NodeState(state)
    version = node.federation_state().global_version
    if not registry_path.is_file():
        raise BadInputError(f"{registry_path}: no registry to read the global model from")
    with Registry(registry_path, read_only=True) as registry:
        arrays = registry.global_model(version)
    if arrays is None:
        raise BadInputError(f"{registry_path}: no global model version {version}")
    model = node.load_model()
    received = shared_arrays(model)
    load_shared_arrays(model, arrays)
    node.save_model(model)
    return sorted(k for k in received if not np.array_equal(received[k], arrays[k]))


# -- the report -----------------------------------------------------------------------------
def geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=np.float64)))))


def geomean_interval(values: Sequence[float], draws: int = 4000) -> tuple[float, float, float]:
    """Geometric mean and a 95% bootstrap interval over the seeds (resampled)."""
    logs = np.log(np.asarray(values, dtype=np.float64))
    if len(logs) < 2:
        return (float(np.exp(logs.mean())),) * 3  # type: ignore[return-value]
    rng = np.random.default_rng(0)
    boots = rng.choice(logs, size=(draws, len(logs)), replace=True).mean(axis=1)
    low, high = np.quantile(boots, [0.025, 0.975])
    return float(np.exp(logs.mean())), float(np.exp(low)), float(np.exp(high))


def ratios(report: NewcomerReport, index: int) -> list[float]:
    """Per seed where both have a latency: row `index`'s latency / SiMoE's (>1: SiMoE faster)."""
    out = []
    for run in report.runs:
        simoe, other = run.rows[0].network_latency_s, run.rows[index].network_latency_s
        if simoe and other:
            out.append(other / simoe)
    return out


def _us(value: float | None) -> str:
    return "none" if value is None else f"{value * 1e6:.2f}"


def served_line(report: NewcomerReport) -> str:
    if report.served == "received":
        return "- SiMoE tuned with the model the newcomer received."
    parts = sorted({k.split(".")[0] for k in report.replaced_arrays}) or ["none"]
    return (
        "- SiMoE tuned with the plain global model of the version the newcomer received "
        f"(`--served global`; {len(report.replaced_arrays)} shared arrays replaced, of "
        f"{', '.join(parts)})."
    )


def markdown(report: NewcomerReport) -> str:
    demo = report.demo
    lines = [
        f"# The demo's newcomer over {len(report.seeds)} seeds (SIMULATED latencies)",
        "",
        f"`{report.command}`",
        "",
        f"- Fleet state: one `simoe-server demo` run ({demo.get('rounds')} rounds; the fleet "
        f"tuned {demo.get('fleet_network')}, {demo.get('fleet_trials')} trials/task; experts "
        f"delivered to the newcomer: {', '.join(demo.get('experts_delivered') or []) or 'none'}).",
        f"- Newcomer: sim:{report.new_gpu}, tunes {report.network}: "
        f"{', '.join(report.tuned_tasks)}; latency = sum of weight x best (microseconds).",
        "- Each seed: a fresh copy of the newcomer's state as enrolment left it; MetaSchedule "
        "in fresh directories. The same seed is passed to all three searches.",
        f"- Load average {reporting.load_text(report.load_average_start)} at the start, "
        f"{reporting.load_text(report.load_average_end)} at the end; "
        f"{report.total_wall_s:.0f} s wall in all.",
        served_line(report),
        "",
        f"| seed | SiMoE zero-shot, {report.budget} | MetaSchedule, {report.budget} "
        f"| MetaSchedule, {report.full_budget} | MS {report.budget} / SiMoE "
        f"| MS {report.full_budget} / SiMoE | CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in report.runs:
        simoe, same, larger = (r.network_latency_s for r in run.rows)
        ratio_same = f"{same / simoe:.3f}" if simoe and same else "n/a"
        ratio_larger = f"{larger / simoe:.3f}" if simoe and larger else "n/a"
        lines.append(
            f"| {run.seed} | {_us(simoe)} | {_us(same)} | {_us(larger)} | {ratio_same} "
            f"| {ratio_larger} | {run.cpu_s:.0f} |"
        )
    lines.append("")
    for run in report.runs:
        for row in run.rows:
            if row.network_latency_s is None:
                lines.append(f"- seed {run.seed}, {row.method}: {row.latency_text()}")
    for index, label in enumerate(
        ("SiMoE zero-shot", f"MetaSchedule, {report.budget}", f"MetaSchedule, {report.full_budget}")
    ):
        values = [r.rows[index].network_latency_s for r in report.runs]
        got = [v for v in values if v]
        if got:
            lines.append(
                f"- {label}: geometric mean {geomean(got) * 1e6:.2f} us over {len(got)} seeds "
                f"(min {min(got) * 1e6:.2f}, max {max(got) * 1e6:.2f})"
            )
    for index, label in ((1, "same budget"), (2, "larger budget")):
        values = ratios(report, index)
        if values:
            mean, low, high = geomean_interval(values)
            wins = sum(v > 1 for v in values)
            lines.append(
                f"- MetaSchedule at the {label} / SiMoE zero-shot: geometric mean {mean:.3f} "
                f"(95% bootstrap interval over seeds {low:.3f} to {high:.3f}); SiMoE faster in "
                f"{wins} of {len(values)} seeds (>1: SiMoE faster)"
            )
    for run in report.runs:
        if run.shared_offered is not None:
            lines.append(
                f"- seed {run.seed}, schedule sharing: {run.shared_offered} schedules offered "
                f"to the newcomer, {run.rows[0].shared_schedules} joined SiMoE's first "
                f"batch, {run.shared_measured} of the {run.shared_tried} candidates it measured "
                "were offered ones"
            )
    models = sorted({r.model_used for r in report.runs})
    lines += ["", f"SiMoE searched with: {'; '.join(models)}", ""]
    return "\n".join(lines)


def paired_lines(first: NewcomerReport, second: NewcomerReport) -> list[str]:
    """SiMoE's latency in `second` over `first`, seed for seed (>1: `first` faster), with the
    geometric mean and its bootstrap interval; for two replays of one demo state (e.g. the
    model received against `--served global`), where SiMoE's tune repeats at a fixed seed
    and only what it tuned with differs. MetaSchedule is set beside it, per replay, to show
    whether the two drew the same baseline (seeded since 8432c0a; before, they did not).
    BadInputError unless both are of one demo."""
    if first.demo != second.demo or first.seeds != second.seeds:
        raise BadInputError("--pair: the two reports are not replays of one demo on one seed set")
    pairs = [
        (a.seed, a.rows[0].network_latency_s, b.rows[0].network_latency_s)
        for a, b in zip(first.runs, second.runs, strict=True)
    ]
    ratios_ = [b / a for _, a, b in pairs if a and b]
    lines = [f"SiMoE, {first.served} then {second.served}, per seed (us):"]
    lines += [f"  seed {s}: {_us(a)} and {_us(b)}" for s, a, b in pairs]
    if ratios_:
        mean, low, high = geomean_interval(ratios_)
        wins = sum(r > 1 for r in ratios_)
        ties = sum(r == 1 for r in ratios_)
        lines.append(
            f"{second.served} / {first.served}: geometric mean {mean:.3f} (95% bootstrap "
            f"interval over seeds {low:.3f} to {high:.3f}); {first.served} faster in {wins}, "
            f"equal in {ties} of {len(ratios_)} seeds"
        )
    for report in (first, second):
        same = [r.rows[1].network_latency_s for r in report.runs if r.rows[1].network_latency_s]
        lines.append(
            f"MetaSchedule at {report.budget}, the {report.served} replay: "
            f"{', '.join(_us(v) for v in same)} us (geometric mean {_us(geomean(same))})"
        )
    return lines


def plan_of(demo: DemoReport) -> DemoPlan:
    """The plan a demo ran; for a report older than `DemoReport.plan`, what its report
    says: the newcomer's network, GPU and budgets, and the FLOPs share its tuned tasks
    covered (the selection rule picks the same tasks again)."""
    if demo.plan:
        known = {f.name for f in dataclasses.fields(DemoPlan)}
        return DemoPlan(**{k: v for k, v in demo.plan.items() if k in known})
    if len(demo.rows) != 3 or demo.flops_share is None:
        raise BadInputError("demo.json: neither a plan nor the newcomer's three rows and tasks")
    return DemoPlan(
        gpus=[n.name for n in demo.nodes if n.device.startswith("sim:")],
        new_gpu=demo.new_gpu, network=demo.fleet_network, fleet_largest_tasks=None,
        new_network=demo.network, flops_share=demo.flops_share,
        fleet_trials=demo.fleet_trials, budget=demo.rows[0].trials_per_task,
        full_budget=demo.rows[2].trials_per_task,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.federation.demo_newcomer", description=__doc__
    )
    parser.add_argument("--data", type=Path, help="a `simoe-server demo --out` directory")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (at least 3)")
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--tag", default="", help="report name: demo_newcomer[_TAG]")
    parser.add_argument("--work", type=Path, help="keep the seeds' state here (default: a temp)")
    parser.add_argument(
        "--served",
        choices=["received", "global"],
        default="received",
        help="SiMoE tunes with the model the newcomer received, or with the plain global of "
        "that version (a paired replay without the opt-in newcomer copy)",
    )
    reporting.add_render_option(parser)
    parser.add_argument(
        "--pair",
        type=Path,
        nargs=2,
        metavar="REPORT",
        help="two reports (.json) replaying one demo state: SiMoE seed for seed; runs nothing",
    )
    args = parser.parse_args(argv)
    stem = "demo_newcomer" + (f"_{args.tag}" if args.tag else "")
    if args.pair:
        first, second = (reporting.read_report(p, NewcomerReport) for p in args.pair)
        print("\n".join(paired_lines(first, second)))
        return
    if args.render:
        print(reporting.render(args.render, NewcomerReport, markdown).command)
        return
    if args.data is None or not (args.data / "demo.json").is_file():
        raise BadInputError("--data: give a `simoe-server demo --out` directory (its demo.json)")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise BadInputError(f"--seeds {args.seeds!r}: give integers, e.g. 0,1,2") from None
    if len(seeds) < 3 or len(set(seeds)) != len(seeds):
        raise BadInputError(f"--seeds {args.seeds!r}: at least 3 different seeds")
    demo = DemoReport.model_validate_json((args.data / "demo.json").read_text())
    base = plan_of(demo)
    newcomer_dir = args.data / "nodes" / f"new-{base.new_gpu}"
    if not (newcomer_dir / "agent.json").is_file():
        raise BadInputError(f"{newcomer_dir}: not the newcomer's state directory")
    load_start, started = reporting.load_average(), time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="demo-newcomer-"))
    runs, replaced = [], []
    try:
        if args.served == "global":  # one copy of the state, served the plain global
            served = work / "served-global"
            shutil.rmtree(served, ignore_errors=True)
            shutil.copytree(newcomer_dir, served, ignore=shutil.ignore_patterns("logs"))
            replaced = serve_plain_global(served, args.data / "server" / "registry.sqlite")
            print(f"served the plain global: {len(replaced)} shared arrays replaced", flush=True)
            newcomer_dir = served
        for seed in seeds:
            print(f"seed {seed}", flush=True)
            plan = dataclasses.replace(base, seed=seed)
            runs.append(run_seed(plan, newcomer_dir, f"sim:{base.new_gpu}", work))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report = NewcomerReport(
        command=reporting.public_command(
            "federation.demo_newcomer", sys.argv[1:] if argv is None else argv
        ),
        demo=demo.model_dump(
            include={
                "plan",
                "fleet_network",
                "fleet_trials",
                "rounds",
                "experts_delivered",
                "nodes",
                "total_wall_s",
                "cpu_s",
            }
        ),  # fmt: skip
        network=base.new_network,
        tuned_tasks=demo.tuned_tasks,
        new_gpu=base.new_gpu,
        budget=base.budget,
        full_budget=base.full_budget,
        seeds=seeds,
        runs=runs,
        served=args.served,
        replaced_arrays=replaced,
        total_wall_s=time.perf_counter() - started,
        load_average_start=load_start,
        load_average_end=reporting.load_average(),
    )
    reporting.write_report(report, markdown, args.out, stem)
    print(markdown(report))


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "demo_newcomer")
