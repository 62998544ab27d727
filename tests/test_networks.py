"""Networks: the suite is the real architectures; a model (suite or ONNX) -> tasks -> tuned,
compiled from the store, and the compiled output agrees with PyTorch / ONNX."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import tune_json

from agent.devices import get_device
from agent.ms_database import ms_database
from agent.networks import (
    NETWORK_SUITE,
    Network,
    extract_network_tasks,
    load_network,
    seeded_module,
)
from agent.store import Store
from agent.tuner import tune_network, verify_network
from schemas import BadInputError


@pytest.mark.parametrize(
    ("name", "params"),
    # the parameter counts of torchvision's resnet50 / mobilenet_v2 and of one BERT-base layer
    [("resnet50", 25_557_032), ("mobilenet_v2", 3_504_872), ("bert_layer", 7_087_872)],
)
def test_suite_networks_are_the_real_architectures(name: str, params: int) -> None:
    model = seeded_module(name)
    assert sum(p.numel() for p in model.parameters()) == params
    assert not model.training


def test_seeded_weights_are_reproducible() -> None:
    a, b = seeded_module("tiny_cnn"), seeded_module("tiny_cnn")
    for pa, pb in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("ref", ["resnet9", "missing.onnx", "some/dir/model.onnx"])
def test_unknown_network_or_missing_file_is_bad_input(ref: str) -> None:
    with pytest.raises(BadInputError):
        load_network(ref)


def test_not_an_onnx_file_is_bad_input(tmp_path: Path) -> None:
    bogus = tmp_path / "model.onnx"
    bogus.write_bytes(b"not a protobuf at all")
    with pytest.raises(BadInputError, match="not a valid ONNX model"):
        load_network(str(bogus))


def test_tiny_cnn_extracts_its_conv_tasks() -> None:
    network = load_network("tiny_cnn")
    names = [t.task_name for t in extract_network_tasks(network, get_device("cpu").target())]
    assert sum("conv2d" in n for n in names) == 2
    assert any("matmul" in n for n in names)


def _export_onnx(path: Path) -> None:
    """A tiny ONNX model written with torch's (offline) TorchScript exporter."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 16),), str(path), dynamo=False)


def test_onnx_model_tuned_compiled_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "tiny.onnx"
    _export_onnx(path)
    network = load_network(str(path))
    assert network.inputs[0].shape == (2, 16)
    with Store(tmp_path / "store.sqlite") as store:
        result = tune_network(
            network, get_device("cpu"), store, trials_per_task=1, cost_model="random",
            baseline=False,
        )  # fmt: skip
        assert store.count_records(device="cpu") >= 1
    assert result.kind == "network" and result.tasks
    assert result.network is not None and result.network.compiled
    assert result.network.matches, result.network
    assert result.network.reference == "ONNX reference evaluator"


def test_verify_network_catches_a_wrong_reference(tmp_path: Path) -> None:
    """The check can fail: a reference that is off by a little is reported as a mismatch."""
    good = load_network("tiny_mlp")
    bad = Network(
        name="tiny_mlp",
        mod=good.mod,
        params=good.params,
        inputs=good.inputs,
        reference=lambda xs: [o + 1e-2 for o in good.reference(xs)],
    )
    with Store(tmp_path / "store.sqlite") as store:
        database = ms_database(store, device="cpu")  # empty: default schedules
        device = get_device("cpu")
        assert verify_network(good, database, device).matches
        check = verify_network(bad, database, device)
    assert check.compiled and check.matches is False
    assert check.max_abs_error == pytest.approx(1e-2, rel=1e-3)


def test_cli_tunes_tiny_mlp_and_matches_pytorch(tmp_path: Path) -> None:
    """Its larger task only (--largest-tasks 1): the other keeps TVM's default schedule."""
    state = tmp_path / "state"
    data = tune_json(
        state, "--model", "tiny_mlp", "--device", "cpu", "--trials", "1",
        "--cost-model", "random", "--no-baseline", "--largest-tasks", "1",
    )  # fmt: skip
    assert data["kind"] == "network" and data["subject"] == "tiny_mlp"
    assert [t["task_name"] for t in data["tasks"]] == ["fused_matmul_add_relu"]
    selection = data["selection"]
    assert selection["tuned"] == ["fused_matmul_add_relu"] and selection["total_tasks"] == 2
    assert 0.5 < selection["flops_share"] < 1.0  # 32x64 of 32x64 + 64x10 multiply-adds
    assert data["network"]["compiled"] and data["network"]["matches"]
    assert data["network"]["reference"] == "PyTorch"
    assert np.isfinite(data["network"]["latency_s"])
    with Store(state / "store.sqlite") as store:
        assert store.count_records(device="cpu") >= len(data["tasks"])
        assert {w["task_name"] for w in store.workloads()} >= {"fused_matmul_add_relu"}


def test_suite_names_are_listed_in_the_error() -> None:
    with pytest.raises(BadInputError) as info:
        load_network("nope")
    assert all(name in str(info.value) for name in NETWORK_SUITE)


@pytest.mark.slow
def test_gpt2_block_is_causal_and_its_operators_are_new(tmp_path: Path) -> None:
    """The suite's GPT-2-style block (issue 12): GPT-2 medium's block size, causal (a later
    token never changes an earlier output), compiled by TVM with default schedules it matches
    PyTorch, and none of its tuning tasks is one of BERT's."""
    from agent.ms_database import workload_key_of

    model = seeded_module("gpt2_block")
    assert sum(p.numel() for p in model.parameters()) == 12_596_224  # one GPT-2 medium block
    x = torch.randn(1, 96, 1024)
    later = x.clone()
    later[:, 60:] += 1.0
    with torch.no_grad():
        a, b = model(x), model(later)
    assert torch.equal(a[:, :60], b[:, :60]) and not torch.allclose(a[:, 60:], b[:, 60:])
    network = load_network("gpt2_block")
    target = get_device("sim:a30-u1").target()
    mine = extract_network_tasks(network, target)
    names = " ".join(t.task_name for t in mine)
    assert "softmax" in names and "layer_norm" in names and "tanh" in names
    keys = {workload_key_of(t.dispatched[0]) for t in mine}
    bert = extract_network_tasks(load_network("bert_layer"), target)  # the convnets: no matmul
    assert not keys & {workload_key_of(t.dispatched[0]) for t in bert}
    # compiled by TVM, a small instance of the same class (the full one runs ~13 s untuned)
    factory = tmp_path / "small_gpt2.py"
    factory.write_text(
        "import torch\nfrom agent.networks import Gpt2Block\n\n\ndef build():\n"
        "    torch.manual_seed(0)\n"
        "    return Gpt2Block(hidden=64, heads=4, seq=8).eval(), (torch.randn(1, 8, 64),)\n"
    )
    small = load_network(f"{factory}:build")
    with Store(tmp_path / "store.sqlite") as store:
        check = verify_network(small, ms_database(store, device="cpu"), get_device("cpu"))
    assert check.compiled and check.matches, check
