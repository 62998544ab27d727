"""Simulated fleet vs real GPUs: AutoTVM's best latencies from TopHub against the model.

For conv2d and depthwise conv2d (NCHW, batch 1) workloads that the real log holds for
titanx, 1080ti, tx2 (and jetson-nano where it has them), sample MetaSchedule CUDA
candidates once, evaluate them on the five simulated GPUs, take the best per GPU
("tuned" = best of the sampled candidates under the model) and compare:

- per GPU pair, the geometric-mean speed ratio over shared workloads, real vs simulated
  (target: within 1.5x of the real one);
- the Spearman correlation of the per-workload speed ratios, real vs simulated;
- the similarity structure: how alike two GPUs rank the workloads (Spearman of their
  latencies), real and simulated; titanx~1080ti must be more alike than 1080ti~tx2.

Nothing from the log enters the model: the log is read only here, after simulating.

    python -m bench.simulator.sim_vs_tophub --log PATH/tophub_cuda_v0.10.log --max-workloads 16
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from bench import prepare

GPUS = ["titanx", "1080ti", "v100", "tx2", "jetson-nano"]
SHARED = ["titanx", "1080ti", "tx2", "jetson-nano"]
DOCS = Path(__file__).resolve().parents[2] / "docs"


def parse_log(path: Path) -> dict[str, dict[str, float]]:
    """{workload spec: {gpu: best real seconds}} for direct conv2d / depthwise NCHW, batch 1."""
    best: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        gpu = row["input"][0].split("-model=")[1].split()[0]
        task = row["input"][1]
        if task not in ("conv2d_nchw.cuda", "depthwise_conv2d_nchw.cuda"):
            continue
        args = row["input"][2]
        (_, data, _), (_, kernel, _) = args[0], args[1]
        strides, padding, dilation = args[2], args[3], args[4]
        if data[0] != 1 or dilation not in ([1, 1], 1) or len(set(padding)) != 1:
            continue
        if len(set(strides)) != 1:
            continue
        n, c, h, w = data
        stride, pad = strides[0], padding[0]
        if task == "conv2d_nchw.cuda":
            k, _, r, s = kernel
            spec = f"conv2d:{n},{c},{h},{w},{k},{r},{s},{stride},{pad}"
        else:
            if kernel[1] != 1:
                continue
            r, s = kernel[2], kernel[3]
            spec = f"depthwise_conv2d:{n},{c},{h},{w},{r},{s},{stride},{pad}"
        secs = float(np.mean(row["result"][0]))
        if row["result"][1] != 0 or not math.isfinite(secs):
            continue
        entry = best.setdefault(spec, {})
        entry[gpu] = min(entry.get(gpu, math.inf), secs)
    return best


def choose_workloads(real: dict[str, dict[str, float]], limit: int) -> list[str]:
    """Workloads of titanx, 1080ti and tx2; those jetson-nano also has first, then spread."""
    common = sorted(w for w, g in real.items() if all(x in g for x in ("titanx", "1080ti", "tx2")))
    with_nano = [w for w in common if "jetson-nano" in real[w]]
    rest = [w for w in common if w not in with_nano]
    picked = with_nano[: limit // 2]
    step = max(1, len(rest) // max(1, limit - len(picked)))
    picked += rest[::step][: limit - len(picked)]
    return picked


def _sample_rows(
    job: tuple[str, int, int, str | None],
) -> tuple[str, list[list[list[float]]], list[int]]:
    """Worker: sample a workload once (or load the cached sample) and analyse its candidates."""
    import tvm

    prepare()
    from agent.devices.sim import candidate_key, tir_analysis
    from agent.devices.sim.catalog import load_catalog
    from agent.fleet_dataset import generic_target, sample_workload

    workload, per_workload, seed, cache = job
    target = generic_target(list(load_catalog().values()))
    cached = (
        Path(cache) / f"{workload.replace(':', '_')}-{per_workload}-{seed}.json" if cache else None
    )
    if cached is not None and cached.exists():
        mods = [tvm.ir.load_json(text) for text in json.loads(cached.read_text())]
    else:
        sampled = sample_workload(workload, target, per_workload, seed=seed)
        mods = [c.sch.mod for c in sampled.candidates]
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps([tvm.ir.save_json(m) for m in mods]))
    rows, keys = [], []
    for mod in mods:
        try:
            kernels = tir_analysis.analyse(mod, target)
        except Exception:  # noqa: BLE001 - the model cannot read it: skip
            continue
        rows.append([k.as_row() for k in kernels])
        keys.append(candidate_key(mod))
    return workload, rows, keys


def simulate_best(
    workloads: list[str], per_workload: int, workers: int, cache: str | None = None
) -> dict[str, dict[str, float]]:
    """{workload: {gpu: best simulated seconds}} over the sampled candidates."""
    from agent.devices.sim import latency
    from agent.devices.sim.catalog import lookup

    params = latency.GpuParams.from_specs([lookup(g) for g in GPUS])
    jobs = [(w, per_workload, 1000 + i, cache) for i, w in enumerate(workloads)]
    out: dict[str, dict[str, float]] = {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for workload, rows, keys in pool.map(_sample_rows, jobs):
            if not rows:
                continue
            flat = [r for cand in rows for r in cand]
            owner = np.repeat(np.arange(len(rows)), [len(c) for c in rows])
            matrix = np.asarray(flat, dtype=np.float64)
            secs = latency.simulate(matrix, owner, np.asarray(keys, np.uint64), params, 3)
            best = secs.mean(axis=2).min(axis=0)
            out[workload] = {g: float(best[i]) for i, g in enumerate(GPUS)}
            print(f"  {workload}: {len(rows)} candidates", flush=True)
    return out


def compare(real: dict[str, dict[str, float]], sim: dict[str, dict[str, float]]) -> dict:
    pairs = []
    for a, b in itertools.combinations(SHARED, 2):
        shared = [w for w in sim if a in real[w] and b in real[w]]
        if len(shared) < 2:
            continue
        real_ratio = np.array([real[w][a] / real[w][b] for w in shared])
        sim_ratio = np.array([sim[w][a] / sim[w][b] for w in shared])
        real_geo = float(np.exp(np.log(real_ratio).mean()))
        sim_geo = float(np.exp(np.log(sim_ratio).mean()))
        real_a = [real[w][a] for w in shared]
        real_b = [real[w][b] for w in shared]
        sim_a = [sim[w][a] for w in shared]
        sim_b = [sim[w][b] for w in shared]
        pairs.append(
            {
                "pair": f"{a}/{b}",
                "workloads": len(shared),
                "real_geomean_latency_ratio": real_geo,
                "sim_geomean_latency_ratio": sim_geo,
                "sim_over_real": sim_geo / real_geo,
                "within_1_5x": bool(max(sim_geo / real_geo, real_geo / sim_geo) <= 1.5),
                "spearman_of_ratios_real_vs_sim": float(spearmanr(real_ratio, sim_ratio)[0]),
                "real_rank_similarity": float(spearmanr(real_a, real_b)[0]),
                "sim_rank_similarity": float(spearmanr(sim_a, sim_b)[0]),
            }
        )
    by_pair = {p["pair"]: p for p in pairs}
    structure = (
        by_pair["titanx/1080ti"]["sim_rank_similarity"]
        > by_pair["1080ti/tx2"]["sim_rank_similarity"]
    )
    return {"pairs": pairs, "similarity_structure_holds": bool(structure)}


def write_report(
    real: dict[str, dict[str, float]], sim: dict[str, dict[str, float]], result: dict, args: dict
) -> None:
    DOCS.mkdir(exist_ok=True)
    (DOCS / "sim_vs_tophub.json").write_text(
        json.dumps({"args": args, **result, "simulated_us": sim, "real_us": real}, indent=1)
    )
    lines = [
        "# Simulated fleet vs TopHub (real AutoTVM best latencies)",
        "",
        "Command: `python -m bench.simulator.sim_vs_tophub "
        f"--log PATH/{args['log']} --max-workloads "
        f"{args['max_workloads']} --per-workload {args['per_workload']}`; {len(sim)} "
        "conv2d/depthwise workloads, simulated = best of the sampled MetaSchedule candidates "
        "under the model (sampled in one thread per workload: a function of the seed).  ",
        f"Ran {result['seconds']:.0f} s; load average {result['load']} (start / end).",
        "",
        "| GPU pair (latency a/b) | workloads | real geomean | simulated geomean | sim/real "
        "| within 1.5x | Spearman of per-workload ratios | real rank similarity "
        "| simulated rank similarity |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in result["pairs"]:
        lines.append(
            f"| {p['pair']} | {p['workloads']} | {p['real_geomean_latency_ratio']:.2f} "
            f"| {p['sim_geomean_latency_ratio']:.2f} | {p['sim_over_real']:.2f} "
            f"| {'yes' if p['within_1_5x'] else 'NO'} "
            f"| {p['spearman_of_ratios_real_vs_sim']:.2f} | {p['real_rank_similarity']:.2f} "
            f"| {p['sim_rank_similarity']:.2f} |"
        )
    lines += [
        "",
        "Similarity structure (simulated titanx~1080ti more alike than 1080ti~tx2): "
        + ("holds" if result["similarity_structure_holds"] else "DOES NOT HOLD"),
        "",
        "## Per-workload best latency, microseconds (real | simulated)",
        "",
        "| workload | " + " | ".join(GPUS) + " |",
        "|---|" + "---|" * len(GPUS),
    ]
    for w in sim:
        cells = []
        for g in GPUS:
            r = real[w].get(g)
            cells.append(
                f"{r * 1e6:.0f} \\| {sim[w][g] * 1e6:.0f}" if r else f"- \\| {sim[w][g] * 1e6:.0f}"
            )
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    (DOCS / "sim_vs_tophub.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, default=Path("../shared/data/tophub_cuda_v0.10.log"))
    parser.add_argument("--max-workloads", type=int, default=16)
    parser.add_argument("--per-workload", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", default=None, help="keep sampled candidates here for reruns")
    args = parser.parse_args()
    if not args.log.is_file():
        parser.exit(2, f"error: {args.log}: no such log (pass --log)\n")
    real = parse_log(args.log)
    workloads = choose_workloads(real, args.max_workloads)
    print(f"{len(workloads)} workloads, {args.per_workload} candidates each", flush=True)
    t0 = time.perf_counter()
    load_start = " ".join(f"{x:.1f}" for x in os.getloadavg())
    sim = simulate_best(workloads, args.per_workload, args.workers, args.cache)
    result = compare(real, sim)
    result["seconds"] = time.perf_counter() - t0
    result["load"] = load_start + " / " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    write_report(real, sim, result, vars(args) | {"log": args.log.name, "cache": None})
    for p in result["pairs"]:
        print(
            f"{p['pair']:20s} real {p['real_geomean_latency_ratio']:.2f} "
            f"sim {p['sim_geomean_latency_ratio']:.2f} within1.5x={p['within_1_5x']} "
            f"rho_ratios={p['spearman_of_ratios_real_vs_sim']:.2f} "
            f"sim_rank={p['sim_rank_similarity']:.2f} real_rank={p['real_rank_similarity']:.2f}"
        )
    print("similarity structure holds:", result["similarity_structure_holds"])


if __name__ == "__main__":
    prepare()
    main()
