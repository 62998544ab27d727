"""bench/simulator/unit_diversity.py: the per-task comparison of two units of one model."""

from __future__ import annotations

import numpy as np
import pytest

from bench.simulator import unit_diversity


def test_a_pair_row_scores_only_candidates_that_ran_on_both() -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0, np.inf])
    same = unit_diversity.pair_row(a, 2 * a)  # a uniform rescale: same order, same best
    assert same["candidates"] == 4 and same["spearman"] == pytest.approx(1.0)
    assert not same["best_differs"] and same["reference_best_cost"] == pytest.approx(1.0)
    assert same["latency_ratio"] == pytest.approx(2.0)
    other = unit_diversity.pair_row(a, np.array([4.0, 3.0, 2.0, 1.0, 5.0]))  # reversed
    assert other["spearman"] == pytest.approx(-1.0) and other["best_differs"]
    assert other["reference_best_cost"] == pytest.approx(4.0)  # a's best costs 4x b's own


def test_groups_are_models_with_several_units_led_by_their_first() -> None:
    groups = unit_diversity.model_groups(unit_diversity.unit_specs())
    assert groups["a100-40gb"][0] == "a100-sxm4-400w" and "a100-mig-1g5gb" in groups["a100-40gb"]
    assert groups["orin"][0] == "orin-maxn" and groups["rtx3060"] == ["rtx3060", "rtx3060-8gb"]
    assert all(len(units) >= 2 for units in groups.values())
