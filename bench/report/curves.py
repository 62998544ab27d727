"""Network performance against compile time, relative to a reference, every method's curve.

One figure for a report (bench/run.py's report.json): a panel per network x GPU of the
compile section and one for the budget section. The y axis is performance relative to the
reference, reference latency / latency (1.0 = the reference; higher is better), so an early
slow point sits near 0 instead of setting the scale; the x axis is compile time (search
wall time + modelled measurement time) on a log scale. Every method's whole curve is drawn,
each with its own colour and line style, the end marked with a dot.

The reference is MetaSchedule-20K in issue 12's protocol; none has finished, so the
reference of a panel is the best latency of its tuned tasks that any MetaSchedule run
reached with its default cost model (XGB): the panel's runs, the repeats the report merged,
or the MetaSchedule-20K reference as far as it has run (bench/compile/reference.py), whichever is
best (named in the panel's title). A curve that ends where a longer one continues (a snapshot
ms-xgb-k is the start of ms-xgb-full, simoe-fast the start of simoe-full) is drawn on top of it.

    python -m bench.report.curves --report bench/reports/report.json --out bench/reports
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

STYLES = ("-", "--", "-.", ":")


def _ms_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """MetaSchedule with its default cost model (XGB): the protocol's reference method."""
    return [r for r in rows if r["method"].startswith("ms-xgb")]


def _reference_20k(
    report: dict[str, Any], key: tuple[str, str], rows: list[dict[str, Any]]
) -> list[tuple[float, str, str]]:
    """The MetaSchedule-20K reference of (network, unit) as far as it has run
    (bench/compile/reference.py), over the tasks this panel tuned: sum of weight x its best
    latency of each (none unless it has measured every one of them)."""
    weights = {
        t["name"]: t["weight"]
        for t in (report.get("sections", {}).get("compile") or {}).get("networks", {})
        .get(key[0], {}).get("tasks_tuned", [])
    }  # fmt: skip
    tuned = {name for r in rows for name in r.get("task_best_s", {})}
    out = []
    for ref in report.get("references", []):
        if (ref["network"], ref["unit"]) != key or not tuned or not tuned <= set(weights):
            continue
        best = ref.get("task_best_s", {})
        if all(best.get(name) for name in tuned):
            latency = sum(weights[name] * best[name] for name in tuned)
            trials = f"{ref['trials']} of {ref['target_trials']} trials"
            out.append(
                (latency, f"MetaSchedule-20K so far ({trials})", "bench/compile/reference.py")
            )
    return out


def panels(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per panel: its title, its rows (this report's runs) and its reference latency."""
    sections = report.get("sections", {})
    out = []
    repeats = {
        "compile": [row for run in report.get("compile_repeats", []) for row in run["rows"]],
        "budget": [row for run in report.get("budget_repeats", []) for row in run["rows"]],
    }
    for name in ("compile", "budget"):
        rows = (sections.get(name) or {}).get("rows", [])
        for key in sorted({(r["network"], r["gpu"]) for r in rows}):
            mine = [r for r in rows if (r["network"], r["gpu"]) == key and r.get("curve")]
            same = [r for r in repeats[name] if (r["network"], r["gpu"]) == key]
            refs = [
                (r["network_latency_s"], r["method"], run)
                for run, group in (("this run", mine), ("a repeat", same))
                for r in _ms_rows(group)
                if r.get("network_latency_s") and math.isfinite(r["network_latency_s"])
            ]
            refs += _reference_20k(report, key, mine)
            if not mine or not refs:
                continue
            ref, method, where = min(refs, key=lambda r: (r[0], r[2] != "this run"))
            info = (sections.get(name) or {}).get("networks", {}).get(key[0], {})
            share = info.get("flops_share_tuned")
            scope = (
                f", {len(info.get('tasks_tuned', []))} task(s), {share:.0%} of its FLOPs"
                if share is not None
                else ""
            )
            out.append(
                {
                    "title": f"{key[0]} on sim:{key[1]} ({name} section{scope})",
                    "reference_s": ref,
                    "reference": f"{method}, {where}, {ref * 1e3:.4f} ms",
                    "rows": mine,
                }
            )
    return out


def plot(report: dict[str, Any], path: Path) -> Path | None:
    """All panels in one PNG at `path` (None when the report has no curves)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = panels(report)
    if not found:
        return None
    cols = 2 if len(found) > 1 else 1
    rows = math.ceil(len(found) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 3.9 * rows), squeeze=False)
    methods = sorted({r["method"] for p in found for r in p["rows"]})
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    for ax, panel in zip(axes.flat, found, strict=False):
        # the longest curves first, so a curve that is the start of another stays visible
        by_end = sorted(panel["rows"], key=lambda r: (-r["curve"][-1][0], r["method"]))
        for i, row in enumerate(by_end):
            xs = [x for x, _ in row["curve"]]
            ys = [panel["reference_s"] / y for _, y in row["curve"]]
            simoe = row["method"].startswith("simoe")
            ax.step(
                xs, ys, where="post", label=row["method"], color=colours[row["method"]],
                linestyle=STYLES[i % len(STYLES)], linewidth=2.2 if simoe else 1.4,
                zorder=2 + i,
            )  # fmt: skip
            ax.plot(xs[-1], ys[-1], "o", color=colours[row["method"]], zorder=2 + i)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.axhline(0.95, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # no crowded labels
        ax.margins(y=0.05)
        top = max(panel["reference_s"] / y for r in panel["rows"] for _, y in r["curve"])
        ax.set_ylim(0, max(1.6, top * 1.08))
        ax.set_title(f"{panel['title']}\nreference = {panel['reference']}", fontsize=8.5)
        ax.set_xlabel("compile time, s (log): search wall + modelled measurement", fontsize=8)
        ax.set_ylabel("performance / reference", fontsize=8)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(found) :]:
        ax.set_visible(False)
    fig.suptitle(
        "Performance relative to the best available MetaSchedule (XGB) run against compile time\n"
        "(SIMULATED GPUs; 1.0 = reference, dotted line = 95%; higher is better)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))  # room for the title
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=Path("bench/reports/report.json"))
    parser.add_argument("--out", type=Path, default=Path("bench/reports"))
    args = parser.parse_args()
    try:
        report = json.loads(args.report.read_text())
    except (OSError, ValueError) as exc:
        parser.exit(2, f"error: cannot read the report {args.report}: {exc}\n")
    path = plot(report, args.out / "curves.png")
    print(path if path else "no curves in the report")


if __name__ == "__main__":
    main()
