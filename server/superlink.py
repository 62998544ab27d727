"""Running the federation with real Flower processes: certificates, SuperLink, the app run.

- `init_certs(DIR)`: a development CA and a server certificate for 127.0.0.1/localhost
  (ECDSA P-256, `cryptography`); real deployments pass their own.
- `SuperLink`: `flower-superlink` with TLS, SuperNode authentication, a persistent
  database, no runtime dependency installation, telemetry off.
- `submit_run`: `flwr run` of a small generated Flower app whose components are
  `server.server_app:app` and `agent.client_app:app` (installed packages, so the
  FAB carries only its pyproject), with the registry path and round settings as
  run config.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from schemas import BadInputError, RunFailure
from schemas import children as kids
from schemas.certs import check_certificate
from schemas.private_files import write_private
from schemas.protocol import CONNECTION, flower_env, flwr_bin, write_connection
from server.run_config import RunConfigValue, ServerRunConfig

# How often the SuperLink's SuperExec asks it for a task (Flower's option, default 1 s).
# That SuperExec only starts the ServerApp of a submitted run, once per `start`, yet each
# ask is a request the SuperLink serves, all day long (docs/reliability.md, section 8).
SUPEREXEC_POLL_ENV = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"
SUPEREXEC_POLL_S = 5.0


def superexec_env() -> dict[str, str]:
    """The SuperExec's poll interval; an operator's own setting of it wins."""
    return {SUPEREXEC_POLL_ENV: os.environ.get(SUPEREXEC_POLL_ENV, str(SUPEREXEC_POLL_S))}


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


def check_certs(certs: Certs) -> None:
    """BadInputError (one line, naming the file) unless the three files make a usable set.

    Each is readable PEM, both certificates are valid now, the server certificate is
    signed by the CA and matches the key. Why: a SuperLink given a bad file dies at
    once with a message only in its log, or starts and no node can ever connect.
    """
    ca = check_certificate(certs.ca, "CA certificate")
    cert = check_certificate(certs.cert, "server certificate")
    try:
        key = serialization.load_pem_private_key(certs.key.read_bytes(), password=None)
    except OSError as exc:
        raise BadInputError(f"{certs.key}: cannot read the server key ({exc.strerror})") from None
    except (ValueError, TypeError):
        raise BadInputError(
            f"{certs.key}: the server key is not an unencrypted PEM private key"
        ) from None
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise BadInputError(
            f"{certs.cert}: the server certificate is not signed by {certs.ca}"
        ) from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, public) != cert.public_key().public_bytes(der, public):
        raise BadInputError(f"{certs.key}: the server key does not match {certs.cert}")


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_private(path, data)


def init_certs(
    directory: Path,
    *,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> Certs:
    """A dev CA and a server certificate signed by it; existing files are kept.

    Both are valid from 5 minutes ago for a year; `not_before`/`not_after` set the
    server certificate's window instead (the tests make an expired one).
    """
    certs = Certs(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    if certs.ca.exists() and certs.cert.exists() and certs.key.exists():
        return certs
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    valid_from, valid_to = now - dt.timedelta(minutes=5), now + dt.timedelta(days=365)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "SiMoE dev CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or valid_from)
        .not_valid_after(not_after or valid_to)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(certs.key, server_key)
    certs.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    certs.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return certs


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def wait_port(
    host: str, port: int, timeout: float, process: subprocess.Popen[bytes] | None = None
) -> bool:
    """True once something listens on host:port; False at the deadline or if `process` exits."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if port_open(host, port):
            return True
        if process is not None and process.poll() is not None:
            return False  # it died (bad certificate, port taken): no point waiting
        time.sleep(0.3)
    return False


class SuperLink:
    """A flower-superlink process with TLS, node auth and a persistent database."""

    def __init__(
        self,
        state_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 9093,
        certs: Certs | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.host = host
        self.port = port
        self.certs = certs or init_certs(state_dir / "certs")
        self.flwr_home = state_dir / "flwr"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            flwr_bin("flower-superlink"),
            "--ssl-ca-certfile", str(self.certs.ca),
            "--ssl-certfile", str(self.certs.cert),
            "--ssl-keyfile", str(self.certs.key),
            "--enable-supernode-auth",
            "--database", str(self.state_dir / "superlink.sqlite"),
            "--disable-runtime-dependency-installation",
            "--host", self.host,
            "--port", str(self.port),
        ]  # fmt: skip

    @property
    def pid_file(self) -> Path:
        """Who supervises this state directory's SuperLink, and the processes it started."""
        return self.state_dir / "server.json"

    def record(self, state: str = "running") -> None:
        """Write the pid file: this process and the SuperLink's whole tree (its ServerApps
        come and go, so the supervisor calls this again as it watches)."""
        children: list[kids.Child] = []
        if state == "running" and self.process is not None and self.process.poll() is None:
            link = kids.child("superlink", self.process.pid)
            children = [link, *kids.descendants(self.process.pid)] if link else []
        data = {
            "state": state,
            "supervisor": kids.child("simoe-server", os.getpid()),
            "address": self.address,
            "children": children,
        }
        write_private(self.pid_file, json.dumps(data, default=_dump, indent=2).encode())

    def stop_orphans(self) -> list[int]:
        """Stop what a killed predecessor on this state directory left running.

        BadInputError if that predecessor still runs: two servers on one registry.
        """
        try:
            previous = json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return []
        owner = previous.get("supervisor")
        if (
            owner
            and owner["pid"] != os.getpid()
            and kids.is_alive(kids.Child.model_validate(owner))
        ):
            raise BadInputError(
                f"{self.state_dir}: a server runs already on this state dir (pid "
                f"{owner['pid']}, {previous.get('address')}); stop it first"
            )
        records = [kids.Child.model_validate(c) for c in previous.get("children") or []]
        return kids.stop_orphans(records)

    def start(self, timeout: float = 60.0) -> SuperLink:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.stop_orphans()
        if port_open(self.host, self.port):
            raise RunFailure(f"{self.address} is in use already (another SuperLink?)")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        write_connection(self.flwr_home, self.address, self.certs.ca)
        log_path = self.state_dir / "logs" / "superlink.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**flower_env(self.flwr_home), **superexec_env()},
                start_new_session=True,
                umask=0o077,  # its database (node keys, messages) is for this user only
            )
        if not wait_port(self.host, self.port, timeout, self.process) or (
            self.process.poll() is not None
        ):
            self.stop()
            lines = log_path.read_text(errors="replace").strip().splitlines()
            why = f" ({lines[-1].strip()[:200]})" if lines else ""
            raise RunFailure(
                f"the SuperLink did not come up on {self.address}{why}; see {log_path}"
            )
        self.record()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the SuperLink and its children (SuperExec, ServerApp), then KILL."""
        self._end_tree(graceful=True, timeout=timeout)
        if self.process is not None:
            self.record("stopped")

    def kill(self) -> None:
        """SIGKILL the SuperLink and every process under it at once: a crash (restart test)."""
        self._end_tree(graceful=False)

    def _end_tree(self, *, graceful: bool, timeout: float = 15.0) -> None:
        """End the SuperLink's whole process tree: its group and its other descendants.

        Flower's SuperExec starts `flwr-serverapp` in a session of its own, out of the
        group's reach: left alive, an old ServerApp goes on writing the registry next to
        the new one after a restart. The descendants are listed first (once the
        SuperLink is gone they belong to init); psutil checks each process's start
        time, so a reused pid is safe.
        """
        import psutil

        if self.process is None:
            return
        try:
            descendants = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        if graceful and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=timeout)
        with contextlib.suppress(ProcessLookupError):  # the group, or what outlived SIGTERM
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for child in descendants:
            with contextlib.suppress(psutil.Error):
                child.terminate() if graceful else child.kill()
        _, alive = psutil.wait_procs(descendants, timeout=5)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(alive, timeout=5)

    def serverapp_running(self) -> bool:
        """Whether a ServerApp process (`flwr-serverapp`) runs under this SuperLink.

        Flower ends a run whose ServerApp misses its heartbeats (a 5 s call timeout:
        a machine loaded enough makes it happen); the SuperLink itself lives on.
        """
        import psutil

        if self.process is None or self.process.poll() is not None:
            return False
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            return False
        for child in children:
            try:
                if any("flwr-serverapp" in part for part in child.cmdline()):
                    return True
            except psutil.Error:
                continue
        return False


def _dump(value: object) -> object:
    if isinstance(value, kids.Child):
        return value.model_dump()
    raise TypeError(type(value).__name__)


def write_app(directory: Path) -> Path:
    """The Flower app the SuperLink runs: only a pyproject naming installed components."""
    directory.mkdir(parents=True, exist_ok=True)
    defaults = ServerRunConfig().to_run_config()  # TOML values: a bool is `true`/`false`
    config_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in defaults.items())
    (directory / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["hatchling"]\n'
        'build-backend = "hatchling.build"\n\n'
        "[project]\n"
        'name = "simoeapp"\n'
        'version = "1.0.0"\n'
        'description = "SiMoE federation: shared parts averaged, experts in a registry"\n'
        'license = "Apache-2.0"\n'
        "dependencies = []\n\n"
        "[tool.flwr.app]\n"
        'publisher = "simoe"\n\n'
        "[tool.flwr.app.components]\n"
        'serverapp = "server.server_app:app"\n'
        'clientapp = "agent.client_app:app"\n\n'
        "[tool.flwr.app.config]\n"
        f"{config_lines}\n"
    )
    return directory


def run_config_argument(config: ServerRunConfig) -> str:
    """`flwr run --run-config`'s value: TOML pairs, so a bool travels as Flower's bool."""
    return " ".join(f"{k}={json.dumps(v)}" for k, v in config.to_run_config().items())


def submit_run(
    state_dir: Path,
    address: str,
    ca: Path,
    run_config: ServerRunConfig | dict[str, RunConfigValue],
) -> str:
    """`flwr run` the SiMoE app; returns the run id (as text: it is a 64-bit number).

    `run_config`: the settings, or some run-config keys (the others keep the defaults).
    """
    if not isinstance(run_config, ServerRunConfig):
        unknown = set(run_config) - set(ServerRunConfig.keys())
        if unknown:
            raise BadInputError(f"unknown run settings {sorted(unknown)}")
        run_config = ServerRunConfig.from_run_config(run_config)
    flwr_home = state_dir / "flwr"
    write_connection(flwr_home, address, ca)
    app_dir = write_app(state_dir / "simoeapp")
    overrides = run_config_argument(run_config)
    command = [flwr_bin("flwr"), "run", str(app_dir), CONNECTION, "--format", "json"]
    if overrides:
        command += ["--run-config", overrides]
    result = subprocess.run(
        command, capture_output=True, text=True, env=flower_env(flwr_home), timeout=120
    )
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError:
        data = {}
    if result.returncode != 0 or not data.get("success", False):
        text = (result.stdout + result.stderr).strip().splitlines()
        raise RunFailure(f"flwr run failed: {text[-1] if text else result.returncode}")
    return str(data.get("run-id", data.get("run_id", "")))
