"""Integration on loopback with real Flower processes: TLS, node auth, rounds, restart.

flower-superlink (TLS + --enable-supernode-auth + a persistent database) and three
flower-supernode processes with registered keys run SiMoE rounds; a fourth node
enrolls during the run and receives experts; a SuperNode with an unregistered key is
refused; the SuperLink is killed and restarted: the registry is intact, the nodes
reconnect by themselves and the round numbers continue. Afterwards the privacy audit
runs over every reply the real ClientApps sent (each node's own copy, agent/audit.py),
and no log holds key material or a raw record.

Slow (about 3-5 minutes on 2 busy cores: each message starts a ClientApp process that
imports torch), so it is marked `slow`.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import free_port, wait_for
from federation_helpers import add_shareable_records, fake_trace, seed_node
from privacy_audit import audit_content, node_secrets

from agent.audit import read_audit
from agent.enroll import create_node_key, enroll, flwr_home, register_key
from agent.enroll import supernode_command as node_command
from agent.node_state import NodeState
from agent.sharing import received_schedules
from schemas import AgentConfig
from schemas.errors import BadInputError, RunFailure
from schemas.protocol import flower_env
from server.registry import Registry
from server.superlink import SuperLink, init_certs, submit_run
from simoe_model.synthetic import make_devices, make_tasks

pytestmark = pytest.mark.slow


def start_node(state_dir: Path, port: int) -> subprocess.Popen[bytes]:
    """A node's SuperNode. It does not test the experts it is sent: a node's verdicts make
    the server withhold experts from newcomers, and how many it had given depended on
    how many rounds ran before the late node came (one expert instead of two)."""
    log = open(state_dir / "supernode.log", "ab")  # noqa: SIM115 - lives as long as the node
    command = node_command(state_dir, port)
    at = command.index("--node-config") + 1
    command[at] += " check-experts=false"
    return subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=flower_env(flwr_home(state_dir)),
        start_new_session=True,
    )


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def rounds_done(registry_path: Path) -> list:
    if not registry_path.exists():
        return []
    try:  # read-only: the poller must never take the write lock the ServerApp needs
        with Registry(registry_path, read_only=True) as registry:
            return [r for r in registry.rounds() if r.status == "done"]
    except (BadInputError, RunFailure):  # its tables not created yet, or busy: ask again
        return []


@pytest.fixture()
def processes() -> Iterator[list[subprocess.Popen[bytes] | SuperLink]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:  # a SuperLink with its whole tree (its ServerApp has its own session)
        process.stop() if isinstance(process, SuperLink) else stop(process)


def test_federation_with_real_processes(tmp_path: Path, processes: list) -> None:
    server_dir = tmp_path / "server"
    certs = init_certs(server_dir / "certs")
    port = free_port()
    address = f"127.0.0.1:{port}"
    link = SuperLink(server_dir, port=port, certs=certs).start()
    processes.append(link)
    registry_path = server_dir / "registry.sqlite"
    assert (server_dir / "superlink.sqlite").stat().st_mode & 0o077 == 0  # owner only

    devices, tasks = make_devices(5, seed=3), make_tasks(1, 8, seed=1)
    nodes = []
    for device in devices:
        state_dir = tmp_path / device.name
        seed_node(state_dir, device.name, device, tasks)
        node = NodeState(state_dir)
        node.audit_dir.mkdir()  # the node keeps a copy of every reply it sends
        node.save_config(node.config().model_copy(update={"server": address, "ca_cert": certs.ca}))
        nodes.append(state_dir)
    # schedule sharing: the first node opts in (its fastest traces of one workload), the
    # others do not; the newcomer below opts in when it enrolls
    sharer = NodeState(nodes[0])
    sharer.save_config(sharer.config().model_copy(update={"share_schedules": True}))
    add_shareable_records(nodes[0], "4242", {4: 2e-3, 8: 1e-3})
    for state_dir in nodes[:3]:
        assert register_key(state_dir, address, certs.ca, NodeState(state_dir).public_key_path) in (
            "registered",
            "already registered",
        )
    node_ports = [free_port() for _ in nodes]
    for state_dir, node_port in zip(nodes[:3], node_ports, strict=False):
        processes.append(start_node(state_dir, node_port))

    run_config = {
        "registry": str(registry_path),
        "num-rounds": 0,  # continual
        "epochs": 1,
        "k-experts": 2,
        "min-nodes": 3,
        "round-timeout": 90.0,
        "wait-nodes": 5.0,
    }
    submit_run(server_dir, address, certs.ca, run_config)
    wait_for("a first round with three nodes", lambda: len(rounds_done(registry_path)) >= 1, 150)
    with Registry(registry_path) as registry:
        first = registry.rounds()[0]
        assert first.replied == 3 and first.rejected == 0
        assert {n["name"] for n in registry.nodes()} == {d.name for d in devices[:3]}
        assert all(n["key_verified"] == 1 for n in registry.nodes())  # SuperLink-bound keys
        assert all(t["bytes_up"] > 0 for t in registry.traffic(first.round))

    # a SuperNode whose key was never registered is refused by the SuperLink
    stranger = tmp_path / "stranger"
    NodeState(stranger).save_config(AgentConfig(name="stranger", server=address, ca_cert=certs.ca))
    create_node_key(stranger)
    refused = start_node(stranger, free_port())
    processes.append(refused)
    refused.wait(timeout=60)
    assert refused.returncode != 0

    # a fourth node enrolls during the run: registered, then served model + experts
    late = nodes[3]
    result = enroll(
        state_dir=late,
        server=address,
        ca=certs.ca,
        name=devices[3].name,
        device=f"sim:{devices[3].name}",
        download_timeout=300,  # under a loaded machine a first ClientApp takes minutes
        supernode_port=node_ports[3],
        share_schedules=True,
    )
    assert result.registration == "registered" and not result.key_created
    # it got the sharing unit's traces with its first model (the only unit that shares)
    assert received_schedules(NodeState(late)) == {"4242": [fake_trace(8), fake_trace(4)]}
    # k = 2 are sent; the late node, with records of its own, tests them on its records as
    # a real node does and leaves out one they refute (how good the experts are depends on
    # how many rounds ran before it came: 1 kept under a loaded machine, 2 on a quiet one)
    assert result.model_path and 1 <= len(result.experts) <= 2
    assert set(NodeState(late).load_model().expert_names) >= set(result.experts)
    # enroll returned once the server held its reply: its round counts it, not as failed
    served = NodeState(late).federation_state().last_round
    with Registry(registry_path) as registry:
        [its_round] = [r for r in registry.rounds() if r.round == served]
        assert its_round.status == "done" and its_round.failed == 0
        late_node = [n for n in registry.nodes() if n["name"] == devices[3].name]
        assert late_node and late_node[0]["rounds"] >= 1
    again = enroll(  # idempotent
        state_dir=late,
        server=address,
        ca=certs.ca,
        name=devices[3].name,
        device=f"sim:{devices[3].name}",
        download=False,
    )
    assert again.registration == "already registered"
    assert again.key_fingerprint == result.key_fingerprint

    # kill the SuperLink (and its ServerApp), restart it on the same database
    before = rounds_done(registry_path)
    tree = psutil.Process(link.process.pid).children(recursive=True)
    assert link.serverapp_running()  # in a session of its own, out of the group's reach
    link.kill()  # the SuperLink and its ServerApp die at once
    assert not [p for p in tree if alive(p)]
    link = SuperLink(server_dir, port=port, certs=certs).start()
    processes.append(link)
    submit_run(server_dir, address, certs.ca, run_config)
    last = before[-1].round
    wait_for(
        "a round after the restart",
        lambda: any(r.round > last for r in rounds_done(registry_path)),
        180,
    )
    with Registry(registry_path) as registry:
        assert {n["name"] for n in registry.nodes()} == {d.name for d in devices[:4]}
        after = [r for r in registry.rounds() if r.round > last and r.status == "done"]
        assert after[0].replied >= 3  # the three SuperNodes reconnected by themselves
        assert len({r.run_id for r in registry.rounds()}) == 2

    # the privacy audit over what the real ClientApps sent (their own copies)
    secrets, secret_rows = node_secrets(tasks)
    for state_dir in nodes[:4]:
        sent = read_audit(NodeState(state_dir).audit_dir)
        assert any("shared" in content for _, content in sent), state_dir
        sharing = state_dir in (nodes[0], late)  # a share from any other is a violation
        assert any("schedules" in content for _, content in sent) == sharing, state_dir
        for _, content in sent:
            audit_content(content, secrets, secret_rows, sharing=sharing)
    # no key material and no raw record in any log, the server's or a node's
    keys = [certs.key, *(NodeState(d).key_path for d in nodes[:4])]
    key_lines = [
        line for key in keys for line in key.read_text().splitlines() if not line.startswith("-")
    ]
    logs = [p for p in tmp_path.rglob("*.log") if p.is_file()]
    assert any(p.stat().st_size > 0 for p in logs)
    for log in logs:
        text = log.read_text(errors="replace")
        assert not [line for line in key_lines if line in text], f"key material in {log}"
        assert not [s for s in secrets if s in text], f"a raw record in {log}"
