"""Does SiMoE's learned similarity mean something on real GPUs?

    python -m bench.real_gpu.similarity [--seeds 0,1,2]

For every kernel and held-out target GPU (the protocol's leave-one-GPU-out), a model is
trained on the fleet as the protocol trains it (probe count 8), and for each fleet GPU k:
the learned similarity cos(z_target, z_k), the spec-sheet similarity (minus the spec
distance of `methods.spec_distance`), and what they should follow: how alike the two GPUs
rank the same configurations (Spearman of their times on the configurations both ran).
The report gives the rank correlation of each similarity with the measured agreement,
over all (target, fleet GPU) pairs and per kernel. Written to
`docs/results/real_similarity.{md,json}` (`SimilarityReport`; `--render PATH` re-renders
the Markdown from the JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict
from scipy.stats import spearmanr

from bench.real_gpu.hub import KERNELS, Hub
from bench.real_gpu.methods import spec_distance
from bench.real_gpu.report import DOCS
from bench.reporting import add_render_option, render
from simoe_model.kernel_model import KernelTraining, train_kernel_model

PROBES = 8


class SimilarityPair(BaseModel):
    """A held-out target and one fleet GPU: both similarities and the measured agreement."""

    model_config = ConfigDict(extra="forbid")

    kernel: str
    target: str
    other: str
    seed: int
    learned: float  # cos(z_target, z_other) of the model trained on the fleet
    spec: float  # minus the spec-sheet distance
    agreement: float  # Spearman of the two GPUs' times on the configurations both ran


class KernelCorrelation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    learned: float  # Spearman of the learned similarity with the agreement
    spec: float


class SimilarityReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str
    seeds: list[int]
    pairs: int
    learned_vs_agreement: float
    spec_vs_agreement: float
    per_kernel: dict[str, KernelCorrelation]
    wall_s: float
    rows: list[SimilarityPair]


def markdown(report: SimilarityReport) -> str:
    return "\n".join(
        [
            "# Learned similarity against measured ranking agreement (real GPUs, MEASURED)",
            "",
            f"Command: `{report.command}`; seeds {report.seeds}; {len(report.rows)} (held-out "
            f"target, fleet GPU) pairs; {report.wall_s:.0f} s. Rank correlation (Spearman) of "
            "each similarity with the Spearman agreement of the two GPUs' times on the "
            "configurations both ran (goal for the learned one: 0.7).",
            "",
            "| kernel | learned similarity | spec-sheet similarity |",
            "|---|---|---|",
            *[f"| {k} | {v.learned:.3f} | {v.spec:.3f} |" for k, v in report.per_kernel.items()],
            f"| all pairs | {report.learned_vs_agreement:.3f} | {report.spec_vs_agreement:.3f} |",
            "",
        ]
    )


def agreement(hub: Hub, kernel: str, a: str, b: str) -> float:
    ca, cb = hub.caches[kernel][a], hub.caches[kernel][b]
    index = cb.index()
    pairs = [
        (ta, cb.time_ms[index[k]])
        for k, ta in zip(ca.keys, ca.time_ms, strict=True)
        if k in index and np.isfinite(ta) and np.isfinite(cb.time_ms[index[k]])
    ]
    x, y = np.array(pairs).T
    return float(spearmanr(x, y).statistic)


def pairs_for(hub: Hub, kernel: str, target: str, seed: int) -> list[SimilarityPair]:
    fleet = [g for g in hub.gpus_of(kernel) if g != target]
    model = train_kernel_model(
        [hub.device(kernel, g, PROBES) for g in fleet], KernelTraining(), seed
    )
    h = hub.hardware_vector(kernel, target, PROBES)
    return [
        SimilarityPair(
            kernel=kernel,
            target=target,
            other=g,
            seed=seed,
            learned=model.similarity(h, model.expert(g).hardware.numpy()),
            spec=-spec_distance(hub.gpus[target], hub.gpus[g]),
            agreement=agreement(hub, kernel, target, g),
        )
        for g in fleet
    ]


def _rho(rows: list[SimilarityPair], key: str) -> float:
    values = [getattr(r, key) for r in rows]
    return float(spearmanr(values, [r.agreement for r in rows]).statistic)


def main(argv: list[str] | None = None) -> None:
    from bench import prepare

    prepare()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub", default=None)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=DOCS)
    add_render_option(parser)
    args = parser.parse_args(argv)
    if args.render:
        render(args.render, SimilarityReport, markdown)
        return
    torch.set_num_threads(1)
    started = time.perf_counter()
    hub = Hub.load(args.hub)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = [
        row
        for kernel in KERNELS
        for target in hub.gpus_of(kernel)
        for seed in seeds
        for row in pairs_for(hub, kernel, target, seed)
    ]
    by_kernel = {k: [r for r in rows if r.kernel == k] for k in KERNELS}
    report = SimilarityReport(
        command="python -m bench.real_gpu.similarity "
        + " ".join(sys.argv[1:] if argv is None else argv),
        seeds=seeds,
        pairs=len(rows),
        learned_vs_agreement=_rho(rows, "learned"),
        spec_vs_agreement=_rho(rows, "spec"),
        per_kernel={
            k: KernelCorrelation(learned=_rho(of, "learned"), spec=_rho(of, "spec"))
            for k, of in by_kernel.items()
        },
        wall_s=time.perf_counter() - started,
        rows=rows,
    )
    text = markdown(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "real_similarity.md").write_text(text)
    # json.dumps as the dict before the model wrote it (NaN stays NaN)
    (args.out / "real_similarity.json").write_text(json.dumps(report.model_dump(), indent=1))
    print(text)


if __name__ == "__main__":
    main()
