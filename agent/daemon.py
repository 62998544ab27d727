"""`simoe-agent run`: the node's long-running daemon.

It keeps the node's SuperNode up (a `flower-supernode` subprocess with the node's key;
restarted with backoff if it dies), and between rounds tunes the work queued with
`simoe-agent submit` using the current federated model. Each tuning job runs in its
own child process, so SIGTERM stops the daemon promptly: the SuperNode and a running
job are terminated, the job goes back to the queue, and everything resumes at the next
start. Measurements are safe in the store (SQLite WAL, one transaction per batch).

Queue layout (under NodeState.queue_dir):
  queue/pending/<stamp>-<id>.json   waiting (oldest first)
  queue/running/<...>.json          being tuned (moved back to pending on restart)
  queue/done/<...>.json             finished, with the result
  queue/failed/<...>.json           failed, with the one-line error
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.node_state import NodeState, write_atomic
from schemas import AgentConfig, BadInputError
from schemas.children import Child, child, hold_lock, stop_orphans
from schemas.cli import Population, Seed, Trials

log = logging.getLogger("simoe.agent.daemon")
STABLE_S = 60.0  # a SuperNode up this long before it exits starts a new count of failures
QUEUE_STATES = ("pending", "running", "done", "failed")


class Job(BaseModel):
    """One piece of queued work: an operator spec or a network to tune."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    kind: Literal["workload", "network"]
    subject: str
    trials: Trials
    submitted_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    attempts: int = 0
    cost_model: str | None = None
    # a network's tasks to tune (`submit --largest-tasks/--flops-share`, as `tune`); None: all
    largest_tasks: int | None = Field(default=None, gt=0)
    flops_share: float | None = Field(default=None, gt=0, le=1)
    # how to search (`submit --seed/--population`, as `tune`); population None: the default
    seed: Seed = 0
    population: Population | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def filename(self) -> str:
        return f"{self.submitted_at.strftime('%Y%m%dT%H%M%S%f')}-{self.id}.json"


class Queue:
    """Jobs as files: a crash at any point leaves each job in exactly one state."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for state in QUEUE_STATES:
            (self.root / state).mkdir(parents=True, exist_ok=True)

    def put(self, job: Job, state: str = "pending") -> Path:
        path = self.root / state / job.filename
        tmp = path.with_suffix(".tmp")
        tmp.write_text(job.model_dump_json(indent=2))
        tmp.replace(path)
        return path

    def move(self, job: Job, src: str, dst: str) -> Path:
        target = self.put(job, dst)
        (self.root / src / job.filename).unlink(missing_ok=True)
        return target

    def jobs(self, state: str) -> list[Job]:
        return [
            Job.model_validate_json(p.read_text())
            for p in sorted((self.root / state).glob("*.json"))
        ]

    def recover(self) -> int:
        """Jobs left running by a crash or a stop go back to pending."""
        jobs = self.jobs("running")
        for job in jobs:
            self.move(job, "running", "pending")
        return len(jobs)

    def next_pending(self) -> Job | None:
        pending = self.jobs("pending")
        return pending[0] if pending else None


def make_job(subject: str, trials: int) -> Job:
    """A job for `subject`: an operator spec (matmul:..., te:...) or a network / .onnx file."""
    from agent.networks import NETWORK_SUITE
    from agent.workloads import parse_workload

    if subject in NETWORK_SUITE or subject.lower().endswith(".onnx"):
        if subject.lower().endswith(".onnx") and not Path(subject).is_file():
            raise BadInputError(f"{subject}: no such model file")
        path = str(Path(subject).resolve()) if subject.lower().endswith(".onnx") else subject
        return Job(kind="network", subject=path, trials=trials)
    try:
        parse_workload(subject)
    except BadInputError as exc:
        known = ", ".join(NETWORK_SUITE)
        raise BadInputError(f"{exc} (or give a network: {known}, or an .onnx file)") from None
    return Job(kind="workload", subject=subject, trials=trials)


def cost_model_for(node: NodeState, config: AgentConfig) -> str:
    """'simoe' once the node holds a federated model, else the config's."""
    return "simoe" if node.has_model() else config.cost_model


def describe_result(result: dict[str, Any] | None) -> str:
    """A finished job's result in a few words: records measured, the best latency found."""
    if not result:
        return "no result recorded"
    tasks = result.get("tasks") or []
    records = sum(int(t.get("trials") or 0) for t in tasks) or result.get("trials")
    parts = [f"{records} records" if records is not None else "records: unknown"]
    network = result.get("network") or {}
    if network.get("latency_s"):
        parts.append(f"network {network['latency_s'] * 1e3:.3f} ms")
    best = [t["best_latency_s"] for t in tasks if t.get("best_latency_s")]
    if best and not network.get("latency_s"):
        parts.append(f"best {min(best) * 1e6:.1f} us")
    if result.get("best_latency_s"):
        parts.append(f"best {result['best_latency_s'] * 1e6:.1f} us")
    return ", ".join(parts)


def run_job(state_dir: Path, job_path: Path) -> int:
    """Child process: tune one job into the store; the result goes back into the job file."""
    from agent.devices import get_device
    from agent.search_start import node_shared_seeds
    from agent.store_datasets import cache_missing_features
    from agent.task_selection import TaskChoice
    from agent.tuner import tune_network, tune_workload
    from agent.workloads import parse_workload

    job = Job.model_validate_json(job_path.read_text())
    node = NodeState(state_dir)
    config = node.config()
    device = get_device(config.device)
    cost_model = job.cost_model or cost_model_for(node, config)
    with node.open_store() as store:
        store.check_writable(job.trials)  # a full disk fails the job now, not after its search
        if job.kind == "workload":
            result = tune_workload(
                parse_workload(job.subject),
                device,
                store,
                trials=job.trials,
                cost_model=cost_model,
                seed=job.seed,
                population=job.population,
                node=node,
                shared=node_shared_seeds(node),  # schedule sharing, when on
            )
        else:
            result = tune_network(
                job.subject,
                device,
                store,
                trials_per_task=job.trials,
                cost_model=cost_model,
                seed=job.seed,
                population=job.population,
                node=node,
                choice=TaskChoice(largest=job.largest_tasks, flops_share=job.flops_share),
                shared=node_shared_seeds(node),
            )
        # TVM is loaded here already: featurize the new records now, so that the next
        # round's ClientApp (a fresh process per message) need not import TVM to do it
        cache_missing_features(store, device.name)
    job.result = json.loads(result.model_dump_json())
    job.cost_model = cost_model
    job_path.write_text(job.model_dump_json(indent=2))
    return 0


class AgentDaemon:
    """Keeps the SuperNode up and works through the queue until told to stop."""

    def __init__(
        self,
        state_dir: Path,
        *,
        port: int = 9094,
        poll_s: float = 2.0,
        supernode: bool = True,
        tune: bool = True,
        max_restart_backoff_s: float = 60.0,
        job_command: list[str] | None = None,
        drain: bool = False,
        max_same_failures: int = 5,
    ) -> None:
        """`drain`: work through the queue, then stop (instead of waiting for more work).

        `max_same_failures`: the SuperNode exiting this many times in a row for the same
        reason stops the daemon with that reason (a broken config never mends itself)."""
        if drain and not tune:
            raise BadInputError("--drain works through the queue; it cannot go with --no-tune")
        self.node = NodeState(state_dir)
        self.state_dir = self.node.dir
        self.drain = drain
        self.port = port
        self.poll_s = poll_s
        self.use_supernode = supernode
        self.tune = tune
        self.max_backoff = max_restart_backoff_s
        # how a job is run: this + [STATE_DIR, JOB_FILE] (tests swap in a stand-in)
        self.job_command = job_command or [sys.executable, "-m", "agent.daemon", "job"]
        self.queue = Queue(self.node.queue_dir)
        self.stop = threading.Event()
        self.supernode: subprocess.Popen[bytes] | None = None
        self.job_process: subprocess.Popen[bytes] | None = None
        self.logs = self.node.logs_dir
        self.logs.mkdir(parents=True, exist_ok=True)
        self._backoff = min(1.0, max_restart_backoff_s)
        self._next_start = 0.0
        self._started_at = 0.0  # when the current SuperNode started (monotonic)
        self._cause: str | None = None  # why the SuperNode exited last
        self._same_failures = 0  # how many times in a row it exited for that reason
        self.max_same_failures = max_same_failures
        self.failure: str | None = None  # why the daemon gave up, if it did
        self._lock: int | None = None

    # -- the SuperNode ------------------------------------------------------------------

    def _start_supernode(self) -> None:
        from agent.enroll import supernode_command
        from schemas.protocol import flower_env

        with open(self.logs / "supernode.log", "ab") as out:
            self.supernode = subprocess.Popen(
                supernode_command(self.state_dir, self.port),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=flower_env(self.node.flwr_home),
                start_new_session=True,  # its own group: we stop it and its children together
            )
        self._started_at = time.monotonic()
        log.info("SuperNode started (pid %d)", self.supernode.pid)

    def _keep_supernode(self) -> None:
        if not self.use_supernode:
            return
        if self.supernode is not None and self.supernode.poll() is None:
            self._backoff = min(1.0, self.max_backoff)
            return
        if self.supernode is not None:
            from agent.enroll import supernode_failure

            log_path = self.logs / "supernode.log"
            cause = supernode_failure(self.supernode.returncode, log_path)
            stable = time.monotonic() - self._started_at > STABLE_S
            same = cause == self._cause and not stable
            self._cause, self._same_failures = cause, (self._same_failures + 1 if same else 1)
            self.supernode = None
            if self._same_failures >= self.max_same_failures:
                self.failure = f"{cause} ({self._same_failures} times in a row); see {log_path}"
                log.error("giving up: %s", self.failure)
                self.stop.set()
                return
            log.warning("%s; restarting", cause)
            self._next_start = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, self.max_backoff)
        if time.monotonic() >= self._next_start:
            self._start_supernode()

    @staticmethod
    def _terminate(process: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> None:
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    # -- tuning jobs --------------------------------------------------------------------

    def job_log(self, text: str, *, error: bool = False) -> None:
        """One line about a job: on the console and in logs/jobs.log (with the time)."""
        (log.error if error else log.info)("%s", text)
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        with open(self.logs / "jobs.log", "a") as out:
            out.write(f"{stamp} simoe-agent run: {text}\n")

    def run_next_job(self) -> bool:
        """Tune the oldest pending job in a child process; False when there is none."""
        job = self.queue.next_pending()
        if job is None:
            return False
        job.attempts += 1
        path = self.queue.move(job, "pending", "running")
        what = f"job {job.id}: {job.kind} {job.subject}"
        self.job_log(
            f"{what}: started ({job.trials} trials per task, attempt {job.attempts}, "
            f"cost model {job.cost_model or cost_model_for(self.node, self.node.config())}, "
            f"seed {job.seed}, population {job.population or 'default'})"
        )
        started = time.monotonic()
        log_path = self.logs / "jobs.log"
        with open(log_path, "ab") as out:
            offset = out.tell()  # where this job's own output starts
            self.job_process = subprocess.Popen(
                [*self.job_command, str(self.state_dir), str(path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.write_status("running")  # its pid: a restart after a SIGKILL stops it
        while self.job_process.poll() is None:
            if self.stop.wait(0.5):
                self._terminate(self.job_process)
                self.queue.move(job, "running", "pending")  # resumes at the next start
                self.job_log(f"{what}: stopped with the daemon; back in the queue")
                return True
            self._keep_supernode()
        code = self.job_process.returncode
        self.job_process = None
        job = Job.model_validate_json(path.read_text())
        took = f"{time.monotonic() - started:.0f} s"
        if code == 0:
            self.queue.move(job, "running", "done")
            self.job_log(f"{what}: done in {took}, {describe_result(job.result)}")
        else:
            with open(log_path, "rb") as handle:
                handle.seek(offset)
                tail = handle.read().decode(errors="replace").strip().splitlines()
            job.error = tail[-1] if tail else f"exit code {code}"
            self.queue.move(job, "running", "failed")
            self.job_log(f"{what}: failed after {took}: {job.error}", error=True)
        return True

    # -- the loop -----------------------------------------------------------------------

    def write_status(self, state: str) -> None:
        status = {
            "state": state,
            "pid": os.getpid(),
            "supernode_pid": self.supernode.pid if self.supernode else None,
            "job_pid": self.job_process.pid if self.job_process else None,
            "children": [
                c.model_dump()
                for c in (
                    child("supernode", self.supernode.pid if self.supernode else None),
                    child("job", self.job_process.pid if self.job_process else None),
                )
                if c is not None
            ],
            "updated_at": datetime.now(timezone.utc).isoformat(),
            "error": self.failure,
            "pending": len(self.queue.jobs("pending")),
            "done": len(self.queue.jobs("done")),
            "failed": len(self.queue.jobs("failed")),
        }
        write_atomic(self.node.daemon_status_path, json.dumps(status, indent=2))

    def install_signal_handlers(self) -> None:
        def _stop(signum: int, _frame: object) -> None:
            log.info("signal %d: stopping", signum)
            self.stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)

    def reap_orphans(self) -> list[int]:
        """Stop what a daemon killed outright (SIGKILL, OOM) left running.

        Its SuperNode and job run in their own sessions, so they outlive it: the old
        SuperNode holds the port, the old job writes the store beside the resumed one.
        `daemon.json` records them with their start times (`schemas.children`, as the
        server records its SuperLink); a pid reused since is left alone, and in a file
        from before start times were kept only processes whose command line names this
        state directory are touched. Returns the pids stopped.
        """
        try:
            previous = json.loads(self.node.daemon_status_path.read_text())
        except (OSError, ValueError):
            return []
        records = [Child.model_validate(c) for c in previous.get("children") or []]
        if not records:  # written before the children were recorded
            for key in ("supernode_pid", "job_pid"):
                if isinstance(previous.get(key), int):
                    records.append(Child(role=key[:-4], pid=previous[key]))
        names = {str(self.state_dir), str(self.state_dir.resolve())}
        return stop_orphans(records, markers=names)

    def check_enrolled(self) -> None:
        """One line, at once, if the SuperNode cannot start: no enrolment, a missing file."""
        from agent.enroll import supernode_command

        supernode_command(self.state_dir, self.port)  # not enrolled: BadInputError
        config = self.node.config()
        files = ((config.ca_cert, "the federation's CA certificate"), (self.node.key_path,
                 "the node key"))  # fmt: skip
        for path, what in files:
            if path is None or not Path(path).is_file():
                raise BadInputError(f"{path}: {what} is missing; enroll this node again")

    def run(self) -> int:
        """Run until stopped (or drained); 1 if it gave up on its SuperNode (`failure`)."""
        # one daemon per node: a second would take the live one's SuperNode for an orphan
        self._lock = hold_lock(self.state_dir / "daemon.lock", "a `simoe-agent run`")
        try:
            return self._run()
        finally:
            os.close(self._lock)
            self._lock = None

    def _run(self) -> int:
        if self.use_supernode:
            self.check_enrolled()
        self.reap_orphans()
        recovered = self.queue.recover()
        if recovered:
            log.info("%d interrupted job(s) back in the queue", recovered)
        self.write_status("running")
        try:
            while not self.stop.is_set():
                self._keep_supernode()
                if not (self.tune and self.run_next_job()):
                    if self.drain:
                        break  # the queue is empty: drained
                    self.stop.wait(self.poll_s)
                self.write_status("running")
        finally:
            self._terminate(self.job_process)
            self._terminate(self.supernode)
            self.write_status("failed" if self.failure else "stopped")
        return 1 if self.failure else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m agent.daemon job STATE_DIR JOB_FILE`: the child that runs one job."""
    from schemas.errors import run_cli
    from schemas.protocol import prepare_flower_env
    from simoe_model import tvm_compat

    prepare_flower_env()
    tvm_compat.install()
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 3 and args[0] == "job":
        return run_cli(lambda: run_job(Path(args[1]), Path(args[2])), "simoe-agent job")
    print("usage: python -m agent.daemon job STATE_DIR JOB_FILE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
