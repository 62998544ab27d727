"""The real-GPU protocol: every GPU of a kernel held out once, every peer on its measurements.

    python -m bench.real_gpu.protocol [--hub DIR] [--seeds 0,1,2] [--out runs/real_gpu]

For each kernel and each of its GPUs as the target (the others are the fleet):

1. SiMoE's experts and program encoder are trained on the fleet's GPUs; for each probe
   count of `PROBE_GRID` the hardware encoder and gate are trained on the fleet.
2. Choices, on the fleet only (leave-one-out among the training GPUs: each in turn
   plays the target, its own expert left out): the probe count and how fast measurements
   move the gate (`SHARPNESS_GRID`), by the mean log fraction of the optimum after 1, 4
   and 16 measurements. The target's measurements are never read for a choice.
3. On the target: SiMoE with those choices, its ablations at equal effort, the transfer
   baselines, the hindsight oracle, and the from-scratch peers, each a trace of measured
   configurations (`methods`). Kernel Tuner's strategies and XGBoost get the longer
   `SCRATCH_BUDGET`: they are the ones that need it to reach 95%.

Traces go to `<out>/traces.json`; `bench.real_gpu.report` scores and renders them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from bench.real_gpu.hub import KERNELS, Hub
from bench.real_gpu.kt_replay import STRATEGIES, kt_strategy_trace
from bench.real_gpu.methods import (
    SearchChoice,
    SiMoETarget,
    best_keys,
    learned_order,
    oracle_source,
    spec_order,
    transfer_trace,
)
from bench.real_gpu.scores import fraction_at
from bench.real_gpu.xgb_recipe import xgb_trace
from simoe_model.kernel_model import (
    KernelTraining,
    retrain_gate,
    train_kernel_model,
)

PROBE_GRID = (4, 8)  # probe configurations per other kernel
SHARPNESS_GRID = (0.0, 2.0, 8.0)  # 0: the zero-shot mixture throughout
TEMPERATURE_GRID = (1.0, 4.0)  # 1: the gate's weights as trained; 4: flatter
SHARE_GRID = (1.0, 3.0)  # the sharing variant's bonus for a shared best configuration
SHARE_TOP = 16  # best configurations a GPU shares (opt-in), per kernel
TRANSFER_K = 3  # TopHub-style transfer from the k most similar GPUs
BUDGET = 128  # measurements of the fleet-based methods
# Measurements of the from-scratch peers: long enough to reach 95% where they can, and
# as long as one run of each affords on 2 cores (Bayesian optimisation's Gaussian process
# and XGBoost's refits grow with every measurement).
SCRATCH_BUDGET = 1024
SCRATCH_BUDGETS = {"bayes_opt": 256, "xgb": 128}
CHOICE_NS = (1, 4, 16)
TRAINING = KernelTraining()

_HUB: Hub | None = None  # loaded once in the parent, shared with forked workers


def _choice_score(traces: list[list[int]], times: list[np.ndarray]) -> float:
    logs = [
        np.log(max(v, 1e-3))
        for trace, t in zip(traces, times, strict=True)
        for v in fraction_at(trace, t, CHOICE_NS).values()
    ]
    return float(np.mean(logs))


def run_target(kernel: str, target: str, seed: int, scratch: bool = True) -> dict:
    """All traces for one (kernel, target, seed), and the choices made on the fleet."""
    torch.set_num_threads(1)
    hub = _HUB
    assert hub is not None
    started = time.perf_counter()
    fleet = [g for g in hub.gpus_of(kernel) if g != target]
    tcache = hub.caches[kernel][target]
    times = tcache.time_ms

    def measure(i: int) -> float:
        return float(times[i])

    devices = {p: [hub.device(kernel, g, p) for g in fleet] for p in PROBE_GRID}
    base = train_kernel_model(
        devices[PROBE_GRID[0]], KernelTraining(**{**asdict(TRAINING), "shared_epochs": 0}), seed
    )
    models = {p: retrain_gate(base, devices[p], TRAINING, seed) for p in PROBE_GRID}

    # choices by leave-one-out among the fleet's GPUs
    shared = {g: best_keys(hub.caches[kernel][g])[:SHARE_TOP] for g in fleet}
    grid: dict[tuple[int, SearchChoice], float] = {}
    for p in PROBE_GRID:
        views = [
            SiMoETarget(
                models[p], d.features, d.hardware_vector, exclude=[d.name], keys=d.keys,
                shared=shared,
            )
            for d in devices[p]
        ]  # fmt: skip
        for sharp, temp, share in itertools.product(
            SHARPNESS_GRID, TEMPERATURE_GRID, (0.0, *SHARE_GRID)
        ):
            choice = SearchChoice(sharp, temp, share)
            traces = [
                v.trace(lambda i, d=d: float(d.time_ms[i]), max(CHOICE_NS), choice)
                for v, d in zip(views, devices[p], strict=True)
            ]
            grid[(p, choice)] = _choice_score(traces, [d.time_ms for d in devices[p]])
    plain = max((k for k in grid if k[1].share_weight == 0), key=lambda k: grid[k])
    sharing = max((k for k in grid if k[1].share_weight > 0), key=lambda k: grid[k])
    probes, choice = plain

    model = models[probes]
    target_h = hub.hardware_vector(kernel, target, probes)
    features = hub.features(kernel, target)
    view = SiMoETarget(model, features, target_h, keys=tcache.keys, shared=shared)
    no_online = SearchChoice(0.0, choice.temperature, 0.0)
    traces: dict[str, list[int]] = {
        "simoe": view.trace(measure, BUDGET, choice),
        "simoe-no-online": view.trace(measure, BUDGET, no_online),
    }
    share_model = models[sharing[0]]
    share_view = SiMoETarget(
        share_model, features, hub.hardware_vector(kernel, target, sharing[0]),
        keys=tcache.keys, shared=shared,
    )  # fmt: skip
    traces["simoe-sharing"] = share_view.trace(measure, BUDGET, sharing[1])
    nearest = learned_order(model, target_h)
    traces["nearest-expert"] = view.expert_trace(nearest[0], BUDGET)
    for part, name in (("analytical", "simoe-analytical"), ("empirical", "simoe-empirical"),
                       ("none", "pooled")):  # fmt: skip
        ablation = retrain_gate(
            base,
            devices[probes],
            KernelTraining(**{**asdict(TRAINING), "hardware_input": part}),
            seed,
        )
        traces[name] = SiMoETarget(ablation, features, target_h).trace(measure, BUDGET, choice)

    sources = {g: hub.caches[kernel][g] for g in fleet}
    by_spec = spec_order(hub.gpus[target], [hub.gpus[g] for g in fleet])
    traces["transfer-spec-1"] = transfer_trace(tcache, [sources[by_spec[0]]], BUDGET)
    traces[f"transfer-spec-{TRANSFER_K}"] = transfer_trace(
        tcache, [sources[g] for g in by_spec[:TRANSFER_K]], BUDGET
    )
    traces["transfer-learned-1"] = transfer_trace(tcache, [sources[nearest[0]]], BUDGET)
    traces[f"transfer-learned-{TRANSFER_K}"] = transfer_trace(
        tcache, [sources[g] for g in nearest[:TRANSFER_K]], BUDGET
    )
    oracle = oracle_source(tcache, sources, BUDGET)
    traces["oracle-source"] = transfer_trace(tcache, [sources[oracle]], BUDGET)
    fleet_seconds = time.perf_counter() - started

    if scratch:
        cache_file = tcache.path
        t1 = KERNELS[kernel].get("t1")
        t1_path = hub.root / "search_spaces" / t1 if t1 else None
        index = tcache.index()
        for strategy in STRATEGIES:
            budget = SCRATCH_BUDGETS.get(strategy, SCRATCH_BUDGET)
            keys = kt_strategy_trace(cache_file, t1_path, strategy, budget, seed)
            traces[f"kt-{strategy}"] = [index[k] for k in keys]
        budget = SCRATCH_BUDGETS.get("xgb", SCRATCH_BUDGET)
        traces["xgb"] = xgb_trace(np.log1p(features), times, budget, seed)
    return {
        "kernel": kernel,
        "target": target,
        "seed": seed,
        "fleet": fleet,
        "choice_grid": {f"{p}/{asdict(c)}": v for (p, c), v in grid.items()},
        "chosen": {"probes_per_kernel": probes, **asdict(choice)},
        "chosen_sharing": {"probes_per_kernel": sharing[0], **asdict(sharing[1])},
        "nearest_learned": nearest,
        "nearest_spec": by_spec,
        "oracle_source": oracle,
        "fleet_method_seconds": fleet_seconds,
        "seconds": time.perf_counter() - started,
        "traces": traces,
    }


def _job(args: tuple[str, str, int, bool]) -> dict:
    return run_target(*args)


def main(argv: list[str] | None = None) -> None:
    from bench import prepare

    prepare()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub", default=None, help="the benchmark_hub directory")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--targets", default="", help="only these GPU keys as targets")
    parser.add_argument("--no-scratch", action="store_true", help="skip the from-scratch peers")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, default=Path("runs/real_gpu"))
    parser.add_argument(
        "--report", action="store_true",
        help="then write docs/results/real_transfer.{md,json,png} (bench.real_gpu.report)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    global _HUB
    kernels = [k for k in args.kernels.split(",") if k]
    _HUB = Hub.load(args.hub, kernels)
    seeds = [int(s) for s in args.seeds.split(",")]
    only = {t for t in args.targets.split(",") if t}
    jobs = [
        (k, g, s, not args.no_scratch)
        for k in kernels
        for g in _HUB.gpus_of(k)
        if not only or g in only
        for s in seeds
    ]
    started = time.perf_counter()
    results = []
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.jobs) as pool:
        for n, result in enumerate(pool.imap_unordered(_job, jobs), 1):
            results.append(result)
            print(
                f"[{n}/{len(jobs)}] {result['kernel']} {result['target']} seed {result['seed']}"
                f" ({result['seconds']:.0f} s, chose {result['chosen']})",
                flush=True,
            )
    results.sort(key=lambda r: (r["kernel"], r["target"], r["seed"]))
    args.out.mkdir(parents=True, exist_ok=True)
    run = {
        "command": "python -m bench.real_gpu.protocol "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "seeds": seeds,
        "budget": BUDGET,
        "scratch_budget": SCRATCH_BUDGET,
        "scratch_budgets": SCRATCH_BUDGETS,
        "probe_grid": list(PROBE_GRID),
        "sharpness_grid": list(SHARPNESS_GRID),
        "temperature_grid": list(TEMPERATURE_GRID),
        "share_grid": list(SHARE_GRID),
        "share_top": SHARE_TOP,
        "training": asdict(TRAINING),
        "wall_s": time.perf_counter() - started,
        "jobs": args.jobs,
        "load_average": os.getloadavg(),
        "results": results,
    }
    (args.out / "traces.json").write_text(json.dumps(run))
    print(f"wrote {args.out / 'traces.json'} ({run['wall_s']:.0f} s)")
    if args.report:
        from bench.real_gpu import report

        report_args = ["--traces", str(args.out / "traces.json"), "--keep-traces"]
        report.main([*report_args, *(["--hub", args.hub] if args.hub else [])])


if __name__ == "__main__":
    main()
