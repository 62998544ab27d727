"""A node's store as SiMoE training data (agent may import simoe_model, not the reverse).

Only successful candidates with cached PerStoreFeature rows become training
examples; a task needs two of them to be ranked. Candidate ids go along, so the
offline benchmark can tell which schedules two GPUs share.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from agent.store import Store
from schemas import BadInputError, HardwareProfile
from simoe_model.data import DeviceDataset, TaskData
from simoe_model.hardware import hardware_vector


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
