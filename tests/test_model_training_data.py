"""A node's store as SiMoE training data, and `simoe-agent evaluate` on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from typer.testing import CliRunner

from agent.cli import app
from agent.store import Store
from agent.store_datasets import load_device_dataset, load_store_file
from schemas import TuningRecord
from simoe_model import synthetic
from simoe_model.model import SiMoE, SiMoEConfig, save_model
from simoe_model.train import train_expert

torch.set_num_threads(1)
DEVICE = synthetic.make_devices(2, seed=5)


def _fill_store(path: Path, device_index: int) -> str:
    """A simulated GPU's store with two tasks of synthetic candidates (and one failure)."""
    gpu = DEVICE[device_index]
    name = f"sim:{gpu.name}"
    tasks = synthetic.make_tasks(2, 24, seed=5)
    with Store(path) as store:
        store.save_profile(gpu.profile())
        for task in tasks:
            store.add_workload(task.name, task.name, "{}")
            lat = gpu.latency(task.latent)
            records = [
                TuningRecord(
                    workload_key=task.name,
                    task_name=task.name,
                    trace={"candidate": i},
                    run_secs=[float(lat[i])] if i else [1e10],  # the first one failed
                    target={"kind": "cuda"},
                    device=name,
                    simulated=True,
                )
                for i in range(len(lat))
            ]
            ids = store.add_records(records)
            store.put_features(dict(zip(ids, task.features, strict=True)))
    return name


def test_store_becomes_a_device_dataset(tmp_path: Path) -> None:
    path = tmp_path / "gpu.sqlite"
    name = _fill_store(path, 0)
    with Store(path) as store:
        dataset = load_device_dataset(store, name, DEVICE[0].profile())
    assert dataset.device == name
    assert len(dataset.tasks) == 2
    assert all(len(t) == 23 for t in dataset.tasks)  # the failed candidate is left out
    assert all(np.all(t.latencies > 0) and t.candidate_ids for t in dataset.tasks)
    assert load_store_file(path).num_candidates == 46


def test_evaluate_command_json(tmp_path: Path) -> None:
    for i in range(2):
        _fill_store(tmp_path / "fleet" / f"gpu{i}.sqlite", i)
    model = SiMoE(SiMoEConfig(store_hidden=16, program_dim=16, expert_hidden=16))
    trained_on = load_store_file(tmp_path / "fleet" / "gpu0.sqlite")
    train_expert(model, trained_on.device, trained_on, epochs=20, seed=0)
    save_model(model, tmp_path / "model.pt")
    args = ["evaluate", "--model", str(tmp_path / "model.pt"), "--data", str(tmp_path / "fleet")]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["device"] for r in rows] == [f"sim:{d.name}" for d in DEVICE]
    assert all(r["simulated"] and r["tasks"] == 2 and 0 < r["top1"] <= 1 for r in rows)
    # zero-shot leaves the device's own expert out: nothing left for gpu0's only expert
    zero = CliRunner().invoke(app, [*args, "--json", "--zero-shot"])
    assert [r["device"] for r in json.loads(zero.stdout)] == [f"sim:{DEVICE[1].name}"]


def test_evaluate_refuses_a_bad_model_file(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_text("nonsense")
    _fill_store(tmp_path / "gpu.sqlite", 0)
    result = CliRunner().invoke(
        app, ["evaluate", "--model", str(tmp_path / "model.pt"), "--data", str(tmp_path)]
    )
    assert result.exit_code != 0
    assert "not a SiMoE model file" in str(result.exception)
