"""Cost-model metrics with TenSet / TLP definitions, per task then averaged.

All take `scores` (higher = predicted faster) and measured `latencies` of one task.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def top_k_score(scores: np.ndarray, latencies: np.ndarray, k: int) -> float:
    """best latency / best latency among the model's top-k (1.0 = found the best)."""
    scores, latencies = np.asarray(scores), np.asarray(latencies, dtype=np.float64)
    k = min(k, len(scores))
    top = np.argsort(-scores, kind="stable")[:k]
    return float(latencies.min() / latencies[top].min())


def pairwise_accuracy(scores: np.ndarray, latencies: np.ndarray) -> float:
    """Fraction of candidate pairs with different latency that the scores order right."""
    scores, latencies = np.asarray(scores), np.asarray(latencies, dtype=np.float64)
    i, j = np.triu_indices(len(scores), k=1)
    differ = latencies[i] != latencies[j]
    if not differ.any():
        return 1.0
    i, j = i[differ], j[differ]
    right = (scores[i] > scores[j]) == (latencies[i] < latencies[j])
    return float(right.mean())


def average_peak_score(scores: np.ndarray, latencies: np.ndarray, max_k: int = 32) -> float:
    """Mean of the top-k scores for k = 1..max_k (the area under the top-k curve)."""
    n = min(max_k, len(scores))
    return float(np.mean([top_k_score(scores, latencies, k) for k in range(1, n + 1)]))


def task_metrics(
    per_task: Sequence[tuple[np.ndarray, np.ndarray]],
    weights: Sequence[float] | None = None,
) -> dict[str, float]:
    """top-1, top-5, pairwise accuracy and average peak score over tasks (weighted mean)."""
    if not per_task:
        return {
            "top1": float("nan"),
            "top5": float("nan"),
            "pairwise": float("nan"),
            "aps": float("nan"),
        }
    w = np.ones(len(per_task)) if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    cols = {
        "top1": [top_k_score(s, lat, 1) for s, lat in per_task],
        "top5": [top_k_score(s, lat, 5) for s, lat in per_task],
        "pairwise": [pairwise_accuracy(s, lat) for s, lat in per_task],
        "aps": [average_peak_score(s, lat) for s, lat in per_task],
    }
    return {name: float(np.dot(w, values)) for name, values in cols.items()}
