"""A full or read-only disk under the store, the registry and the model files.

Each test mounts a small tmpfs (1 MiB) and fills it, or remounts it read-only; this
needs root (CAP_SYS_ADMIN), and the tests are skipped, saying so, where it is not
available. On a full disk every write fails with one line that names the file, no
committed row is lost, SQLite's integrity_check passes, and writing works again
once there is room. A read-only disk is one line naming the file too.
"""

from __future__ import annotations

import errno
import hashlib
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from agent.store import Store
from schemas import RunFailure, TuningRecord
from server.registry import Registry
from simoe_model.model import SiMoE, save_model

AGENT = str(Path(sys.executable).with_name("simoe-agent"))
SERVER = str(Path(sys.executable).with_name("simoe-server"))


class Tmpfs:
    """A mounted tmpfs: fill it, free it, make it read-only and writable again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler.bin"

    def fill(self) -> None:
        """Write a filler file until the disk is full (down to the last 512 bytes)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for chunk in (1 << 16, 4096, 512):
                try:
                    while True:
                        os.write(fd, b"\0" * chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)
        assert _free(self.path) < 8192

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def remount(self, mode: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], check=True)


def _free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


@pytest.fixture()
def disk(tmp_path: Path) -> Iterator[Tmpfs]:
    path = tmp_path / "disk"
    path.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {result.stderr.strip()}")
    try:
        yield Tmpfs(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def records(n: int, device: str = "sim:t4") -> list[TuningRecord]:
    """n records with 8 KB traces each (so a batch needs fresh pages)."""
    return [
        TuningRecord(
            workload_key="wk-1",
            task_name="matmul:64,64,64",
            trace={"candidate": uuid.uuid4().hex, "pad": "x" * 8000},
            run_secs=[1e-5],
            target={"kind": "cuda"},
            device=device,
            simulated=True,
        )
        for _ in range(n)
    ]


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("pragma integrity_check").fetchone()[0]
    finally:
        conn.close()


def test_store_on_a_full_disk(disk: Tmpfs) -> None:
    path = disk.path / "store.sqlite"
    with Store(path) as store:
        store.add_records(records(10))
        before = store.count_records()
        disk.fill()
        with pytest.raises(RunFailure) as failure:
            store.add_records(records(20))
        assert str(path) in str(failure.value) and "full" in str(failure.value)
        assert len(str(failure.value).splitlines()) == 1
        assert store.count_records() == before  # nothing lost, nothing half-written
        disk.free()
        store.add_records(records(20))  # room again: work resumes on the same connection
        assert store.count_records() == before + 20
    assert integrity(path) == "ok"


def test_registry_on_a_full_disk(disk: Tmpfs) -> None:
    path = disk.path / "registry.sqlite"
    rng = np.random.default_rng(0)
    with Registry(path) as registry:
        registry.save_global({"w": rng.standard_normal(1000).astype(np.float32)}, round_=1)
        disk.fill()
        with pytest.raises(RunFailure) as failure:
            registry.save_global({"w": rng.standard_normal(50_000).astype(np.float32)}, round_=2)
        assert str(path) in str(failure.value) and len(str(failure.value).splitlines()) == 1
        assert registry.global_version() == 1
        disk.free()
        registry.save_global({"w": rng.standard_normal(50_000).astype(np.float32)}, round_=2)
        assert registry.global_version() == 2
    assert integrity(path) == "ok"


def test_model_file_on_a_full_disk(disk: Tmpfs) -> None:
    path = disk.path / "federation" / "model.pt"
    save_model(SiMoE(), path)
    good = hashlib.sha256(path.read_bytes()).hexdigest()
    disk.fill()
    with pytest.raises(RunFailure, match="previous file is kept") as failure:
        save_model(SiMoE(), path)
    assert str(path) in str(failure.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == good
    assert not list(path.parent.glob("*.tmp"))  # no half-written file left behind
    disk.free()
    save_model(SiMoE(), path)


def test_backup_onto_a_full_disk(disk: Tmpfs, tmp_path: Path) -> None:
    state = tmp_path / "server"
    with Registry(state / "registry.sqlite") as registry:
        big = np.random.default_rng(0).standard_normal(400_000).astype(np.float32)
        registry.save_global({"w": big}, round_=1)  # 1.6 MB: more than the disk holds
    target = disk.path / "b.sqlite"
    result = subprocess.run(
        [SERVER, "backup", str(target), "--state-dir", str(state)], capture_output=True, text=True
    )
    assert result.returncode == 1 and str(target) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not target.exists() and not list(disk.path.glob(".*.tmp"))


def test_read_only_disk(disk: Tmpfs, tmp_path: Path) -> None:
    store_path, registry_path = disk.path / "store.sqlite", disk.path / "registry.sqlite"
    Registry(tmp_path / "registry.sqlite").close()  # a registry to back up onto the disk
    with Store(store_path) as store:
        store.add_records(records(3))
    Registry(registry_path).close()
    model_path = disk.path / "model.pt"
    save_model(SiMoE(), model_path)
    disk.remount("ro")
    try:
        with pytest.raises(RunFailure) as failure:
            Store(store_path)
        assert str(store_path) in str(failure.value)
        with pytest.raises(RunFailure) as failure:
            Registry(registry_path)
        assert str(registry_path) in str(failure.value)
        with pytest.raises(RunFailure, match="Read-only") as failure:
            save_model(SiMoE(), model_path)
        assert str(model_path) in str(failure.value)
        result = subprocess.run(
            [AGENT, "records", "--state-dir", str(disk.path)], capture_output=True, text=True
        )
        assert result.returncode == 1 and str(store_path) in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        backup = disk.path / "b.sqlite"
        result = subprocess.run(
            [SERVER, "backup", str(backup), "--state-dir", str(tmp_path)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 1 and str(backup) in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    finally:
        disk.remount("rw")
    with Store(store_path) as store:  # writable again: everything is there
        assert store.count_records() == 3
    assert integrity(store_path) == "ok"


@pytest.mark.slow  # two tunes (one refused at once): about 20 s
def test_tune_on_a_full_disk_then_with_room(disk: Tmpfs) -> None:
    store_path = disk.path / "store.sqlite"
    with Store(store_path) as store:
        store.add_records(records(5))
    command = [
        AGENT, "tune", "-w", "matmul:64,64,64", "-d", "sim:t4", "--trials", "4",
        "--population", "32", "--no-baseline", "--cost-model", "random",
        "--state-dir", str(disk.path), "--json",
    ]  # fmt: skip
    disk.fill()
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 1 and str(store_path) in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    disk.free()
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    with Store(store_path) as store:  # the 5 from before, and what the second tune measured
        assert store.count_records(device="sim:t4") > 5
    assert integrity(store_path) == "ok"


def test_rounds_resume_once_the_registry_has_room(
    disk: Tmpfs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round loop: a round the registry cannot record is one log line, then retried."""
    import threading
    import time

    from federation_helpers import ToyNode, initial_arrays, toy_similarity

    import server.server_app as server_app
    from server.inprocess import InProcessGrid
    from server.strategy import SiMoEStrategy

    monkeypatch.setattr(server_app, "RETRY_S", 0.2)
    path = disk.path / "registry.sqlite"
    grid = InProcessGrid()
    grid.add_node(1, ToyNode("t4", 8000).app(), {})
    stop, done = threading.Event(), []

    def on_round(outcome: object) -> None:
        done.append(outcome)
        if len(done) == 1:
            disk.fill()  # the next rounds cannot be recorded

    def serve() -> None:  # SQLite connections belong to the thread that opened them
        with Registry(path) as registry:
            strategy = SiMoEStrategy(registry, toy_similarity)
            server_app.run_rounds(
                grid, strategy, initial_arrays(), num_rounds=0, stop=stop, on_round=on_round,
                wait_nodes_s=0,
            )  # fmt: skip

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not done and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # rounds are tried and not recorded meanwhile
        assert len(done) == 1 and thread.is_alive()  # the loop is still there
        disk.free()
        while len(done) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert len(done) >= 2  # rounds resumed once there was room
    with Registry(path) as check:
        assert [r.status for r in check.rounds()].count("done") >= 2
    assert integrity(path) == "ok"
