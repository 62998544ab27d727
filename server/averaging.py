"""The averaging math, apart from the strategies (as Flower keeps its aggregation helpers).

Pure functions over `{name: array}` dicts: no messages, no registry, no round state.
`SiMoEStrategy.aggregate_shared` and the robust strategies compose them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

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


@dataclass
class ServerAdam:
    """FedAdam's server optimizer (Reddi et al., "Adaptive Federated Optimization", 2021;
    Flower's FedAdam): the nodes' average change is a pseudo-gradient, and each learned
    array steps lr * m_hat / (sqrt(v_hat) + tau), with Adam's bias correction.

    Why: each node's local optimizer is Adam, restarted every round, so its few steps are
    near sign steps of size lr; averaging 23 of them cancels every direction the nodes do
    not agree on, and the encoder learns only what all hardware shares. The server's own
    per-array normalisation restores the step a central Adam would take. The moments live
    in the strategy (a restarted server starts them afresh); statistics pass unchanged.
    """

    lr: float
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-9
    steps: int = 0
    m: dict[str, np.ndarray] = field(default_factory=dict)
    v: dict[str, np.ndarray] = field(default_factory=dict)

    def step(self, change: Mapping[str, np.ndarray]) -> Arrays:
        self.steps += 1
        m_scale = 1 - self.beta1**self.steps
        v_scale = 1 - self.beta2**self.steps
        out: Arrays = {}
        for key, d in change.items():
            if is_statistic(key):
                out[key] = d
                continue
            m = self.beta1 * self.m.get(key, 0.0) + (1 - self.beta1) * d
            v = self.beta2 * self.v.get(key, 0.0) + (1 - self.beta2) * d * d
            self.m[key], self.v[key] = m, v
            out[key] = self.lr * (m / m_scale) / (np.sqrt(v / v_scale) + self.tau)
        return out
