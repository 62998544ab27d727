"""bench/transfer/offline_transfer.py's report: the typed report (`OfflineTransferReport`),
its JSON and the Markdown and plot rendered from it, runs of disjoint methods merged into
one, and the paired interval its table shows.

The JSON is the one the dict before the model wrote: the same keys and values (budgets are
numbers here and strings in JSON, as `json.dumps` wrote them; NaN stays NaN).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricRow(_Report):
    """Mean metrics over a GPU's test tasks (simoe_model.metrics.task_metrics)."""

    top1: float
    top5: float
    pairwise: float
    aps: float  # average peak score


class AblationSeeds(_Report):
    top1_per_seed: list[float]  # budget 0, mean over the held-out GPUs
    similarity_fidelity_per_seed: list[float]


class TrainSeconds(_Report):
    experts: float | None  # None: SiMoE was not trained in this run
    shared: float | None


class OfflineTransferReport(_Report):
    command: str
    data: str
    held_out: list[str]
    train_gpus: list[str]
    tasks_per_gpu: int
    test_candidates_per_task: float
    budgets: list[int]
    results: dict[str, dict[int, MetricRow]]  # method -> budget -> mean over held-out GPUs
    per_gpu: dict[str, dict[int, dict[str, MetricRow]]]  # method -> budget -> GPU
    per_task_top1: dict[str, dict[int, dict[str, list[float]]]] = {}  # ... -> GPU -> tasks
    ablation_seeds: dict[str, AblationSeeds] = {}
    references: dict[str, float] = {}  # top-1 references (not methods)
    seconds: dict[str, float]
    simoe_train_seconds: TrainSeconds


def report_json(report: OfflineTransferReport) -> str:
    return json.dumps(report.model_dump(exclude_unset=True), indent=1, default=float)


def read(path: Path) -> OfflineTransferReport:
    return OfflineTransferReport.model_validate_json(path.read_text())


def paired_difference(
    ours: dict[str, list[float]], theirs: dict[str, list[float]], seed: int = 0
) -> tuple[float, float, float]:
    """Mean per-task top-1 difference (ours - theirs) and a 95% paired bootstrap interval."""
    gpus = sorted(set(ours) & set(theirs))
    diff = np.concatenate([np.asarray(ours[g]) - np.asarray(theirs[g]) for g in gpus])
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (2000, len(diff)))].mean(1)
    return float(diff.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def write_report(report: OfflineTransferReport, out: Path, stem: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(report_json(report))
    (out / f"{stem}.md").write_text(markdown(report))
    plot(report, out / f"{stem}.png")
    print(markdown(report))


def merge(paths: list[Path], out: Path, stem: str) -> None:
    """One report from runs of disjoint methods on the same split (run in parallel)."""
    reports = [read(p) for p in paths]
    first = reports[0]
    for other in reports[1:]:
        if other.held_out != first.held_out or other.train_gpus != first.train_gpus:
            raise SystemExit(f"cannot merge: different splits in {paths}")
    merged = {
        "command": " && ".join(r.command for r in reports),
        "results": {k: v for r in reports for k, v in r.results.items()},
        "per_gpu": {k: v for r in reports for k, v in r.per_gpu.items()},
        "per_task_top1": {k: v for r in reports for k, v in r.per_task_top1.items()},
        "ablation_seeds": {k: v for r in reports for k, v in r.ablation_seeds.items()},
        "references": {k: v for r in reports for k, v in r.references.items()},
        "seconds": {k: v for r in reports for k, v in r.seconds.items()},
        "simoe_train_seconds": next(
            (r.simoe_train_seconds for r in reports if r.simoe_train_seconds.experts),
            first.simoe_train_seconds,
        ),
    }
    write_report(first.model_copy(update=merged), out, stem)


def markdown(report: OfflineTransferReport) -> str:
    lines = [
        f"Command: `{report.command}`  ",
        f"Data: {report.data}; held out: {', '.join(report.held_out)}; "
        f"{report.tasks_per_gpu} tasks per GPU, "
        f"~{report.test_candidates_per_task:.0f} test candidates per task.",
        "",
        "| method | budget | top-1 | top-5 | pairwise | avg peak |",
        "|---|---|---|---|---|---|",
    ]
    for method, by_budget in report.results.items():
        for budget, row in sorted(by_budget.items()):
            lines.append(
                f"| {method} | {budget} | {row.top1:.3f} | {row.top5:.3f} | "
                f"{row.pairwise:.3f} | {row.aps:.3f} |"
            )
    per_task = report.per_task_top1
    if "simoe" in per_task:
        lines += [
            "",
            "SiMoE minus each baseline, top-1 per task (mean over all held-out tasks, "
            "95% paired bootstrap interval):",
            "",
            "| baseline | budget | difference | 95% interval |",
            "|---|---|---|---|",
        ]
        for method, by_budget in per_task.items():
            if method == "simoe" or method.startswith("simoe-"):
                continue
            for budget in sorted(by_budget):
                if budget not in per_task["simoe"]:
                    continue
                mean, low, high = paired_difference(per_task["simoe"][budget], by_budget[budget])
                lines.append(f"| {method} | {budget} | {mean:+.3f} | [{low:+.3f}, {high:+.3f}] |")
    if report.ablation_seeds:
        lines += [
            "",
            "Ablations, hardware encoder and gate trained anew per seed on the same experts "
            "(top-1 at budget 0 per seed; similarity fidelity = Spearman, over the training "
            "GPUs, between cos(z) to the held-out GPU and the measured rank agreement):",
            "",
            "| variant | top-1 per seed | mean | fidelity per seed | mean |",
            "|---|---|---|---|---|",
        ]
        for label, info in report.ablation_seeds.items():
            top1, fid = info.top1_per_seed, info.similarity_fidelity_per_seed
            lines.append(
                f"| {label} | {', '.join(f'{x:.3f}' for x in top1)} | {np.mean(top1):.3f} | "
                f"{', '.join(f'{x:.2f}' for x in fid)} | {np.mean(fid):.3f} |"
            )
    if report.references:
        lines += ["", "References (top-1 on the same test sets; not methods):", ""]
        lines += [f"- {name}: {value:.4f}" for name, value in report.references.items()]
    return "\n".join(lines) + "\n"


def plot(report: OfflineTransferReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, metric, title in zip(
        axes,
        ["top1", "top5", "pairwise"],
        ["top-1 score", "top-5 score", "pairwise accuracy"],
        strict=True,
    ):
        for method, by_budget in report.results.items():
            budgets = sorted(by_budget)
            ax.plot(
                budgets,
                [getattr(by_budget[b], metric) for b in budgets],
                marker="o",
                label=method,
                linestyle="-" if not method.startswith("simoe-") else "--",
            )
        ax.set_title(title)
        ax.set_xlabel("measurements per task on the held-out GPU")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Transfer to held-out GPUs ({report.data})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
