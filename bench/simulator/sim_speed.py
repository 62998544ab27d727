"""Speed of the simulated fleet (a benchmark, not a test; writes docs/sim_speed.json).

1. Labelling: candidate-GPU pairs per second of the vectorized latency model, after
   sampling and TIR analysis (target: >= 100,000 pairs/s).
2. TIR analysis: seconds per candidate (done once per candidate, not per GPU).
3. Tuning: a 1024^3 matmul on sim:a100 with 256 trials through the agent's tuner
   (target: under 90 s on 2 cores); search wall time and modelled measurement time
   (what those measurements would have cost on a real A100) reported separately.

    python -m bench.simulator.sim_speed [--skip-tune]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import prepare

DOCS = Path(__file__).resolve().parents[2] / "docs"


def bench_labelling(pairs_target: int = 2_000_000) -> dict:
    prepare()
    from agent.devices.sim import candidate_key, latency, tir_analysis
    from agent.devices.sim.catalog import load_catalog
    from agent.fleet_dataset import generic_target, sample_workload

    specs = list(load_catalog().values())
    target = generic_target(specs)
    t0 = time.perf_counter()
    sampled = sample_workload("matmul:256,256,256", target, 32, seed=0)
    t_sample = time.perf_counter() - t0
    t0 = time.perf_counter()
    kernels = [tir_analysis.analyse(c.sch.mod, target) for c in sampled.candidates]
    t_analyse = time.perf_counter() - t0
    keys = [candidate_key(c.sch.mod) for c in sampled.candidates]
    # replicate the analysed candidates to a large batch (distinct noise keys)
    reps = max(1, pairs_target // (len(kernels) * len(specs)))
    batch = kernels * reps
    batch_keys = np.arange(len(batch), dtype=np.uint64) ^ np.uint64(keys[0])
    matrix, owner = latency.kernel_matrix(batch)
    params = latency.GpuParams.from_specs(specs)
    t0 = time.perf_counter()
    secs = latency.simulate(matrix, owner, batch_keys, params, repeats=3)
    t_label = time.perf_counter() - t0
    pairs = secs.shape[0] * secs.shape[1]
    return {
        "candidates_sampled": len(sampled.candidates),
        "sampling_s_per_candidate": t_sample / max(1, len(sampled.candidates)),
        "analysis_s_per_candidate": t_analyse / max(1, len(kernels)),
        "labelled_pairs": pairs,
        "labelling_s": t_label,
        "pairs_per_second": pairs / t_label,
        "repeats_per_pair": 3,
    }


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (builder/runner workers)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def bench_tuning(trials: int, population: int | None = None) -> dict:
    prepare()
    from agent.devices import get_device
    from agent.store import Store
    from agent.tuner import search_population, tune_workload
    from agent.workloads import parse_workload

    device = get_device("sim:a100")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "store.sqlite")
        load_before = os.getloadavg()
        cpu0 = _cpu_seconds()
        t0 = time.perf_counter()
        result = tune_workload(
            parse_workload("matmul:1024,1024,1024"),
            device,
            store,
            trials=trials,
            baseline=False,
            seed=0,
            population=population,
        )
        total = time.perf_counter() - t0
        cpu = _cpu_seconds() - cpu0
        store.close()
    task = result.tasks[0]
    return {
        "workload": "matmul:1024,1024,1024",
        "device": device.name,
        "trials": result.trials,
        "population": search_population(population),
        "total_wall_s": total,
        "cpu_s": cpu,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "search_wall_s": result.search_wall_s,
        "modelled_measure_s": device.modelled_measure_seconds,
        "modelled_measurements": device.measurements,
        "sim_model_wall_s": device.model_wall_seconds,
        "best": task.model_dump() if hasattr(task, "model_dump") else str(task),
        "simulated": True,
    }


def bench_tuning_direct(trials: int, population: int) -> dict:
    """The same tune straight through MetaSchedule with a small search population."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    prepare()
    from agent.devices import get_device
    from agent.workloads import parse_workload, prim_func

    device = get_device("sim:a100")
    mod = tvm.IRModule({"main": prim_func(parse_workload("matmul:1024,1024,1024"))})
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        database = ms.tir_integration.tune_tir(
            mod,
            device.target(),
            tmp,
            max_trials_global=trials,
            num_trials_per_iter=64,
            builder=device.builder(),
            runner=device.runner(),
            measure_callbacks=[
                ms.measure_callback.AddToDatabase(),
                ms.measure_callback.UpdateCostModel(),
            ],
            strategy=ms.search_strategy.EvolutionarySearch(
                population_size=population, genetic_num_iters=2
            ),
            seed=0,
        )
        records = database.get_all_tuning_records()
        best = min(float(r.run_secs[0]) for r in records if r.run_secs)
    return {
        "workload": "matmul:1024,1024,1024",
        "device": device.name,
        "population": population,
        "trials": len(records),
        "wall_s": time.perf_counter() - t0,
        "cpu_s_main_process": time.process_time() - cpu0,
        "sim_model_wall_s": device.model_wall_seconds,
        "modelled_measure_s": device.modelled_measure_seconds,
        "best_latency_s": best,
        "simulated": True,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-tune", action="store_true")
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--skip-labelling", action="store_true")
    parser.add_argument(
        "--population",
        type=int,
        default=None,
        help="search population of the tuner (default: the tuner's, 512 at 256 trials)",
    )
    parser.add_argument(
        "--direct-population", type=int, default=0, help="also tune via MetaSchedule directly"
    )
    args = parser.parse_args()
    report: dict = {}
    if not args.skip_labelling:
        report["labelling"] = bench_labelling()
        print(json.dumps(report["labelling"], indent=1), flush=True)
    if args.direct_population:
        report["tuning_direct"] = bench_tuning_direct(args.trials, args.direct_population)
        print(json.dumps(report["tuning_direct"], indent=1), flush=True)
    if not args.skip_tune:
        key = "tuning" if args.population is None else f"tuning_population_{args.population}"
        report[key] = bench_tuning(args.trials, args.population)
        print(json.dumps(report[key], indent=1, default=str), flush=True)
    DOCS.mkdir(exist_ok=True)
    out = DOCS / "sim_speed.json"
    old = json.loads(out.read_text()) if out.exists() else {}
    old.update(report)
    out.write_text(json.dumps(old, indent=1, default=str))


if __name__ == "__main__":
    prepare()
    main()
