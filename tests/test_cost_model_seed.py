"""A tuning run's `--seed` reaches the SiMoE cost model's online fine-tune and replay buffer.

Before: `agent.cost_models.make_cost_model` built SiMoE with its default seed 0 whatever the
run's seed, so tuning at seeds 1 and 2 fine-tuned and replayed as at seed 0. Seed 0 keeps
what it did."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.store import Store
from simoe_model.task_data import TaskData


class Built(Exception):
    """Stops the tune once its cost model would be built."""


def test_the_tuners_seed_is_the_cost_models(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import agent.tuner as tuner
    from agent.devices import get_device
    from agent.workloads import parse_workload

    seen: list[int] = []

    def building(*_args: object, seed: int = 0) -> None:
        seen.append(seed)
        raise Built

    monkeypatch.setattr(tuner, "make_cost_model", building)
    device, spec = get_device("sim:t4"), parse_workload("matmul:64,64,64")
    with Store(tmp_path / "store.sqlite") as store:
        for seed in (5, None):
            with pytest.raises(Built):
                tuner.tune_workload(
                    spec, device, store, trials=4, cost_model="simoe", seed=seed, baseline=False
                )
    assert seen == [5, 0]  # None: seed 0, as the evolutionary search takes it


def test_simoe_draws_its_fine_tune_and_replay_from_the_seed(tmp_path: Path) -> None:
    from agent.cost_models import make_cost_model
    from agent.devices import get_device
    from agent.node_state import NodeState

    device, node = get_device("sim:t4"), NodeState(tmp_path)
    default = make_cost_model("simoe", device, node)
    zero = make_cost_model("simoe", device, node, seed=0)
    three = make_cost_model("simoe", device, node, seed=3)
    assert (default.seed, default.replay.seed) == (zero.seed, zero.replay.seed) == (0, 0)
    assert (three.seed, three.replay.seed) == (3, 3)
    # the replay buffer keeps another sample of a large task at another seed
    rng = np.random.default_rng(0)
    task = TaskData("t", [rng.normal(size=(2, 4)) for _ in range(300)], rng.random(300))
    kept = []
    for model in (default, zero, three):
        model.replay.add([task])
        kept.append(np.concatenate([f.ravel() for f in model.replay.tasks[0].features]))
    assert np.array_equal(kept[0], kept[1]) and not np.array_equal(kept[0], kept[2])
    with pytest.raises(ValueError, match="before the first update"):
        three.reseed(4)
