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

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agent.devices.sim import candidate_key, cuda_target, latency, tir_analysis
from agent.devices.sim.catalog import load_catalog, resolve
from agent.progress import ProgressCallback
from schemas import FAILED_RUN_SECS, BadInputError, TuningRecord
from schemas.gpu import GpuSpec

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
    """`all` (the catalog's models) or a comma list of models, units or spec.json paths."""
    catalog = load_catalog()
    if text.strip().lower() == "all":
        return list(catalog.values())
    specs: list[GpuSpec] = []
    for name in text.split(","):
        if name.strip():
            spec = resolve(name)
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


def sample_candidates(
    mod: Any,
    target: Any,
    count: int,
    *,
    seed: int,
    task_name: str,
    num_threads: int = 1,
) -> tuple[list[Any], Any]:
    """Up to `count` distinct postprocessed candidates of `mod` by replaying its design-space
    traces, and the TuneContext that sampled them.

    ReplayTrace re-draws every decision and retries candidates that fail VerifyGPUCode,
    in `num_threads` C++ threads. One by default: with several, each thread draws from its
    own random state in whatever order the threads run, so the sample changed from run to
    run and from machine to machine (a rebuilt protocol fleet differed from the lost one).
    """
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.ReplayTrace(max_fail_count=max(100, count)),
        task_name=task_name,
        rand_state=seed,
        num_threads=num_threads,
    )
    ctx.pre_tuning(max_trials=count, num_trials_per_iter=count)
    found = ctx.generate_measure_candidates() or []
    ctx.post_tuning()
    seen: set[int] = set()
    candidates = []
    for cand in found:
        key = candidate_key(cand.sch.mod)
        if key not in seen:
            seen.add(key)
            candidates.append(cand)
    return candidates, ctx


def sample_workload(
    workload: str, target: Any, per_workload: int, *, seed: int, num_threads: int = 1
) -> SampledWorkload:
    """Sample distinct candidates of one workload (see `sample_candidates`)."""
    import tvm

    from agent.workloads import parse_workload, prim_func

    mod = tvm.IRModule({"main": prim_func(parse_workload(workload))})
    candidates, ctx = sample_candidates(
        mod, target, per_workload, seed=seed, task_name=workload, num_threads=num_threads
    )
    return SampledWorkload(workload, mod, candidates, ctx)


def _record_args(mod: Any) -> list[Any]:
    from tvm.s_tir import meta_schedule as ms

    from agent.ms_database import plain_json

    return [plain_json(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]


@dataclass
class AnalysedSample:
    """What labelling needs of one workload's sample: everything but the GPUs.

    Sampling (ReplayTrace + VerifyGPUCode) is the slow part of a dataset; features and the
    TIR analysis are per candidate, not per GPU. Kept in a cache directory, a sample is
    labelled again on other GPUs or units without sampling anew.
    """

    workload: str
    workload_key: str
    mod_json: str
    traces: list[Any]
    args_info: list[Any]
    features: list[np.ndarray]
    matrix: np.ndarray
    owner: np.ndarray
    keys: np.ndarray
    seconds: dict[str, float]


def _cache_file(cache_dir: Path, workload: str, target: Any, per_workload: int, seed: int) -> Path:
    import hashlib

    # v2: samples drawn in one thread. A v1 entry was drawn in several threads and depends
    # on their timing, so it must never be reused as if it were a function of the seed.
    tag = hashlib.sha256(
        f"{workload}|{per_workload}|{seed}|{target.max_shared_memory_per_block}|"
        f"{target.max_num_threads}|v2".encode()
    ).hexdigest()[:12]
    slug = "".join(c if c.isalnum() else "_" for c in workload)
    return cache_dir / f"{slug}-{tag}.npz"


def _load_cached(path: Path, workload: str) -> AnalysedSample | None:
    import json

    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            offsets = data["feature_offsets"]
            flat = data["features"]
            features = [flat[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
            return AnalysedSample(
                workload=workload,
                workload_key=meta["workload_key"],
                mod_json=meta["mod_json"],
                traces=meta["traces"],
                args_info=meta["args_info"],
                features=features,
                matrix=data["matrix"],
                owner=data["owner"],
                keys=data["keys"].astype(np.uint64),
                seconds=dict.fromkeys(("sampling", "features", "analysis"), 0.0),
            )
    except (OSError, ValueError, KeyError):
        return None  # a damaged cache entry is sampled again


def _save_cached(path: Path, sample: AnalysedSample) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "workload_key": sample.workload_key,
        "mod_json": sample.mod_json,
        "traces": sample.traces,
        "args_info": sample.args_info,
    }
    sizes = [len(f) for f in sample.features]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    width = sample.features[0].shape[1] if sample.features else 164
    flat = np.concatenate(sample.features) if sample.features else np.zeros((0, width), np.float32)
    tmp = path.with_name(f".{path.stem}.tmp.npz")
    np.savez(
        tmp,
        meta=np.asarray(json.dumps(meta)),
        feature_offsets=offsets,
        features=flat,
        matrix=sample.matrix,
        owner=sample.owner,
        keys=sample.keys.astype(np.uint64),
    )
    tmp.replace(path)  # never half a cache entry


def analyse_sample(
    workload: str, target: Any, per_workload: int, *, seed: int, cache_dir: Path | None = None
) -> AnalysedSample:
    """Sample a workload's candidates once, extract features, analyse their TIR (cached)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from agent.ms_database import plain_json, workload_key_of

    path = _cache_file(cache_dir, workload, target, per_workload, seed) if cache_dir else None
    if path is not None and path.exists():
        cached = _load_cached(path, workload)
        if cached is not None:
            return cached
    t0 = time.perf_counter()
    sampled = sample_workload(workload, target, per_workload, seed=seed)
    t1 = time.perf_counter()
    feats = ms.feature_extractor.PerStoreFeature().extract_from(sampled.context, sampled.candidates)
    features = [np.asarray(f.numpy(), dtype=np.float32) for f in feats]
    t2 = time.perf_counter()
    kernels = []
    for cand in sampled.candidates:
        try:
            kernels.append(tir_analysis.analyse(cand.sch.mod, target))
        except Exception:  # noqa: BLE001 - unreadable by the model: failed everywhere
            kernels.append([])
    keys = np.asarray([candidate_key(c.sch.mod) for c in sampled.candidates], np.uint64)
    matrix, owner = latency.kernel_matrix(kernels)
    t3 = time.perf_counter()
    sample = AnalysedSample(
        workload=workload,
        workload_key=workload_key_of(sampled.mod),
        mod_json=tvm.ir.save_json(sampled.mod),
        traces=[plain_json(c.sch.trace.as_json()) for c in sampled.candidates],
        args_info=_record_args(sampled.mod),
        features=features,
        matrix=matrix,
        owner=owner,
        keys=keys,
        seconds={"sampling": t1 - t0, "features": t2 - t1, "analysis": t3 - t2},
    )
    if path is not None:
        _save_cached(path, sample)
    return sample


def build_fleet_dataset(
    workloads: Sequence[str],
    gpus: Sequence[GpuSpec],
    per_workload: int,
    out_dir: Path,
    *,
    seed: int = 0,
    repeats: int = 3,
    progress: ProgressCallback | None = None,
    cache_dir: Path | None = None,
    ptxas_cache: Path | None = None,
) -> DatasetSummary:
    """Sample, featurize and analyse each workload once; label it on every GPU; write stores.

    With `cache_dir`, each workload's sample (traces, features, TIR analysis) is kept there
    and reused: labelling the same sample on other GPUs or units costs seconds. With
    `ptxas_cache`, ptxas's registers, spills and static shared memory replace the
    estimate on every GPU whose arch nvcc compiles for (`sim.compiler_facts`).
    """
    from agent.ms_database import plain_json
    from agent.store import Store

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
            sample = analyse_sample(
                workload, target, per_workload, seed=seed + index, cache_dir=cache_dir
            )
            for name, dt in sample.seconds.items():
                timing[name] += dt
            t3 = time.perf_counter()
            facts = None
            if ptxas_cache is not None:
                from agent.devices.sim import compiler_facts

                facts, _ = compiler_facts.sample_fact_arrays(
                    sample.mod_json, sample.traces, sample.owner, target,
                    [spec.cuda_arch for spec in gpus], compiler_facts.FactsCache(ptxas_cache),
                )  # fmt: skip
            secs = latency.simulate(
                sample.matrix, sample.owner, sample.keys, params, repeats=repeats, facts=facts
            )
            t4 = time.perf_counter()
            wkey = sample.workload_key
            valid: dict[str, int] = {}
            best: dict[str, float | None] = {}
            for g, spec in enumerate(gpus):
                store = stores[spec.key]
                store.add_workload(wkey, workload, sample.mod_json, workload)
                gpu_target = plain_json(cuda_target(spec).export())
                records = []
                for c, trace in enumerate(sample.traces):
                    run = secs[c, g]
                    ok = bool(np.all(np.isfinite(run)))
                    records.append(
                        TuningRecord(
                            workload_key=wkey,
                            task_name=workload,
                            trace=trace,
                            run_secs=[float(s) for s in run] if ok else [FAILED_RUN_SECS],
                            target=gpu_target,
                            args_info=sample.args_info,
                            device=f"sim:{spec.key}",
                            simulated=True,
                        )
                    )
                ids = store.add_records(records)
                store.put_features(dict(zip(ids, sample.features, strict=True)))
                finite = secs[:, g, :].mean(axis=1)
                finite = finite[np.isfinite(finite)]
                valid[spec.key] = int(finite.size)
                best[spec.key] = float(finite.min() * 1e6) if finite.size else None
            t5 = time.perf_counter()
            timing["labelling"] += t4 - t3
            timing["writing"] += t5 - t4
            total_candidates += len(sample.traces)
            summaries.append(
                WorkloadSummary(
                    workload=workload,
                    candidates=len(sample.traces),
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
