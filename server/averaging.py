"""The averaging math, apart from the strategies (as Flower keeps its aggregation helpers).

Pure functions over `{name: array}` dicts: no messages, no registry, no round state.
`SiMoEStrategy.aggregate_shared` and the robust strategies compose them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from schemas.protocol import Arrays


def weighted_average(updates: list[Arrays], weights: list[float]) -> Arrays:
    """Exactly FedAvg: sum_i w_i x_i / sum_i w_i, computed in float64."""
    total = float(sum(weights))
    out: Arrays = {}
    for key in updates[0]:
        acc = np.zeros(updates[0][key].shape, dtype=np.float64)
        for update, weight in zip(updates, weights, strict=True):
            acc += update[key].astype(np.float64) * (weight / total)
        out[key] = acc.astype(updates[0][key].dtype)
    return out


def delta(update: Mapping[str, np.ndarray], current: Mapping[str, np.ndarray]) -> Arrays:
    """What an update changes: update - current, per key, in float64."""
    return {k: update[k].astype(np.float64) - current[k].astype(np.float64) for k in current}


def clip_delta(change: Arrays, max_norm: float) -> Arrays:
    """Scale a change down to L2 norm `max_norm` (over all keys) if it is longer."""
    norm = math.sqrt(sum(float(np.sum(d * d)) for d in change.values()))
    if norm <= max_norm:
        return change
    return {k: d * (max_norm / norm) for k, d in change.items()}


def apply_change(current: Mapping[str, np.ndarray], change: Mapping[str, np.ndarray]) -> Arrays:
    """current + change, per key, back in each array's own dtype."""
    return {
        key: (base.astype(np.float64) + change[key]).astype(base.dtype)
        for key, base in current.items()
    }


def is_statistic(key: str) -> bool:
    """A normalizer's fitted mean or std (`*.norm.mean`, `*.norm.std`): data statistics the
    nodes fit, which a server learning rate must not extrapolate."""
    return key.endswith((".norm.mean", ".norm.std"))
