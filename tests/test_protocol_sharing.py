"""simoe-sharing's score (bench/transfer/protocol_sharing.py, issue 23 Must-show 1): a shared
best candidate moves up by share_weight x its gate-weighted share, share_weight 0 ranks as
SiMoE does, and only training units' labels make shares."""

from __future__ import annotations

import numpy as np
import pytest

from bench import protocol
from bench.transfer.protocol_sharing import (
    choose,
    share_weights,
    shared_of,
    sharing_scores,
    training_shares,
)
from simoe_model.task_data import DeviceDataset, TaskData


def task(name: str, ids: list[str], latencies: list[float]) -> TaskData:
    return TaskData(name, [np.zeros((1, 4), np.float32) for _ in ids], np.array(latencies), ids)


def unit(device: str, tasks: list[TaskData]) -> DeviceDataset:
    return DeviceDataset(device, np.zeros(8, np.float32), tasks)


def test_a_shared_best_candidate_gains_its_weighted_share() -> None:
    mixture = np.array([3.0, 1.0, 2.0, 0.0])  # SiMoE ranks 0, 2, 1, 3
    # two experts: the first shared candidate 3 as its best (rank 0), the second candidate 1
    # as its 5th best (rank 4: 1 / (1 + 4/4) = 0.5)
    shared = shared_of(
        task("t", ["a", "b", "c", "d"], [1, 1, 1, 1]),
        ["sim:x", "sim:y"],
        {"sim:x": {"t": ["d"]}, "sim:y": {"t": ["p", "q", "r", "s", "b"]}},
    )
    assert shared.tolist() == [[0, 0], [0, 0.5], [0, 0], [1, 0]]
    weights = np.tile([0.75, 0.25], (4, 1))
    z = (mixture - mixture.mean()) / mixture.std()
    got = sharing_scores(mixture, shared, weights, 2.0)
    expected = z + 2.0 * np.array([0.0, 0.25 * 0.5, 0.0, 0.75 * 1.0])
    np.testing.assert_allclose(got, expected)
    assert np.argmax(got) == 0 and got[3] > got[1]  # d moved up past b (1.5 standard deviations)
    # share_weight 0: SiMoE's order exactly
    off = sharing_scores(mixture, shared, weights, 0.0)
    assert np.argsort(-off, kind="stable").tolist() == np.argsort(-mixture, kind="stable").tolist()


def test_measured_evidence_moves_the_weights_only_when_asked() -> None:
    prior = np.full((3, 2), 0.5)
    measured = np.array([[2.0, 0.0], [1.0, 1.0], [0.0, 2.0]])  # expert 0 ranks them right
    times = np.array([1.0, 2.0, 3.0])
    assert share_weights(prior, measured, times, 0.0) is prior
    assert share_weights(prior, None, None, 8.0) is prior
    moved = share_weights(prior, measured, times, 8.0)
    np.testing.assert_allclose(moved.sum(1), 1.0)
    assert (moved[:, 0] > 0.9).all()


def test_shares_are_a_training_units_best_and_never_a_test_units() -> None:
    train_unit, test_unit = protocol.TRAIN_UNITS[0], protocol.TEST_UNITS[0]
    lat = [3.0, np.nan, 1.0, 2.0, 0.5]
    got = training_shares([unit(f"sim:{train_unit}", [task("t", list("abcde"), lat)])], top=3)
    assert got == {f"sim:{train_unit}": {"t": ["e", "c", "d"]}}  # best first, failed left out
    for other in (test_unit, protocol.VALIDATION_UNITS[0]):
        with pytest.raises(protocol.LeakageError, match="not a training unit"):
            training_shares([unit(f"sim:{other}", [task("t", list("abcde"), lat)])])


def test_the_rule_keeps_the_smaller_point_unless_beaten_by_more_than_0001() -> None:
    means = {(0.5, 0.0): 0.900, (1.0, 0.0): 0.9009, (3.0, 0.0): 0.905, (10.0, 0.0): 0.9055}
    assert choose(means) == (3.0, 0.0)
    assert choose({(0.5, 0.0): 0.9, (0.5, 2.0): 0.9, (1.0, 0.0): 0.9}) == (0.5, 0.0)
