"""A simulated fleet as the federation benchmarks (federation_helps, poisoning) load it:
one `FleetGPU` per node (name, profile, all its data) from a fleet dataset's stores, the
protocol's units or a synthetic fleet; each node's train/held-out task split; and a node's
state directory written as enrolment plus tuning would leave it."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schemas import BadInputError, HardwareProfile
from simoe_model.task_data import DeviceDataset, TaskData


@dataclass
class FleetGPU:
    """One simulated GPU of the fleet: its node name, device, profile and all its data."""

    name: str
    profile: HardwareProfile
    dataset: DeviceDataset

    @property
    def device(self) -> str:
        return self.profile.device


# -- loading ------------------------------------------------------------------------------------
def load_gpus(
    directories: Sequence[Path], gpus: Sequence[str], scored: Sequence[str] = ()
) -> dict[str, FleetGPU]:
    """The named GPUs of a fleet dataset (DIR/<gpu>.sqlite in each directory, tasks joined),
    read through the protocol's label reader (bench/protocol.py `UnitLabels`): `gpus` train
    (a test unit of the protocol among them is refused before anything is read), `scored`
    (newcomers) are read for scoring only.

    Tasks are joined in sorted path order, as bench/transfer/offline_transfer.py's `load_fleet`, so
    `split_device` draws the same test split. Profiles come from the first directory's
    profiles/ cache (written by the offline benchmark), else are taken.
    """
    from bench import protocol

    labels = protocol.UnitLabels(Path(directories[0]), more_dirs=tuple(directories[1:]))
    purposes: dict[str, protocol.Purpose] = {g: "train" for g in gpus}
    for g in scored:
        purposes[g] = "test" if protocol.split_of(g) == "test" else "select"
    try:
        datasets = labels.load_set(purposes)  # a refused set reads nothing
    except FileNotFoundError as exc:
        raise BadInputError(str(exc)) from None
    out: dict[str, FleetGPU] = {}
    for gpu, dataset in datasets.items():
        cached = labels.dirs[0] / "profiles" / f"{gpu}.json"  # written by the reader
        profile = HardwareProfile.model_validate_json(cached.read_text())
        dataset = DeviceDataset(profile.device, _hardware_vector(profile), dataset.tasks)
        out[gpu] = FleetGPU(gpu, profile, dataset)
    return out


def protocol_gpus(split: str) -> tuple[list[FleetGPU], list[FleetGPU]]:
    """The protocol's training units as nodes, its `split` units as newcomers (bench/protocol.py).

    Labels come through the protocol's guard: newcomers of the test split only for scoring.
    """
    nodes = protocol_units("train", "train")
    return nodes, protocol_units(split, "test" if split == "test" else "select")


def protocol_units(split: str, purpose: str) -> list[FleetGPU]:
    """The protocol's `split` units as FleetGPUs, their labels read for `purpose`."""
    from bench import protocol

    labels = protocol.UnitLabels()

    def gpu(unit: str) -> FleetGPU:
        dataset = labels.load(unit, purpose)  # type: ignore[arg-type]
        cached = labels.data_dir / "profiles" / f"{unit}.json"
        profile = HardwareProfile.model_validate_json(cached.read_text())
        return FleetGPU(unit, profile, dataset)

    return [gpu(u) for u in protocol.units(split)]  # type: ignore[arg-type]


def synthetic_gpus(n_devices: int, n_tasks: int, per_task: int) -> dict[str, FleetGPU]:
    """A synthetic fleet (simoe_model.synthetic): for development and the smoke test."""
    from simoe_model import synthetic

    devices = synthetic.make_devices(n_devices, seed=0)
    tasks = synthetic.make_tasks(n_tasks, per_task, seed=0)
    out = {}
    for i, device in enumerate(devices):
        profile = device.profile()
        dataset = synthetic.device_dataset(device, tasks, seed=i)
        dataset.device = profile.device
        out[device.name] = FleetGPU(device.name, profile, dataset)
    return out


def _hardware_vector(profile: HardwareProfile) -> np.ndarray:
    from simoe_model.hardware import hardware_vector

    return hardware_vector(profile)


def split_tasks(
    gpu: FleetGPU,
    fraction: float,
    seed: int,
    same_split: bool,
    held_out: Sequence[str] | None = None,
) -> tuple[list[TaskData], list[TaskData]]:
    """(train, held-out) tasks of a node; the draw depends on the node's name unless shared.

    `held_out` names the held-out tasks outright (the protocol's, the same on every node).
    """
    names = sorted(t.task_name for t in gpu.dataset.tasks)
    rng = np.random.default_rng(seed if same_split else [seed, zlib.crc32(gpu.name.encode())])
    count = min(len(names) - 1, max(1, round(fraction * len(names))))
    if held_out is not None:
        held = set(held_out) & set(names)
    else:
        held = set(rng.choice(names, size=count, replace=False).tolist())
    train = [t for t in gpu.dataset.tasks if t.task_name not in held]
    return train, [t for t in gpu.dataset.tasks if t.task_name in held]


def write_node(state_dir: Path, gpu: FleetGPU, tasks: Sequence[TaskData]) -> None:
    """A node's state directory as enrolment plus tuning of `tasks` would leave it."""
    from agent.enroll import create_node_key
    from agent.node_state import NodeState
    from schemas import AgentConfig, TuningRecord

    node = NodeState(state_dir)
    node.save_config(AgentConfig(name=gpu.name, device=gpu.device))
    create_node_key(state_dir)
    node.save_profile(gpu.profile)  # the profile file, and the store's provenance copy
    with node.open_store() as store:
        for task in tasks:
            ids = task.candidate_ids or [f"c{i}" for i in range(len(task))]
            records = [
                TuningRecord(
                    workload_key=f"wk:{task.task_name}",
                    task_name=task.task_name,
                    trace={"candidate": cid},
                    run_secs=[float(latency)],
                    target={"kind": "cuda"},
                    device=gpu.device,
                    simulated=True,
                )
                for cid, latency in zip(ids, task.latencies, strict=True)
            ]
            stored = store.add_records(records)
            store.put_features(dict(zip(stored, task.features, strict=True)))
