"""What the chaos benchmark reads back after each fault, read-only: a node's committed
records and its store's integrity, the registry's integrity and consistency, and which
nodes (or the server) came back in which round. The faults: bench/reliability/chaos.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from bench.reliability.chaos_report import Fault


def read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)


def store_facts(path: Path) -> tuple[int, str]:
    """(committed records, integrity_check) of a node's store; (0, 'absent') before any."""
    if not path.exists():
        return 0, "absent"
    with read_only(path) as db:
        tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
        count = (
            db.execute("select count(*) from records").fetchone()[0] if "records" in tables else 0
        )
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    return int(count), str(integrity)


def registry_facts(path: Path, node_names: Sequence[str]) -> dict:
    """Integrity and consistency of the server's registry, read-only."""
    problems: list[str] = []
    with read_only(path) as db:
        integrity = str(db.execute("PRAGMA integrity_check").fetchone()[0])
        names = [r[0] for r in db.execute("select name from nodes")]
        keys = {r[0] for r in db.execute("select node_key from nodes")}
        rounds = db.execute(
            "select round, status, started_at, finished_at, replied from rounds order by round"
        ).fetchall()
        for table in ("experts", "metrics", "traffic"):
            orphans = db.execute(
                f"select count(*) from {table} where node_key not in (select node_key from nodes)"
            ).fetchone()[0]
            if orphans:
                problems.append(f"{table}: {orphans} rows of unregistered nodes")
        for table in ("metrics", "traffic"):
            strays = db.execute(
                f"select count(*) from {table} where round not in (select round from rounds)"
            ).fetchone()[0]
            if strays:
                problems.append(f"{table}: {strays} rows of rounds that do not exist")
        versions = [r[0] for r in db.execute("select version from model_versions order by 1")]
        traffic = db.execute(
            "select t.round, n.name from traffic t join nodes n using (node_key)"
        ).fetchall()
    numbers = [r[0] for r in rounds]
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"round numbers have gaps: {numbers[:5]}...")
    if versions != list(range(1, len(versions) + 1)):
        problems.append("model versions have gaps")
    if sorted(names) != sorted(node_names):
        problems.append(f"registered nodes {sorted(names)} != {sorted(node_names)}")
    if len(keys) != len(names):
        problems.append("node keys are not unique")
    open_rounds = [r[0] for r in rounds if r[1] == "running"]
    interrupted = [r[0] for r in rounds if r[1] == "interrupted"]
    return {
        "integrity": integrity,
        "problems": problems,
        "rounds": len(rounds),
        "closed_rounds": sum(1 for r in rounds if r[1] in {"done", "no-update"}),
        "open_rounds": open_rounds,
        "interrupted": interrupted,
        "rounds_table": [list(r) for r in rounds],
        "replies": [list(t) for t in traffic],
    }


def iso_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def nodes_returned(facts: dict, since: dict[str, datetime]) -> dict[str, bool]:
    """Whether each node replied in a round that started after `since[node]`."""
    started = {r[0]: iso_time(r[2]) for r in facts.get("rounds_table", [])}
    out = {}
    for name, when in since.items():
        rounds = [r for r, n in facts.get("replies", []) if n == name]
        out[name] = any(started.get(r) is not None and started[r] >= when for r in rounds)
    return out


def first_round_back(facts: dict, fault: Fault) -> tuple[int | None, float | None]:
    """The first round started after the restart that the target replied in (server: that
    closed), and the seconds from the restart to that round's start."""
    rounds = {r[0]: r for r in facts.get("rounds_table", [])}
    if fault.target == "server":
        numbers = [n for n, r in rounds.items() if r[1] in {"done", "no-update"}]
    else:
        numbers = [n for n, name in facts.get("replies", []) if name == fault.target]
    later = sorted(
        n
        for n in set(numbers)
        if (iso_time(rounds[n][2]) or fault.restarted_at) >= fault.restarted_at
    )
    if not later:
        return None, None
    started = iso_time(rounds[later[0]][2])
    return later[0], (started - fault.restarted_at).total_seconds() if started else None
