"""`simoe-server backup` / `restore`: SQLite's online backup while the registry is written.

A writer thread keeps committing rows to the registry (as the ServerApp does every
round) while `simoe-server backup` runs as a real process. The backup must pass
`integrity_check`, hold every row committed before it began, and a restore must
give back exactly its rows; the registry a restore replaces is kept.
"""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from federation_helpers import ToyNode

from server.backup import table_counts
from server.registry import Registry

SERVER = str(Path(sys.executable).with_name("simoe-server"))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SERVER, *args], capture_output=True, text=True, timeout=120)


def rows(path: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    try:
        return {
            t: sorted(conn.execute(f'select * from "{t}"').fetchall(), key=repr)
            for t in table_counts(conn)
        }
    finally:
        conn.close()


@pytest.fixture()
def registry_dir(tmp_path: Path) -> Path:
    """A registry with a node, an expert and a few MB of model versions (a backup takes time)."""
    state = tmp_path / "server"
    with Registry(state / "registry.sqlite") as registry:
        node = ToyNode("t4", 8000)
        key = registry.upsert_node(node.hello(), 7)
        registry.put_expert("t4", key, {"w": np.ones((4, 4), np.float32)}, round_=1, num_examples=3)
        rng = np.random.default_rng(0)
        for round_ in range(1, 9):
            registry.save_global(
                {"w": rng.standard_normal(100_000).astype(np.float32)}, round_=round_
            )
    return state


def test_backup_while_written_then_restore(registry_dir: Path, tmp_path: Path) -> None:
    path = registry_dir / "registry.sqlite"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # the registry is private
    stop = threading.Event()
    committed: list[int] = []

    def writer() -> None:  # another connection, committing all the time
        with Registry(path) as registry:
            i = 0
            while not stop.is_set():
                registry.add_rejection(1, f"node-{i}", "test write during backup")
                i += 1
                committed.append(i)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(committed) < 20:
            stop.wait(0.01)
        before = len(committed)
        result = cli(
            "backup", str(tmp_path / "b.sqlite"), "--state-dir", str(registry_dir), "--json"
        )
        during_end = len(committed)
    finally:
        stop.set()
        thread.join()
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    backup_file = tmp_path / "b.sqlite"
    assert report["integrity"] == "ok"
    assert stat.S_IMODE(backup_file.stat().st_mode) == 0o600
    assert not Path(f"{backup_file}-wal").exists()  # one self-contained file
    # a consistent snapshot: all rows committed before it began, none that never were
    assert before <= report["rows"]["rejections"] <= during_end
    assert during_end > before  # the writer really did write while the backup ran
    assert report["rows"]["model_versions"] == 8 and report["rows"]["experts"] == 1
    saved = rows(backup_file)

    # restore into a new server dir: exactly the backup's rows, and a sound file
    fresh = tmp_path / "fresh"
    result = cli("restore", str(backup_file), "--state-dir", str(fresh), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["integrity"] == "ok"
    assert rows(fresh / "registry.sqlite") == saved
    assert stat.S_IMODE((fresh / "registry.sqlite").stat().st_mode) == 0o600
    with Registry(fresh / "registry.sqlite") as registry:  # the server can open it
        assert registry.global_version() == 8 and registry.expert("t4") is not None

    # restore over the live registry: it goes back to the backup, the old one is kept
    after_writes = rows(path)
    result = cli("restore", str(backup_file), "--state-dir", str(registry_dir), "--json")
    assert result.returncode == 0, result.stderr
    kept = Path(json.loads(result.stdout)["kept"])
    assert rows(path) == saved
    assert rows(kept) == after_writes


def _text_file(d: Path) -> Path:
    (d / "x.txt").write_text("hello")
    return d / "x.txt"


def _other_database(d: Path) -> Path:
    conn = sqlite3.connect(d / "o.sqlite")
    conn.execute("create table t(x)")
    conn.close()
    return d / "o.sqlite"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda d: d / "nope.sqlite", "no such file"),
        (_text_file, "not a SQLite"),
        (_other_database, "not a SiMoE registry"),
    ],
)
def test_restore_refuses_what_is_not_a_registry(
    registry_dir: Path, tmp_path: Path, make: Callable[[Path], Path], words: str
) -> None:
    before = rows(registry_dir / "registry.sqlite")
    result = cli("restore", str(make(tmp_path)), "--state-dir", str(registry_dir))
    assert result.returncode == 2 and words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert rows(registry_dir / "registry.sqlite") == before


def test_backup_refuses_to_overwrite(registry_dir: Path, tmp_path: Path) -> None:
    existing = tmp_path / "exists.sqlite"
    existing.write_bytes(b"keep me")
    result = cli("backup", str(existing), "--state-dir", str(registry_dir))
    assert result.returncode == 2 and "exists already" in result.stderr
    assert existing.read_bytes() == b"keep me"
