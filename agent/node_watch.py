"""`simoe-agent status --watch`: the node's own live view, refreshed in place (rich Live).

One screen from the node's state directory, read afresh at each refresh and never
written (so it runs beside the daemon, over ssh): its config and device, what its store
holds, its jobs (pending, running, done, failed, and the last one's result), the daemon's
state and the federation (last round, global model, own expert, experts held). The store
is opened read-only (`mode=ro`: no schema, no migration; SQLite may add its `-wal` and
`-shm` side files beside a store no process holds open). `--once` prints one frame.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from agent.daemon import QUEUE_STATES, Job, describe_result
from agent.node_state import NodeState
from schemas import SimoeError
from schemas.cli import live_view
from schemas.errors import one_line
from schemas.tables import ago


@dataclass
class StoreCounts:
    records: int = 0
    workloads: int = 0
    failed: int = 0
    devices: list[tuple[str, int]] = field(default_factory=list)  # (device, records)


@dataclass
class LastJob:
    job: Job
    state: str  # done / failed
    finished_at: datetime  # its queue file's last change


@dataclass
class NodeView:
    """What one frame shows, read from the state directory."""

    state_dir: str
    name: str | None = None
    device: str = "?"
    server: str | None = None
    cost_model: str = "?"  # what queued jobs tune with (`agent.daemon.cost_model_for`)
    store: StoreCounts | None = None  # None: no store yet
    store_error: str | None = None
    jobs: dict[str, list[Job]] = field(default_factory=dict)  # queue state -> jobs
    last_job: LastJob | None = None
    daemon: dict[str, Any] | None = None  # daemon.json
    daemon_alive: bool = False
    federation: Any = None  # NodeFederationState, None before it enrolled
    error: str | None = None  # the node could not be read this time (one line)


def _store_counts(path: Path) -> StoreCounts:
    """Counts from the store, opened read-only (never migrated, never written)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute(
            "SELECT device, COUNT(*), COALESCE(SUM(failed), 0) FROM records GROUP BY device "
            "ORDER BY device"
        ).fetchall()
        workloads = conn.execute("SELECT COUNT(*) FROM workloads").fetchone()[0]
    finally:
        conn.close()
    return StoreCounts(
        records=sum(r[1] for r in rows),
        workloads=int(workloads),
        failed=sum(int(r[2]) for r in rows),
        devices=[(str(r[0]), int(r[1])) for r in rows],
    )


def _queue(root: Path) -> tuple[dict[str, list[Job]], LastJob | None]:
    """The jobs in each queue state (files only; the folders are never created here)."""
    jobs: dict[str, list[Job]] = {state: [] for state in QUEUE_STATES}
    last: LastJob | None = None
    for state in QUEUE_STATES:
        for path in sorted((root / state).glob("*.json")):
            try:
                job = Job.model_validate_json(path.read_text())
                changed = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
            except (OSError, ValidationError, ValueError):
                continue  # moved between states while read, or torn: the next frame has it
            jobs[state].append(job)
            if state in ("done", "failed") and (last is None or changed > last.finished_at):
                last = LastJob(job, state, changed)
    return jobs, last


def _daemon(node: NodeState) -> tuple[dict[str, Any] | None, bool]:
    """daemon.json, and whether its process still runs."""
    try:
        daemon = json.loads(node.daemon_status_path.read_text())
    except (OSError, ValueError):
        return None, False
    pid, updated = daemon.get("pid"), daemon.get("updated_at")
    return daemon, isinstance(pid, int) and _runs_since(pid, updated)


def _runs_since(pid: int, updated_at: str | None) -> bool:
    """Process `pid` runs and started before `updated_at` (the daemon that wrote the file,
    not a process that got its pid since)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        written = datetime.fromisoformat(updated_at).timestamp() if updated_at else None
        return written is None or proc.create_time() <= written + 1
    except (psutil.Error, ValueError):
        return False


def read_node(state_dir: Path) -> NodeView:
    """The node's state now; an unreadable part is said in the frame, not raised."""
    from agent.daemon import cost_model_for

    node = NodeState(state_dir)
    view = NodeView(state_dir=str(node.dir))
    try:
        config = node.config()
    except (SimoeError, ValidationError, ValueError, OSError) as exc:
        view.error = f"its config: {one_line(exc)}"
        return view
    view.name, view.device, view.server = config.name, config.device, config.server
    view.cost_model = cost_model_for(node, config)
    if node.store_path.exists():
        try:
            view.store = _store_counts(node.store_path)
        except sqlite3.Error as exc:
            view.store_error = f"{node.store_path}: {exc}"
    view.jobs, view.last_job = _queue(node.queue_dir)
    view.daemon, view.daemon_alive = _daemon(node)
    if config.server or node.federation_state_path.exists():
        view.federation = node.federation_state()
    return view


def _daemon_line(view: NodeView, now: datetime | None) -> str:
    daemon = view.daemon
    if daemon is None:
        return "never ran here (`simoe-agent run`)"
    state = str(daemon.get("state") or "?")
    if state != "stopped" and not view.daemon_alive:
        state = f"not running (last said {state}, pid {daemon.get('pid')} is gone)"
    else:
        state += f", pid {daemon.get('pid')}" if view.daemon_alive else ""
    text = f"{state}; updated {ago(daemon.get('updated_at'), now)}"
    if daemon.get("error"):
        text += f"; stopped because: {daemon['error']}"
    return text


def _job_text(job: Job) -> str:
    return f"{job.kind} {job.subject}, {job.trials} trials/task"


def render(view: NodeView, now: datetime | None = None) -> Group:
    """One frame: a header line, then the node, its store, its jobs and its federation."""
    clock = (now or datetime.now(timezone.utc)).strftime("%H:%M:%S UTC")
    title = f"SiMoE node {view.name}" if view.name else "SiMoE node"
    header = Text.assemble((title, "bold"), f"  {view.state_dir}  {clock}")
    if view.error:
        return Group(header, Text(f"cannot read the node: {view.error}", style="red"))
    node = Table(show_header=False, title="node", title_justify="left", expand=False)
    node.add_column("", style="bold")
    node.add_column("")
    node.add_row("device", view.device)
    node.add_row("server", view.server or "none (standalone)")
    node.add_row("queued jobs tune with", view.cost_model)
    if view.store_error:
        node.add_row("store", Text(view.store_error, style="red"))
    elif view.store is None:
        node.add_row("store", "none yet")
    else:
        store = view.store
        per_device = ", ".join(f"{d}: {n}" for d, n in store.devices) or "no records"
        node.add_row(
            "store",
            f"{store.records} records ({store.failed} failed), {store.workloads} workloads; "
            f"{per_device}",
        )
    node.add_row("daemon", _daemon_line(view, now))
    counts = {state: len(view.jobs.get(state) or []) for state in QUEUE_STATES}
    node.add_row("jobs", ", ".join(f"{n} {state}" for state, n in counts.items()))
    running = view.jobs.get("running") or []
    if running:
        node.add_row("tuning now", _job_text(running[0]))
    pending = view.jobs.get("pending") or []
    if pending:
        node.add_row("next", _job_text(pending[0]))
    if view.last_job is not None:
        last = view.last_job
        outcome = (
            describe_result(last.job.result) if last.state == "done" else last.job.error or "?"
        )
        node.add_row(
            "last job",
            f"{_job_text(last.job)}: {last.state} {ago(last.finished_at, now)}, {outcome}",
        )
    fed = view.federation
    if fed is None:
        node.add_row("federation", "not enrolled")
    else:
        node.add_row(
            "federation",
            f"last round {fed.last_round}, global model v{fed.global_version}, own expert "
            f"trained in {fed.rounds_trained} rounds",
        )
        node.add_row("experts held", ", ".join(fed.experts) or "none")
        if fed.refused:
            node.add_row("refused by the server", Text(fed.refused, style="red"))
    return Group(header, node)


def watch(state_dir: Path, console: Console, *, interval: float = 2.0, once: bool = False) -> None:
    """Show the node until Ctrl-C, redrawn in place every `interval` seconds."""
    live_view(lambda: render(read_node(state_dir)), console, interval=interval, once=once)
