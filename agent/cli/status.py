"""`simoe-agent status`: where the node keeps its state and what it holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel, ConfigDict, ValidationError

from agent.cli.app import StateDir, app, node_state
from agent.node_state import NodeState
from agent.store import StoreSummary
from schemas import AgentConfig, BadInputError, HardwareProfile
from schemas.cli import Json, Verbose, console, print_json, print_table
from schemas.tables import Column, short_time


class CachedProfile(BaseModel):
    """A profile file the profiler cached under `state_dir/profiles/`."""

    model_config = ConfigDict(extra="forbid")

    file: str
    device: str | None = None
    name: str | None = None
    simulated: bool | None = None
    created_at: str | None = None
    error: str | None = None  # set when the file is not a valid profile


class FederationStatus(BaseModel):
    """What the node knows of its federation (`federation/state.json`, the daemon's file)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None
    server: str | None
    key_fingerprint: str | None
    global_version: int
    last_round: int
    rounds_trained: int  # rounds in which it trained and sent its own expert
    experts: list[str]  # the experts of similar hardware it holds
    refused: str | None
    refused_payload: str | None  # the last server payload it refused, and why
    has_model: bool
    daemon: dict[str, Any] | None  # daemon.json: state, pid, queue counts


class AgentStatus(BaseModel):
    """What `simoe-agent status --json` prints."""

    model_config = ConfigDict(extra="forbid")

    state_dir: str
    config_file: str | None  # None: no agent.json yet, defaults in use
    config: dict[str, Any]
    # what queued jobs tune with unless submitted with their own (`agent.daemon.cost_model_for`)
    queued_jobs_cost_model: str
    store_path: str
    store_exists: bool
    store_bytes: int  # the database file plus its WAL and shared-memory files
    store: StoreSummary | None
    cached_profiles: list[CachedProfile]
    # None until the node has enrolled (or its ClientApp took part in a round)
    federation: FederationStatus | None = None


def _federation(node: NodeState, config: AgentConfig) -> FederationStatus | None:
    if not (config.server or node.federation_state_path.exists()):
        return None
    state = node.federation_state()
    try:
        fingerprint = node.fingerprint()
    except (BadInputError, ValueError):
        fingerprint = None
    daemon = None
    daemon_file = node.daemon_status_path
    if daemon_file.exists():
        try:
            daemon = json.loads(daemon_file.read_text())
        except (OSError, ValueError):
            daemon = None
    return FederationStatus(
        name=config.name,
        server=config.server,
        key_fingerprint=fingerprint,
        global_version=state.global_version,
        last_round=state.last_round,
        rounds_trained=state.rounds_trained,
        experts=state.experts,
        refused=state.refused,
        refused_payload=state.refused_payload,
        has_model=node.has_model(),
        daemon=daemon,
    )


def _store_bytes(path: Path) -> int:
    suffixes = ["", "-wal", "-shm"]
    return sum(p.stat().st_size for p in (Path(f"{path}{s}") for s in suffixes) if p.exists())


def _cached_profiles(node: NodeState) -> list[CachedProfile]:
    found = []
    for file in sorted(node.profiles_dir.glob("*.json")):
        try:
            profile = HardwareProfile.model_validate_json(file.read_text())
        except (OSError, ValidationError, ValueError) as exc:
            found.append(CachedProfile(file=file.name, error=type(exc).__name__))
            continue
        found.append(
            CachedProfile(
                file=file.name,
                device=profile.device,
                name=profile.name,
                simulated=profile.simulated,
                created_at=profile.created_at.isoformat(),
            )
        )
    return found


def _cost_models(tune: str, queued: str) -> str:
    if tune == queued:
        return tune
    return f"{queued} for queued jobs (the federation's model), {tune} for `tune`"


def collect_status(state_dir: Path | None) -> AgentStatus:
    """The node's status; reads the store but never creates it."""
    from agent.daemon import cost_model_for

    node = node_state(state_dir)
    config = node.config()
    path = node.store_path
    summary = None
    if path.exists():
        with node.open_store() as store:
            summary = store.summary()
    return AgentStatus(
        state_dir=str(node.dir),
        config_file=str(node.config_path) if node.config_path.exists() else None,
        config=config.model_dump(mode="json"),
        queued_jobs_cost_model=cost_model_for(node, config),
        store_path=str(path),
        store_exists=path.exists(),
        store_bytes=_store_bytes(path),
        store=summary,
        cached_profiles=_cached_profiles(node),
        federation=_federation(node, config),
    )


def _watch(state_dir: Path | None, *, json_out: bool, once: bool, interval: float) -> None:
    """The node's live view (agent.node_watch): read-only, one line for bad input."""
    import contextlib

    from agent.node_watch import watch
    from schemas.cli import Seconds, checked

    if json_out:
        raise BadInputError("--watch draws a live view; for scripts use --json without it")
    checked("--interval", interval, Seconds)
    node = node_state(state_dir)
    if not node.dir.is_dir():
        raise BadInputError(f"{node.dir}: no node here (enroll, or pass --state-dir)")
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the last frame stays on screen
        watch(node.dir, console, interval=interval, once=once)


def _federation_rows(federation: FederationStatus | None) -> list[tuple[str, Any]]:
    if federation is None:
        return [("federation", "not enrolled")]
    rows: list[tuple[str, Any]] = [
        ("federation", f"{federation.name or '?'} at {federation.server or '?'}"),
        ("global model", f"v{federation.global_version}, last round {federation.last_round}"),
        ("own expert", f"trained in {federation.rounds_trained} rounds"),
        ("experts held", ", ".join(federation.experts) or "none"),
    ]
    if federation.daemon:
        daemon = federation.daemon
        rows.append(
            (
                "daemon",
                f"{daemon.get('state')}; queue {daemon.get('pending', 0)} pending, "
                f"{daemon.get('done', 0)} done, {daemon.get('failed', 0)} failed",
            )
        )
        if daemon.get("error"):
            rows.append(("daemon stopped because", daemon["error"]))
    if federation.refused:
        rows.append(("refused by the server", federation.refused))
    if federation.refused_payload:
        rows.append(("refused payload", federation.refused_payload))
    return rows


@app.command("status")
def status(
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
    watch: bool = typer.Option(
        False, "--watch", help="a live view, redrawn in place until Ctrl-C (read-only)"
    ),
    once: bool = typer.Option(False, "--once", help="with --watch: print one frame and exit"),
    interval: float = typer.Option(2.0, "--interval", help="with --watch: seconds between frames"),
) -> None:
    """Where the node keeps its state, its config, and what its store holds."""
    if watch or once:
        _watch(state_dir, json_out=json_out, once=once, interval=interval)
        return
    result = collect_status(state_dir)
    if json_out:
        print_json(result.model_dump(mode="json"))
        return
    config = result.config
    print_table(
        "node",
        ["", ""],
        [
            ("state dir", result.state_dir),
            ("config", result.config_file or "defaults (no agent.json yet)"),
            ("device", config["device"]),
            ("server", config["server"] or "not set"),
            ("cost model", _cost_models(config["cost_model"], result.queued_jobs_cost_model)),
            ("trials per task", config["trials_per_task"]),
            ("store", result.store_path if result.store_exists else "none yet"),
            ("store size", f"{result.store_bytes / 1e6:.2f} MB"),
            *_federation_rows(result.federation),
        ],
    )
    if result.store is not None:
        print_table(
            f"store: {result.store.workloads} workloads, {result.store.records} records, "
            f"{result.store.features} cached feature sets",
            [
                "device",
                *(Column(h, "right") for h in ("workloads", "records", "failed")),
                Column("simulated", optional=True),
            ],  # fmt: skip
            [
                (d.device, d.workloads, d.records, d.failed, "yes" if d.simulated else "no")
                for d in result.store.devices
            ],
        )
    profiles = result.cached_profiles
    if profiles:
        print_table(
            "cached profiles",
            ["device", "hardware", Column("taken", optional=True), Column("file", optional=True)],
            [(p.device, p.name, p.error or short_time(p.created_at), p.file) for p in profiles],
        )
    else:
        console.print("no cached hardware profile (run `simoe-agent profile`)")
