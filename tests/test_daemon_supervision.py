"""The node daemon as an operator meets it (issue 25, items 2, 3 and 8).

One daemon per node (a lock); a broken config stops it at once, and a SuperNode that
keeps failing the same way stops it with the cause on its console and in `status`; each
job's start, end, records and result are in logs/jobs.log and on the console; `status`
says which cost model queued jobs tune with.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cli_helpers import one_line_error, run_main

import agent.enroll as enroll_module
from agent.cli import main as agent_main
from agent.daemon import AgentDaemon, Job, Queue
from agent.node_state import NodeState
from schemas import AgentConfig

AGENT = str(Path(sys.executable).with_name("simoe-agent"))


def enrolled(state: Path) -> NodeState:
    """A node whose config and key files exist (no server: nothing connects here)."""
    node = NodeState(state)
    ca = state / "ca.pem"
    state.mkdir(parents=True, exist_ok=True)
    ca.write_text("not checked here\n")
    node.save_config(AgentConfig(name="n1", device="cpu", server="127.0.0.1:1", ca_cert=ca))
    node.keys_dir.mkdir(parents=True, exist_ok=True)
    node.key_path.write_text("key\n")
    return node


def test_a_second_daemon_on_a_live_node_is_refused_in_one_line(tmp_path: Path) -> None:
    runner = tmp_path / "run_daemon.py"
    runner.write_text(
        "import sys\nfrom pathlib import Path\nfrom agent.daemon import AgentDaemon\n"
        f"d = AgentDaemon(Path({str(tmp_path)!r}), supernode=False, tune=False, poll_s=0.2)\n"
        "d.install_signal_handlers()\nsys.exit(d.run())\n"
    )
    first = subprocess.Popen([sys.executable, str(runner)])
    try:
        status = NodeState(tmp_path).daemon_status_path
        deadline = time.monotonic() + 60
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert json.loads(status.read_text())["state"] == "running"
        second = subprocess.run(
            [AGENT, "run", "--no-tune", "--state-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        one_line_error("simoe-agent", second.returncode, second.stdout, second.stderr)
        assert f"runs already on {tmp_path} (pid {first.pid})" in second.stderr
        assert first.poll() is None  # the live daemon untouched, its status still its own
        assert json.loads(status.read_text())["state"] == "running"
    finally:
        first.terminate()
        assert first.wait(timeout=30) == 0
    # once it has stopped, the next one starts
    assert AgentDaemon(tmp_path, supernode=False, tune=False, drain=False).run is not None
    daemon = AgentDaemon(tmp_path, supernode=False, drain=True)
    assert daemon.run() == 0


def test_a_missing_ca_file_stops_run_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    node = enrolled(tmp_path / "node")
    node.config().ca_cert.unlink()  # type: ignore[union-attr]
    code, out, err = run_main(
        agent_main, "simoe-agent", ["run", "--state-dir", str(node.dir)], monkeypatch, capsys
    )
    assert "the federation's CA certificate is missing" in one_line_error(
        "simoe-agent", code, out, err
    )


def test_repeated_identical_supernode_failures_stop_the_daemon_with_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    node = enrolled(tmp_path / "node")
    failing = [sys.executable, "-c", "import sys; print('connection refused'); sys.exit(305)"]
    monkeypatch.setattr(enroll_module, "supernode_command", lambda *a, **k: failing)
    daemon = AgentDaemon(node.dir, poll_s=0.05, tune=False, max_restart_backoff_s=0.05)
    started = time.monotonic()
    assert daemon.run() == 1  # it gave up, instead of restarting forever
    assert time.monotonic() - started < 30
    assert "could not connect to the SuperLink" in (daemon.failure or "")
    assert "5 times in a row" in (daemon.failure or "")
    status = json.loads(node.daemon_status_path.read_text())
    assert status["state"] == "failed" and status["error"] == daemon.failure
    code, out, err = run_main(
        agent_main, "simoe-agent", ["status", "--state-dir", str(node.dir)], monkeypatch, capsys
    )
    assert code == 0 and "daemon stopped because" in out and "SuperLink" in out


FAKE_JOB = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    path = Path(sys.argv[2])
    job = json.loads(path.read_text())
    if job["subject"].startswith("matmul:13"):
        print("tuning failed: no schedule"); sys.exit(1)
    job["result"] = {"trials": 5, "tasks": [{"trials": 5, "best_latency_s": 2e-5}]}
    path.write_text(json.dumps(job))
    """
)


class Lines(logging.Handler):
    """What the daemon logs (its console): the test run has no pytest log capture."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_each_job_start_end_records_and_result_are_logged(tmp_path: Path) -> None:
    script = tmp_path / "fake_job.py"
    script.write_text(FAKE_JOB)
    queue = Queue(NodeState(tmp_path).queue_dir)
    good = queue.put(Job(kind="workload", subject="matmul:8,8,8", trials=5))
    queue.put(Job(kind="workload", subject="matmul:13,8,8", trials=2))
    daemon = AgentDaemon(
        tmp_path, supernode=False, poll_s=0.1, job_command=[sys.executable, str(script)],
        drain=True,
    )  # fmt: skip
    console, logger = Lines(), logging.getLogger("simoe.agent.daemon")
    logger.addHandler(console)
    logger.setLevel(logging.INFO)
    try:
        assert daemon.run() == 0
    finally:
        logger.removeHandler(console)
    log = (NodeState(tmp_path).logs_dir / "jobs.log").read_text()
    good_id = good.name.split("-")[-1].removesuffix(".json")
    assert f"job {good_id}: workload matmul:8,8,8: started (5 trials per task" in log
    assert "done in" in log and "5 records, best 20.0 us" in log
    assert "matmul:13,8,8: failed after" in log and "no schedule" in log
    text = "\n".join(console.lines)
    assert "started" in text and "5 records" in text and "failed after" in text
    [failed] = queue.jobs("failed")
    assert failed.error == "tuning failed: no schedule"  # the job's own line, not ours


def test_status_says_which_cost_model_queued_jobs_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    node = NodeState(tmp_path)
    node.save_config(AgentConfig(cost_model="xgb"))
    node.model_path.parent.mkdir(parents=True, exist_ok=True)
    node.model_path.write_bytes(b"a federated model")
    code, out, err = run_main(
        agent_main, "simoe-agent", ["status", "--state-dir", str(tmp_path), "--json"],
        monkeypatch, capsys,
    )  # fmt: skip
    assert code == 0 and json.loads(out)["queued_jobs_cost_model"] == "simoe"
    code, out, err = run_main(
        agent_main, "simoe-agent", ["status", "--state-dir", str(tmp_path)], monkeypatch, capsys
    )
    assert "simoe for queued jobs" in out and "xgb for `tune`" in out
