"""A finished federation's state, read back from its registry: what the diagnosis tools
(routing_swap, teacher_diagnose, teacher_weights) start from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class SavedRun:
    """The registry's latest global model (version, arrays) and every expert by name."""

    version: int
    global_arrays: dict[str, np.ndarray]
    experts: dict[str, dict[str, np.ndarray] | None]


def read_saved_run(registry_path: Path) -> SavedRun:
    """BadInputError, one line naming `--registry`, when the file is missing or holds no
    global model."""
    from schemas import BadInputError
    from server.registry import Registry

    if not registry_path.is_file():
        raise BadInputError(f"--registry {registry_path} does not exist")
    with Registry(registry_path) as registry:
        latest = registry.latest_global()
        if latest is None:
            raise BadInputError(f"--registry {registry_path} holds no global model")
        experts = {name: registry.expert(name) for name in registry.expert_names()}
    return SavedRun(latest[0], latest[1], experts)
