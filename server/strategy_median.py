"""SiMoE with the coordinate-wise median of the updates (Flower's FedMedian rule).

Why: the median of each coordinate stays within the honest nodes' values as long as
fewer than half the nodes lie, whatever the liars send; it ignores the `num-examples`
weights, as Flower's FedMedian does (a weight is a node's claim).
"""

from __future__ import annotations

import numpy as np

from schemas.protocol import Arrays
from server.strategy import SiMoEStrategy


class SiMoEMedian(SiMoEStrategy):
    """Shared arrays: current + the coordinate-wise median of the (clipped) changes."""

    aggregation = "median"

    def combine(self, changes: list[Arrays], weights: list[float]) -> Arrays:
        return {key: np.median(np.stack([c[key] for c in changes]), axis=0) for key in changes[0]}
