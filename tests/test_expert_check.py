"""A node leaves out a delivered expert that ranks its own measurements backwards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simoe_model import synthetic
from simoe_model.expert_check import drop_refuted_experts, rank_agreement, screen_experts
from simoe_model.model import SiMoE, add_expert, expert_arrays
from simoe_model.train import train_expert


def backwards(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same expert with its output negated: every ranking reversed."""
    out = dict(arrays)
    out["head.2.weight"] = -arrays["head.2.weight"]
    out["head.2.bias"] = -arrays["head.2.bias"]
    return out


def test_a_backwards_expert_is_dropped_and_an_honest_one_kept() -> None:
    torch.manual_seed(0)
    devices = synthetic.make_devices(2, seed=5)
    tasks = synthetic.make_tasks(4, 32, seed=5)
    sender, receiver = (synthetic.device_dataset(d, tasks, seed=i) for i, d in enumerate(devices))
    model = SiMoE()
    train_expert(model, "honest", sender, epochs=3, seed=0)
    add_expert(model, "liar", backwards(expert_arrays(model, "honest")))

    drop, agreement = screen_experts(model, ["honest", "liar"], receiver.tasks)

    assert drop == ["liar"]
    assert agreement["honest"] > 0.2
    assert agreement["liar"] == pytest.approx(-agreement["honest"])  # the reversed ranking
    # what the ClientApp runs: the refuted expert leaves the model, the honest one stays
    assert drop_refuted_experts(model, ["honest", "liar"], receiver) == ["liar"]
    assert "liar" not in model.expert_names and "honest" in model.expert_names


def test_no_usable_measurements_checks_nothing() -> None:
    tasks = synthetic.make_tasks(1, 3, seed=1)  # 3 candidates: below the minimum
    device = synthetic.make_devices(1, seed=1)[0]
    dataset = synthetic.device_dataset(device, tasks, seed=0)
    model = SiMoE()
    model.ensure_expert("x", dataset.hardware_vector)
    assert rank_agreement(model, "x", dataset.tasks) is None
    assert screen_experts(model, ["x"], dataset.tasks) == ([], {})
