"""Fleet datasets: candidates sampled ONCE per workload, labelled on every simulated GPU.

CUDA design spaces differ between GPUs only by their limits (threads per block,
shared memory per block), so candidates are sampled once for a generic cuda target
with the loosest limits of the fleet; a candidate that exceeds one GPU's limits (or
cannot keep one block resident on its SM) is recorded on that GPU as failed
(run_secs = [1e10]), as a real build would fail there. Program features
(MetaSchedule's PerStoreFeature, [n_stores, 164]) are extracted once per candidate;
the latency model labels all candidates on all GPUs in one vectorized call.

Each GPU's data is its own node's local data: one store per GPU,
`DIR/<gpu>.sqlite`, written through `agent.store.Store`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agent.devices.sim import candidate_key, cuda_target, latency, tir_analysis
from agent.devices.sim.catalog import load_catalog, lookup
from schemas import FAILED_RUN_SECS, BadInputError, TuningRecord
from schemas.gpu import GpuSpec

Progress = Callable[[str, int, int], None]

# A small suite for tests and smoke runs: tiny shapes that sample in seconds.
TINY_SUITE = ["matmul:64,64,64", "depthwise_conv2d:1,16,14,14,3,3,1,1"]


class WorkloadSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workload: str
    candidates: int
    valid_per_gpu: dict[str, int]
    best_us_per_gpu: dict[str, float | None]


class DatasetSummary(BaseModel):
    """What `dataset build` wrote; the `--json` output of the command."""

    model_config = ConfigDict(extra="forbid")

    out_dir: str
    gpus: list[str]
    workloads: list[WorkloadSummary]
    candidates: int = Field(description="sampled candidates over all workloads")
    pairs: int = Field(description="candidate-GPU pairs labelled")
    seconds_sampling: float
    seconds_features: float
    seconds_analysis: float
    seconds_labelling: float
    seconds_writing: float
    simulated: bool = True


@dataclass
class SampledWorkload:
    """One workload's distinct candidates and the TuneContext that sampled them."""

    name: str
    mod: Any
    candidates: list[Any]
    context: Any


def resolve_gpus(text: str) -> list[GpuSpec]:
    """`all` or a comma list of catalog names/aliases."""
    catalog = load_catalog()
    if text.strip().lower() == "all":
        return list(catalog.values())
    specs: list[GpuSpec] = []
    for name in text.split(","):
        if name.strip():
            spec = lookup(name)
            if spec not in specs:
                specs.append(spec)
    if not specs:
        raise BadInputError("--gpus: name at least one GPU, or `all`")
    return specs


def resolve_workloads(text: str) -> list[str]:
    """`suite` (the operator suite), `tiny` (two small ones) or a comma/semicolon list."""
    from agent.workloads import OPERATOR_SUITE, parse_workload

    text = text.strip()
    if text == "suite":
        return [str(w) for w in OPERATOR_SUITE]
    if text == "tiny":
        return list(TINY_SUITE)
    names = [t.strip() for t in text.replace(";", " ").split() if t.strip()]
    for name in names:
        parse_workload(name)  # one-line BadInputError for a malformed one
    if not names:
        raise BadInputError("--workloads: give `suite`, `tiny` or workloads separated by spaces")
    return names


def generic_target(gpus: Sequence[GpuSpec]) -> Any:
    """A cuda target with the loosest limits of the fleet: no candidate is lost to sampling."""
    loosest = max(gpus, key=lambda s: (s.shared_mem_per_block_kb, s.max_threads_per_block))
    return cuda_target(loosest)


def sample_workload(
    workload: str, target: Any, per_workload: int, *, seed: int, num_threads: int | None = None
) -> SampledWorkload:
    """Sample distinct postprocessed candidates by replaying the design-space traces.

    ReplayTrace re-draws every decision and retries candidates that fail VerifyGPUCode,
    in C++ threads (`num_threads`, default: every core).
    """
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from agent.workloads import parse_workload, prim_func

    mod = tvm.IRModule({"main": prim_func(parse_workload(workload))})
    ctx = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.ReplayTrace(max_fail_count=max(100, per_workload)),
        task_name=workload,
        rand_state=seed,
        num_threads=num_threads or max(1, os.cpu_count() or 1),
    )
    ctx.pre_tuning(max_trials=per_workload, num_trials_per_iter=per_workload)
    found = ctx.generate_measure_candidates() or []
    ctx.post_tuning()
    seen: set[int] = set()
    candidates = []
    for cand in found:
        key = candidate_key(cand.sch.mod)
        if key not in seen:
            seen.add(key)
            candidates.append(cand)
    return SampledWorkload(workload, mod, candidates, ctx)


def _record_args(mod: Any) -> list[Any]:
    from tvm.s_tir import meta_schedule as ms

    from agent.store import plain_json

    return [plain_json(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]


def build_fleet_dataset(
    workloads: Sequence[str],
    gpus: Sequence[GpuSpec],
    per_workload: int,
    out_dir: Path,
    *,
    seed: int = 0,
    repeats: int = 3,
    progress: Progress | None = None,
) -> DatasetSummary:
    """Sample, featurize and analyse each workload once; label it on every GPU; write stores."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from agent.store import Store, plain_json, workload_key_of

    if per_workload < 1:
        raise BadInputError("--per-workload must be at least 1")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = generic_target(gpus)
    params = latency.GpuParams.from_specs(list(gpus))
    stores = {spec.key: Store(out_dir / f"{spec.key}.sqlite") for spec in gpus}
    timing = dict.fromkeys(("sampling", "features", "analysis", "labelling", "writing"), 0.0)
    summaries: list[WorkloadSummary] = []
    total_candidates = 0
    try:
        for index, workload in enumerate(workloads):
            if progress:
                progress(workload, index, len(workloads))
            t0 = time.perf_counter()
            sampled = sample_workload(workload, target, per_workload, seed=seed + index)
            ctx = sampled.context
            t1 = time.perf_counter()
            feats = ms.feature_extractor.PerStoreFeature().extract_from(ctx, sampled.candidates)
            features = [np.asarray(f.numpy(), dtype=np.float32) for f in feats]
            t2 = time.perf_counter()
            kernels = []
            for cand in sampled.candidates:
                try:
                    kernels.append(tir_analysis.analyse(cand.sch.mod, target))
                except Exception:  # noqa: BLE001 - unreadable by the model: failed everywhere
                    kernels.append([])
            keys = np.asarray([candidate_key(c.sch.mod) for c in sampled.candidates], np.uint64)
            t3 = time.perf_counter()
            matrix, owner = latency.kernel_matrix(kernels)
            secs = latency.simulate(matrix, owner, keys, params, repeats=repeats)
            t4 = time.perf_counter()
            wkey = workload_key_of(sampled.mod)
            mod_json = tvm.ir.save_json(sampled.mod)
            traces = [plain_json(c.sch.trace.as_json()) for c in sampled.candidates]
            args_info = _record_args(sampled.mod)
            valid: dict[str, int] = {}
            best: dict[str, float | None] = {}
            for g, spec in enumerate(gpus):
                store = stores[spec.key]
                store.add_workload(wkey, workload, mod_json, workload)
                gpu_target = cuda_target(spec).export()
                records = []
                for c, trace in enumerate(traces):
                    run = secs[c, g]
                    ok = bool(np.all(np.isfinite(run)))
                    records.append(
                        TuningRecord(
                            workload_key=wkey,
                            task_name=workload,
                            trace=trace,
                            run_secs=[float(s) for s in run] if ok else [FAILED_RUN_SECS],
                            target=plain_json(gpu_target),
                            args_info=args_info,
                            device=f"sim:{spec.key}",
                            simulated=True,
                        )
                    )
                ids = store.add_records(records)
                store.put_features(dict(zip(ids, features, strict=True)))
                finite = secs[:, g, :].mean(axis=1)
                finite = finite[np.isfinite(finite)]
                valid[spec.key] = int(finite.size)
                best[spec.key] = float(finite.min() * 1e6) if finite.size else None
            t5 = time.perf_counter()
            for name, dt in zip(timing, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                timing[name] += dt
            total_candidates += len(sampled.candidates)
            summaries.append(
                WorkloadSummary(
                    workload=workload,
                    candidates=len(sampled.candidates),
                    valid_per_gpu=valid,
                    best_us_per_gpu=best,
                )
            )
        if progress:
            progress("done", len(workloads), len(workloads))
    finally:
        for store in stores.values():
            store.close()
    return DatasetSummary(
        out_dir=str(out_dir),
        gpus=[spec.key for spec in gpus],
        workloads=summaries,
        candidates=total_candidates,
        pairs=total_candidates * len(gpus),
        seconds_sampling=timing["sampling"],
        seconds_features=timing["features"],
        seconds_analysis=timing["analysis"],
        seconds_labelling=timing["labelling"],
        seconds_writing=timing["writing"],
    )
