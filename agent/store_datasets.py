"""A node's store as SiMoE training data (agent may import simoe_model, not the reverse).

Only successful candidates with cached PerStoreFeature rows become training
examples; a task needs two of them to be ranked. Candidate ids go along, so the
offline benchmark can tell which schedules two GPUs share.

The tuner stores traces, not features: `cache_missing_features` replays the trace
of each measured record that has none on its workload and extracts its features
once, so a node trains on its own tuning records.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from agent.node_state import NodeState
from agent.store import Store
from schemas import BadInputError, HardwareProfile
from simoe_model.hardware import hardware_vector
from simoe_model.task_data import DeviceDataset, TaskData

log = logging.getLogger("simoe.agent")


def load_device_dataset(
    store: Store,
    device: str,
    profile: HardwareProfile,
    *,
    min_per_task: int = 2,
) -> DeviceDataset:
    """Every measured, featurized candidate of `device` in `store`, grouped by task."""
    by_task: dict[str, tuple[list[np.ndarray], list[float], list[str]]] = defaultdict(
        lambda: ([], [], [])
    )
    for item in store.labelled_candidates(device=device):
        if item.latency_s is None or item.features is None:
            continue
        feats, lats, ids = by_task[item.task_name]
        feats.append(item.features)
        lats.append(item.latency_s)
        ids.append(item.candidate_id)
    tasks = [
        TaskData(name, feats, np.asarray(lats), ids)
        for name, (feats, lats, ids) in sorted(by_task.items())
        if len(feats) >= min_per_task
    ]
    return DeviceDataset(device, hardware_vector(profile), tasks)


def cache_missing_features(store: Store, device: str) -> int:
    """Extract and cache the features of `device`'s measured records that have none.

    Each record's trace is replayed on its workload's module (as `compile_tir` does)
    and MetaSchedule's PerStoreFeature reads the scheduled module, with the record's
    own target. A record that cannot be replayed is skipped (logged), never fatal.
    Returns how many feature sets were added.
    """
    missing = {
        c.candidate_id
        for c in store.labelled_candidates(device=device)
        if c.latency_s is not None and c.features is None
    }
    if not missing:
        return 0
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    extractor = ms.feature_extractor.PerStoreFeature()
    modules: dict[str, Any] = {}
    found: dict[str, np.ndarray] = {}
    for record in store.records(device=device):
        candidate_id = Store.candidate_id(record.workload_key, record.trace)
        if candidate_id not in missing:
            continue
        try:
            if record.workload_key not in modules:
                row = store.workload(record.workload_key)
                modules[record.workload_key] = tvm.ir.load_json(row["mod_json"]) if row else None
            mod = modules[record.workload_key]
            if mod is None:
                continue
            ms_record = ms.database.TuningRecord.from_json(
                [record.trace, record.run_secs, record.target, record.args_info or None],
                ms.database.Workload(mod),
            )
            sch = Schedule(mod)
            ms_record.trace.apply_to_schedule(sch, remove_postproc=False)
            args = ms_record.args_info or ms.arg_info.ArgInfo.from_prim_func(mod["main"])
            context = ms.TuneContext(mod=mod, target=tvm.target.Target(record.target))
            [rows] = extractor.extract_from(context, [ms.MeasureCandidate(sch, args)])
            found[candidate_id] = np.asarray(rows.numpy(), dtype=np.float32)
        except Exception as exc:  # noqa: BLE001 - TVM raises its own types for a bad trace
            log.warning("record %s: no features (%s)", candidate_id, type(exc).__name__)
    if found:
        store.put_features(found)
    return len(found)


def store_devices(store: Store) -> list[str]:
    """The devices a store holds records of."""
    return sorted(store.devices())


def load_store_file(path: Path, profile: HardwareProfile | None = None) -> DeviceDataset:
    """A fleet-dataset file (one store per GPU) as the dataset of its one device.

    The profile is the store's latest one for that device unless given.
    """
    with Store(path) as store:
        devices = store_devices(store)
        if len(devices) != 1:
            raise BadInputError(f"{path}: expected records of one device, found {devices}")
        device = devices[0]
        profile = profile or store.latest_profile(device)
        if profile is None:
            raise BadInputError(
                f"{path}: no hardware profile of {device}; run `simoe-agent profile`"
            )
        return load_device_dataset(store, device, profile)


def node_dataset(node: NodeState, profile: HardwareProfile) -> DeviceDataset:
    """A node's measurements on its profiled device (features cached in its store)."""
    if not node.store_path.exists():
        return DeviceDataset(profile.device, hardware_vector(profile), [])
    with node.open_store() as store:
        cache_missing_features(store, profile.device)  # the tuner's records have none yet
        return load_device_dataset(store, profile.device, profile)
