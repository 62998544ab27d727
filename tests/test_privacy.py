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

import numpy as np
import pytest
from federation_helpers import seed_node
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord

from agent.client_app import app as client_app
from schemas.messages import ALLOWED_METRICS, ALLOWED_REPLY_RECORDS, REC_NODE, NodeHello
from schemas.protocol import arrays_to_record
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.server_app import run_rounds
from server.similarity import initial_shared_arrays, model_similarity
from server.strategy import SiMoEStrategy
from simoe_model.model import Expert, SiMoE, shared_arrays
from simoe_model.synthetic import make_devices, make_tasks

SHARED_SHAPES = {k: v.shape for k, v in shared_arrays(SiMoE()).items()}
EXPERT_SHAPES = {k: tuple(v.shape) for k, v in Expert(SiMoE().config).state_dict().items()}
RECORD_TYPES = {"array": ArrayRecord, "metric": MetricRecord, "config": ConfigRecord}


class PrivacyViolation(AssertionError):
    pass


def audit_reply(message: Message, secrets: set[str], secret_rows: list[bytes]) -> None:
    """Raise PrivacyViolation if the message carries anything but the allowed payloads."""
    if message.has_error():
        return
    content = message.content
    for key, record in content.items():
        kind = ALLOWED_REPLY_RECORDS.get(key)
        if kind is None or not isinstance(record, RECORD_TYPES[kind]):
            raise PrivacyViolation(f"record {key!r} ({type(record).__name__}) is not allowed")
    for key, record in content.array_records.items():
        expected = SHARED_SHAPES if key == "shared" else EXPERT_SHAPES
        shapes = {k: tuple(v.shape) for k, v in record.items()}
        if shapes != {k: tuple(s) for k, s in expected.items()}:
            raise PrivacyViolation(f"{key}: arrays are not exactly the model's parameters")
        for name, array in record.items():
            haystack = array.numpy().astype(np.float32).tobytes()
            if any(needle in haystack for needle in secret_rows):
                raise PrivacyViolation(f"{key}/{name} contains raw feature values")
    for record in content.metric_records.values():
        extra = set(record) - ALLOWED_METRICS
        if extra:
            raise PrivacyViolation(f"metrics {sorted(extra)} are not allowed aggregates")
    for key, record in content.config_records.items():
        if key != REC_NODE or set(record) != {"hello"}:
            raise PrivacyViolation(f"config record {key!r} has {sorted(record)}")
        NodeHello.model_validate_json(str(record["hello"]))  # extra fields are refused
    text = json.dumps(
        {k: str(dict(r)) for k, r in content.config_records.items()}
        | {k: sorted(r) for k, r in content.array_records.items()}
        | {k: sorted(r) for k, r in content.metric_records.items()}
    )
    leaked = [s for s in secrets if s in text]
    if leaked:
        raise PrivacyViolation(f"raw data in the message: {leaked[:3]}")


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> tuple[InProcessGrid, set, list]:
    """Three nodes with synthetic measurements, two rounds; every reply recorded."""
    tmp_path = tmp_path_factory.mktemp("privacy")
    devices, tasks = make_devices(3, seed=5), make_tasks(2, 10, seed=9)
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, model_similarity, k_experts=2, epochs=1)
    grid = InProcessGrid()
    for i, device in enumerate(devices):
        seed_node(tmp_path / device.name, device.name, device, tasks)
        grid.add_node(10 + i, client_app, {"state-dir": str(tmp_path / device.name)})
    run_rounds(grid, strategy, initial_shared_arrays(0), num_rounds=2, wait_nodes_s=0)
    secrets = {t.name for t in tasks} | {f"wk-{t.name}" for t in tasks}
    # the first 4 values of every feature row, as bytes: a copied row would contain them
    secret_rows = [
        row[:4].astype(np.float32).tobytes() for t in tasks for f in t.features for row in f
    ]
    return grid, secrets, secret_rows


def test_every_node_message_carries_only_allowed_payloads(federation) -> None:
    grid, secrets, secret_rows = federation
    assert len(grid.sent_by_nodes) == 3 + 3 * 2  # hellos, then two rounds of train replies
    for message in grid.sent_by_nodes:
        audit_reply(message, secrets, secret_rows)
    kinds = {tuple(sorted(m.content.keys())) for m in grid.sent_by_nodes}
    assert ("metrics", "node", "own_expert", "shared") in kinds


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
