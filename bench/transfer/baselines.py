"""The trivial baselines every SiMoE result is held against (docs/results/protocol.md).

- fleet schedule transfer: rank a target's candidates by the latencies the k most
  similar training units measured for the same schedules (what TopHub does with its
  per-device logs). Zero-shot, "most similar" is the cosine of the normalised hardware
  vectors; with N measurements on the target, the k units whose latencies agree best
  (Spearman) with those N measurements. k is chosen on validation.
- random: random scores.

Both rank the same candidate sets every other method ranks, on the same test sets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import spearmanr

from simoe_model.task_data import DeviceDataset, TaskData

Scorer = Callable[[TaskData], np.ndarray]


def _table(ds: DeviceDataset) -> dict[tuple[str, str], float]:
    return {
        (t.task_name, c): float(lat)
        for t in ds.tasks
        for c, lat in zip(t.candidate_ids or [], t.latencies, strict=True)
    }


class ScheduleTransfer:
    """Rank by the best-known schedules of the k most similar training units."""

    def __init__(self, train: Sequence[DeviceDataset], k: int) -> None:
        self.names = [d.device for d in train]
        self.tables = [_table(d) for d in train]
        vectors = np.stack([d.hardware_vector for d in train]).astype(np.float64)
        self.mean = vectors.mean(0)
        self.std = vectors.std(0) + 1e-6
        self.vectors = (vectors - self.mean) / self.std
        self.k = k

    def neighbours_by_profile(self, hardware_vector: np.ndarray) -> list[int]:
        v = (np.asarray(hardware_vector, np.float64) - self.mean) / self.std
        cos = self.vectors @ v / (np.linalg.norm(self.vectors, axis=1) * np.linalg.norm(v) + 1e-12)
        return list(np.argsort(-cos)[: self.k])

    def neighbours_by_measurements(self, measured: Sequence[TaskData]) -> list[int]:
        """The k units whose latencies rank the target's own measurements best."""
        agreement = []
        for table in self.tables:
            rhos = []
            for task in measured:
                ids = task.candidate_ids or []
                theirs = [table.get((task.task_name, c), np.nan) for c in ids]
                ok = np.isfinite(theirs)
                if ok.sum() >= 3:
                    rho = spearmanr(np.asarray(theirs)[ok], task.latencies[ok]).statistic
                    if np.isfinite(rho):
                        rhos.append(rho)
            agreement.append(np.mean(rhos) if rhos else -1.0)
        return list(np.argsort(-np.asarray(agreement))[: self.k])

    def scorer(self, neighbours: Sequence[int]) -> Scorer:
        """Higher = faster: minus the mean log latency over the neighbours that ran it."""

        def score(task: TaskData) -> np.ndarray:
            out = np.empty(len(task))
            for i, c in enumerate(task.candidate_ids or [""] * len(task)):
                logs = [
                    np.log(self.tables[j][(task.task_name, c)])
                    for j in neighbours
                    if (task.task_name, c) in self.tables[j]
                ]
                out[i] = -np.mean(logs) if logs else -np.inf  # failed on every neighbour
            return out

        return score

    def at_budget(self, hardware_vector: np.ndarray, measured: Sequence[TaskData]) -> Scorer:
        if measured:
            return self.scorer(self.neighbours_by_measurements(measured))
        return self.scorer(self.neighbours_by_profile(hardware_vector))


def random_scorer(seed: int) -> Scorer:
    rng = np.random.default_rng(seed)
    return lambda task: rng.uniform(size=len(task))
