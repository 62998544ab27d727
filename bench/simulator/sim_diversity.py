"""Diversity of the simulated fleet: do GPUs disagree about which schedule is best?

Reads a fleet dataset written by `simoe-agent dataset build` (one store per GPU, the
same candidates labelled on every GPU) and reports:

- the matrix of cross-GPU rank correlations (Spearman) of candidate latencies,
  averaged over workloads, as a heatmap PNG;
- per workload, how many distinct candidates are the best on some GPU, and what the
  best schedule of one generation costs on another (slowdown against that GPU's own best).

    simoe-agent dataset build --workloads suite --gpus all --per-workload 64 --out /tmp/fleet
    python -m bench.simulator.sim_diversity --dataset /tmp/fleet
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

from bench import prepare

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs"
# one representative per generation, for the transfer table
GENERATIONS = ["k80", "titanx", "1080ti", "v100", "t4", "a100-40gb", "4090", "h100-sxm", "tx2"]


def load(dataset: Path) -> tuple[list[str], dict[str, dict[str, dict[str, float]]]]:
    """GPU keys (catalog order) and {workload: {gpu: {candidate id: seconds or inf}}}."""
    prepare()
    from agent.devices.sim.catalog import load_catalog
    from agent.store import Store

    order = list(load_catalog())
    gpus = [g for g in order if (dataset / f"{g}.sqlite").exists()]
    data: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for gpu in gpus:
        with Store(dataset / f"{gpu}.sqlite") as store:
            for c in store.labelled_candidates():
                lat = c.latency_s if c.latency_s is not None else np.inf
                data[c.task_name][gpu][c.candidate_id] = lat
    return gpus, data


def rank_correlations(gpus: list[str], data: dict) -> np.ndarray:
    n = len(gpus)
    sums = np.zeros((n, n))
    counts = np.zeros((n, n))
    for per_gpu in data.values():
        ids = sorted(per_gpu[gpus[0]])
        lat = np.array([[per_gpu[g][i] for i in ids] for g in gpus])
        for a in range(n):
            for b in range(n):
                ok = np.isfinite(lat[a]) & np.isfinite(lat[b])
                if ok.sum() >= 5:
                    rho = spearmanr(lat[a][ok], lat[b][ok])[0]
                    if np.isfinite(rho):
                        sums[a, b] += rho
                        counts[a, b] += 1
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def transfer(gpus: list[str], data: dict) -> tuple[dict, dict]:
    """Slowdown of using GPU a's best candidate on GPU b (geomean over workloads)."""
    reps = [g for g in GENERATIONS if g in gpus]
    logs: dict[tuple[str, str], list[float]] = defaultdict(list)
    distinct: dict[str, int] = {}
    for workload, per_gpu in data.items():
        ids = sorted(per_gpu[gpus[0]])
        best = {g: min(ids, key=lambda i, g=g: per_gpu[g][i]) for g in gpus}
        distinct[workload] = len(set(best.values()))
        for a in reps:
            for b in reps:
                own = per_gpu[b][best[b]]
                used = per_gpu[b][best[a]]
                if np.isfinite(own) and own > 0:
                    logs[(a, b)].append(np.log(used / own) if np.isfinite(used) else np.log(100))
    table = {f"{a}->{b}": float(np.exp(np.mean(v))) for (a, b), v in logs.items()}
    return table, distinct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    args = parser.parse_args()
    gpus, data = load(args.dataset)
    if not gpus:
        raise SystemExit(f"{args.dataset}: no <gpu>.sqlite stores")
    corr = rank_correlations(gpus, data)
    table, distinct = transfer(gpus, data)
    DOCS.mkdir(exist_ok=True)
    fig, ax = plt.subplots(figsize=(11, 9))
    im = ax.imshow(corr, vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(gpus)), gpus, rotation=90, fontsize=7)
    ax.set_yticks(range(len(gpus)), gpus, fontsize=7)
    ax.set_title(
        f"Simulated fleet: Spearman rank correlation of candidate latencies\n"
        f"(mean over {len(data)} workloads; SIMULATED)"
    )
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(DOCS / "sim_rank_correlation.png", dpi=110)
    reps = [g for g in GENERATIONS if g in gpus]
    report = {
        "dataset": args.dataset.name,
        "workloads": len(data),
        "gpus": gpus,
        "distinct_best_candidates_per_workload": distinct,
        "transfer_slowdown_geomean": table,
        "rank_correlation": {
            a: {b: None if np.isnan(corr[i, j]) else float(corr[i, j]) for j, b in enumerate(gpus)}
            for i, a in enumerate(gpus)
        },
    }
    (DOCS / "sim_diversity.json").write_text(json.dumps(report, indent=1))
    lines = [
        "# Simulated fleet diversity",
        "",
        f"`python -m bench.simulator.sim_diversity --dataset DIR` on {len(data)} workloads x "
        f"{len(gpus)} GPUs. Heatmap: `docs/sim_rank_correlation.png`.",
        "",
        "Distinct best candidates per workload (out of "
        f"{len(gpus)} GPUs): " + ", ".join(f"{w}: {n}" for w, n in distinct.items()),
        "",
        "Slowdown of running the best candidate of the row GPU on the column GPU "
        "(geomean over workloads; 1.00 = that GPU's own best):",
        "",
        "| best of \\ run on | " + " | ".join(reps) + " |",
        "|---|" + "---|" * len(reps),
    ]
    for a in reps:
        lines.append(f"| {a} | " + " | ".join(f"{table[f'{a}->{b}']:.2f}" for b in reps) + " |")
    (DOCS / "sim_diversity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    prepare()
    main()
