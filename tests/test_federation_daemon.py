"""The agent daemon: queue, jobs in child processes, SIGTERM, resume after a stop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.daemon import AgentDaemon, Job, Queue, make_job
from schemas import BadInputError

# A stand-in for the tuner: sleeps SECONDS (from the env), then writes a result.
FAKE_JOB = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    path = Path(sys.argv[2])
    time.sleep(float(os.environ.get("FAKE_JOB_SECONDS", "0")))
    job = json.loads(path.read_text())
    if job["subject"].startswith("matmul:13"):
        print("tuning failed: no schedule"); sys.exit(1)
    job["result"] = {"best_latency_s": 1e-3}
    path.write_text(json.dumps(job))
    """
)


def fake_command(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_job.py"
    script.write_text(FAKE_JOB)
    return [sys.executable, str(script)]


def test_make_job_parses_subjects() -> None:
    assert make_job("matmul:64,64,64", 8).kind == "workload"
    assert make_job("tiny_cnn", 8).kind == "network"
    with pytest.raises(BadInputError, match="network"):
        make_job("matmul:64", 8)


def test_daemon_runs_queue_and_records_failures(tmp_path: Path) -> None:
    queue = Queue(tmp_path)
    queue.put(Job(kind="workload", subject="matmul:8,8,8", trials=2))
    queue.put(Job(kind="workload", subject="matmul:13,8,8", trials=2))
    daemon = AgentDaemon(tmp_path, supernode=False, poll_s=0.1, job_command=fake_command(tmp_path))
    # stop once the queue is empty
    original = daemon._run_next_job

    def run_then_stop() -> bool:
        ran = original()
        if not ran:
            daemon.stop.set()
        return ran

    daemon._run_next_job = run_then_stop  # type: ignore[method-assign]
    assert daemon.run() == 0
    [done] = queue.jobs("done")
    [failed] = queue.jobs("failed")
    assert done.result == {"best_latency_s": 1e-3} and done.attempts == 1
    assert "no schedule" in (failed.error or "")
    status = json.loads((tmp_path / "daemon.json").read_text())
    assert status["state"] == "stopped" and status["done"] == 1 and status["failed"] == 1


def test_sigterm_stops_promptly_and_the_job_resumes(tmp_path: Path) -> None:
    Queue(tmp_path).put(Job(kind="workload", subject="matmul:8,8,8", trials=2))
    command = fake_command(tmp_path)
    runner = tmp_path / "run_daemon.py"
    runner.write_text(
        "import sys\nfrom pathlib import Path\nfrom agent.daemon import AgentDaemon\n"
        f"d = AgentDaemon(Path({str(tmp_path)!r}), supernode=False, poll_s=0.1, "
        f"job_command={command!r})\n"
        "d.install_signal_handlers()\nsys.exit(d.run())\n"
    )
    env = {"FAKE_JOB_SECONDS": "60", "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen([sys.executable, str(runner)], env=env)
    running = tmp_path / "queue" / "running"
    deadline = time.monotonic() + 60
    while not list(running.glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(running.glob("*.json")), "the job never started"
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert time.monotonic() - started < 20  # did not wait for the 60 s job
    queue = Queue(tmp_path)
    [pending] = queue.jobs("pending")  # back in the queue, attempt counted
    assert pending.attempts == 1 and not queue.jobs("running")
    # restart: it resumes and finishes the job
    daemon = AgentDaemon(tmp_path, supernode=False, poll_s=0.1, job_command=command)
    daemon._run_next_job() and daemon.stop.set()
    assert [j.id for j in queue.jobs("done")] == [pending.id]
