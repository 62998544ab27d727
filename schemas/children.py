"""The child processes a supervisor started, recorded so that its successor can stop them.

A supervisor (`simoe-agent run`, `simoe-server start`) starts children in sessions of
their own (so a signal to it does not reach them half-way), which means they outlive it
when it is killed outright (SIGKILL, the OOM killer): an old SuperNode or SuperLink
holds its port, an old job or ServerApp writes the store or registry beside the new one.
So each supervisor writes the children it started into a file in its state directory
(`Child` records: role, pid, start time), and at its next start stops whatever of them
still runs (`stop_orphans`). A pid is only trusted with its start time (or, in records
written before start times were kept, with a marker in its command line): a pid the
system has reused since is left alone. agent and server never import each other; both
use this.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from schemas.errors import BadInputError

log = logging.getLogger("simoe.children")


class Child(BaseModel):
    """One child process: what it is, its pid, and when it started (psutil's create_time)."""

    model_config = ConfigDict(extra="ignore")

    role: str
    pid: int
    started: float | None = None


def child(role: str, pid: int | None) -> Child | None:
    """The record of a running process `pid` (None if it is gone, or `pid` is None)."""
    import psutil

    if pid is None:
        return None
    try:
        return Child(role=role, pid=pid, started=psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def descendants(pid: int) -> list[Child]:
    """Records of every process below `pid` (e.g. a SuperLink's SuperExec and ServerApp)."""
    import psutil

    found = []
    try:
        for proc in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                found.append(Child(role=proc.name(), pid=proc.pid, started=proc.create_time()))
    except psutil.Error:
        pass
    return found


def is_alive(record: Child, markers: Iterable[str] = ()) -> bool:
    """Whether the process of `record` still runs: the same pid and the same start time.

    A record without a start time (an older file) counts only if one of `markers` is in
    the process's command line.
    """
    import psutil

    try:
        proc = psutil.Process(record.pid)
        if record.started is not None:
            return abs(proc.create_time() - record.started) < 0.01
        cmdline = " ".join(proc.cmdline())
        return any(marker in cmdline for marker in markers)
    except psutil.Error:
        return False


def stop_orphans(
    records: Iterable[Child], *, markers: Iterable[str] = (), timeout: float = 5.0
) -> list[int]:
    """SIGKILL every recorded process still alive, with what runs below it; the pids stopped.

    Never this process itself. Each one's own descendants go first (once their parent is
    gone they belong to init, out of reach), then its process group if it leads one.
    """
    import psutil

    markers = tuple(markers)
    stopped: list[int] = []
    victims: list[psutil.Process] = []
    for record in records:
        if record.pid == os.getpid() or not is_alive(record, markers):
            continue
        log.warning(
            "stopping the %s left by a killed predecessor (pid %d)", record.role, record.pid
        )
        try:
            proc = psutil.Process(record.pid)
            below = proc.children(recursive=True)
        except psutil.Error:
            continue
        for target in [*below, proc]:
            with contextlib.suppress(psutil.Error):
                target.kill()
            victims.append(target)
        with contextlib.suppress(OSError):
            if os.getpgid(record.pid) == record.pid:
                os.killpg(record.pid, signal.SIGKILL)
        stopped.append(record.pid)
    # Wait without reaping (psutil.wait_procs would reap a child of ours under its owner).
    end = time.monotonic() + timeout
    while any(_running(v) for v in victims) and time.monotonic() < end:
        time.sleep(0.05)
    return stopped


def _running(proc: object) -> bool:
    """Alive, or a zombie leader whose other threads still exit (they hold its sockets)."""
    import psutil

    try:
        if proc.status() != psutil.STATUS_ZOMBIE:  # type: ignore[attr-defined]
            return True
        # Linux marks a killed leader Z before its other threads have ended; its files (a
        # listening port) close with the last thread, so a restart waits for them too.
        return len(os.listdir(f"/proc/{proc.pid}/task")) > 1  # type: ignore[attr-defined]
    except (psutil.Error, OSError):
        return False


def hold_lock(path: Path, what: str) -> int:
    """Take the exclusive lock on `path` for this process's life; its file descriptor.

    BadInputError naming the holder's pid if another process holds it (one instance per
    state directory). The descriptor is not inherited by children (PEP 446), so an
    orphaned child of a killed holder never keeps the lock.
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise BadInputError(
            f"{what} runs already on {path.parent} (pid {holder}); stop it first"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
