"""Shared fixtures: every test gets its own state directory; Flower stays offline; the
processes a test starts end with it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from schemas.protocol import prepare_flower_env
from server.processes import free_port
from simoe_model import tvm_compat

__all__ = ["free_port", "wait_for"]  # for the tests: `from conftest import free_port, wait_for`

# The test run is an entry point like any other: Flower offline, TVM's inspect patch.
prepare_flower_env()
tvm_compat.install()


@pytest.fixture(autouse=True)
def simoe_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh $SIMOE_HOME per test, so no test sees another's state or the user's."""
    home = tmp_path / "simoe-home"
    monkeypatch.setenv("SIMOE_HOME", str(home))
    return home


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    process: subprocess.Popen | None = None,
) -> None:
    """Poll `check` until it holds; fail the test after `timeout` s or when `process` exits."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{process.args[0]} exited ({process.returncode}) before {what}")
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture()
def started() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts (it appends them); whatever is left is killed with its
    children, so a failed test leaves no SuperLink or ServerApp behind."""
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            for child in psutil.Process(process.pid).children(recursive=True):
                child.kill()
            process.kill()
            process.wait()
