"""Defects a new user met in the federation (issue 13, defects 1-4), each pinned by a test.

1. a refused enroll leaves nothing behind that blocks a retry with a free name;
2. `simoe-agent status` shows the federation state of a node that ran rounds;
3. a node trains and sends its own expert from its tuning records, alone in the fleet
   (the tuner stores traces, not features: training must not wait for features);
4. one-node rounds report no spurious failures, `status`'s rejected count agrees with
   the rounds', `nodes` counts the rounds a node replied in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from federation_helpers import ToyNode, seed_node
from flwr.app import Error, Message
from typer.testing import CliRunner

from agent.cli import app as agent_cli
from agent.client_app import app as client_app
from agent.node_state import NodeState
from schemas import AgentConfig, BadInputError
from server.cli import app as server_cli
from server.inprocess import SUPERLINK_NODE_ID, InProcessGrid
from server.registry import Registry
from server.roster import Roster
from server.server_app import run_rounds
from server.similarity import initial_shared_arrays, model_similarity
from server.strategy import SiMoEStrategy
from simoe_model.synthetic import make_devices, make_tasks

runner = CliRunner()


def invoke(cli, *args: str):  # noqa: ANN001, ANN201
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- 1. a refused enroll ----------------------------------------------------------------


def test_refused_enroll_leaves_nothing_that_blocks_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server refuses the name (its refusal lands in the node's state as the ClientApp
    writes it); the retry with a free name in the same state dir must go through."""
    import agent.enroll as enroll_module

    state_dir = tmp_path / "node"
    ca = tmp_path / "ca.pem"
    from server.superlink import init_certs

    ca = init_certs(tmp_path / "certs").ca
    monkeypatch.setattr(enroll_module, "check_server", lambda *_a, **_k: None)
    monkeypatch.setattr(enroll_module, "register_key", lambda *_a, **_k: "registered")
    profile = make_devices(1, seed=2)[0].profile()
    NodeState(state_dir).save_profile(profile)

    def refused_fetch(state_dir: Path, **_kw: object) -> None:
        node = NodeState(state_dir)
        state = node.federation_state()
        state.refused = "name 't4-01' is taken by another node"  # what query.refused writes
        node.save_federation_state(state)
        raise BadInputError(f"the server refused this node: {state.refused}")

    monkeypatch.setattr(enroll_module, "fetch_model", refused_fetch)
    with pytest.raises(BadInputError, match="refused"):
        enroll_module.enroll(
            state_dir=state_dir, server="127.0.0.1:1", ca=ca, name="t4-01", device=profile.device
        )
    assert NodeState(state_dir).config().name is None  # not enrolled under the refused name

    def good_fetch(state_dir: Path, **_kw: object) -> None:
        node = NodeState(state_dir)
        assert not node.federation_state().refused, "the old refusal must not be read as this one's"
        state = node.federation_state()
        state.last_round += 1
        node.save_federation_state(state)

    monkeypatch.setattr(enroll_module, "fetch_model", good_fetch)
    result = enroll_module.enroll(
        state_dir=state_dir, server="127.0.0.1:1", ca=ca, name="t4-02", device=profile.device
    )
    assert result.name == "t4-02" and NodeState(state_dir).config().name == "t4-02"


# -- 2 and 4: a small real federation in process -----------------------------------------


class SuperLinkGrid(InProcessGrid):
    """A dead node's message comes back as the SuperLink's error reply (src node 0)."""

    def pull_messages(self, message_ids):  # noqa: ANN001, ANN201
        ids = list(message_ids)
        pending = {i: self._pending.get(i) for i in ids}
        replies = list(super().pull_messages(ids))
        answered = {r.metadata.reply_to_message_id for r in replies}
        for message_id, message in pending.items():
            if message is None or message_id in answered:
                continue
            error = Message(Error(code=3, reason="node unavailable"), reply_to=message)
            error.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
            replies.append(error)
        return replies


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real node with data and one without (served), two rounds; then a third round
    where a node with a taken name is refused and the data node is dead."""
    root = tmp_path_factory.mktemp("fleet")
    devices, tasks = make_devices(2, seed=3), make_tasks(2, 8, seed=1)
    registry = Registry(root / "server" / "registry.sqlite")
    strategy = SiMoEStrategy(registry, model_similarity, k_experts=2, epochs=1)
    grid = SuperLinkGrid()
    data_dir = root / devices[0].name
    seed_node(data_dir, devices[0].name, devices[0], tasks)
    empty_dir = root / devices[1].name
    seed_node(empty_dir, devices[1].name, devices[1], [])
    grid.add_node(101, client_app, {"state-dir": str(data_dir)})
    grid.add_node(102, client_app, {"state-dir": str(empty_dir)})
    roster = Roster()  # the run's: the third round continues it
    outcomes = run_rounds(
        grid, strategy, initial_shared_arrays(0), num_rounds=2, wait_nodes_s=0, roster=roster
    )
    impostor = ToyNode(devices[0].name, 5000)  # another key claiming a taken name
    grid.add_node(103, impostor.app(), {})
    grid.kill_node(101)
    outcomes += run_rounds(grid, strategy, {}, num_rounds=1, wait_nodes_s=0, roster=roster)
    registry.close()
    return {
        "root": root,
        "server": root / "server",
        "data": data_dir,
        "empty": empty_dir,
        "names": [d.name for d in devices],
        "outcomes": outcomes,
    }


def test_agent_status_shows_the_federation(fleet: dict) -> None:
    status = invoke(agent_cli, "status", "--state-dir", str(fleet["data"]))
    federation = status["federation"]
    assert federation is not None, "an enrolled node that ran rounds is not 'not enrolled'"
    assert federation["name"] == fleet["names"][0]
    assert federation["last_round"] == 2 and federation["rounds_trained"] == 2
    assert federation["global_version"] >= 1
    assert federation["experts"] == []  # its only peer has no expert to deliver
    table = runner.invoke(agent_cli, ["status", "--state-dir", str(fleet["data"])])
    assert table.exit_code == 0 and "not enrolled" not in table.output
    assert "round 2" in table.output


def test_no_spurious_failures_and_counts_agree(fleet: dict) -> None:
    outcomes = fleet["outcomes"]
    assert [o.failed for o in outcomes] == [0, 0, 1]  # the dead node once, not twice
    rounds = invoke(server_cli, "rounds", "--state-dir", str(fleet["server"]))
    assert [r["failed"] for r in rounds] == [0, 0, 1]
    status = invoke(server_cli, "status", "--state-dir", str(fleet["server"]))
    assert status["rejections"] == sum(r["rejected"] for r in rounds)
    assert status["refused_hellos"] == 1  # the impostor: refused at hello, not an update
    nodes = {n["name"]: n for n in invoke(server_cli, "nodes", "--state-dir", str(fleet["server"]))}
    replied = {name: 0 for name in nodes}
    data_name, empty_name = fleet["names"]
    replied[data_name], replied[empty_name] = 2, 3  # the data node died before round 3
    assert {n: v["rounds"] for n, v in nodes.items()} == replied


# -- 3. a lone node's own expert from tuned records ---------------------------------------


@pytest.mark.slow
def test_lone_node_sends_its_expert_from_tuned_records(tmp_path: Path) -> None:
    """Records as the tuner writes them (traces, no features); one node, one round."""
    from agent.devices import get_device
    from agent.enroll import create_node_key
    from agent.node_state import load_or_profile
    from agent.tuner import tune_workload
    from agent.workloads import parse_workload

    state_dir = tmp_path / "t4-01"
    NodeState(state_dir).save_config(AgentConfig(name="t4-01", device="sim:t4"))
    create_node_key(state_dir)
    device = get_device("sim:t4")
    NodeState(state_dir).save_profile(load_or_profile(device, state_dir))
    with NodeState(state_dir).open_store() as store:
        tune_workload(
            parse_workload("matmul:64,64,64"), device, store, trials=6, baseline=False,
            population=8,
        )  # fmt: skip
        tuned = store.count_records(device="sim:t4")
    assert tuned >= 2
    with Registry(tmp_path / "registry.sqlite") as registry:
        strategy = SiMoEStrategy(registry, model_similarity, epochs=1)
        grid = InProcessGrid()
        grid.add_node(7, client_app, {"state-dir": str(state_dir)})
        [outcome] = run_rounds(
            grid, strategy, initial_shared_arrays(0), num_rounds=1, wait_nodes_s=0
        )
        assert outcome.accepted, f"no update from a node with {tuned} records: {outcome}"
        [expert] = registry.experts()
        assert expert.name == "t4-01" and expert.num_examples == tuned
        assert registry.rounds()[0].status == "done"


def test_an_expert_may_be_called_like_a_module_method(tmp_path: Path) -> None:
    """Found by the demo: the node named 'cpu' crashed every round (nn.Module.cpu)."""
    import numpy as np

    from simoe_model.model import SiMoE, add_expert, expert_arrays, load_model, save_model

    model = SiMoE()
    hardware = np.zeros(model.config.hardware_dim, dtype=np.float32)
    for name in ("cpu", "train", "t4.01"):
        model.ensure_expert(name, hardware)
    assert model.expert_names == ["cpu", "train", "t4.01"]
    save_model(model, tmp_path / "m.pt")
    loaded = load_model(tmp_path / "m.pt")
    assert loaded.expert_names == ["cpu", "train", "t4.01"]
    other = SiMoE()
    add_expert(other, "cpu", expert_arrays(model, "cpu"))
    assert other.expert_names == ["cpu"]


def test_a_restarted_daemon_stops_what_a_killed_one_left(tmp_path: Path) -> None:
    """Found by the real loop: a SIGKILLed daemon's SuperNode (own session) kept the port."""
    import subprocess
    import sys

    from agent.daemon import AgentDaemon

    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    orphan = subprocess.Popen([*sleep, str(tmp_path)], start_new_session=True)
    stranger = subprocess.Popen(sleep, start_new_session=True)  # a reused pid: not ours
    try:
        NodeState(tmp_path).daemon_status_path.write_text(
            json.dumps({"supernode_pid": orphan.pid, "job_pid": stranger.pid})
        )
        daemon = AgentDaemon(tmp_path, supernode=False, tune=False)
        assert daemon.reap_orphans() == [orphan.pid]
        assert orphan.wait(timeout=10) != 0
        assert stranger.poll() is None
    finally:
        for process in (orphan, stranger):
            process.kill()
            process.wait()


# -- the newcomer's first reply ----------------------------------------------------------


class ReceiptGrid(InProcessGrid):
    """Delivers what the server only pushes (a receipt) when the test says so."""

    def deliver_pushed(self) -> list[Message]:
        return list(self.pull_messages(list(self._pending)))


def test_a_leaving_node_is_told_its_reply_is_in_and_not_sampled_again(tmp_path: Path) -> None:
    """Found by the demo: `enroll` stopped its SuperNode as soon as its reply was sent, and
    Flower answers for an offline node with an error even when its reply already waits in
    the SuperLink (it checks availability first), so the newcomer's first round counted it
    failed and `nodes` showed 0 rounds. Now a leaving node (enroll's SuperNode) says so,
    the server tells it once the round is recorded, and it is not sampled again."""
    devices = make_devices(2, seed=3)
    old_dir, new_dir = tmp_path / devices[0].name, tmp_path / devices[1].name
    seed_node(old_dir, devices[0].name, devices[0], [])  # no records: served, fast
    seed_node(new_dir, devices[1].name, devices[1], [])
    grid = ReceiptGrid()
    grid.add_node(201, client_app, {"state-dir": str(old_dir)})
    grid.add_node(202, client_app, {"state-dir": str(new_dir), "leaving": True})
    with Registry(tmp_path / "registry.sqlite") as registry:
        strategy = SiMoEStrategy(registry, model_similarity, k_experts=2, epochs=1)
        roster = Roster()
        [first] = run_rounds(
            grid, strategy, initial_shared_arrays(0), num_rounds=1, wait_nodes_s=0, roster=roster
        )
        assert first.failed == 0 and len(first.served) == 2
        assert first.leaving == [202]
        new = NodeState(new_dir)
        assert new.federation_state().receipt_round == 0  # pushed, not yet delivered
        [receipt] = grid.deliver_pushed()
        assert not receipt.has_error()
        assert new.federation_state().receipt_round == first.round == 1
        # still listed online (enroll stops it now): neither sampled nor counted failed
        [second] = run_rounds(grid, strategy, {}, num_rounds=1, wait_nodes_s=0, roster=roster)
        assert second.sampled == [201] and second.failed == 0
        nodes = {n["name"]: n for n in registry.nodes()}
    assert nodes[devices[1].name]["rounds"] == 1


def test_enroll_stops_its_supernode_only_after_the_receipt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fetch_model waits for the server's receipt, not only for the model."""
    import sys
    import time

    import agent.enroll as enroll_module

    state_dir = tmp_path / "node"
    node = NodeState(state_dir)
    marker = tmp_path / "stopped-after-receipt"
    # a stand-in SuperNode: a model, round 1 and its reply sent at once, the receipt 3 s later
    script = f"""
import json, pathlib, signal, sys, time
state = pathlib.Path({str(node.federation_state_path)!r})
state.parent.mkdir(parents=True, exist_ok=True)
model = pathlib.Path({str(node.model_path)!r})
model.parent.mkdir(parents=True, exist_ok=True)
model.write_bytes(b"m")
state.write_text(json.dumps({{"last_round": 1}}))
print("Sending: train message", "Sent successfully", sep="\\n", flush=True)  # as Flower logs
def stopped(*_):
    received = json.loads(state.read_text()).get("receipt_round", 0) == 1
    pathlib.Path({str(marker)!r}).write_text(str(received))
    sys.exit(0)
signal.signal(signal.SIGTERM, stopped)
time.sleep(3)
state.write_text(json.dumps({{"last_round": 1, "receipt_round": 1}}))
time.sleep(60)
"""
    monkeypatch.setattr(
        enroll_module, "supernode_command", lambda *_a, **_k: [sys.executable, "-c", script]
    )
    started = time.monotonic()
    enroll_module.fetch_model(state_dir, timeout=30)
    assert time.monotonic() - started >= 3
    assert marker.read_text() == "True"


def test_a_node_that_joins_ends_the_wait_between_rounds(tmp_path: Path) -> None:
    """Rounds are spaced out (few rounds while the fleet tunes), yet a newcomer is served
    at once rather than after the interval; an idle fleet still waits it out."""
    import time

    devices = make_devices(2, seed=3)
    dirs = [tmp_path / d.name for d in devices]
    for state_dir, device in zip(dirs, devices, strict=True):
        seed_node(state_dir, device.name, device, [])
    grid = InProcessGrid()
    grid.add_node(301, client_app, {"state-dir": str(dirs[0])})

    def join(outcome) -> None:  # noqa: ANN001
        if outcome.round == 1:
            grid.add_node(302, client_app, {"state-dir": str(dirs[1])})

    with Registry(tmp_path / "registry.sqlite") as registry:
        strategy = SiMoEStrategy(registry, model_similarity, epochs=1)
        started, roster = time.monotonic(), Roster()
        outcomes = run_rounds(
            grid, strategy, initial_shared_arrays(0), num_rounds=2, wait_nodes_s=0,
            min_interval_s=600.0, on_round=join, roster=roster,
        )  # fmt: skip
        assert time.monotonic() - started < 300  # not the 600 s interval
        assert outcomes[1].sampled == [301, 302]
        started = time.monotonic()
        run_rounds(
            grid, strategy, {}, num_rounds=2, wait_nodes_s=0, min_interval_s=3.0, roster=roster
        )
        assert time.monotonic() - started >= 3.0  # nobody new: the interval holds
