"""Prediction throughput of the SiMoE model alone, and feature extraction separately.

    python -m bench.compile.model_throughput [--data DIR] [--experts 24] [--candidates 50000]

Model: `simoe_model.train.predict` (packing, log transform, program encoder, gate over
`--experts` experts, the experts) on `--candidates` candidates with 2 torch threads.
Candidates come from a fleet dataset store when `--data` is given (their real row
counts), else synthetic ones. Feature extraction: MetaSchedule's PerStoreFeature on
freshly sampled candidates of a matmul for a cuda target (no GPU needed), per candidate.
Writes docs/results/model_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from simoe_model import synthetic  # noqa: E402
from simoe_model.hardware import hardware_vector  # noqa: E402
from simoe_model.model import SiMoE  # noqa: E402
from simoe_model.train import predict  # noqa: E402


def candidates_from(data: Path | None, n: int) -> list[np.ndarray]:
    if data is not None:
        from agent.store import Store

        path = sorted(data.glob("*.sqlite"))[0]
        with Store(path) as store:
            feats = [c.features for c in store.labelled_candidates() if c.features is not None]
    else:
        feats = [f for t in synthetic.make_tasks(4, 256, seed=0) for f in t.features]
    reps = -(-n // len(feats))
    return (feats * reps)[:n]


def feature_extraction_seconds(n: int) -> float:
    """Seconds per candidate of PerStoreFeature on sampled cuda matmul candidates."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    a = te.placeholder((512, 512), name="A")
    b = te.placeholder((512, 512), name="B")
    k = te.reduce_axis((0, 512), name="k")
    c = te.compute((512, 512), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    target = tvm.target.Target(
        {
            "kind": "cuda",
            "arch": "sm_80",
            "max_threads_per_block": 1024,
            "max_shared_memory_per_block": 49152,
            "thread_warp_size": 32,
        }
    )
    ctx = ms.TuneContext(
        mod=tvm.IRModule({"main": te.create_prim_func([a, b, c])}),
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.ReplayTrace(max_fail_count=200),
        num_threads=1,
    )
    ctx.pre_tuning(max_trials=n, num_trials_per_iter=n)
    candidates = ctx.search_strategy.generate_measure_candidates() or []
    extractor = ms.feature_extractor.PerStoreFeature()
    extractor.extract_from(ctx, candidates[:4])  # warm up
    t0 = time.perf_counter()
    extractor.extract_from(ctx, candidates)
    return (time.perf_counter() - t0) / max(1, len(candidates))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path)
    parser.add_argument("--experts", type=int, default=24)
    parser.add_argument("--candidates", type=int, default=50_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-features", action="store_true", help="skip feature extraction")
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    model = SiMoE()
    devices = synthetic.make_devices(args.experts, seed=0)
    for d in devices:
        model.ensure_expert(d.name, hardware_vector(d.profile()))
    feats = candidates_from(args.data, args.candidates)
    rows = float(np.mean([f.shape[0] for f in feats]))
    target = hardware_vector(devices[0].profile())
    predict(model, feats[:2000], target)  # warm up
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        predict(model, feats, target)
        times.append(time.perf_counter() - t0)
    best = min(times)
    report = {
        "command": " ".join(["python", "-m", "bench.compile.model_throughput", *sys.argv[1:]]),
        "threads": args.threads,
        "experts": args.experts,
        "candidates": len(feats),
        "mean_rows_per_candidate": rows,
        "seconds": times,
        "candidates_per_second": len(feats) / best,
        "candidates_per_second_median": len(feats) / float(np.median(times)),
    }
    if not args.no_features:
        per = feature_extraction_seconds(64)
        report["feature_extraction_ms_per_candidate"] = per * 1e3
        report["feature_extraction_candidates_per_second"] = 1 / per
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model_throughput.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
