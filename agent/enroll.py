"""Enrolment: a node key, a hardware profile, registration with the SuperLink, a first model.

`simoe-agent enroll --server HOST:PORT --ca CERT --name NAME [--device D]`:

1. creates the node's ECDSA key (P-384, as Flower's SuperNode auth expects) unless
   the state directory already has one (idempotent);
2. profiles the hardware (cached: agent.node_state.load_or_profile) and keeps the
   profile the federation will see;
3. registers the public key with the SuperLink over TLS (`flwr supernode register`),
   after checking the server is reachable and the CA certificate is one;
4. connects once as a SuperNode until the server has sent the global model and the
   experts of the most similar hardware, so the node can tune zero-shot at once.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from agent.node_state import NodeState
from schemas import BadInputError, RunFailure
from schemas.certs import check_certificate
from schemas.cli import Port, Seconds, checked
from schemas.messages import check_node_name, key_fingerprint
from schemas.private_files import write_private
from schemas.protocol import CONNECTION, flower_env, flwr_bin, write_connection
from schemas.sharing import MAX_TOP_K


def create_node_key(state_dir: Path) -> tuple[Path, Path, bool]:
    """(private key path, public key path, created) - an existing key is kept."""
    node = NodeState(state_dir)
    keys, private, public = node.keys_dir, node.key_path, node.public_key_path
    if private.exists() and public.exists():
        return private, public, False
    keys.mkdir(parents=True, exist_ok=True)
    os.chmod(keys, 0o700)
    key = ec.generate_private_key(ec.SECP384R1())
    # OpenSSH formats: what flower-supernode and `flwr supernode register` read
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    write_private(private, pem)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
    )
    return private, public, True


def parse_address(server: str) -> tuple[str, int]:
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInputError(f"server {server!r}: expected HOST:PORT, e.g. 127.0.0.1:9093")
    return host, int(port)


def check_ca(ca: Path) -> bytes:
    """The CA certificate's bytes; BadInputError unless it is a PEM certificate valid now."""
    check_certificate(ca, "CA certificate")
    return ca.read_bytes()


def check_server(server: str, ca: Path, timeout: float = 5.0) -> None:
    """One-line errors for an unreachable server and a certificate that does not verify."""
    host, port = parse_address(server)
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the dev certificate names 127.0.0.1/localhost only
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as sock,
            context.wrap_socket(sock, server_hostname=host),
        ):
            return
    except ssl.SSLCertVerificationError as exc:
        raise BadInputError(
            f"server {server}: its certificate does not verify against {ca} ({exc.verify_message})"
        ) from None
    except ssl.SSLError as exc:
        raise RunFailure(f"server {server}: TLS handshake failed ({exc.reason})") from None
    except OSError as exc:
        raise RunFailure(f"server {server}: unreachable ({exc.strerror or exc})") from None


def flwr_home(state_dir: Path) -> Path:
    """A private FLWR_HOME with the federation's connection settings (flwr CLI reads it)."""
    return NodeState(state_dir).flwr_home


def register_key(state_dir: Path, server: str, ca: Path, public_key: Path) -> str:
    """`flwr supernode register`; an already registered key counts as success."""
    home = write_connection(flwr_home(state_dir), server, ca)
    timeout = 300  # the flwr CLI alone takes tens of seconds to start on a busy machine
    try:
        result = subprocess.run(
            [flwr_bin("flwr"), "supernode", "register", str(public_key), CONNECTION],
            capture_output=True,
            text=True,
            env=flower_env(home),
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise RunFailure(
            f"registering the node key with {server}: no answer in {timeout} s"
        ) from None
    text = (result.stdout + result.stderr).strip()
    if result.returncode == 0:
        return "registered"
    if "already" in text.lower():
        return "already registered"
    last = text.splitlines()[-1] if text else f"exit code {result.returncode}"
    raise RunFailure(f"registering the node key with {server} failed: {last}")


@dataclass
class EnrollResult:
    name: str
    device: str
    state_dir: str
    key_fingerprint: str
    key_created: bool
    registration: str
    global_version: int
    experts: list[str]
    model_path: str | None


def enroll(
    *,
    state_dir: Path,
    server: str,
    ca: Path,
    name: str,
    device: str,
    download: bool = True,
    download_timeout: float = 180.0,
    supernode_port: int | None = None,
    share_schedules: bool | None = None,
    share_top_k: int | None = None,
    say: Callable[[str], None] = lambda _text: None,
) -> EnrollResult:
    """Enrol this node (idempotent: running it again keeps the key and the registration).

    Everything the user gave is checked before anything is written or started, so a
    refused enrolment changes nothing here nor what the server records of this node.
    `say` hears each step as it starts (the CLI prints them: enrolling takes a while).
    `share_schedules`/`share_top_k`: opt in to (or out of) schedule sharing (None: keep).
    """
    try:
        check_node_name(name)
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    checked("--timeout", download_timeout, Seconds)
    if supernode_port is not None:
        checked("--port", supernode_port, Port)
    if share_top_k is not None and not 1 <= share_top_k <= MAX_TOP_K:
        raise BadInputError(f"--share-top-k must be 1 to {MAX_TOP_K}, got {share_top_k}")
    parse_address(server)
    check_ca(ca)
    node = NodeState(state_dir)
    config = node.config()
    if config.name and config.name != name:
        raise BadInputError(
            f"{state_dir}: already enrolled as {config.name!r}; use another --state-dir"
        )
    say(f"checking the server {server}")
    check_server(server, ca)
    if supernode_port is not None and download:  # its SuperNode will listen there
        check_port_free(supernode_port)
    _, public, created = create_node_key(state_dir)
    previous, had_config = config, node.config_path.exists()
    update: dict[str, object] = {
        "name": name, "device": device, "server": server, "ca_cert": ca.resolve()
    }  # fmt: skip
    if supernode_port is not None:  # kept: `run` uses it (nodes on one host differ)
        update["supernode_port"] = supernode_port
    if share_schedules is not None:
        update["share_schedules"] = share_schedules
    if share_top_k is not None:
        update["share_top_k"] = share_top_k
    config = config.model_copy(update=update)
    # The SuperNode's ClientApp reads the name from agent.json, so it is written now; a
    # failed enrolment (refused name, no server) puts the old config back, so nothing
    # left here blocks a retry with another name. The key stays: it is registered.
    node.save_config(config)
    try:
        say(f"profiling {device} (cached after the first time)")
        node.profile(device)  # profiled once (cached): the profile the federation sees
        say("registering the node key with the server")
        registration = register_key(state_dir, server, ca, public)
        if download:
            forget_refusal(node)  # a refusal of an earlier name is not this attempt's answer
            say(f"waiting for the first model and experts (up to {download_timeout:.0f} s)")
            fetch_model(state_dir, timeout=download_timeout, port=supernode_port)
    except BaseException:
        forget_refusal(node)
        if had_config:
            node.save_config(previous)
        else:
            node.config_path.unlink(missing_ok=True)  # this attempt wrote the only one
        raise
    state = node.federation_state()
    return EnrollResult(
        name=name,
        device=device,
        state_dir=str(state_dir),
        key_fingerprint=key_fingerprint(public.read_bytes()),
        key_created=created,
        registration=registration,
        global_version=state.global_version,
        experts=state.experts,
        model_path=str(node.model_path) if node.has_model() else None,
    )


def check_port_free(port: int, host: str = "127.0.0.1") -> int:
    """`port` unless something on this host listens there already (one line, exit 2)."""
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise BadInputError(
                f"--port {port} is in use on this host (this node's daemon, or another "
                "node's SuperNode?); give each node on a host its own --port"
            ) from None
    return port


# What flower-supernode's exit codes mean for a node (flwr.supercore.exit.ExitCode; the
# process's status is the code modulo 256: 305 arrives as 49).
SUPERNODE_EXITS = {
    code % 256: why
    for code, why in {
        302: "the node key is not a valid private key",
        303: "node authentication needs TLS",
        305: "it could not connect to the SuperLink (key not registered, or server gone)",
        604: "a path it was given (CA certificate, node key) is not a usable file",
        603: "the CA certificate cannot be used",
        600: "the server address is not valid",
    }.items()
}


def supernode_failure(returncode: int | None, log_path: Path) -> str:
    """Why a SuperNode exited, in one line: its exit code's meaning, else its log's last line."""
    try:
        lines = log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    tail = "\n".join(lines[-20:]).lower()
    if "address already in use" in tail:
        why = "its local port is in use (another SuperNode on this host?)"
    else:
        why = SUPERNODE_EXITS.get((returncode or 0) % 256) or (
            lines[-1].strip()[:200] if lines else "no output"
        )
    return f"the SuperNode exited with code {returncode}: {why}"


def forget_refusal(node: NodeState) -> None:
    state = node.federation_state()
    if state.refused:
        state.refused = None
        node.save_federation_state(state)


def supernode_command(
    state_dir: Path, port: int | None = None, *, leaving: bool = False
) -> list[str]:
    """The flower-supernode command line of this node (TLS + node key auth).

    `leaving`: it replies once and stops (enroll's download); its ClientApp says so, and
    the server confirms it holds the reply (MSG_RECEIVED) before the node goes.
    """
    node = NodeState(state_dir)
    config = node.config()
    if not config.server or not config.ca_cert:
        raise BadInputError(f"{state_dir}: not enrolled (no server); run enroll")
    command = [
        flwr_bin("flower-supernode"),
        "--superlink",
        config.server,
        "--root-certificates",
        str(config.ca_cert),
        "--auth-supernode-private-key",
        str(node.key_path),
        "--node-config",
        f'state-dir="{state_dir.resolve()}"' + (" leaving=true" if leaving else ""),
    ]
    if port is not None:  # its local runtime API; several nodes on one host need distinct ports
        command += ["--host", "127.0.0.1", "--port", str(port)]
    return command


def fetch_model(state_dir: Path, *, timeout: float, port: int | None = None) -> None:
    """Run the SuperNode until the server has delivered a model and a bank (or refused us)."""
    node = NodeState(state_dir)
    before = node.federation_state()
    log_path = node.logs_dir / "enroll-supernode.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            supernode_command(state_dir, port, leaving=True),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=flower_env(flwr_home(state_dir)),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = node.federation_state()
            if state.refused:
                raise BadInputError(f"the server refused this node: {state.refused}")
            if state.last_round > before.last_round and node.has_model():
                # The ClientApp saved the model; the server must pull its reply before the
                # SuperNode goes offline, or Flower answers for it with an error and the
                # round counts this node failed: wait for the server's receipt (it comes
                # once the round is recorded). An older server sends none: the deadline.
                while state.receipt_round < state.last_round and time.monotonic() < deadline:
                    if process.poll() is not None:
                        break
                    time.sleep(0.5)
                    state = node.federation_state()
                return
            if process.poll() is not None:
                why = supernode_failure(process.returncode, log_path)
                raise RunFailure(f"{why}; see {log_path}")
            time.sleep(0.5)
        raise RunFailure(
            f"no model from the server within {timeout:.0f} s (is a run going?); see {log_path}"
        )
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM a process started in its own session and its children (ClientApps), then KILL."""
    import signal

    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass
