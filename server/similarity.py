"""Hardware similarity as the federation sees it: cos(z_i, z_j) from the shared encoder.

The server holds no model of its own beyond the averaged shared arrays; it loads
them into a SiMoE and encodes the hardware vectors of the profiles nodes sent.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from schemas import HardwareProfile
from simoe_model.hardware import hardware_vector
from simoe_model.model import SiMoE, load_shared_arrays, shared_arrays


def initial_shared_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    """The shared parts of a freshly initialised model (the federation's version 1)."""
    torch.manual_seed(seed)
    return shared_arrays(SiMoE())


def _model(arrays: Mapping[str, np.ndarray]) -> SiMoE:
    model = SiMoE()
    if arrays:
        load_shared_arrays(model, arrays)
    model.eval()
    return model


def model_similarity(
    arrays: Mapping[str, np.ndarray],
    target: HardwareProfile,
    candidates: Mapping[str, HardwareProfile],
) -> dict[str, float]:
    """Similarity of each candidate's hardware to the target's, by the shared encoder."""
    model = _model(arrays)
    h = hardware_vector(target)
    return {name: model.similarity(h, hardware_vector(p)) for name, p in candidates.items()}


def similarity_matrix(
    arrays: Mapping[str, np.ndarray], profiles: Mapping[str, HardwareProfile]
) -> tuple[list[str], np.ndarray]:
    """Names and the symmetric matrix of cos(z_i, z_j) over all profiles."""
    names = sorted(profiles)
    model = _model(arrays)
    if not names:
        return names, np.zeros((0, 0))
    with torch.no_grad():
        h = torch.as_tensor(np.stack([hardware_vector(profiles[n]) for n in names]))
        z = torch.nn.functional.normalize(model.encode_hardware(h), dim=-1)
        return names, (z @ z.T).numpy().astype(np.float64)
