"""Running the product's own CLIs as separate processes (the demo drives a deployment).

The server never imports agent code: it reaches a node only through `simoe-agent`
run as a program. `cli(...)` runs one command to completion and reads its `--json`
output; `Background` starts a long-running one (a server, a daemon) in its own process
group, with its output in a log file, and stops the whole group.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from schemas import RunFailure
from schemas.protocol import flower_env, flwr_bin


def program(name: str) -> str:
    """A console script of this installation (next to the interpreter), else from PATH."""
    if os.sep in name:
        return name
    return flwr_bin(name)  # any console script of the venv, found the way Flower's are


def offline_env() -> dict[str, str]:
    """This environment, with Flower kept offline and this venv's programs found first."""
    env = flower_env()
    # tables a command prints into a pipe get this terminal's width, not rich's 80
    env.setdefault("COLUMNS", str(shutil.get_terminal_size().columns))
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def cli(
    name: str,
    args: list[str],
    *,
    timeout: float = 900,
    as_json: bool = True,
    log: Path | None = None,
) -> Any:
    """Run `name args` to completion; its parsed `--json` output (or its text).

    A non-zero exit is a RunFailure with the command's last line of output.
    `log`: the command's stderr (progress bars, warnings) is appended there.
    """
    command = [program(name), *args, *(["--json"] if as_json else [])]
    what = f"{name} {args[0]}" if args else name
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=offline_env()
        )
    except subprocess.TimeoutExpired:
        raise RunFailure(f"{what}: no answer in {timeout:.0f} s") from None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as handle:
            handle.write(f"$ {' '.join(command)}\n{result.stderr}\n")
    if result.returncode != 0:
        why = _last_line(result.stderr) or _last_line(result.stdout) or f"exit {result.returncode}"
        raise RunFailure(f"{what}: {why.removeprefix(name + ': ')}")
    if not as_json:
        return result.stdout
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        raise RunFailure(f"{what}: its --json output is not JSON") from None


class Background:
    """A long-running CLI process in its own process group, logging to a file."""

    def __init__(self, label: str, name: str, args: list[str], log: Path, *, nice: int = 0) -> None:
        """`nice` > 0: it (and what it starts from then on) yields the CPU to the others
        (added to this process's niceness, as `nice -n`)."""
        self.label = label
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as handle:
            self.process = subprocess.Popen(
                [program(name), *args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=offline_env(),
                start_new_session=True,  # stopped with its children (SuperNode, ClientApps)
            )
        if nice:  # set before the new interpreter has started any child of its own
            pid = self.process.pid
            os.setpriority(
                os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, pid) + nice)
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def check(self) -> None:
        """RunFailure naming the log if the process has exited."""
        if not self.alive():
            tail = _last_line(self.log.read_text(errors="replace")) if self.log.exists() else ""
            raise RunFailure(
                f"{self.label} exited ({self.process.returncode}): {tail[:200]}; see {self.log}"
            )

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (it stops its own children), then SIGKILL the group after `timeout`."""
        if self.alive():
            self.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout)
        self.signal(signal.SIGKILL)  # whatever of the group outlived it
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


def wait_until(what: str, check: Any, timeout: float, poll_s: float = 2.0) -> Any:
    """Poll `check()` until it returns something truthy; RunFailure at the deadline."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= end:
            raise RunFailure(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll_s)
