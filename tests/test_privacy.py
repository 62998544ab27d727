"""Privacy audit: every message a node sends carries only the allowed payloads.

Allowed: the shared arrays (exactly the model's shared keys and shapes), the node's
own expert (exactly an expert's keys and shapes), the NodeHello (name, key
fingerprint, hardware profile) and the aggregate metrics in ALLOWED_METRICS. The
audit also looks for the node's raw data (task names, workload keys, latencies,
feature rows) anywhere in what was sent.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from federation_helpers import seed_node
from flwr.app import ConfigRecord, Context, Message
from privacy_audit import PrivacyViolation, audit_content, audit_reply, node_secrets

from agent.audit import read_audit
from agent.client_app import app as client_app
from agent.model_choice import choose_model
from agent.node_state import NodeState
from schemas import TrainInstruction
from schemas.messages import MSG_TRAIN, REC_CONFIG
from schemas.protocol import arrays_to_record, payload_bytes
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.server_app import run_rounds
from server.similarity import initial_shared_arrays, model_similarity
from server.strategy import SiMoEStrategy
from simoe_model.synthetic import make_devices, make_tasks

# (round, personal epochs) of every train instruction the nodes received
INSTRUCTIONS: list[tuple[int, int]] = []


def recording_app(message: Message, context: Context) -> Message:
    """The real ClientApp, noting each train instruction's personal fine-tune first."""
    if message.metadata.message_type == MSG_TRAIN:
        config = message.content.config_records[REC_CONFIG]
        sent = TrainInstruction.model_validate_json(str(config["instruction"]))
        INSTRUCTIONS.append((sent.server_round, sent.personal_epochs))
    return client_app(message, context)


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> tuple[InProcessGrid, set, list]:
    """Three nodes with synthetic measurements, two rounds; every reply recorded. The nodes
    personalise in the last round (a personal model that must never leave them)."""
    tmp_path = tmp_path_factory.mktemp("privacy")
    devices, tasks = make_devices(3, seed=5), make_tasks(2, 10, seed=9)
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, model_similarity, k_experts=2, epochs=1, personal_epochs=2)
    grid = InProcessGrid()
    for i, device in enumerate(devices):
        seed_node(tmp_path / device.name, device.name, device, tasks)
        (tmp_path / device.name / "audit").mkdir()  # each node keeps a copy of what it sends
        grid.add_node(10 + i, recording_app, {"state-dir": str(tmp_path / device.name)})
    run_rounds(grid, strategy, initial_shared_arrays(0), num_rounds=2, wait_nodes_s=0)
    return grid, *node_secrets(tasks)


def test_every_node_message_carries_only_allowed_payloads(federation) -> None:
    grid, secrets, secret_rows = federation
    assert len(grid.sent_by_nodes) == 3 + 3 * 2  # hellos, then two rounds of train replies
    for message in grid.sent_by_nodes:
        audit_reply(message, secrets, secret_rows)
    kinds = {tuple(sorted(m.content.keys())) for m in grid.sent_by_nodes}
    assert ("metrics", "node", "own_expert", "shared") in kinds


def test_the_nodes_own_audit_copy_is_what_the_server_got(federation) -> None:
    """The audit copy (agent/audit.py) is exact: the real-deployment test relies on it."""
    grid, secrets, secret_rows = federation
    copies = []
    for node in grid.nodes.values():
        copies += [c for _, c in read_audit(Path(node.context.node_config["state-dir"]) / "audit")]
    assert len(copies) == len(grid.sent_by_nodes)
    sent = sorted(payload_bytes(m.content) for m in grid.sent_by_nodes)
    assert sorted(payload_bytes(c) for c in copies) == sent
    for content in copies:
        audit_content(content, secrets, secret_rows)


@pytest.mark.parametrize(
    "leak",
    [
        lambda c: c.__setitem__("records", ConfigRecord({"rows": "task0_000,1e-3"})),
        lambda c: c["metrics"].__setitem__("task0_000-latency", 0.001),
        lambda c: c.__setitem__(
            "own_expert", arrays_to_record({"features": np.ones((7, 164), np.float32)})
        ),
        lambda c: c["node"].__setitem__("workloads", "wk-task9_000"),
    ],
)
def test_audit_catches_a_leak(federation, leak) -> None:
    grid, secrets, secret_rows = federation
    leaky = copy.deepcopy(next(m for m in grid.sent_by_nodes if "shared" in m.content))
    leak(leaky.content)
    with pytest.raises(PrivacyViolation):
        audit_reply(leaky, secrets, secret_rows)


def test_audit_catches_raw_values_in_arrays(federation) -> None:
    grid, secrets, secret_rows = federation
    reply = copy.deepcopy(next(m for m in grid.sent_by_nodes if "shared" in m.content))
    shared = {k: v.numpy().copy() for k, v in reply.content["shared"].items()}
    first = next(iter(shared))
    shared[first].ravel()[:4] = np.frombuffer(secret_rows[3], dtype=np.float32)
    reply.content["shared"] = arrays_to_record(shared)
    with pytest.raises(PrivacyViolation, match="raw feature values"):
        audit_reply(reply, secrets, secret_rows)


def test_a_node_reports_one_two_decimal_agreement_per_checked_expert(federation) -> None:
    """Round 2's replies carry each node's rank agreement with the 2 experts it checked;
    the audit refuses more digits or a value per task (which would describe records)."""
    grid, secrets, secret_rows = federation
    last = [m for m in grid.sent_by_nodes if "shared" in m.content][-3:]  # round 2
    for reply in last:
        hello = json.loads(str(reply.content["node"]["hello"]))
        assert len(hello["expert_agreement"]) == 2
        assert set(hello["expert_agreement"]) == set(hello["checked_experts"])
    for leak in ({"x": 0.123456}, {"x": [0.1, 0.2]}):
        leaky = copy.deepcopy(last[0])
        hello = json.loads(str(leaky.content["node"]["hello"]))
        hello["checked_experts"], hello["expert_agreement"] = ["x"], leak
        leaky.content["node"]["hello"] = json.dumps(hello)
        with pytest.raises(PrivacyViolation, match="2-decimal"):
            audit_reply(leaky, secrets, secret_rows)


def test_the_personal_model_is_asked_in_the_last_round_and_never_leaves_the_node(
    federation,
) -> None:
    """Personalisation (ServerRunConfig.personal_epochs): only the run's last round asks for
    it; each node keeps personal.pt (its own fine-tuned encoder), and no reply carries it."""
    grid, _, _ = federation
    assert sorted(set(INSTRUCTIONS)) == [(1, 0), (2, 2)]
    sent = [
        v.numpy()
        for m in grid.sent_by_nodes
        for key in ("shared", "own_expert")
        if key in m.content
        for v in m.content[key].values()
    ]
    for node in grid.nodes.values():
        state = NodeState(Path(node.context.node_config["state-dir"]))
        personal = state.load_personal_model()
        assert personal is not None and state.federation_state().personal_epochs == 2
        assert choose_model(state).source == "personal"
        mine = [p.detach().numpy() for p in personal.program_encoder.parameters()]
        assert not any(
            a.shape == b.shape and np.allclose(a, b) for a in mine for b in sent
        )  # the fine-tuned encoder is in no reply


def test_teacher_scores_are_one_float_per_public_probe_and_the_teacher_stays_home(
    tmp_path: Path,
) -> None:
    """With teacher_epochs (off by default) a node also sends its own-records teacher's
    scores on the public probes the server sent: the audit allows exactly one float per
    probe candidate, no raw row; the teacher model itself (teacher.pt) is in no reply, and
    an audit that was not told the server asked for scores refuses them."""
    from simoe_model.features import FEATURE_DIM
    from simoe_model.probe_file import load_probes, save_probes

    rng = np.random.default_rng(3)
    save_probes(
        tmp_path / "probes.npz", [(rng.normal(size=(10, FEATURE_DIM)), np.arange(0, 11, 2))] * 2
    )
    probes = load_probes(tmp_path / "probes.npz")
    devices, tasks = make_devices(3, seed=5), make_tasks(2, 10, seed=9)
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(
        registry, model_similarity, k_experts=2, epochs=1, probes=probes,
        teacher_epochs=1, teacher_distill_steps=3,
    )  # fmt: skip
    grid = InProcessGrid()
    for i, device in enumerate(devices):
        seed_node(tmp_path / device.name, device.name, device, tasks)
        grid.add_node(10 + i, client_app, {"state-dir": str(tmp_path / device.name)})
    outcomes = run_rounds(grid, strategy, initial_shared_arrays(0), num_rounds=2, wait_nodes_s=0)
    assert all(not o.rejected and len(o.accepted) == 3 for o in outcomes)
    secrets, secret_rows = node_secrets(tasks)
    replies = [m for m in grid.sent_by_nodes if "probe_scores" in m.content]
    assert len(replies) == 6  # every node, every round
    sent_set = [strategy.probe_digest()]  # the hellos may say they hold it, and the shipped one
    for message in grid.sent_by_nodes:
        audit_reply(message, secrets, secret_rows, probe_counts=[5, 5], probe_digests=sent_set)
    with pytest.raises(PrivacyViolation, match="probe sets no server sent"):
        audit_reply(grid.sent_by_nodes[-1], secrets, secret_rows, probe_counts=[5, 5])
    assert sorted(replies[0].content["probe_scores"]) == ["scores_0", "scores_1"]
    with pytest.raises(PrivacyViolation, match="did not ask for"):
        audit_reply(replies[0], secrets, secret_rows)
    with pytest.raises(PrivacyViolation, match="one score per probe"):
        audit_reply(replies[0], secrets, secret_rows, probe_counts=[5, 4])
    sent = [v.numpy() for m in grid.sent_by_nodes for r in m.content.array_records.values()
            for v in r.values()]  # fmt: skip
    for node in grid.nodes.values():
        teacher = NodeState(Path(node.context.node_config["state-dir"])).load_teacher_model()
        assert teacher is not None
        mine = [p.detach().numpy() for p in teacher.program_encoder.parameters()]
        assert not any(a.shape == b.shape and np.allclose(a, b) for a in mine for b in sent)
    registry.close()
