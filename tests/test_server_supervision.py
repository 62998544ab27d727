"""`simoe-server start` supervises its children: after a `kill -9` a restart finds and stops
the SuperLink and ServerApp its predecessor left, and a normal stop leaves nothing behind.

Real processes, as an operator runs them (issue 25, item 1).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import free_port, wait_for

from server.superlink import port_open

SERVER = str(Path(sys.executable).with_name("simoe-server"))


def children(state: Path) -> dict[str, list[int]]:
    """The pid file's children by role ({} while there is none)."""
    try:
        data = json.loads((state / "server.json").read_text())
    except (OSError, ValueError):
        return {}
    found: dict[str, list[int]] = {}
    for c in data.get("children") or []:
        found.setdefault(c["role"], []).append(c["pid"])
    return found


def has_serverapp(state: Path) -> bool:
    return any("serverapp" in role for role in children(state))


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.slow  # two SuperLinks and a ServerApp process start: 20-60 s on 2 busy cores
def test_restart_after_kill_9_stops_the_orphans_and_a_stop_leaves_none(
    tmp_path: Path, started: list
) -> None:
    state, port = tmp_path / "server", free_port()
    command = [SERVER, "start", "--port", str(port), "--state-dir", str(state)]
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - closed with the test's tmp dir
    first = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    started.append(first)
    wait_for("the SuperLink to listen", lambda: port_open("127.0.0.1", port), 90, first)
    wait_for("a ServerApp in the pid file", lambda: has_serverapp(state), 120, first)
    orphans = [pid for pids in children(state).values() for pid in pids]
    first.send_signal(signal.SIGKILL)  # as the OOM killer would
    first.wait()
    assert all(alive(pid) for pid in orphans)  # what the fault leaves: orphans on the port
    assert port_open("127.0.0.1", port)

    second = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    started.append(second)
    wait_for(
        "the restart to replace the orphaned SuperLink",
        lambda: children(state).get("superlink", [None])[0] not in (None, *orphans),
        120,
        second,
    )
    assert not any(alive(pid) for pid in orphans)
    assert port_open("127.0.0.1", port)

    # a second server on the same state dir, while this one runs: refused in one line
    third = subprocess.run(
        [SERVER, "start", "--port", str(free_port()), "--state-dir", str(state)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert third.returncode == 2 and "a server runs already" in third.stderr, third.stderr
    assert len(third.stderr.strip().splitlines()) == 1

    now = [pid for pids in children(state).values() for pid in pids]
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0
    wait_for("its children to end", lambda: not any(alive(pid) for pid in now), 30)
    assert not port_open("127.0.0.1", port)
    assert json.loads((state / "server.json").read_text())["state"] == "stopped"
