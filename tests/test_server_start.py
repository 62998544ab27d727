"""`simoe-server start` as a user runs it: a real process on loopback, stopped by SIGTERM.

init-certs, then start (TLS, node authentication, a temporary state dir, telemetry
off); it must listen, `status --json` must read its registry, and on SIGTERM it must
exit 0 within a timeout, leaving no SuperLink behind and an intact registry. Bad
certificates give a one-line error and exit 2, without starting anything.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import free_port, wait_for

from server.registry import Registry
from server.superlink import port_open

SERVER = str(Path(sys.executable).with_name("simoe-server"))


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SERVER, *args], capture_output=True, text=True, timeout=timeout)


def global_version(state: Path) -> int | None:
    """What `status --json` says of the global model; None while there is no registry."""
    if not (state / "registry.sqlite").exists():
        return None
    result = cli("status", "--state-dir", str(state), "--json")
    return json.loads(result.stdout)["global_version"] if result.returncode == 0 else None


@pytest.mark.slow  # the ServerApp process imports torch: 20-60 s on 2 busy cores
def test_start_listens_reports_and_stops_on_sigterm(tmp_path: Path, started: list) -> None:
    certs = json.loads(cli("init-certs", str(tmp_path / "certs"), "--json").stdout)
    state = tmp_path / "server"
    port = free_port()
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - closed at the end of the test
    server = subprocess.Popen(
        [SERVER, "start", "--port", str(port), "--certs", str(tmp_path / "certs"),
         "--state-dir", str(state), "--rounds", "0"],
        stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    started.append(server)
    registry = state / "registry.sqlite"
    wait_for("the SuperLink to listen", lambda: port_open("127.0.0.1", port), 90, server)
    wait_for("the ServerApp's first global model", lambda: global_version(state) == 1, 150, server)

    # TLS with the CA it was given: a client that trusts that CA completes the handshake
    context = ssl.create_default_context(cafile=certs["ca"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
        context.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() is not None

    # the SuperLink child: node authentication, persistent database, no dependency installs,
    # telemetry off
    [link] = [
        p for p in psutil.Process(server.pid).children(recursive=True)
        if any(a.endswith("flower-superlink") for a in p.cmdline()[:2])
    ]  # fmt: skip
    command = link.cmdline()
    assert "--enable-supernode-auth" in command and "--insecure" not in command
    assert "--disable-runtime-dependency-installation" in command
    assert command[command.index("--database") + 1] == str(state / "superlink.sqlite")
    assert link.environ().get("FLWR_TELEMETRY_ENABLED") == "0"
    # its SuperExec (it starts the ServerApp) asks for tasks every 5 s, not Flower's 1 s:
    # each ask is a request the SuperLink serves, all day on an idle federation
    [superexec] = [p for p in link.children() if "flower-superexec" in " ".join(p.cmdline())]
    assert superexec.environ().get("FLWR_SUPEREXEC_TASK_POLL_INTERVAL") == "5.0"

    status = cli("status", "--state-dir", str(state), "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["registry"] == str(registry)
    assert data["nodes"] == 0 and data["rounds"] == 0 and data["global_version"] == 1

    # a round the stop cuts short (opened as the round loop opens one; no node answers it)
    with Registry(registry) as open_registry:
        cut = open_registry.start_round(0, 1)
    children = psutil.Process(server.pid).children(recursive=True)
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=60) == 0, (tmp_path / "server.log").read_text()[-2000:]
    log.close()
    _, alive = psutil.wait_procs(children, timeout=20)
    assert not alive, f"left running: {[p.cmdline()[:2] for p in alive]}"
    assert not port_open("127.0.0.1", port)
    assert "SuperLink stopped" in (tmp_path / "server.log").read_text()

    with sqlite3.connect(registry) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    after = cli("status", "--state-dir", str(state), "--json")
    assert after.returncode == 0 and json.loads(after.stdout)["global_version"] == 1
    # ... is not left `running` (status and watch would show a round that never ends)
    rounds = json.loads(cli("rounds", "--state-dir", str(state), "--json").stdout)
    assert [(r["round"], r["status"]) for r in rounds] == [(cut, "interrupted")]
    assert f"round {cut}: cut short by the stop" in (tmp_path / "server.log").read_text()


@pytest.mark.parametrize("damage", ["missing", "not-pem"])
def test_bad_certificates_are_one_line_exit_2(tmp_path: Path, damage: str) -> None:
    certs = tmp_path / "certs"
    assert cli("init-certs", str(certs)).returncode == 0
    if damage == "missing":
        (certs / "server.key").unlink()
    else:
        (certs / "server.pem").write_text("this is not a certificate\n")
    port = free_port()
    result = cli(
        "start", "--port", str(port), "--certs", str(certs),
        "--state-dir", str(tmp_path / "server"), timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simoe-server: error:"), result.stderr
    assert ("server.key" if damage == "missing" else "server.pem") in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not port_open("127.0.0.1", port)
    assert not (tmp_path / "server" / "superlink.sqlite").exists()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--aggregation", "mean"], "--aggregation"),
        (["--aggregation", "trimmed", "--trim", "0.6"], "--trim"),
        (["--clip", "-3"], "--clip"),
        (["--aggregation", "krum", "--krum-f", "-1"], "--krum-f"),
        (["--server-optimizer", "yogi"], "--server-optimizer"),
        (["--server-lr", "0"], "--server-lr"),
        (["--rounds", "-1"], "--rounds must be at least 0"),
        (["--k-experts", "0"], "--k-experts must be at least 1"),
        (["--k-experts", "-3"], "--k-experts must be at least 1"),
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["--min-nodes", "0"], "--min-nodes must be at least 1"),
        (["--round-timeout", "0"], "--round-timeout must be more than 0"),
        (["--round-interval", "-1"], "--round-interval must be at least 0"),
        (["--similarity-steps", "-1"], "--similarity-steps must be at least 0"),
    ],
)
def test_bad_aggregation_options_are_one_line_exit_2(
    tmp_path: Path, options: list[str], named: str
) -> None:
    port = free_port()
    result = cli(
        "start", "--port", str(port), *options, "--state-dir", str(tmp_path / "server"),
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "Input should" not in result.stderr  # the user's words, not pydantic's
    assert not (tmp_path / "server").exists()  # refused before anything was created
