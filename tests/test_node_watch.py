"""`simoe-agent status --watch`: the node's own live view (issue 25), read-only.

A node's state directory made by hand (config, a store with records, queued, running,
done and failed jobs, daemon.json, federation state), shown once; then the real command in
a real terminal (tmux), which must redraw in place as the node's jobs move on.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cli_helpers import one_line_error, run_main

from agent.cli import main as agent_main
from agent.daemon import Job
from agent.node_state import NodeState
from agent.store import Store
from schemas import AgentConfig, TuningRecord
from schemas.messages import NodeFederationState

AGENT = str(Path(sys.executable).with_name("simoe-agent"))


def make_node(root: Path) -> NodeState:
    node = NodeState(root)
    node.dir.mkdir(parents=True)
    node.save_config(
        AgentConfig(name="t4-01", device="sim:t4", server="127.0.0.1:9093", cost_model="xgb")
    )
    with Store(node.store_path) as store:
        store.add_workload("w1", "matmul", "{}")
        store.add_records(
            [
                TuningRecord(
                    workload_key="w1", task_name="matmul", trace=[["Sample", i]],
                    run_secs=[1e-5 * (i + 1)], target={"kind": "cuda"}, device="sim:t4",
                    simulated=True,
                )
                for i in range(7)
            ]
        )  # fmt: skip
    queue = node.queue_dir
    done = Job(kind="network", subject="bert_layer", trials=16)
    done.result = {"tasks": [{"trials": 7, "best_latency_s": 2.5e-5}]}
    failed = Job(kind="workload", subject="matmul:64,64,64", trials=4, error="no GPU left")
    pending = Job(kind="network", subject="resnet50", trials=32)
    for state, job in (("done", done), ("failed", failed), ("pending", pending)):
        (queue / state).mkdir(parents=True, exist_ok=True)
        (queue / state / job.filename).write_text(job.model_dump_json())
    os.utime(queue / "failed" / failed.filename, (time.time() - 600, time.time() - 600))
    node.daemon_status_path.write_text(
        json.dumps(
            {"state": "idle", "pid": os.getpid(), "children": [], "error": None,
             "updated_at": datetime.now(timezone.utc).isoformat()}
        )
    )  # fmt: skip
    node.federation_dir.mkdir(parents=True, exist_ok=True)
    node.save_federation_state(
        NodeFederationState(global_version=4, last_round=6, rounds_trained=3, experts=["v100-a"])
    )
    return node


def snapshot(root: Path) -> dict[str, str]:
    """Every file's hash, but SQLite's -wal/-shm side files (a reader may add them)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


def test_status_once_shows_the_node_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    node = make_node(tmp_path / "node")
    before = snapshot(node.dir)
    monkeypatch.setenv("COLUMNS", "160")
    code, out, err = run_main(
        agent_main, "simoe-agent", ["status", "--watch", "--once", "--state-dir", str(node.dir)],
        monkeypatch, capsys,
    )  # fmt: skip
    assert code == 0, err
    for words in ("SiMoE node t4-01", "sim:t4", "127.0.0.1:9093", "7 records",
                  "1 pending", "1 done", "1 failed", "next", "network resnet50",
                  "last job", "network bert_layer", "done", "7 records, best 25.0 us",
                  f"idle, pid {os.getpid()}", "last round 6", "global model v4",
                  "trained in 3 rounds", "v100-a"):  # fmt: skip
        assert words in out, (words, out)
    assert "no GPU left" not in out  # the failed job is older: the done one is the last
    assert snapshot(node.dir) == before  # read-only: not one byte of the node changed
    assert not (node.dir / "queue" / "running").exists()  # no folder made either


def test_a_daemon_that_is_gone_is_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    node = make_node(tmp_path / "node")
    status = json.loads(node.daemon_status_path.read_text())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    node.daemon_status_path.write_text(json.dumps({**status, "state": "running", "pid": gone.pid}))
    monkeypatch.setenv("COLUMNS", "160")
    code, out, err = run_main(
        agent_main, "simoe-agent", ["status", "--once", "--state-dir", str(node.dir)],
        monkeypatch, capsys,
    )  # fmt: skip
    assert code == 0 and "not running (last said running" in out, out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--watch", "--json"], "--json"),
        (["--watch", "--interval", "0"], "--interval"),
        (["--watch", "--state-dir", "/nonexistent/node"], "no node here"),
    ],
)
def test_bad_watch_options_are_one_line(
    args: list[str], words: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    code, out, err = run_main(agent_main, "simoe-agent", ["status", *args], monkeypatch, capsys)
    assert words in one_line_error("simoe-agent", code, out, err)


def pane(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal)")
def test_status_watch_redraws_in_place_in_a_real_terminal(tmp_path: Path) -> None:
    node = make_node(tmp_path / "node")
    session = f"simoe-node-watch-{tmp_path.name}"[:40]
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "40",
         AGENT, "status", "--watch", "--state-dir", str(node.dir), "--interval", "0.5"],
        check=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "1 pending" not in pane(session) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "1 pending" in pane(session), pane(session)
        # the daemon takes the pending job: it is tuning now
        pending = next((node.queue_dir / "pending").glob("*.json"))
        (node.queue_dir / "running").mkdir()
        pending.rename(node.queue_dir / "running" / pending.name)
        deadline = time.monotonic() + 30
        while "tuning now" not in pane(session) and time.monotonic() < deadline:
            time.sleep(0.5)
        screen = pane(session)
        assert "tuning now" in screen and "0 pending, 1 running" in screen, screen
        assert "1 pending" not in screen, screen  # redrawn, not appended
        assert screen.count("SiMoE node t4-01") == 1, screen  # one frame, in place
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
