"""bench/reliability/chaos.py's checks find what they claim to find, on real SQLite files."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

from federation_helpers import ToyNode

from bench.reliability.chaos_facts import (
    first_round_back,
    nodes_returned,
    registry_facts,
    store_facts,
)
from bench.reliability.chaos_report import Fault
from server.registry import Registry


def registry_with_rounds(path: Path) -> Registry:
    registry = Registry(path)
    for node in (ToyNode("a", 1000.0), ToyNode("b", 2000.0)):
        registry.upsert_node(node.hello(), 1, key_verified=False)
    key_a = registry.node_by_name("a")["node_key"]
    for _ in range(3):
        number = registry.start_round(run_id=1, sampled=2)
        registry.add_traffic(number, key_a, bytes_down=1, bytes_up=1)
        registry.finish_round(
            number, replied=1, rejected=0, failed=1, global_version=1, updated=False
        )
    return registry


def test_a_consistent_registry_and_who_came_back(tmp_path: Path) -> None:
    registry_with_rounds(tmp_path / "r.sqlite").close()
    facts = registry_facts(tmp_path / "r.sqlite", ["a", "b"])
    assert facts["integrity"] == "ok" and facts["problems"] == []
    assert facts["closed_rounds"] == 3 and facts["open_rounds"] == []
    long_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    assert nodes_returned(facts, {"a": long_ago, "b": long_ago}) == {"a": True, "b": False}
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert nodes_returned(facts, {"a": later}) == {"a": False}
    fault = Fault(
        cycle=1, at_s=0, target="a", processes_killed=1, restart_s=0, restarted_at=long_ago,
        records_before={}, records_after={}, integrity_after={}, lost=0, last_round_before=0,
    )  # fmt: skip
    assert first_round_back(facts, fault)[0] == 1


def test_gaps_orphans_and_strangers_are_reported(tmp_path: Path) -> None:
    registry_with_rounds(tmp_path / "r.sqlite").close()
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        db.execute("delete from rounds where round = 2")
        db.execute("insert into traffic values (9, 'nobody', 1, 1)")
    problems = registry_facts(tmp_path / "r.sqlite", ["a", "b", "c"])["problems"]
    text = " ".join(problems)
    assert "gaps" in text and "unregistered" in text and "do not exist" in text
    assert "registered nodes" in text  # c never enrolled


def test_store_counts_are_committed_records(tmp_path: Path) -> None:
    assert store_facts(tmp_path / "none.sqlite") == (0, "absent")
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        db.execute("create table records (id integer)")
        db.executemany("insert into records values (?)", [(i,) for i in range(5)])
    assert store_facts(tmp_path / "s.sqlite") == (5, "ok")
