"""bench/federation/poisoning.py's lying nodes do what the report says they do."""

from __future__ import annotations

import numpy as np

from bench.federation.poisoning import LyingNode, backwards_expert, plan


def test_signflip_sends_the_honest_change_negated_and_scaled_x10() -> None:
    received = {"w": np.array([1.0, 2.0], np.float32)}
    honest = {"w": np.array([1.5, 1.0], np.float32)}
    out = LyingNode("signflip", 0).corrupt(honest, received)
    np.testing.assert_allclose(out["w"], [1.0 - 10 * 0.5, 2.0 + 10 * 1.0])
    assert out["w"].dtype == np.float32


def test_stale_resends_its_first_update_and_random_is_not_the_update() -> None:
    node = LyingNode("stale", 0)
    first = node.corrupt({"w": np.ones(3, np.float32)}, {"w": np.zeros(3, np.float32)})
    later = node.corrupt({"w": np.full(3, 7.0, np.float32)}, {"w": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(first["w"], later["w"])
    noise = LyingNode("random", 0).corrupt({"w": np.ones(1000, np.float32)}, {})
    assert abs(float(noise["w"].std()) - 1.0) < 0.1


def test_the_backwards_expert_negates_only_the_output_layer() -> None:
    arrays = {
        "head.0.weight": np.ones((2, 2), np.float32),
        "head.2.weight": np.array([[1.0, -2.0]], np.float32),
        "head.2.bias": np.array([0.5], np.float32),
    }
    out = backwards_expert(arrays)
    np.testing.assert_array_equal(out["head.0.weight"], arrays["head.0.weight"])
    np.testing.assert_array_equal(out["head.2.weight"], [[-1.0, 2.0]])
    np.testing.assert_array_equal(out["head.2.bias"], [-0.5])


def test_plan_compares_every_attack_with_and_without_the_robust_option() -> None:
    runs = plan(["signflip", "stale"], ["fedavg", "median"])
    assert runs[0] == ("none", "fedavg", False)  # the clean reference
    assert ("none", "median", True) in runs
    assert ("signflip", "fedavg", False) in runs and ("signflip", "median", True) in runs
    assert len(runs) == 2 + 2 * 2
