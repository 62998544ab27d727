"""The node's store and files checked before work, not after it (issue 25, items 4 and 6).

A full disk stops `tune` before its search (one line naming the store), a damaged store
is named on open, and the profile cache on a full disk is one line with no `.tmp` left.
The full-disk cases mount a small tmpfs (root only; skipped, saying so, elsewhere).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import one_line_error, run_main
from test_full_disk import Tmpfs, disk, records  # noqa: F401 - the fixture, used by name

import agent.tuner as tuner_module
from agent.cli import main as agent_main
from agent.node_state import NodeState
from agent.store import Store
from schemas import BadInputError, RunFailure


def nearly_full(disk: Tmpfs) -> None:  # noqa: F811
    """Room for the store to open, none for a search's records (64 KiB left)."""
    disk.fill()
    os.truncate(disk.filler, disk.filler.stat().st_size - 64 * 1024)


def test_tune_on_a_full_disk_stops_before_the_search(
    disk: Tmpfs,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    with Store(disk.path / "store.sqlite") as store:
        store.add_records(records(2))
    searched: list[object] = []
    monkeypatch.setattr(tuner_module, "tune_workload", lambda *a, **k: searched.append(a))
    nearly_full(disk)
    code, out, err = run_main(
        agent_main, "simoe-agent",
        ["tune", "-w", "matmul:64,64,64", "-d", "sim:t4", "--trials", "4",
         "--cost-model", "random", "--state-dir", str(disk.path)],
        monkeypatch, capsys,
    )  # fmt: skip
    line = one_line_error("simoe-agent", code, out, err, exit_code=1)
    assert str(disk.path / "store.sqlite") in line and "MB free" in line
    assert not searched  # refused before any search


def test_store_check_writable_with_room_and_without(disk: Tmpfs) -> None:  # noqa: F811
    with Store(disk.path / "store.sqlite") as store:
        store.check_writable(4)
        nearly_full(disk)
        with pytest.raises(RunFailure, match="MB free"):
            store.check_writable(4)
        disk.free()
        store.check_writable(4)


def test_profile_cache_on_a_full_disk_is_one_line_and_leaves_no_tmp(disk: Tmpfs) -> None:  # noqa: F811
    from simoe_model.synthetic import make_devices

    node = NodeState(disk.path / "node")
    profile = make_devices(1, seed=2)[0].profile()
    node.profiles_dir.mkdir(parents=True)
    disk.fill()
    with pytest.raises(RunFailure) as failure:
        node.save_profile(profile)
    message = str(failure.value)
    assert len(message.splitlines()) == 1 and "no space left" in message
    assert str(node.profile_path(profile.device)) in message
    assert not [p.name for p in node.profiles_dir.iterdir() if p.name.endswith(".tmp")]


def test_a_damaged_store_is_named_on_open(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    with Store(path) as store:
        store.add_records(records(30))
    conn = sqlite3.connect(path)
    conn.execute("pragma wal_checkpoint(truncate)")
    [(root,)] = conn.execute("select rootpage from sqlite_master where name = 'records'")
    conn.close()
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    start = (root - 1) * size  # the records table's b-tree root page: its cell pointers
    data[start + 8 : start + 60] = b"\xff" * 52
    path.write_bytes(bytes(data))
    with pytest.raises((BadInputError, RunFailure)) as failure:
        Store(path)
    assert str(path) in str(failure.value) and "damaged" in str(failure.value)
