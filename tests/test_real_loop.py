"""The product loop for real, as `simoe-server demo` drives it: separate processes only.

`simoe-server start` (TLS, node auth), three nodes `simoe-agent enroll` + `submit` +
`run` on simulated GPUs: each daemon tunes its queued work with MetaSchedule and its
expert appears in the registry; a fourth node enrolls and receives those experts; a
daemon killed with SIGKILL in the middle of tuning loses none of the records it had
committed and, restarted, finishes its job.

Slow: every round starts a ClientApp process per node (944 s measured with
`pytest tests/test_real_loop.py` on the shared 2-core machine at load average 20-40).
So the fleet tunes tiny_mlp at 2 trials a task, the killed job tunes 2 of tiny_cnn's 5
tasks (`submit --largest-tasks 2`, which this checks too), and the two daemons the kill
does not concern are stopped once the newcomer is served (rounds then cost one ClientApp).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from agent.client_app import NodeState
from agent.daemon import Queue
from agent.store import Store
from server.demo import Demo, DemoPlan
from server.processes import Background
from server.registry import Registry

pytestmark = pytest.mark.slow


class Quiet:
    def __init__(self) -> None:
        self.events: list[str] = []

    def event(self, text: str) -> None:
        self.events.append(text)

    def status(self, text: str) -> None:
        pass

    def show(self, text: str) -> None:
        pass


def candidate_ids(store_path: Path) -> set[str]:
    if not store_path.exists():
        return set()
    with Store(store_path) as store:
        return store.candidate_ids()


def test_real_loop(tmp_path: Path) -> None:
    plan = DemoPlan(
        gpus=["k80-u1", "t4-cool", "a100-pcie-250w"], cpu=False, new_gpu="a10-ecc-on",
        network="tiny_mlp", fleet_largest_tasks=None, fleet_trials=2, fleet_population=16,
        epochs=1, k_experts=2, timeout_s=900,
    )  # fmt: skip
    demo = Demo(tmp_path, plan, Quiet())
    try:
        demo.start_server()
        demo.bring_up_fleet()
        demo.run_fleet()  # returns once every node tuned and a later round trained them all
        with Registry(demo.registry_path) as registry:
            experts = {e.name: e for e in registry.experts()}
            assert set(experts) == set(plan.gpus)
            assert all(e.num_examples > 0 for e in experts.values())
            assert all(not r.failed for r in registry.rounds() if r.status != "running")

        # a fourth node enrolls: the global model and the experts of similar hardware
        state_dir, _device, delivered = demo.newcomer()
        assert len(delivered) == 2 and set(delivered) <= set(plan.gpus)
        assert set(NodeState(state_dir).load_model().expert_names) >= set(delivered)

        # SIGKILL a daemon in the middle of tuning; restarted, it loses nothing committed
        node = demo.nodes[1]
        for other in (demo.nodes[0], demo.nodes[2]):  # not needed from here on
            assert other.daemon is not None
            other.daemon.stop()
            other.daemon = None
        store_path = node.state_dir / "store.sqlite"
        before_job = candidate_ids(store_path)
        demo.agent(
            ["submit", "tiny_cnn", "--trials", "3", "--cost-model", "xgb", "--population", "16",
             "--largest-tasks", "2", "--state-dir", str(node.state_dir)],
            node.name,
        )  # fmt: skip
        deadline = time.monotonic() + 600
        while len(candidate_ids(store_path)) == len(before_job):  # its first task committed
            assert time.monotonic() < deadline, "the daemon never committed a record"
            assert node.daemon is not None
            node.daemon.check()
            time.sleep(0.5)
        os.kill(node.daemon.pid, signal.SIGKILL)  # the daemon alone: its job and SuperNode
        node.daemon.process.wait(timeout=30)  # (own sessions) live on until it restarts
        committed = candidate_ids(store_path)
        assert len(list((node.state_dir / "queue" / "running").glob("*.json"))) == 1
        node.daemon = Background(
            "restarted daemon",
            "simoe-agent",
            ["run", "--port", str(node.port), "--state-dir", str(node.state_dir)],
            demo.logs / f"{node.name}.restart.log",
        )
        queue = node.state_dir / "queue"
        deadline = time.monotonic() + 600
        while len(list((queue / "done").glob("*.json"))) < 2:  # the first job and this one
            assert time.monotonic() < deadline, "the interrupted job did not finish"
            node.daemon.check()
            assert not list((queue / "failed").glob("*.json"))
            time.sleep(1.0)
        restart_log = (demo.logs / f"{node.name}.restart.log").read_text()
        assert "left by a killed predecessor" in restart_log  # its old SuperNode, job: stopped
        after = candidate_ids(store_path)
        assert committed <= after  # nothing committed before the kill was lost
        assert not list((queue / "running").glob("*.json"))
        assert not list((queue / "pending").glob("*.json"))
        [resumed] = [j for j in Queue(queue).jobs("done") if j.subject == "tiny_cnn"]
        assert resumed.result is not None  # the submitted selection is what the job tuned
        assert len(resumed.result["selection"]["tuned"]) == 2
        assert resumed.result["selection"]["total_tasks"] == 5
    finally:
        demo.stop_all()
