"""The node's round as a plain function: no Flower message, context or grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from federation_helpers import seed_node

from agent.node_round import Received, node_round
from agent.node_state import NodeState
from agent.payload import PayloadRefused
from schemas import TrainInstruction
from schemas.messages import WEIGHT_METRIC
from server.similarity import initial_shared_arrays
from simoe_model.model import Expert, SiMoE, add_expert, save_model, shared_arrays
from simoe_model.synthetic import make_devices, make_tasks


def expert(value: float | None = None) -> dict[str, np.ndarray]:
    """An expert's arrays as the server sends them (all `value`, if given)."""
    state = Expert(SiMoE().config).state_dict()
    arrays = {k: v.detach().numpy().copy() for k, v in state.items()}
    if value is not None:
        arrays = {k: np.full_like(v, value) for k, v in arrays.items()}
    return arrays


def node_with(tmp_path: Path, records: bool) -> NodeState:
    devices, tasks = make_devices(2, seed=3), make_tasks(2, 8, seed=1)
    state_dir = tmp_path / devices[0].name
    seed_node(state_dir, devices[0].name, devices[0], tasks if records else [])
    node = NodeState(state_dir)
    model = SiMoE()
    add_expert(model, "stale", expert())  # last round's bank: the server chose otherwise
    save_model(model, node.model_path)
    return node


def instruction(**kwargs: object) -> TrainInstruction:
    return TrainInstruction(server_round=3, global_version=2, epochs=1, **kwargs)  # type: ignore[arg-type]


def test_a_round_adopts_prunes_trains_and_keeps_the_federation_state(tmp_path: Path) -> None:
    node = node_with(tmp_path, records=True)
    name = node.name()
    shared = initial_shared_arrays(0)
    received = Received(
        shared,
        experts={"x": expert(), "bad": expert(np.nan), name: expert(1.0)},  # own: ignored
        unreadable={"corrupt": "expert 'corrupt': corrupt arrays (ValueError)"},
    )
    result = node_round(
        node, instruction(experts=["x", "bad", "corrupt"]), received, check_experts=False
    )
    assert result.shared_update is not None and set(result.shared_update) == set(shared)
    assert result.own_expert is not None and set(result.own_expert) == set(expert())
    assert result.metrics[WEIGHT_METRIC] > 0 and result.metrics["train-seconds"] > 0
    assert all(np.isfinite(v) for v in result.metrics.values())
    state = node.federation_state()
    assert (state.last_round, state.global_version, state.rounds_trained) == (3, 2, 1)
    assert state.experts == ["x"]  # "stale" pruned, "bad" and "corrupt" left out
    assert state.checked_experts == [] and state.last_metrics == result.metrics
    log = node.federation_log_path.read_text()
    assert "'corrupt'" in log and "'bad'" in log and "left it out" in log
    model = node.load_model()
    assert set(model.expert_names) == {name, "x"}
    for key, value in shared_arrays(model).items():  # the node keeps the global shared parts
        np.testing.assert_array_equal(value, shared[key])


def test_a_node_without_records_is_served_and_checks_nothing(tmp_path: Path) -> None:
    node = node_with(tmp_path, records=False)
    result = node_round(
        node, instruction(experts=["x"]), Received(initial_shared_arrays(0), {"x": expert()})
    )
    assert result.shared_update is None and result.own_expert is None
    assert result.metrics[WEIGHT_METRIC] == 0.0 and result.metrics["num-tasks"] == 0.0
    state = node.federation_state()
    assert state.rounds_trained == 0 and state.experts == ["x"] and state.last_round == 3
    assert state.checked_experts == []  # nothing of its own to test "x" on


def test_a_refused_global_model_fails_the_round_and_keeps_the_model(tmp_path: Path) -> None:
    node = node_with(tmp_path, records=True)
    before = node.model_path.read_bytes()
    bad = {k: np.full_like(v, np.inf) for k, v in initial_shared_arrays(0).items()}
    with pytest.raises(PayloadRefused, match="global model refused"):
        node_round(node, instruction(), Received(bad))
    assert node.model_path.read_bytes() == before
    state = node.federation_state()
    assert state.refused_payload is not None and state.refused_payload.startswith("train: ")
    assert state.last_round == 0 and state.rounds_trained == 0


def test_the_node_reports_its_rank_agreement_with_each_expert_it_checked(
    tmp_path: Path,
) -> None:
    """Checked experts: names, the refuted ones, and one 2-decimal agreement each, in the
    hello its reply carries (an aggregate over its tasks; its records stay)."""
    node = node_with(tmp_path, records=True)
    honest = expert()
    liar = dict(honest, **{k: -honest[k] for k in ("head.2.weight", "head.2.bias")})
    received = Received(initial_shared_arrays(0), {"x": honest, "liar": liar})
    node_round(node, instruction(experts=["x", "liar"]), received)
    hello = node.hello()
    assert hello.checked_experts == ["liar", "x"]
    agreement = hello.expert_agreement
    assert set(agreement) == {"liar", "x"}
    assert all(-1 <= v <= 1 and round(v, 2) == v for v in agreement.values())
    assert agreement["liar"] == pytest.approx(-agreement["x"], abs=0.011)  # reversed ranking
    assert agreement["x"] != 0 and hello.refuted_experts == (
        ["x"] if agreement["x"] < 0 else ["liar"]
    )


def test_a_personal_fine_tune_is_kept_apart_and_the_reply_stays_the_averaged_parts(
    tmp_path: Path,
) -> None:
    """`personal_epochs`: the node fine-tunes a copy of encoder and own expert into
    personal.pt (what it tunes with); model.pt and the reply keep the global shared parts;
    a later trained round without it removes the now-stale personal model."""
    from agent.model_choice import choose_model

    node = node_with(tmp_path, records=True)
    shared = initial_shared_arrays(0)
    bank = Received(shared, {"x": expert()})  # with a bank: model.pt keeps the global parts
    result = node_round(
        node, instruction(experts=["x"], personal_epochs=3), bank, check_experts=False
    )
    personal = node.load_personal_model()
    assert personal is not None and choose_model(node).source == "personal"
    state = node.federation_state()
    assert state.personal_epochs == 3 and state.personal_seconds > 0
    for key, value in shared_arrays(node.load_model()).items():  # the node's global parts
        np.testing.assert_array_equal(value, shared[key])
    mine = shared_arrays(personal)
    assert any(not np.allclose(mine[k], shared[k]) for k in shared)  # its encoder moved
    assert result.own_expert is not None and result.shared_update is not None
    assert not any(
        np.allclose(mine[k], result.shared_update[k]) for k in shared if "store_mlp" in k
    )  # what it sends is not its personal encoder
    node_round(node, instruction(experts=["x"]), bank, check_experts=False)
    assert node.load_personal_model() is None and choose_model(node).source == "federation"


def test_the_cross_node_transfer_loss_changes_only_the_encoder_the_node_sends(
    tmp_path: Path,
) -> None:
    """`transfer_weight`: the node's contribution to the average is trained also on how the
    delivered experts' mixture ranks its records, so the encoder it sends differs from the
    round without it (same seed); the own expert it keeps and sends is trained on the
    global encoder, frozen, either way, and model.pt keeps the global parts."""
    shared = initial_shared_arrays(0)
    replies = {}
    for weight in (0.0, 5.0):
        node = node_with(tmp_path / str(weight), records=True)
        bank = Received(shared, {"x": expert()})
        replies[weight] = node_round(
            node, instruction(experts=["x"], transfer_weight=weight), bank, check_experts=False
        )
        for key, value in shared_arrays(node.load_model()).items():
            np.testing.assert_array_equal(value, shared[key])
    plain, crossed = replies[0.0], replies[5.0]
    assert plain.shared_update is not None and crossed.shared_update is not None
    moved = [
        k
        for k in shared
        if not np.allclose(plain.shared_update[k], crossed.shared_update[k], atol=1e-7)
    ]
    assert moved and all(k.startswith("program_encoder.") for k in moved)
    assert plain.own_expert is not None and crossed.own_expert is not None
    for key, value in plain.own_expert.items():
        np.testing.assert_array_equal(value, crossed.own_expert[key])
