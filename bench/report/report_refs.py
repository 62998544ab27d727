"""BENCHMARKS.md's sections on the MetaSchedule-20K references (bench/compile/reference.py: what
they cost and how far they are) and on the issue-12 targets this report misses."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.report import budget_seeds
from bench.report.claims import (
    TARGET_COMPILE_SPEEDUP,
    TARGET_PERF_SHARE,
    Claims,
    peer_target,
    peers_at,
    summarize,
)
from bench.report.md_format import fmt
from bench.report.report_model import BenchReport, ReferenceSummary, TrialCost, own_sections

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "bench" / "reports" / "references"
# the protocol's references: 4 networks (ResNet-50, MobileNetV2, the BERT layer and the
# GPT-2-style block) x 3 test units of different generations
PAIRS_NEEDED = 4 * 3


def load_references(where: Path = REFERENCES) -> list[ReferenceSummary]:
    """Every committed reference summary (bench/reports/references/*/summary.json)."""
    out = []
    for path in sorted(where.glob("*/summary.json")):
        d = json.loads(path.read_text())
        last = d["runs"][-1] if d.get("runs") else {}
        out.append(
            ReferenceSummary(
                network=d["network"], unit=d["unit"], trials=d["trials"],
                target_trials=d["target_trials"], in_database=d["in_database"],
                tasks=d["tasks"], tasks_with_records=d["tasks_with_records"],
                network_latency_s=d.get("network_latency_s"),
                cpu_s_total=d["cpu_s_total"],
                modelled_measure_s_total=d["modelled_measure_s_total"],
                cpu_s_per_trial=d.get("cpu_s_per_trial_this_run"),
                projected_cpu_h_to_finish=d.get("projected_cpu_h_to_finish"),
                metaschedule_defaults=bool(d["settings"].get("metaschedule_defaults")),
                pieces=len(d.get("runs", [])), last_command=last.get("command", ""),
                last_load=[*last.get("load_start", []), *last.get("load_end", [])],
                last_wall_s=last.get("wall_s"), task_best_s=d.get("task_best_s", {}),
            )
        )  # fmt: skip
    return out


def trial_cost_md(cost: TrialCost | None) -> list[str]:
    """Where a reference trial's CPU goes: MetaSchedule's own search, or something of ours."""
    if cost is None:
        return []
    share = cost.share_of_profiled_wall
    names = {
        "metaschedule_cpp_search": "MetaSchedule's C++ evolutionary search (sampling, "
        "mutation, postprocessors, features)",
        "xgb": "XGB training and scoring",
        "simulator": "the simulated GPU's latency model (ours)",
        "tvm_import_once": "TVM's one-off import (once per process)",
    }
    return [
        f"Where a trial's CPU goes (`{cost.command}`; {cost.task} of {cost.network} on "
        f"sim:{cost.unit}, {cost.trials} trials, {cost.cpu_s:.0f} CPU s = "
        f"{fmt(cost.cpu_s_per_trial, '.2f')} CPU s per trial, load {cost.load_start} -> "
        f"{cost.load_end}; shares of the profiled wall time, under cProfile): "
        + "; ".join(f"{names.get(k, k)} {v:.1%}" for k, v in share.items())
        + ". MetaSchedule's own search dominates; nothing of ours (the simulator, the "
        "snapshots) is worth cutting, and its default search settings stay as they are.",
        "",
    ]


def references_md(refs: list[ReferenceSummary]) -> list[str]:
    lines = [
        "## 6. The MetaSchedule-20K references: cost and progress (SIMULATED units)",
        "",
        "TLM's baseline: MetaSchedule with 20,000 measured trials per network, its gradient "
        "task scheduler and default search (population 512, 4 genetic iterations, 64 trials "
        "per search, XGB). `bench/compile/reference.py` computes one (network, unit) reference "
        "resumably: it stops at `--budget-s` (or on SIGTERM, after the batch in flight), "
        "snapshots its tuning database gzipped under bench/reports/references/<network>__<unit>/"
        " after every batch, and a later run (a fresh clone too) continues from it. Continue "
        "or start one with:",
        "",
        "    nice -n 10 python -m bench.compile.reference --network bert_layer --unit a30-u1 "
        "--trials 20000 --budget-s 1800",
        "",
    ]
    if not refs:
        return [*lines, "No reference has been started yet.", ""]
    lines += [
        "| network | unit | trials done / target | tasks measured | network latency so far ms "
        "| CPU s so far | search CPU s per trial (last piece) | projected CPU h to finish "
        "| pieces | last piece: wall s, load at start and end |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in refs:
        lat = fmt(r.network_latency_s * 1e3 if r.network_latency_s else None, ".4f")
        lines.append(
            f"| {r.network} | {r.unit} | {r.trials} / {r.target_trials} "
            f"| {r.tasks_with_records} / {r.tasks} | {lat} | {r.cpu_s_total:.0f} "
            f"| {fmt(r.cpu_s_per_trial, '.2f')} | {fmt(r.projected_cpu_h_to_finish, '.1f')} "
            f"| {r.pieces} | {fmt(r.last_wall_s, '.0f')}, {r.last_load} |"
        )
    rates = [r.cpu_s_per_trial for r in refs if r.cpu_s_per_trial and r.metaschedule_defaults]
    if rates:
        rate = math.exp(sum(math.log(x) for x in rates) / len(rates))
        per_pair = 20000 * rate / 3600
        lines += [
            "",
            f"At the measured {rate:.2f} CPU s of search per trial (geometric mean of the "
            "last pieces; it grows as XGB's training data grows, so this is a lower bound), "
            f"one reference costs about {per_pair:.1f} CPU hours, and the protocol's "
            f"{PAIRS_NEEDED} (4 networks x 3 test units) about {per_pair * PAIRS_NEEDED:.0f} "
            f"CPU hours: {per_pair * PAIRS_NEEDED / 2:.0f} hours of wall time on this 2-core "
            f"machine with nothing else running, about {per_pair * PAIRS_NEEDED / 16:.0f} on "
            "16 cores (one reference per core; a simulated unit needs no GPU). Until they "
            "exist, every 'relative to the reference' figure in this report is relative to "
            "the best MetaSchedule run available, named where it is used.",
        ]
    # the cost is a projection only from searches at MetaSchedule's defaults (the rates)
    cost = "the CPU hours above, far beyond 2 shared cores" if rates else "more than 2 cores have"
    lines += [
        "",
        "**Why MetaSchedule-20K is not the headline here** (issue 24): finishing the "
        f"protocol's references costs {cost}, and a "
        "finished one would still be a simulated reference, not a measurement. The "
        "compile-time claim is therefore measured where it can be repeated: section 5's ratio "
        "at 95% (and 99%) of MetaSchedule at 1,000 trials on one task, over seeds and test "
        "units (each run's command and CPU cost named there), and on real GPUs against an "
        "exactly known optimum (section 0). `bench.compile.reference` stays as it is, for "
        "anyone with more cores.",
    ]
    return [*lines, ""]


def missed_md(report: BenchReport) -> list[str]:
    """Every issue-12 target this report does not meet, by how much and why."""
    lines = ["## Targets missed (issue 12)", ""]
    c = report.sections.compile
    done = [r for r in report.references if r.trials >= r.target_trials]
    lines.append(
        f"- **MetaSchedule-20K references**: {len(done)} of {PAIRS_NEEDED} finished, so the "
        "headline (95% of MetaSchedule-20K at 10·g, compile time at least "
        f"{TARGET_COMPILE_SPEEDUP:.0f}x shorter, on 3 test units) is not measured: compute "
        "(section 6)."
    )
    if c is not None and c.summary:
        k = c.settings.tlm_budget
        claims = Claims(c.summary, k)
        if claims.speedup is not None and claims.speedup < TARGET_COMPILE_SPEEDUP:
            lines.append(
                f"- Compile-time ratio against this run's MetaSchedule-full: "
                f"{claims.speedup:.2f}x against {TARGET_COMPILE_SPEEDUP:.0f}x; the quick "
                "MetaSchedule-full measures 64 trials per task, not 20,000 per network, so "
                "the measurement ratio caps the compile ratio near 2x (section 1)."
            )
        if claims.perf is not None and claims.perf < TARGET_PERF_SHARE:
            lines.append(f"- Performance kept: {claims.perf:.1%} against 95%.")
        for peer in peers_at(k):
            value = claims.vs_peer.get(peer)
            target = peer_target(peer)
            have = [e for e in c.summary if e.speedup_vs.get(peer)]
            short = [e for e in have if e.speedup_vs[peer] < target]
            if value is not None and (value < target or short):
                lines.append(
                    f"- SiMoE fast against {peer} at {k} (seed {c.settings.seed}): geometric "
                    f"mean {value:.3f}x against {target}x "
                    f"({'missed' if value < target else 'met'}); below the target on "
                    f"{len(short)} of {len(have)} network x unit pairs: "
                    + ", ".join(f"{e.network}/{e.gpu} {e.speedup_vs[peer]:.2f}x" for e in short)
                    + "."
                )
        short = {n: i.flops_share_tuned or 0.0 for n, i in c.networks.items()}
        short = {n: v for n, v in short.items() if v < 0.8}
        if short:
            lines.append(
                f"- Task subset: {c.settings.max_tasks or 'all'} task(s) per network; under "
                "the issue's 80% of a network's FLOPs for "
                + ", ".join(f"{n} ({v:.0%})" for n, v in short.items())
                + ", so their figures are those of the tuned tasks, not of the network: more "
                "tasks per method, unit and seed do not fit the time on 2 cores."
            )
        if len(c.settings.unseen_gpus) < 3:
            lines.append(f"- Units: {len(c.settings.unseen_gpus)} test unit(s) in this run, not 3.")
        if not report.compile_repeats:
            lines.append("- Seeds: one run of the compile section, not 2 seeds.")
        else:  # every run (seed) together, as section 1's run-to-run lines give them
            runs = [c.rows, *(r.rows for r in report.compile_repeats)]
            every = [e for rows in runs for e in summarize(rows, k)]
            pooled = Claims(every, k)
            for peer, value in pooled.vs_peer.items():
                target = peer_target(peer)
                if value is not None and value < target:
                    lines.append(
                        f"- All {len(runs)} runs (seeds) together: SiMoE fast against {peer} "
                        f"at {k}: {value:.3f}x against {target}x."
                    )
    lines += _budget_seeds_missed(report)
    if report.mode == "quick" and not own_sections(report):
        lines.append(
            "- `python -m bench.run --quick` under 15 minutes on 2 cores: not timed as one "
            "invocation of this code; each section's own wall and CPU time is in the section "
            "timings below and with its command at the top."
        )
    elif report.mode == "quick" and report.elapsed_s / 60 >= 15:
        lines.append(
            f"- `{report.command}` started {report.started_utc} UTC took "
            f"{report.elapsed_s / 60:.1f} min ({report.cpu_s or 0:.0f} CPU s), over 15; later "
            "sections came from the other invocations named at the top."
        )
    lines.append(
        "- Real GPU run (SiMoE at 10·g and MetaSchedule against PyTorch): no NVIDIA GPU was "
        "available to this run."
    )
    return [*lines, ""]


def _budget_seeds_missed(report: BenchReport) -> list[str]:
    """Section 5 over seeds and units (issue 24): each SiMoE mode's median ratio at 95% of
    its run's MetaSchedule-1000 where it misses the goal."""
    runs = budget_seeds.from_report(report)
    if len(runs) < 2:
        return []
    out = []
    for method in ("simoe-fast", "simoe-full"):
        sp = budget_seeds.spread(runs, method, "95", "seed")
        if sp.runs and (sp.median or 0.0) < budget_seeds.GOAL_RATIO:
            out.append(
                f"- Section 5 over {sp.runs} (unit, seed) runs: {method}'s median compile-time "
                f"ratio at 95% of MetaSchedule-1000 is "
                f"{budget_seeds.verdict_ratio(sp.median, budget_seeds.GOAL_RATIO)} "
                f"(reached 95% in {sp.reached} of {sp.runs})."
            )
    return out


def attach(report: BenchReport, where: Path = REFERENCES) -> Any:
    """The references' summaries and the measured cost of a trial, into the report (its
    JSON renders BENCHMARKS.md)."""
    report.references = load_references(where)
    cost = where / "trial_cost.json"
    report.reference_trial_cost = (
        TrialCost.model_validate_json(cost.read_text()) if cost.exists() else None
    )
    return report


def at_measurements(row: dict[str, Any], n: int) -> tuple[float, float] | None:
    """(compile s, latency) of a one-task run after its first n measurements (its curve has
    a point per measurement, after the default's when that was measured first)."""
    curve, measured = row.get("curve") or [], row.get("measured", 0)
    if len(row.get("task_best_s", {})) != 1 or measured < n:
        return None
    first = len(curve) - measured  # 1 when the default's point leads, else 0
    if first not in (0, 1):
        return None
    seconds, latency = curve[first + n - 1]
    return float(seconds), float(latency)


def ten_g_md(report: BenchReport, n: int = 10) -> list[str]:
    """Issue 12's headline point, 10 measurements per task (10·g), against the best
    MetaSchedule run available per panel (MetaSchedule-20K where it has run far enough)."""
    from bench.report.curves import panels

    rows = []
    for panel in panels(report.model_dump(mode="json")):
        if "(compile section" not in panel["title"]:
            continue
        for row in panel["rows"]:
            if row["method"] not in ("simoe-fast", "mlp-fast"):
                continue
            point = at_measurements(row, n)
            if point is None:
                continue
            seconds, latency = point
            rows.append(
                f"| {row['network']} | {row['gpu']} | {row['method']} "
                f"| {latency * 1e3:.4f} | {panel['reference_s'] / latency:.1%} | {seconds:.0f} "
                f"| {panel['reference']} |"
            )
    if not rows:
        return []
    return [
        f"**At {n}·g** ({n} measurements per task; one-task runs, from each run's curve: its "
        f"model's top {n}). Performance = the reference's latency / the method's; the "
        "reference is the best MetaSchedule run available for the panel, NOT "
        "MetaSchedule-20K (none has finished: section 6), so the issue's 95% / 61x test "
        "cannot be read here:",
        "",
        f"| network | unit | method | latency ms at {n}·g | perf vs reference | compile s "
        "| reference |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
