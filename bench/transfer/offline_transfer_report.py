"""bench/transfer/offline_transfer.py's report: the JSON and the Markdown and plot rendered from it,
runs of disjoint methods merged into one, and the paired interval its table shows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def paired_difference(
    ours: dict[str, list[float]], theirs: dict[str, list[float]], seed: int = 0
) -> tuple[float, float, float]:
    """Mean per-task top-1 difference (ours - theirs) and a 95% paired bootstrap interval."""
    gpus = sorted(set(ours) & set(theirs))
    diff = np.concatenate([np.asarray(ours[g]) - np.asarray(theirs[g]) for g in gpus])
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (2000, len(diff)))].mean(1)
    return float(diff.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def write_report(report: dict, out: Path, stem: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=float))
    (out / f"{stem}.md").write_text(markdown(report))
    plot(report, out / f"{stem}.png")
    print(markdown(report))


def merge(paths: list[Path], out: Path, stem: str) -> None:
    """One report from runs of disjoint methods on the same split (run in parallel)."""
    reports = [json.loads(p.read_text()) for p in paths]
    first = reports[0]
    for other in reports[1:]:
        if other["held_out"] != first["held_out"] or other["train_gpus"] != first["train_gpus"]:
            raise SystemExit(f"cannot merge: different splits in {paths}")
    merged = {
        **first,
        "command": " && ".join(r["command"] for r in reports),
        "results": {k: v for r in reports for k, v in r["results"].items()},
        "per_gpu": {k: v for r in reports for k, v in r["per_gpu"].items()},
        "per_task_top1": {k: v for r in reports for k, v in r.get("per_task_top1", {}).items()},
        "ablation_seeds": {k: v for r in reports for k, v in r.get("ablation_seeds", {}).items()},
        "references": {k: v for r in reports for k, v in r.get("references", {}).items()},
        "seconds": {k: v for r in reports for k, v in r["seconds"].items()},
        "simoe_train_seconds": next(
            (r["simoe_train_seconds"] for r in reports if r["simoe_train_seconds"]["experts"]),
            first["simoe_train_seconds"],
        ),
    }
    write_report(merged, out, stem)


def markdown(report: dict) -> str:
    lines = [
        f"Command: `{report['command']}`  ",
        f"Data: {report['data']}; held out: {', '.join(report['held_out'])}; "
        f"{report['tasks_per_gpu']} tasks per GPU, "
        f"~{report['test_candidates_per_task']:.0f} test candidates per task.",
        "",
        "| method | budget | top-1 | top-5 | pairwise | avg peak |",
        "|---|---|---|---|---|---|",
    ]
    for method, by_budget in report["results"].items():
        for budget, row in sorted(by_budget.items(), key=lambda kv: int(kv[0])):
            lines.append(
                f"| {method} | {budget} | {row['top1']:.3f} | {row['top5']:.3f} | "
                f"{row['pairwise']:.3f} | {row['aps']:.3f} |"
            )
    per_task = report.get("per_task_top1", {})
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
            for budget in sorted(by_budget, key=int):
                if budget not in per_task["simoe"]:
                    continue
                mean, low, high = paired_difference(per_task["simoe"][budget], by_budget[budget])
                lines.append(f"| {method} | {budget} | {mean:+.3f} | [{low:+.3f}, {high:+.3f}] |")
    if report.get("ablation_seeds"):
        lines += [
            "",
            "Ablations, hardware encoder and gate trained anew per seed on the same experts "
            "(top-1 at budget 0 per seed; similarity fidelity = Spearman, over the training "
            "GPUs, between cos(z) to the held-out GPU and the measured rank agreement):",
            "",
            "| variant | top-1 per seed | mean | fidelity per seed | mean |",
            "|---|---|---|---|---|",
        ]
        for label, info in report["ablation_seeds"].items():
            top1, fid = info["top1_per_seed"], info["similarity_fidelity_per_seed"]
            lines.append(
                f"| {label} | {', '.join(f'{x:.3f}' for x in top1)} | {np.mean(top1):.3f} | "
                f"{', '.join(f'{x:.2f}' for x in fid)} | {np.mean(fid):.3f} |"
            )
    if report.get("references"):
        lines += ["", "References (top-1 on the same test sets; not methods):", ""]
        lines += [f"- {name}: {value:.4f}" for name, value in report["references"].items()]
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
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
        for method, by_budget in report["results"].items():
            budgets = sorted(by_budget, key=int)
            ax.plot(
                [int(b) for b in budgets],
                [by_budget[b][metric] for b in budgets],
                marker="o",
                label=method,
                linestyle="-" if not method.startswith("simoe-") else "--",
            )
        ax.set_title(title)
        ax.set_xlabel("measurements per task on the held-out GPU")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Transfer to held-out GPUs ({report['data']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
