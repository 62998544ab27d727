"""SiMoE with a coordinate-wise trimmed mean of the updates (Flower's FedTrimmedAvg rule).

Why: a few nodes sending wild updates (sign-flipped, scaled, random) move a FedAvg
arbitrarily far; cutting the `trim_fraction` largest and smallest values of every
coordinate before averaging bounds what any minority below that fraction can do.
The trimmed mean is Flower's own `trim_mean`; like Flower's FedTrimmedAvg it ignores
the `num-examples` weights (a weight is a node's claim, and a liar can inflate it).
"""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy.fedtrimmedavg import trim_mean

from schemas.protocol import Arrays
from server.strategy import SiMoEStrategy


class SiMoETrimmedAvg(SiMoEStrategy):
    """Shared arrays: current + the coordinate-wise trimmed mean of the (clipped) changes."""

    aggregation = "trimmed"

    def __init__(self, *args: object, trim_fraction: float = 0.2, **kwargs: object) -> None:
        if not 0.0 <= trim_fraction < 0.5:
            raise ValueError(f"trim_fraction must be in [0, 0.5), got {trim_fraction}")
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.trim_fraction = trim_fraction

    def combine(self, changes: list[Arrays], weights: list[float]) -> Arrays:
        return {
            key: np.asarray(trim_mean(np.stack([c[key] for c in changes]), self.trim_fraction))
            for key in changes[0]
        }
