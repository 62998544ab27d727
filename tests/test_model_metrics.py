"""Properties of the ranking metrics (TenSet / TLP definitions)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simoe_model.metrics import average_peak_score, pairwise_accuracy, top_k_score

latencies = st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=40)


@settings(max_examples=60, deadline=None)
@given(latencies, st.integers(0, 2**31 - 1))
def test_scores_are_bounded_and_perfect_for_the_truth(lat: list[float], seed: int) -> None:
    lat_a = np.asarray(lat)
    scores = np.random.default_rng(seed).normal(size=len(lat_a))
    for k in (1, 5):
        assert 0 < top_k_score(scores, lat_a, k) <= 1
        assert top_k_score(-lat_a, lat_a, k) == 1.0
    assert top_k_score(scores, lat_a, 5) >= top_k_score(scores, lat_a, 1)
    assert 0 <= pairwise_accuracy(scores, lat_a) <= 1
    assert pairwise_accuracy(-lat_a, lat_a) == 1.0
    assert 0 < average_peak_score(scores, lat_a) <= 1


@settings(max_examples=40, deadline=None)
@given(latencies)
def test_reversed_ranking_gets_every_pair_wrong(lat: list[float]) -> None:
    lat_a = np.asarray(lat)
    if len(set(lat)) > 1:
        assert pairwise_accuracy(lat_a, lat_a) == 0.0
