"""The trivial baselines (bench/transfer/baselines.py) on hand-made fleets: they rank as TopHub
would."""

from __future__ import annotations

import numpy as np

from bench.transfer.baselines import ScheduleTransfer, random_scorer
from simoe_model.metrics import top_k_score
from simoe_model.task_data import DeviceDataset, TaskData


def _unit(name: str, vector: list[float], latencies: list[float]) -> DeviceDataset:
    ids = [f"c{i}" for i in range(len(latencies))]
    features = [np.zeros((1, 164), np.float32) for _ in latencies]
    task = TaskData("t", features, np.asarray(latencies), ids)
    return DeviceDataset(name, np.asarray(vector, np.float32), [task])


def test_schedule_transfer_uses_the_most_similar_units_latencies() -> None:
    alike = _unit("alike", [1.0, 0.0], [1, 2, 3, 4, 5, 6])
    other = _unit("other", [0.0, 1.0], [6, 5, 4, 3, 2, 1])
    target = _unit("target", [0.9, 0.1], [1.1, 2.2, 2.9, 4.1, 5.0, 6.3])
    transfer = ScheduleTransfer([alike, other], k=1)
    task = target.tasks[0]
    # zero-shot: the nearest profile (alike) ranks the target perfectly
    zero = transfer.at_budget(target.hardware_vector, [])
    assert top_k_score(zero(task), task.latencies, 1) == 1.0
    # with measurements: the unit whose latencies agree with them, whatever the profile says
    misleading = _unit("target", [0.0, 1.0], list(task.latencies))
    few = [task.subset([0, 2, 4, 5])]
    chosen = transfer.at_budget(misleading.hardware_vector, few)
    assert top_k_score(chosen(task), task.latencies, 1) == 1.0
    assert transfer.neighbours_by_profile(misleading.hardware_vector) == [1]  # "other"


def test_a_candidate_no_neighbour_ran_is_ranked_last() -> None:
    unit = _unit("u", [1.0], [1, 2, 3])
    unit.tasks[0] = unit.tasks[0].subset([1, 2])  # c0 failed there
    target = _unit("target", [1.0], [1, 2, 3])
    scores = ScheduleTransfer([unit], k=1).at_budget(target.hardware_vector, [])(target.tasks[0])
    assert scores[0] == -np.inf and scores[1] > scores[2]


def test_random_is_seeded() -> None:
    task = _unit("u", [1.0], [1, 2, 3, 4]).tasks[0]
    assert np.array_equal(random_scorer(3)(task), random_scorer(3)(task))
