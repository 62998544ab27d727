"""A frozen cost model's predictions, cached by the candidate's structural hash.

A model-only search (simoe_model.model_search) asks its cost model about the same
scheduled module many times: the evolutionary search re-scores the candidates a genetic
iteration leaves unmutated and the database's best it seeds each round with, and the
builder that plays the device scores again the very candidates the search just picked.
Program features (MetaSchedule's PerStoreFeature) are a function of the scheduled module
alone, so a frozen model's prediction is too: one prediction per distinct module is enough.

The cache is only right while the model does not learn, so `update` does nothing (in a
model-only search the "measurements" are the model's own scores: nothing to learn from).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms


@dataclass
class CacheStats:
    """What the cache saved: predictions asked for, made, and the seconds they took."""

    asked: int = 0
    predicted: int = 0
    predict_seconds: float = 0.0

    @property
    def hits(self) -> int:
        return self.asked - self.predicted


@derived_object
class CachedModel(ms.cost_model.PyCostModel):
    """`model` frozen, with one prediction per distinct scheduled module.

    Misses are predicted in one batch per call (the wrapped model batches its features)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.table: dict[int, float] = {}
        self.stats = CacheStats()

    def load(self, path: str) -> None:
        self.model.load(path)
        self.table.clear()

    def save(self, path: str) -> None:
        self.model.save(path)

    def update(self, context: Any, candidates: Any, results: Any) -> None:
        pass  # frozen (module docstring): the search's results are this model's own scores

    def predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
        if not candidates:
            return np.zeros(0, dtype=np.float64)
        keys = [int(tvm_ffi.structural_hash(c.sch.mod)) for c in candidates]
        missing: dict[int, Any] = {}
        for key, cand in zip(keys, candidates, strict=True):
            if key not in self.table and key not in missing:
                missing[key] = cand
        self.stats.asked += len(candidates)
        if missing:
            started = time.perf_counter()
            values = np.asarray(self.model.predict(context, list(missing.values())), np.float64)
            self.stats.predict_seconds += time.perf_counter() - started
            self.stats.predicted += len(missing)
            self.table.update(zip(missing, values.tolist(), strict=True))
        return np.fromiter((self.table[k] for k in keys), dtype=np.float64, count=len(keys))
