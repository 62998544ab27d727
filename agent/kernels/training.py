"""Train a SiMoE kernel model from the kernel records in a node's store.

    simoe-agent kernels train --kernel Xgemm --probe-kernel convolution_kernel --out gemm.pt

Every GPU with records of the kernel becomes an expert; its hardware vector is its spec
sheet (`agent.kernels.gpus`) and its probe values: the fixed probe configurations of the
probe kernels, read from the same store (so each GPU must have records of those too).
The model file carries what `agent.kernels.strategy.SiMoEStrategy` needs: the search
space, the probe set and the experts' GPUs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from agent.kernels.gpus import find_gpu
from agent.kernels.probes import PROBE_SET_VERSION, gpu_probe_vector, probe_keys
from agent.kernels.records import kernel_measurements, kernel_spaces
from agent.kernels.strategy import MODEL_KIND
from agent.store import Store
from schemas import BadInputError
from schemas.kernels import KernelSpace
from simoe_model.hardware import kernel_hardware_vector
from simoe_model.kernel_model import KernelDevice, KernelTraining, train_kernel_model
from simoe_model.model import save_model
from simoe_model.param_features import ParamFeaturizer


@dataclass
class _Data:
    keys: list[str]
    time_ms: object


def _space(store: Store, kernel: str) -> KernelSpace:
    spaces = [s for s in kernel_spaces(store) if kernel in (s.kernel_name, s.space_id)]
    if len(spaces) != 1:
        known = sorted({s.kernel_name for s in kernel_spaces(store)})
        raise BadInputError(
            f"kernel {kernel!r}: {len(spaces)} spaces in the store match (known: {known})"
        )
    return spaces[0]


def _gpus(store: Store, space_id: str) -> list[str]:
    rows = store._query(
        "SELECT DISTINCT gpu FROM kernel_records WHERE space_id = ? ORDER BY gpu", [space_id]
    )
    return [r["gpu"] for r in rows]


def train_from_store(
    store: Store,
    kernel: str,
    probe_kernels: list[str],
    out: Path,
    *,
    probes_per_kernel: int = 8,
    training: KernelTraining | None = None,
    seed: int = 0,
    sharpness: float = 2.0,
) -> dict[str, object]:
    """Train, save to `out`, and return what was trained on (the file's metadata)."""
    training = training or KernelTraining()
    space = _space(store, kernel)
    gpus = _gpus(store, space.space_id)
    if len(gpus) < 2:
        raise BadInputError(f"kernel {kernel!r}: records of {len(gpus)} GPU; a fleet needs 2+")
    probe_spaces = {k: _space(store, k) for k in probe_kernels}
    data = {
        k: {g: _Data(*kernel_measurements(store, s.space_id, g)[:2]) for g in gpus}
        for k, s in probe_spaces.items()
    }
    for k, by_gpu in data.items():
        lacking = [g for g, d in by_gpu.items() if not d.keys]
        if lacking:
            raise BadInputError(f"probe kernel {k!r} has no records on {lacking}")
    probes = {
        k: probe_keys(k, list(by_gpu.values()), probes_per_kernel) for k, by_gpu in data.items()
    }
    featurizer = ParamFeaturizer(space)
    devices = []
    for gpu in gpus:
        keys, times, _ = kernel_measurements(store, space.space_id, gpu)
        values = [_values(space, key) for key in keys]
        h = kernel_hardware_vector(
            find_gpu(gpu).analytical, gpu_probe_vector(probes, {k: data[k][gpu] for k in probes})
        )
        devices.append(KernelDevice(gpu, h, featurizer.features(values), times, keys))
    model = train_kernel_model(devices, training, seed)
    metadata = {
        "kind": MODEL_KIND,
        "space": space.model_dump(),
        "probes": probes,
        "probe_set_version": PROBE_SET_VERSION,
        "gpus": gpus,
        "training": asdict(training),
        "seed": seed,
        "sharpness": sharpness,
        "measured": True,
    }
    save_model(model, out, metadata)
    return metadata


def _values(space: KernelSpace, key: str) -> tuple:
    """A cache key back to its values, typed as the space lists them."""
    parts = key.split(",")
    out = []
    for part, (name, values) in zip(parts, space.params.items(), strict=True):
        match = [v for v in values if str(v) == part]
        if not match:
            raise BadInputError(f"configuration {key!r}: {name}={part} is not in the space")
        out.append(match[0])
    return tuple(out)
