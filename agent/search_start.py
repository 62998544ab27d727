"""What a node's search starts from, besides its cost model: the schedules the federation
offered it (opt-in schedule sharing), a warm-start MetaSchedule database of other units'
best schedules, and the node's own earlier measurements of the same tasks (which move the
SiMoE gate). `agent.tuner` hands them to the search."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.ms_database import workload_key_of
from agent.networks import one_line_of
from agent.tune_harness import TuneTask
from schemas import BadInputError
from schemas.records import failed_run

if TYPE_CHECKING:
    from agent.node_state import NodeState
    from agent.store import Store


class SharedSeeds:
    """The schedules the federation offered this node (schedule sharing, opt-in), by
    workload key, made into each task's seed traces (`resolve`); what applied (`used`) and
    what did not (`skipped`: a trace of another target or TVM version, never a crash)."""

    def __init__(self, traces: dict[str, list[str]]) -> None:
        self.traces = traces
        self.seeds: list[list[Any]] = []
        self.used = 0
        self.skipped = 0

    def resolve(self, tasks: list[TuneTask]) -> None:
        from agent.sharing import seed_traces

        self.seeds, self.skipped = seed_traces(tasks, self.traces)
        self.used = sum(len(s) for s in self.seeds)


def node_shared_seeds(node: NodeState | None) -> SharedSeeds | None:
    """The schedules the federation offered `node`, when it shares (else None)."""
    if node is None:
        return None
    from agent.sharing import received_schedules, sharing_on

    return SharedSeeds(received_schedules(node)) if sharing_on(node) else None


def observe_stored(model: Any, tasks: list[TuneTask], store: Store, device: str) -> int:
    """The node's earlier measurements of these tasks on this device, handed to a cost model
    whose gate they move (SiMoE with `sharpness` > 0, simoe_model.online_gate), so its
    search (fast mode's chained model-only searches too) starts from what this device has
    already shown about the experts. Nothing is trained on them here. How many it handed."""
    if isinstance(model, str) or getattr(model, "sharpness", 0.0) <= 0:
        return 0
    from agent.store_datasets import cache_missing_features

    by_key = {workload_key_of(t.mod): t for t in tasks}
    if not any(store.records(device=device, workload_key=k) for k in by_key):
        return 0
    cache_missing_features(store, device)
    found: dict[str, tuple[list[np.ndarray], list[float]]] = {}
    for item in store.labelled_candidates(device=device):
        if item.workload_key in by_key and item.latency_s and item.features is not None:
            feats, lats = found.setdefault(item.workload_key, ([], []))
            feats.append(item.features)
            lats.append(float(item.latency_s))
    for key, (feats, lats) in found.items():
        model.observe(by_key[key].mod, feats, np.asarray(lats))
    return sum(len(lats) for _, lats in found.values())


def warm_start_seeds(tasks: list[TuneTask], path: Path, k: int) -> list[list[Any]]:
    """The fleet schedule warm start: per task, the traces of the `k` fastest records of the
    same workload (structurally equal) in a MetaSchedule JSON database directory `path`,
    e.g. the best schedules other units tuned. Opt-in; only schedule traces are read from
    it (its latencies only rank them), and nothing of this node is written to it."""
    from tvm.s_tir import meta_schedule as ms

    files = [path / "database_workload.json", path / "database_tuning_record.json"]
    if not all(f.is_file() for f in files):
        raise BadInputError(
            f"--warm-start {path}: not a MetaSchedule JSON database directory (needs "
            "database_workload.json and database_tuning_record.json)"
        )
    try:
        db = ms.database.JSONDatabase(*map(str, files), allow_missing=False)
    except Exception as exc:  # noqa: BLE001 - TVM's parse errors: one line
        raise BadInputError(f"--warm-start {path}: unreadable: {one_line_of(exc)}") from exc
    import tvm_ffi

    index = {tvm_ffi.structural_hash(t.mod): i for i, t in enumerate(tasks)}
    found: list[list[tuple[float, Any]]] = [[] for _ in tasks]
    for rec in db.get_all_tuning_records():
        i = index.get(tvm_ffi.structural_hash(rec.workload.mod))
        secs = [float(x) for x in rec.run_secs or []]
        if i is not None and secs and not failed_run(secs):
            found[i].append((sum(secs) / len(secs), rec.trace))
    return [[trace for _, trace in sorted(f, key=lambda x: x[0])[:k]] for f in found]
