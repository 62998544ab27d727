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
from agent.node_state import NodeState
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
    queue = Queue(NodeState(tmp_path).queue_dir)
    queue.put(Job(kind="workload", subject="matmul:8,8,8", trials=2))
    queue.put(Job(kind="workload", subject="matmul:13,8,8", trials=2))
    daemon = AgentDaemon(
        tmp_path, supernode=False, poll_s=0.1, job_command=fake_command(tmp_path), drain=True
    )
    assert daemon.run() == 0  # drained: returns once the queue is empty
    [done] = queue.jobs("done")
    [failed] = queue.jobs("failed")
    assert done.result == {"best_latency_s": 1e-3} and done.attempts == 1
    assert "no schedule" in (failed.error or "")
    status = json.loads(NodeState(tmp_path).daemon_status_path.read_text())
    assert status["state"] == "stopped" and status["done"] == 1 and status["failed"] == 1


def test_sigterm_stops_promptly_and_the_job_resumes(tmp_path: Path) -> None:
    Queue(NodeState(tmp_path).queue_dir).put(Job(kind="workload", subject="matmul:8,8,8", trials=2))
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
    running = NodeState(tmp_path).queue_dir / "running"
    deadline = time.monotonic() + 60
    while not list(running.glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(running.glob("*.json")), "the job never started"
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert time.monotonic() - started < 20  # did not wait for the 60 s job
    queue = Queue(NodeState(tmp_path).queue_dir)
    [pending] = queue.jobs("pending")  # back in the queue, attempt counted
    assert pending.attempts == 1 and not queue.jobs("running")
    # restart: it resumes and finishes the job
    daemon = AgentDaemon(tmp_path, supernode=False, poll_s=0.1, job_command=command, drain=True)
    assert daemon.run() == 0
    assert [j.id for j in queue.jobs("done")] == [pending.id]


def test_drain_stops_once_the_queue_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`--drain` on an empty queue stops at once; `run --drain --no-tune` exits 2, one line."""
    from agent.cli import main

    daemon = AgentDaemon(tmp_path, supernode=False, poll_s=30.0, drain=True)
    started = time.monotonic()
    assert daemon.run() == 0
    assert time.monotonic() - started < 10  # did not wait a 30 s poll for more work
    assert json.loads(NodeState(tmp_path).daemon_status_path.read_text())["state"] == "stopped"
    argv = ["simoe-agent", "run", "--drain", "--no-tune", "--state-dir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and "--no-tune" in err[0], err


def test_a_job_searches_with_the_seed_and_population_it_was_submitted_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`submit --seed/--population` (as `tune`'s) are carried in the job to its search; a
    bad value is one line and queues nothing."""
    from cli_helpers import one_line_error, run_main

    import agent.tuner
    from agent.cli import main
    from agent.daemon import run_job
    from schemas import AgentConfig
    from schemas.tuning import TuneResult

    node = NodeState(tmp_path)
    node.save_config(AgentConfig(name="n1", device="sim:t4", cost_model="random"))
    state = ["--state-dir", str(tmp_path)]
    for bad, option in ((["--population", "1"], "--population"), (["--seed", "-1"], "--seed")):
        ran = run_main(
            main, "simoe-agent", ["submit", "matmul:8,8,8", *bad, *state], monkeypatch, capsys
        )
        assert option in one_line_error("simoe-agent", *ran)
    assert not Queue(node.queue_dir).jobs("pending")
    args = ["submit", "matmul:8,8,8", "--trials", "2", "--seed", "7", "--population", "16"]
    assert run_main(main, "simoe-agent", [*args, *state], monkeypatch, capsys)[0] == 0
    [job] = Queue(node.queue_dir).jobs("pending")
    assert (job.seed, job.population) == (7, 16)

    searched: dict = {}

    def fake_tune(workload, device, store, **options) -> TuneResult:  # noqa: ANN001
        searched.update(options)
        return TuneResult(
            subject=str(workload), kind="workload", device=device.name, simulated=True,
            cost_model=options["cost_model"], trials=0, search_wall_s=0.0, tasks=[],
        )  # fmt: skip

    monkeypatch.setattr(agent.tuner, "tune_workload", fake_tune)
    assert run_job(tmp_path, node.queue_dir / "pending" / job.filename) == 0
    assert (searched["seed"], searched["population"], searched["trials"]) == (7, 16, 2)
