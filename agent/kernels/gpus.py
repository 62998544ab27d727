"""The real GPUs of kernel data: spec sheets with their sources (`gpus.json`), by name.

Kernel Tuner writes the GPU's name into each cache file (`device_name`); `find_gpu`
maps such a name, a file stem of a benchmark collection, or a catalog key to its entry.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from schemas import BadInputError
from schemas.kernels import KernelGpu

CATALOG = Path(__file__).with_name("gpus.json")


@cache
def kernel_gpus() -> tuple[KernelGpu, ...]:
    data = json.loads(CATALOG.read_text())
    return tuple(KernelGpu.model_validate(g) for g in data["gpus"])


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def find_gpu(name: str) -> KernelGpu:
    """The catalog entry a device name, file stem or key means; BadInputError if none."""
    wanted = _norm(name)
    for gpu in kernel_gpus():
        if wanted in {_norm(gpu.key), *(_norm(n) for n in gpu.names)}:
            return gpu
    known = ", ".join(g.key for g in kernel_gpus())
    raise BadInputError(f"GPU {name!r} is not in the kernel GPU catalog (known: {known})")
