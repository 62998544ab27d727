"""Hardware similarity as the federation sees it: cos(z_i, z_j) from the shared encoder.

The server holds no model of its own beyond the averaged shared arrays; it loads
them into a SiMoE and encodes the hardware vectors of the profiles nodes sent. After
each round's average it fits that encoder on the nodes' reported rank agreements
(`fit_shared_similarity`), so that "similar" means "ranks the same candidates alike".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from schemas import HardwareProfile
from simoe_model.hardware import hardware_vector
from simoe_model.model import SiMoE, load_shared_arrays, shared_arrays
from simoe_model.train import fit_similarity

# The server's step on the hardware encoder per round (Adam): with 10 steps each learned
# value moves at most about 0.1 per round, and each round refits on the latest agreements.
FIT_LR = 1e-2


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


def fit_shared_similarity(
    arrays: Mapping[str, np.ndarray],
    profiles: Mapping[str, HardwareProfile],
    agreements: Sequence[tuple[str, str, float]],
    *,
    steps: int,
    seed: int,
    lr: float = FIT_LR,
) -> tuple[dict[str, np.ndarray], float, float]:
    """The shared arrays with the hardware encoder fitted so that cos(z_a, z_b) follows
    each (a, b, agreement): node a's rank agreement with the expert of node b, on a's own
    records. Each reporting node's pairs weigh the same. Returns (arrays, loss before,
    loss after); only the hardware encoder's learned arrays change. BadInputError if
    `arrays` are not a SiMoE's shared arrays."""
    model = _model(arrays)
    keys = sorted(profiles)
    index = {key: i for i, key in enumerate(keys)}
    hardware = np.stack([hardware_vector(profiles[key]) for key in keys])
    pairs = np.array([[index[a], index[b]] for a, b, _ in agreements], dtype=np.int64)
    values = np.array([value for _, _, value in agreements], dtype=np.float32)
    groups = [index[a] for a, _, _ in agreements]
    before, after = fit_similarity(
        model, hardware, pairs, values, groups=groups, steps=steps, lr=lr, seed=seed
    )
    return shared_arrays(model), before, after
