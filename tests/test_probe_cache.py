"""The public probe set crosses once per node: the train message names it by its sha256 and
carries its arrays only to a node whose hello does not list that digest (agent.probe_cache).

Real nodes (the ClientApp, synthetic records) and the real strategy over the in-process
Grid; traffic is the strategy's own `bytes_down` accounting (what the registry keeps)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from federation_helpers import seed_node
from flwr.app import Context, Message

from agent.client_app import app as client_app
from agent.node_state import NodeState
from agent.probe_cache import cached_probes, held_digests
from schemas.messages import MSG_TRAIN, REC_CONFIG, REC_PROBES, TrainInstruction
from schemas.protocol import payload_bytes
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.round_outcome import RoundOutcome
from server.server_app import run_rounds
from server.similarity import initial_shared_arrays, model_similarity
from server.strategy import SiMoEStrategy
from simoe_model.features import FEATURE_DIM
from simoe_model.probe_file import (
    SUITE_PROBES,
    load_probes,
    probe_digest,
    save_probes,
    suite_digest,
)
from simoe_model.synthetic import make_devices, make_tasks

# what each node was sent, per train message: (node dir name, round, digest named, carried)
SEEN: list[tuple[str, int, str | None, bool]] = []
SIZES: dict[tuple[str, int], int] = {}  # (node dir name, round) -> the message's bytes


def watching_app(message: Message, context: Context) -> Message:
    """The real ClientApp, noting what each train message named and carried first."""
    if message.metadata.message_type == MSG_TRAIN:
        sent = TrainInstruction.model_validate_json(
            str(message.content.config_records[REC_CONFIG]["instruction"])
        )
        name = Path(str(context.node_config["state-dir"])).name
        carried = REC_PROBES in message.content.array_records
        SEEN.append((name, sent.server_round, sent.probes_sha256, carried))
        SIZES[name, sent.server_round] = payload_bytes(message.content)
    return client_app(message, context)


def a_probe_file(path: Path, seed: int = 3) -> Path:
    rng = np.random.default_rng(seed)
    save_probes(path, [(rng.normal(size=(10, FEATURE_DIM)), np.arange(0, 11, 2))] * 2)
    return path


def federation(  # noqa: ANN201
    tmp_path: Path, probes_file: Path | str, nodes: int = 2, k_experts: int = 1, teacher: int = 1
):
    """Nodes seeded with synthetic records, and a strategy asking for teacher scores."""
    SEEN.clear()
    SIZES.clear()
    devices, tasks = make_devices(nodes, seed=5), make_tasks(2, 10, seed=9)
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(
        registry, model_similarity, k_experts=k_experts, epochs=1,
        probes=load_probes(probes_file), teacher_epochs=teacher,
    )  # fmt: skip
    grid = InProcessGrid()
    for i, device in enumerate(devices):
        seed_node(tmp_path / device.name, device.name, device, tasks)
        grid.add_node(10 + i, watching_app, {"state-dir": str(tmp_path / device.name)})
    return grid, strategy, registry, [NodeState(tmp_path / d.name) for d in devices]


def scored(outcome: RoundOutcome, grid: InProcessGrid) -> int:
    """Replies of the round that carried teacher scores."""
    group = [m for m in grid.sent_by_nodes if m.metadata.group_id == str(outcome.round)]
    return sum("probe_scores" in m.content for m in group)


def test_a_probe_set_is_sent_once_per_node_then_named(tmp_path: Path) -> None:
    """Round 1 carries the probe set to each node, which keeps it under its digest; rounds 2
    and 3 name it only, and every node still scores it every round. Each round after the
    first is lighter by the probe record's bytes, per node (the strategy's `bytes_down`)."""
    grid, strategy, registry, nodes = federation(tmp_path, a_probe_file(tmp_path / "p.npz"))
    digest = strategy.probe_digest()
    outcomes = run_rounds(grid, strategy, initial_shared_arrays(0), num_rounds=3, wait_nodes_s=0)
    assert [(r, d, c) for _, r, d, c in SEEN] == [
        (r, digest, r == 1) for r in (1, 2, 3) for _ in nodes
    ]
    assert all(scored(o, grid) == len(nodes) for o in outcomes)  # every node, every round
    for node in nodes:
        assert held_digests(node) == [suite_digest(), digest]
        assert (node.probes_dir / f"{digest}.npz").is_file()
    for outcome in outcomes:  # the traffic the registry keeps is what the nodes were sent
        for answer in outcome.replies:
            assert answer.bytes_down == SIZES[answer.name, outcome.round]
    registry.close()


def test_the_shipped_probe_set_is_never_sent(tmp_path: Path) -> None:
    """A node holds the probe set SiMoE ships: with it (the default) no message carries it."""
    grid, strategy, registry, nodes = federation(tmp_path, "suite")
    assert strategy.probe_digest() == suite_digest() == probe_digest(load_probes(SUITE_PROBES))
    outcomes = run_rounds(grid, strategy, initial_shared_arrays(0), num_rounds=1, wait_nodes_s=0)
    assert SEEN and not any(carried for *_, carried in SEEN)
    assert scored(outcomes[0], grid) == len(nodes)
    assert not any(n.probes_dir.exists() for n in nodes)  # nothing copied
    registry.close()


class Lines(logging.Handler):
    """The log lines of one logger (pytest's log capture is off in this project)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_damaged_cache_is_dropped_and_the_set_sent_again(tmp_path: Path) -> None:
    """After round 1 one node's kept file is replaced by another probe set under the same
    name: in round 2 it does not trust it (one log line, the file dropped), replies without
    teacher scores and a hello without the digest; round 3 carries the set to it again."""
    grid, strategy, registry, nodes = federation(tmp_path, a_probe_file(tmp_path / "p.npz"))
    digest = strategy.probe_digest()
    damaged = nodes[0].probes_dir / f"{digest}.npz"

    def damage(outcome: RoundOutcome) -> None:
        if outcome.round == 1:
            a_probe_file(damaged, seed=4)  # a valid probe file, but not the named set

    logged = Lines()
    logger = logging.getLogger("simoe.agent.probes")
    logger.addHandler(logged)
    try:
        outcomes = run_rounds(
            grid, strategy, initial_shared_arrays(0), num_rounds=3, wait_nodes_s=0,
            on_round=damage,
        )  # fmt: skip
    finally:
        logger.removeHandler(logged)
    name = nodes[0].dir.name
    assert [c for n, _, _, c in SEEN if n == name] == [True, False, True]
    assert [c for n, _, _, c in SEEN if n != name] == [True, False, False]
    assert [scored(o, grid) for o in outcomes] == [2, 1, 2]
    why = "its content does not match its digest"
    assert [line for line in logged.lines if "dropped" in line] == [
        f"cached probe set {digest[:12]} dropped: {why}"
    ]
    assert probe_digest(load_probes(damaged)) == digest  # kept again, the right one
    registry.close()


def test_a_cache_is_checked_against_its_digest(tmp_path: Path) -> None:
    """`cached_probes`: the shipped set always, a kept file only if its content is the set
    its name says (a truncated file is dropped too), nothing for an unknown digest."""
    node = NodeState(tmp_path / "node")
    assert cached_probes(node, suite_digest()) is not None
    probes = load_probes(a_probe_file(tmp_path / "p.npz"))
    digest = probe_digest(probes)
    assert cached_probes(node, digest) is None  # not held
    node.probes_dir.mkdir(parents=True)
    kept = node.probes_dir / f"{digest}.npz"
    kept.write_bytes((tmp_path / "p.npz").read_bytes()[:100])  # a half write
    assert cached_probes(node, digest) is None and not kept.exists()
    kept.write_bytes((tmp_path / "p.npz").read_bytes())
    assert probe_digest(cached_probes(node, digest) or []) == digest
    assert held_digests(node) == [suite_digest(), digest]


def test_sent_probes_must_be_the_named_set(tmp_path: Path) -> None:
    """`round_probes`: arrays that are not the set the message names are refused (and not
    kept); the named set is kept; no arrays and no digest is no probe set."""
    from agent.payload import PayloadRefused
    from agent.probe_cache import ProbesUnavailable, round_probes
    from simoe_model.probe_file import probe_arrays

    node = NodeState(tmp_path / "node")
    probes = load_probes(a_probe_file(tmp_path / "p.npz"))
    other = load_probes(a_probe_file(tmp_path / "q.npz", seed=4))
    ask = TrainInstruction(
        server_round=1, global_version=0, teacher_epochs=1, probes_sha256=probe_digest(probes)
    )
    with pytest.raises(PayloadRefused, match="the message names"):
        round_probes(node, ask, probe_arrays(other))
    assert held_digests(node) == [suite_digest()]  # not kept
    assert len(round_probes(node, ask, probe_arrays(probes))) == 2
    assert held_digests(node) == [suite_digest(), probe_digest(probes)]
    with pytest.raises(ProbesUnavailable):
        round_probes(node, ask.model_copy(update={"probes_sha256": None}), None)


def test_a_hello_says_only_digests_of_probe_sets() -> None:
    """What a hello may say of probe sets is sha256 digests (a few), never other text."""
    from pydantic import ValidationError

    from schemas.messages import MAX_PROBES_HELD, NodeHello

    fields = {"name": "n", "key_fingerprint": "f" * 32, "profile": make_devices(1)[0].profile()}
    assert NodeHello(**fields, probes_held=[suite_digest()]).probes_held == [suite_digest()]
    for held in (
        ["wk-softmax"],
        [suite_digest().upper()],
        [suite_digest()] * (MAX_PROBES_HELD + 1),
    ):
        with pytest.raises(ValidationError):
            NodeHello(**fields, probes_held=held)


def traffic(work: Path, probes_file: Path | str, teacher: int) -> list[list[int]]:
    """Bytes down per node (by name) per round, 3 nodes, 3 rounds, k = 3 (`bytes_down`)."""
    grid, strategy, registry, _ = federation(
        work, probes_file, nodes=3, k_experts=3, teacher=teacher
    )
    outcomes = run_rounds(grid, strategy, initial_shared_arrays(0), num_rounds=3, wait_nodes_s=0)
    registry.close()
    return [[a.bytes_down for a in sorted(o.replies, key=lambda a: a.name)] for o in outcomes]


if __name__ == "__main__":  # the traffic figures: python tests/test_probe_cache.py
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        other = work / "other.npz"  # the shipped set's size, but not the shipped set
        with np.load(SUITE_PROBES) as shipped:
            count = sum(name.startswith("rows_") for name in shipped.files)
            rows = [(shipped[f"rows_{i}"] + np.float32(1e-3), shipped[f"offsets_{i}"])
                    for i in range(count)]  # fmt: skip
        save_probes(other, rows)
        runs = {
            "teacher off": (SUITE_PROBES, 0),
            "teacher on, the shipped set": (SUITE_PROBES, 1),
            "teacher on, a set of its size not shipped": (other, 1),
        }
        print(json.dumps({k: traffic(work / str(i), *v) for i, (k, v) in enumerate(runs.items())}))
