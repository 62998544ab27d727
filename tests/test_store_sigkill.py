"""A SIGKILL at any moment loses no committed record and never corrupts the store.

A writer process (tests/store_writer.py) fills the store; the test reads what is
committed, kills the writer with SIGKILL, and checks after every kill that
everything read before is still there and that SQLite finds the file sound.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from store_writer import BATCH

from agent.store import Store

WRITER = Path(__file__).with_name("store_writer.py")
REPO = WRITER.parents[1]

# (mode, records to wait for beyond those already there, extra delay before the kill in s).
# The first kill lands during start-up; the batch kills land inside big transactions.
KILLS = [
    ("batches", 0, 0.4),
    ("batches", 40, 0.0),
    ("tune", 2, 0.0),
    ("batches", 200, 0.07),
    ("batches", 80, 0.013),
]
WAIT_LIMIT_S = 180.0  # a guard against a hung writer; under a loaded machine start-up is slow


def _committed(path: Path) -> set[tuple[str, str]]:
    """(candidate, device) pairs committed so far, read through a connection of our own."""
    if not path.exists():
        return set()
    conn = sqlite3.connect(path, timeout=30)
    try:
        return set(conn.execute("SELECT candidate_id, device FROM records").fetchall())
    except sqlite3.OperationalError:  # no tables yet
        return set()
    finally:
        conn.close()


def _start(path: Path, mode: str, seed: int, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(WRITER), str(path), mode, str(seed)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
        )


@pytest.mark.slow
def test_sigkill_loses_no_committed_record(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    log = tmp_path / "writer.log"
    seen: set[tuple[str, str]] = set()
    for seed, (mode, wait_for, delay) in enumerate(KILLS):
        proc = _start(path, mode, seed, log)
        try:
            deadline = time.monotonic() + WAIT_LIMIT_S
            while wait_for and len(_committed(path)) < len(seen) + wait_for:
                assert proc.poll() is None, f"writer died: {log.read_text()[-2000:]}"
                assert time.monotonic() < deadline, f"no progress: {log.read_text()[-2000:]}"
                time.sleep(0.02)
            time.sleep(delay)
            before = _committed(path)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        with Store(path) as store:  # reopening recovers from the WAL
            assert store.integrity_check() == "ok"
            after = {(r.candidate_id, r.device) for r in store.summaries()}
            assert before <= after, f"kill {seed}: {len(before - after)} committed records lost"
            assert seen <= after
            # What is there is readable: traces parse, feature blobs have their shapes.
            records = store.records()
            store.labelled_candidates()
        # Transactions are atomic: every batch of the batch writer is all there or absent.
        batch_sizes = Counter(
            (r.workload_key, r.trace[0][1]) for r in records if r.task_name.startswith("synthetic")
        )
        assert set(batch_sizes.values()) <= {BATCH}, f"kill {seed}: a torn batch {batch_sizes}"
        seen = after
    assert len(seen) >= sum(w for _, w, _ in KILLS)
