"""Program features: MetaSchedule's PerStoreFeature rows, log-transformed and packed.

A candidate is a variable number of 164-wide rows (one per buffer store). The
model encodes each row and sums per candidate, so a batch is packed as one
[total_rows, 164] array plus the row offsets of each candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from schemas.records import FEATURE_DIM

__all__ = ["FEATURE_DIM", "log_transform", "pack_rows", "extract_features"]

if TYPE_CHECKING:
    from tvm.s_tir import meta_schedule as ms


def log_transform(rows: np.ndarray) -> np.ndarray:
    """sign(x) log1p(|x|): the features span many decades (bytes, loop extents).

    In torch (vectorized log1p), several times faster than numpy on large batches.
    """
    x = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))
    return x.abs().log1p_().copysign_(x).numpy()


def pack_rows(
    features: Sequence[np.ndarray], width: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Transformed rows of all candidates stacked, and the row offsets [n + 1].

    Rows are `width` wide: MetaSchedule's 164 per store by default, or what the first
    candidate has (a parameter-space kernel's representation, one row per candidate).
    A candidate without rows (nothing stored) keeps an all-zero row, so every
    candidate has an embedding.
    """
    if width is None:
        shaped = (np.asarray(f) for f in features)
        width = next((f.shape[1] for f in shaped if f.ndim == 2 and f.size), FEATURE_DIM)
    fixed = []
    for feat in features:
        feat = np.asarray(feat, dtype=np.float32)
        if feat.ndim != 2 or feat.shape[1] != width:
            if feat.size == 0:
                feat = np.zeros((1, width), dtype=np.float32)
            else:
                raise ValueError(f"expected [n_stores, {width}] features, got {feat.shape}")
        if feat.shape[0] == 0:
            feat = np.zeros((1, width), dtype=np.float32)
        fixed.append(feat)
    counts = np.fromiter((f.shape[0] for f in fixed), dtype=np.int64, count=len(fixed))
    offsets = np.zeros(len(fixed) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    rows = np.concatenate(fixed) if fixed else np.zeros((0, width), np.float32)
    return log_transform(rows), offsets


def extract_features(
    context: ms.TuneContext,
    candidates: Sequence[ms.MeasureCandidate],
    extractor: ms.feature_extractor.FeatureExtractor | None = None,
) -> list[np.ndarray]:
    """PerStoreFeature rows of each candidate (one [n_stores, 164] array each)."""
    from tvm.s_tir import meta_schedule as ms

    extractor = extractor or ms.feature_extractor.PerStoreFeature()
    return [f.numpy().astype(np.float32) for f in extractor.extract_from(context, candidates)]
