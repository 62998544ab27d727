"""BENCHMARKS.md's run-to-run spread of section 1: the same section at other seeds, merged
as repeats (`python -m bench.run --merge ... --replace compile`), each run's claims and all
of them together, and MetaSchedule's own spread."""

from __future__ import annotations

import numpy as np

from bench.report.claims import Claims, peer_target, summarize, verdict
from bench.report.md_format import fmt, ms, peer_lines
from bench.report.report_model import MethodRow, Repeat


def repeats_md(rows: list[MethodRow], repeats: list[Repeat]) -> list[str]:
    """The same section run again (same settings, same seed): how far the results move."""
    if not repeats:
        return []
    lines = [
        "**Run-to-run spread.** The same settings were run again "
        + "; ".join(f"(`{r.command}`, seed {r.settings.seed})" for r in repeats)
        + ". Network latency in ms, this report's run first; the evolutionary search is not "
        "deterministic across runs (threads, timing), and XGB scores at random in its warm-up:",
        "",
        "| network | GPU | method | "
        + " | ".join(f"run {i + 1}" for i in range(len(repeats) + 1))
        + " |",
        "|---|---|---|" + "---|" * (len(repeats) + 1),
    ]
    for r in rows:
        values = [r.network_latency_s]
        for rep in repeats:
            key = (r.network, r.gpu, r.method)
            match = [x for x in rep.rows if (x.network, x.gpu, x.method) == key]
            values.append(match[0].network_latency_s if match else None)
        cells = " | ".join(ms(v) for v in values)
        lines.append(f"| {r.network} | {r.gpu} | {r.method} | {cells} |")
    return [*lines, "", *_repeat_claims(rows, repeats)]


def _repeat_claims(rows: list[MethodRow], repeats: list[Repeat]) -> list[str]:
    """The claims at TLM's budget (geometric means over the pairs) in every run."""
    k = next((r.trials_per_task for r in rows if r.method == "simoe-fast"), 32)
    lines = []
    runs = [rows, *(rep.rows for rep in repeats)]
    every = [e for run_rows in runs for e in summarize(run_rows, k)]
    pooled = Claims(every, k)
    lines += peer_lines(
        every, pooled, k, lead=f"**All {len(runs)} runs together** (geometric means): ",
        unit="network x GPU x run",
    )  # fmt: skip
    for method in sorted({r.method for r in rows if r.method.startswith("ms-")}):
        spread = []
        for r in rows:
            if r.method != method or not r.network_latency_s:
                continue
            values = [r.network_latency_s] + [
                x.network_latency_s for rep in repeats for x in rep.rows
                if (x.network, x.gpu, x.method) == (r.network, r.gpu, method)
                and x.network_latency_s
            ]  # fmt: skip
            if len(values) > 1:
                spread.append(max(values) / min(values))
        if spread:
            lines.append(
                f"- {method}'s run-to-run spread (slowest / fastest run of a network x GPU): "
                f"median {float(np.median(spread)):.2f}x, largest {max(spread):.2f}x over "
                f"{len(spread)} pair(s)."
            )
    for i, run_rows in enumerate(runs):
        claims = Claims(summarize(run_rows, k), k)
        parts = [
            f"{fmt(value, '.3f')}x as fast as {peer}'s ({verdict(value, peer_target(peer))})"
            for peer, value in claims.vs_peer.items()
        ]
        lines.append(
            f"- Run {i + 1}: at {k} measurements per task SiMoE fast's networks are "
            + " and ".join(parts)
            + " (geometric means; targets 1.25x, schedule-transfer 1.0x)."
        )
    return [*lines, ""]
