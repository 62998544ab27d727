"""A bad server payload: the node's real ClientApp refuses it and keeps its last good model.

NaN, Inf, a wrong shape, a missing key, another protocol version, bytes that do not
decode, a broken instruction: each is refused with a line in `logs/federation.log`
and in `simoe-agent status`, the model file is left byte for byte as it was, and the
server gets an error reply (no update built on a bad model). A bad expert is left out
while the round goes on; a node keeps the version of it that it already holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from federation_helpers import seed_node
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from typer.testing import CliRunner

from agent.cli import app as agent_cli
from agent.client_app import app as client_app
from agent.node_state import NodeState
from schemas.messages import (
    MSG_HELLO,
    MSG_TRAIN,
    REC_CONFIG,
    REC_EXPERT_PREFIX,
    REC_SHARED,
    TrainInstruction,
)
from schemas.protocol import arrays_to_record
from server.inprocess import InProcessGrid
from server.similarity import initial_shared_arrays
from simoe_model.model import Expert, SiMoE
from simoe_model.synthetic import make_devices, make_tasks

Arrays = dict[str, np.ndarray]
GOOD = initial_shared_arrays(0)
EXPERT = {k: v.numpy() for k, v in Expert(SiMoE().config).state_dict().items()}


def train_message(
    shared: ArrayRecord | Arrays,
    *,
    version: int,
    experts: dict[str, ArrayRecord | Arrays] | None = None,
    instruction: str | None = None,
) -> Message:
    experts = experts or {}
    if instruction is None:
        instruction = TrainInstruction(
            server_round=version, global_version=version, experts=sorted(experts), epochs=1
        ).model_dump_json()
    wrap = lambda a: a if isinstance(a, ArrayRecord) else arrays_to_record(a)  # noqa: E731
    content = RecordDict({REC_SHARED: wrap(shared)})
    content[REC_CONFIG] = ConfigRecord({"instruction": instruction})
    for name, arrays in experts.items():
        content[REC_EXPERT_PREFIX + name] = wrap(arrays)
    return Message(content, dst_node_id=1, message_type=MSG_TRAIN, group_id=str(version))


def send(grid: InProcessGrid, message: Message) -> Message:
    (reply,) = grid.send_and_receive([message])
    return reply


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def status(state_dir: Path) -> dict:
    result = CliRunner().invoke(agent_cli, ["status", "--state-dir", str(state_dir), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["federation"]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> tuple[InProcessGrid, NodeState]:
    """A node with data that completed one good round (global v1, one expert held)."""
    state_dir = tmp_path_factory.mktemp("bad-payload") / "node"
    device = make_devices(1, seed=2)[0]
    seed_node(state_dir, device.name, device, make_tasks(1, 8, seed=4))
    grid = InProcessGrid()
    # the expert check is off: "peer" is an untrained expert, which the check may refute
    grid.add_node(1, client_app, {"state-dir": str(state_dir), "check-experts": "false"})
    reply = send(grid, train_message(GOOD, version=1, experts={"peer": EXPERT}))
    assert not reply.has_error(), reply.error
    return grid, NodeState(state_dir)


def with_value(value: float) -> Callable[[Arrays], Arrays]:
    def corrupt(arrays: Arrays) -> Arrays:
        out = {k: v.copy() for k, v in arrays.items()}
        out[next(iter(out))].flat[0] = value
        return out

    return corrupt


def wrong_shape(arrays: Arrays) -> Arrays:
    out = dict(arrays)
    key = next(iter(out))
    out[key] = np.zeros((*out[key].shape, 2), np.float32)
    return out


def missing_key(arrays: Arrays) -> Arrays:
    return dict(list(arrays.items())[1:])


def corrupt_bytes(arrays: Arrays) -> ArrayRecord:
    record = arrays_to_record(arrays)
    key = next(iter(record))
    good = record[key]
    record[key] = Array(dtype=good.dtype, shape=good.shape, stype=good.stype, data=b"\x93NUMPY")
    return record


BAD_GLOBALS = {
    "nan": (with_value(float("nan")), "NaN"),
    "inf": (with_value(float("inf")), "NaN, Inf"),
    "shape": (wrong_shape, "shape"),
    "missing key": (missing_key, "missing keys"),
    "corrupt bytes": (corrupt_bytes, "corrupt arrays"),
}


@pytest.mark.parametrize("case", sorted(BAD_GLOBALS))
def test_a_bad_global_model_is_refused_and_the_model_kept(node, case: str) -> None:
    grid, state = node
    corrupt, words = BAD_GLOBALS[case]
    before = digest(state.model_path)
    reply = send(grid, train_message(corrupt(GOOD), version=2))
    assert reply.has_error()  # the server sees a failed node, not an update
    assert digest(state.model_path) == before
    assert state.federation_state().global_version == 1
    refused = status(state.dir)["refused_payload"]
    assert words in refused and "kept global model v1" in refused
    log = state.federation_log_path.read_text().strip().splitlines()
    assert words in log[-1] and "refused a server payload" in log[-1]


@pytest.mark.parametrize(
    ("instruction", "words"),
    [
        (TrainInstruction(server_round=2, global_version=2, protocol=99).model_dump_json(), "99"),
        ('{"server_round": "two"}', "bad train instruction"),
    ],
)
def test_a_wrong_version_or_instruction_is_refused(node, instruction: str, words: str) -> None:
    grid, state = node
    before = digest(state.model_path)
    reply = send(grid, train_message(GOOD, version=2, instruction=instruction))
    assert reply.has_error()
    assert digest(state.model_path) == before
    assert words in status(state.dir)["refused_payload"]


def test_a_bad_expert_is_left_out_and_the_held_version_kept(node) -> None:
    grid, state = node
    held = state.load_model().expert("peer").state_dict()
    bad = with_value(float("nan"))(EXPERT)
    reply = send(grid, train_message(GOOD, version=2, experts={"peer": bad, "other": bad}))
    assert not reply.has_error(), reply.error  # the round goes on without them
    assert "shared" in reply.content.array_records
    model = state.load_model()
    assert "other" not in model.expert_names  # never held: left out
    kept = model.expert("peer").state_dict()  # held: the good version stays
    assert all(np.array_equal(kept[k].numpy(), held[k].numpy()) for k in held)
    assert "expert 'other'" in status(state.dir)["refused_payload"]


def test_hello_refuses_a_bad_global_model(tmp_path: Path) -> None:
    device = make_devices(1, seed=3)[0]
    seed_node(tmp_path, device.name, device, make_tasks(1, 4, seed=1))
    grid = InProcessGrid()
    grid.add_node(1, client_app, {"state-dir": str(tmp_path)})
    content = RecordDict({REC_SHARED: arrays_to_record(with_value(float("inf"))(GOOD))})
    content[REC_CONFIG] = ConfigRecord({"global-version": 3, "protocol": 1})
    reply = send(grid, Message(content, dst_node_id=1, message_type=MSG_HELLO))
    assert not reply.has_error()  # it still says who it is
    state = NodeState(tmp_path)
    assert not state.model_path.exists() and state.federation_state().global_version == 0
    assert "kept no model" in status(tmp_path)["refused_payload"]
