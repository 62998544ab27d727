"""Does SiMoE's learned similarity mean something on real GPUs?

    python -m bench.real_gpu.similarity [--seeds 0,1,2] [--alignment NAME]

For every kernel and held-out target GPU (the protocol's leave-one-GPU-out), a model is
trained on the fleet as the protocol trains it (probe count 8), and for each fleet GPU k:
the learned similarity cos(z_target, z_k), the spec-sheet similarity (minus the spec
distance of `methods.spec_distance`), and what they should follow: how alike the two GPUs
rank the same configurations (Spearman of their times on the configurations both ran).
The report gives the rank correlation of each similarity with the measured agreement,
over all (target, fleet GPU) pairs and per kernel. Written to
`docs/results/real_similarity.{md,json}` (`SimilarityReport`; `--render PATH` re-renders
the Markdown from the JSON; `--versus EARLIER.json` adds this run minus an earlier one).
`--alignment NAME` trains the hardware encoder with that loss
of `simoe_model.losses.ALIGNMENT_LOSSES` (issue 23 item 3; default: the library's default,
chosen on the simulated validation split) and writes `real_similarity_<name>.{md,json}`
unless it is `mse` (the earlier runs' loss and file), so an earlier run's report is never
overwritten by another variant's. Within a kernel the
report also gives the per-target correlation (over the fleet GPUs of one held-out target,
averaged: what picks a newcomer's experts).
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
from bench.reporting import add_render_option, read_report, render
from simoe_model.kernel_model import KernelTraining, train_kernel_model
from simoe_model.losses import ALIGNMENT_LOSSES, DEFAULT_ALIGNMENT

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
    # mean over held-out targets of the Spearman over that target's fleet GPUs (None in runs
    # before issue 23 item 3 added it)
    learned_per_target: float | None = None
    spec_per_target: float | None = None


class SimilarityReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str
    seeds: list[int]
    alignment: str = "mse"  # the hardware encoder's alignment loss (every run before: mse)
    pairs: int
    learned_vs_agreement: float
    spec_vs_agreement: float
    per_kernel: dict[str, KernelCorrelation]
    wall_s: float
    rows: list[SimilarityPair]


def markdown(
    report: SimilarityReport, versus: SimilarityReport | None = None, versus_path: str = ""
) -> str:
    pooled_ci = _interval(report.rows, pooled=True)
    target_ci = _interval(report.rows, pooled=False)
    return "\n".join(
        [
            "# Learned similarity against measured ranking agreement (real GPUs, MEASURED)",
            "",
            f"Command: `{report.command}`; seeds {report.seeds}; alignment loss of the "
            f"hardware encoder: {report.alignment}; {len(report.rows)} (held-out "
            f"target, fleet GPU) pairs; {report.wall_s:.0f} s. Rank correlation (Spearman) of "
            "each similarity with the Spearman agreement of the two GPUs' times on the "
            "configurations both ran (goal for the learned one: 0.7); per target: over one "
            "held-out target's fleet GPUs, averaged over targets and seeds.",
            "",
            "| kernel | learned similarity | spec-sheet similarity | learned, per target "
            "| spec-sheet, per target |",
            "|---|---|---|---|---|",
            *[
                f"| {k} | {v.learned:.3f} | {v.spec:.3f} | "
                f"{_stored_or(v.learned_per_target, report, k, 'learned'):.3f} | "
                f"{_stored_or(v.spec_per_target, report, k, 'spec'):.3f} |"
                for k, v in report.per_kernel.items()
            ],
            f"| all pairs | {report.learned_vs_agreement:.3f} | {report.spec_vs_agreement:.3f} "
            f"| {_per_target(report.rows, 'learned'):.3f} "
            f"| {_per_target(report.rows, 'spec'):.3f} |",
            "",
            f"Learned similarity, 95 % bootstrap intervals resampling (kernel, held-out target) "
            f"({len(_clusters(report.rows))} of them): all pairs "
            f"[{pooled_ci[0]:+.3f}, {pooled_ci[1]:+.3f}], per target "
            f"[{target_ci[0]:+.3f}, {target_ci[1]:+.3f}].",
            "",
            *(_versus_lines(report, versus, versus_path) if versus is not None else []),
        ]
    )


def _clusters(rows: list[SimilarityPair]) -> dict[tuple[str, str], list[SimilarityPair]]:
    """The independent units on real data: one held-out target GPU of one kernel."""
    out: dict[tuple[str, str], list[SimilarityPair]] = {}
    for r in rows:
        out.setdefault((r.kernel, r.target), []).append(r)
    return out


def _target_rhos(rows: list[SimilarityPair], key: str = "learned") -> dict[tuple[str, str], float]:
    """Per (kernel, target): the within-target Spearman, averaged over seeds."""
    out = {}
    for cluster, of in _clusters(rows).items():
        by_seed: dict[int, list[SimilarityPair]] = {}
        for r in of:
            by_seed.setdefault(r.seed, []).append(r)
        rhos = [_rho(g, key) for g in by_seed.values() if len(g) >= 3]
        out[cluster] = float(np.nanmean(rhos)) if rhos else float("nan")
    return out


def _interval(
    rows: list[SimilarityPair], *, pooled: bool, versus: list[SimilarityPair] | None = None
) -> tuple[float, float]:
    """95 % bootstrap interval of the learned similarity's correlation (pooled over pairs, or
    per target), or of its difference from `versus`'s on the same clusters."""
    clusters = _clusters(rows)
    other = _clusters(versus) if versus is not None else {}
    keys = sorted(clusters) if versus is None else sorted(clusters.keys() & other.keys())
    mine, theirs = _target_rhos(rows), _target_rhos(versus) if versus is not None else {}
    rng = np.random.default_rng(0)
    stats = []
    for _ in range(2000):
        drawn = [keys[i] for i in rng.integers(len(keys), size=len(keys))]
        if pooled:
            value = _rho([r for k in drawn for r in clusters[k]], "learned")
            if versus is not None:
                value -= _rho([r for k in drawn for r in other[k]], "learned")
        else:
            value = float(np.nanmean([mine[k] - theirs.get(k, 0.0) for k in drawn]))
        stats.append(value)
    lo, hi = np.nanpercentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def _versus_lines(report: SimilarityReport, versus: SimilarityReport, path: str) -> list[str]:
    """The learned similarity against an earlier run's (same kernels, targets and seeds)."""
    mine, theirs = _target_rhos(report.rows), _target_rhos(versus.rows)
    shared = sorted(mine.keys() & theirs.keys())
    per_target = float(np.nanmean([mine[k] - theirs[k] for k in shared]))
    pooled = report.learned_vs_agreement - versus.learned_vs_agreement
    p_lo, p_hi = _interval(report.rows, pooled=True, versus=versus.rows)
    t_lo, t_hi = _interval(report.rows, pooled=False, versus=versus.rows)
    return [
        f"Against the run of `{versus.command}` (alignment {versus.alignment}; same kernels, "
        f"targets and seeds {versus.seeds}), learned similarity, this run minus that one: "
        f"all pairs {pooled:+.3f} [{p_lo:+.3f}, {p_hi:+.3f}], per target {per_target:+.3f} "
        f"[{t_lo:+.3f}, {t_hi:+.3f}] (paired bootstrap over the {len(shared)} (kernel, target) "
        f"clusters; `--versus {path}`).",
        "",
    ]


def _stored_or(value: float | None, report: SimilarityReport, kernel: str, key: str) -> float:
    """A per-target figure as stored, or (a report written before it was) from its rows."""
    if value is not None:
        return value
    return _per_target([r for r in report.rows if r.kernel == kernel], key)


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


def pairs_for(
    hub: Hub, kernel: str, target: str, seed: int, alignment: str = DEFAULT_ALIGNMENT
) -> list[SimilarityPair]:
    fleet = [g for g in hub.gpus_of(kernel) if g != target]
    model = train_kernel_model(
        [hub.device(kernel, g, PROBES) for g in fleet], KernelTraining(alignment=alignment), seed
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


def _per_target(rows: list[SimilarityPair], key: str) -> float:
    groups: dict[tuple[str, str, int], list[SimilarityPair]] = {}
    for r in rows:
        groups.setdefault((r.kernel, r.target, r.seed), []).append(r)
    rhos = [_rho(g, key) for g in groups.values() if len(g) >= 3]
    return float(np.nanmean(rhos)) if rhos else float("nan")


def main(argv: list[str] | None = None) -> None:
    from bench import prepare

    prepare()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub", default=None)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=DOCS)
    parser.add_argument(
        "--alignment", default=DEFAULT_ALIGNMENT, help=f"one of {sorted(ALIGNMENT_LOSSES)}"
    )
    parser.add_argument(
        "--versus", type=Path, default=None,
        help="an earlier run's JSON: the Markdown also gives this run minus that one",
    )  # fmt: skip
    add_render_option(parser)
    args = parser.parse_args(argv)
    for path in (args.render, args.versus):
        if path is not None and not path.is_file():
            sys.exit(f"error: no report {path}")
    versus = read_report(args.versus, SimilarityReport) if args.versus else None
    if args.render:
        render(args.render, SimilarityReport, lambda r: markdown(r, versus, str(args.versus)))
        return
    if args.alignment not in ALIGNMENT_LOSSES:
        sys.exit(
            f"error: unknown --alignment {args.alignment!r}; known: {sorted(ALIGNMENT_LOSSES)}"
        )
    torch.set_num_threads(1)
    started = time.perf_counter()
    hub = Hub.load(args.hub)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = [
        row
        for kernel in KERNELS
        for target in hub.gpus_of(kernel)
        for seed in seeds
        for row in pairs_for(hub, kernel, target, seed, args.alignment)
    ]
    by_kernel = {k: [r for r in rows if r.kernel == k] for k in KERNELS}
    report = SimilarityReport(
        command="python -m bench.real_gpu.similarity "
        + " ".join(sys.argv[1:] if argv is None else argv),
        seeds=seeds,
        alignment=args.alignment,
        pairs=len(rows),
        learned_vs_agreement=_rho(rows, "learned"),
        spec_vs_agreement=_rho(rows, "spec"),
        per_kernel={
            k: KernelCorrelation(
                learned=_rho(of, "learned"),
                spec=_rho(of, "spec"),
                learned_per_target=_per_target(of, "learned"),
                spec_per_target=_per_target(of, "spec"),
            )
            for k, of in by_kernel.items()
        },
        wall_s=time.perf_counter() - started,
        rows=rows,
    )
    text = markdown(report, versus, str(args.versus))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "real_similarity"  # the earlier runs' name: mse, the default until issue 23 item 3
    if args.alignment != "mse":
        stem += "_" + args.alignment.replace("+", "_")
    (args.out / f"{stem}.md").write_text(text)
    # json.dumps as the dict before the model wrote it (NaN stays NaN)
    (args.out / f"{stem}.json").write_text(json.dumps(report.model_dump(), indent=1))
    print(text)


if __name__ == "__main__":
    main()
