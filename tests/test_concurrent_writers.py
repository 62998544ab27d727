"""Concurrent writers on one node's store: two `simoe-agent tune` processes and the daemon.

Two real `simoe-agent tune` processes and a daemon tuning job (its own child process)
write to one store at the same time, on tiny simulated workloads. Every record each
of them reports must be in the store afterwards, none twice, the file must pass
`integrity_check`, and no process may print a traceback or "database is locked"
(the store waits for the lock: WAL, busy_timeout, BEGIN IMMEDIATE).
A second test holds the write lock until a tune asks for it (its `BEGIN IMMEDIATE`,
seen through SQLite's statement trace): the lock is contended, and the tune waits for
it, not fails.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.daemon import AgentDaemon, Job, Queue
from agent.node_state import NodeState
from schemas import AgentConfig

AGENT = str(Path(sys.executable).with_name("simoe-agent"))
# population 32: with 8, MetaSchedule now and then finds no candidate at all (0 trials)
TINY = ["--trials", "4", "--population", "32", "--no-baseline", "--cost-model", "random"]


def tune(state_dir: Path, workload: str, seed: int) -> subprocess.Popen[str]:
    command = [AGENT, "tune", "-w", workload, *TINY, "--seed", str(seed), "--json"]
    return subprocess.Popen(
        [*command, "--state-dir", str(state_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def counts(store: Path) -> dict[str, int]:
    conn = sqlite3.connect(store, timeout=30)
    try:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("select workload_key, count(*) from records group by workload_key")
        return dict(rows.fetchall())
    finally:
        conn.close()


def finish(process: subprocess.Popen[str]) -> dict:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert "Traceback" not in err and "locked" not in err
    return json.loads(out)


@pytest.fixture()
def node(tmp_path: Path) -> Path:
    NodeState(tmp_path).save_config(AgentConfig(name="n1", device="sim:t4", cost_model="random"))
    return tmp_path


@pytest.mark.slow  # three tuners on two busy cores: 30-60 s
def test_two_tune_processes_and_the_daemon_at_once(node: Path) -> None:
    store = NodeState(node).store_path
    queue = Queue(NodeState(node).queue_dir)
    queue.put(
        Job(
            kind="workload", subject="matmul:32,64,64", trials=4, cost_model="random", population=16
        )
    )
    daemon = AgentDaemon(node, supernode=False, poll_s=0.2)
    thread = threading.Thread(target=daemon.run)
    # all three start against a store that does not exist yet: creating it races too
    first, second = tune(node, "matmul:64,64,64", 1), tune(node, "matmul:64,32,64", 2)
    thread.start()
    try:
        results = [finish(first), finish(second)]
        end = time.monotonic() + 300
        while not queue.jobs("done") and not queue.jobs("failed") and time.monotonic() < end:
            time.sleep(0.5)
    finally:
        daemon.stop.set()
        thread.join(timeout=60)
    assert not queue.jobs("failed"), queue.jobs("failed")[0].error
    (job,) = queue.jobs("done")
    results.append(job.result)
    jobs_log = (NodeState(node).logs_dir / "jobs.log").read_text()
    assert "Traceback" not in jobs_log and "locked" not in jobs_log
    reported = {t["workload_key"]: t["trials"] for r in results for t in r["tasks"]}
    assert len(reported) == 3 and sum(n > 0 for n in reported.values()) >= 2  # they did write
    stored = counts(store)
    # every reported record is there, none twice (the daemon job's result may name its
    # workload by another key than its records carry: compare the totals for it)
    assert sum(stored.values()) == sum(reported.values())
    for result in results[:2]:
        (task,) = result["tasks"]
        assert stored.get(task["workload_key"], 0) == task["trials"]


# `simoe-agent tune` with every SQLite connection traced: each BEGIN IMMEDIATE (a write
# transaction asking for the lock) is appended to the file named first, when it starts.
TRACED_AGENT = """
import sqlite3, sys
from pathlib import Path

marker = Path(sys.argv.pop(1))
connect = sqlite3.connect


def trace(sql):
    if sql.lstrip().upper().startswith("BEGIN IMMEDIATE"):
        with marker.open("a") as handle:
            handle.write(sql.strip() + "\\n")


def traced(*args, **kwargs):
    conn = connect(*args, **kwargs)
    conn.set_trace_callback(trace)
    return conn


sqlite3.connect = traced
sys.argv[0] = "simoe-agent"
from agent.cli import main

main()
"""


@pytest.mark.slow  # a tune that first waits for the lock: about 15 s
def test_a_tune_waits_for_a_held_write_lock(node: Path) -> None:
    store, marker = node / "store.sqlite", node / "begin-immediate.log"
    holder = sqlite3.connect(store, timeout=30, isolation_level=None)
    holder.execute("pragma journal_mode=wal")
    holder.execute("begin immediate")  # what a long writer does: the lock is taken
    command = ["tune", "-w", "matmul:64,64,64", *TINY, "--seed", "3", "--json"]
    process = subprocess.Popen(
        [sys.executable, "-c", TRACED_AGENT, str(marker), *command, "--state-dir", str(node)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:  # no guess at how long the tune takes to start: wait until it asks for the lock
        deadline = time.monotonic() + 120
        while not (marker.exists() and marker.read_text()):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the tune never asked for the write lock"
            time.sleep(0.05)
        assert process.poll() is None  # it asked while the lock was held, and it waits
    finally:
        holder.execute("commit")
        holder.close()
    (task,) = finish(process)["tasks"]
    assert task["trials"] > 0 and counts(store) == {task["workload_key"]: task["trials"]}
