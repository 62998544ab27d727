"""Certificates and identity: bad certificates refused in one line, private files, impostors.

- `simoe-server start` refuses an expired certificate, one signed by another CA and a
  key that does not match, before anything starts (exit 2, one line);
- `simoe-agent enroll` refuses an expired CA file, and a server whose certificate has
  expired or comes from another CA, before it creates anything (exit 2, one line);
- key and registry files are created 0600 (key directory 0700);
- a node that claims another node's key fingerprint (to upload an expert under its
  name) is rejected: the server binds an expert to the key the SuperLink authenticated.
"""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import free_port
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from federation_helpers import ToyNode, initial_arrays, toy_similarity

from agent.enroll import create_node_key
from schemas.messages import key_fingerprint
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.roster import Roster
from server.server_app import run_rounds
from server.strategy import SiMoEStrategy
from server.superlink import Certs, init_certs

BIN = Path(sys.executable).parent
NOW = dt.datetime.now(dt.timezone.utc)


def one_line_error(result: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert words in lines[0], lines[0]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def cert_sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Certs]:
    root = tmp_path_factory.mktemp("certs")
    good = init_certs(root / "good")
    other = init_certs(root / "other")
    expired = init_certs(  # the CA is valid, the server certificate expired yesterday
        root / "expired",
        not_before=NOW - dt.timedelta(days=30),
        not_after=NOW - dt.timedelta(days=1),
    )
    mixes = {
        "wrong-ca": Certs(good.ca, other.cert, other.key),  # server cert of another CA
        "wrong-key": Certs(good.ca, good.cert, other.key),
    }
    for name, certs in mixes.items():
        directory = root / name
        directory.mkdir()
        for src, dst in (
            (certs.ca, "ca.pem"),
            (certs.cert, "server.pem"),
            (certs.key, "server.key"),
        ):
            (directory / dst).write_bytes(src.read_bytes())
        mixes[name] = Certs(
            directory / "ca.pem", directory / "server.pem", directory / "server.key"
        )
    expired_ca = root / "expired-ca.pem"
    expired_ca.write_bytes(self_signed(NOW - dt.timedelta(days=400), NOW - dt.timedelta(days=35)))
    return {"good": good, "other": other, "expired": expired, **mixes, "expired-ca": expired_ca}


def self_signed(not_before: dt.datetime, not_after: dt.datetime) -> bytes:
    """A CA certificate valid only in [not_before, not_after]."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("expired", "expired on"),
        ("wrong-ca", "is not signed by"),
        ("wrong-key", "does not match"),
    ],
)
def test_start_refuses_bad_certificates(
    cert_sets: dict[str, Certs], case: str, words: str, tmp_path: Path
) -> None:
    certs_dir = cert_sets[case].cert.parent
    port = free_port()
    result = run(
        "simoe-server", "start", "--certs", str(certs_dir), "--port", str(port),
        "--state-dir", str(tmp_path / "server"),
    )  # fmt: skip
    one_line_error(result, 2, words)
    assert not (tmp_path / "server" / "superlink.sqlite").exists()  # nothing was started


@pytest.fixture()
def tls_server(request: pytest.FixtureRequest) -> Iterator[int]:
    """A TLS listener on loopback presenting the certificate set named by the test's param."""
    certs: Certs = request.getfixturevalue("cert_sets")[request.param]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certs.cert), str(certs.key))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                pass  # the client refused our certificate: what the test wants

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    listener.close()


def enroll(port: int, ca: Path, state_dir: Path) -> subprocess.CompletedProcess[str]:
    return run(
        "simoe-agent", "enroll", "--server", f"127.0.0.1:{port}", "--ca", str(ca),
        "--name", "n1", "--device", "sim:t4", "--state-dir", str(state_dir),
    )  # fmt: skip


def test_enroll_refuses_an_expired_ca_file(cert_sets: dict, tmp_path: Path) -> None:
    one_line_error(enroll(free_port(), cert_sets["expired-ca"], tmp_path), 2, "expired on")
    assert not (tmp_path / "keys").exists() and not (tmp_path / "agent.json").exists()


@pytest.mark.parametrize(
    ("tls_server", "ca", "words"),
    [
        ("expired", "expired", "certificate has expired"),  # its own (valid) CA
        ("other", "good", "does not verify"),  # another CA's certificate
    ],
    indirect=["tls_server"],
)
def test_enroll_refuses_a_server_certificate(
    tls_server: int, ca: str, words: str, cert_sets: dict[str, Certs], tmp_path: Path
) -> None:
    one_line_error(enroll(tls_server, cert_sets[ca].ca, tmp_path), 2, words)
    assert not (tmp_path / "keys").exists() and not (tmp_path / "agent.json").exists()


def test_private_files_are_0600(tmp_path: Path) -> None:
    private, public, created = create_node_key(tmp_path / "node")
    assert created and stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700
    assert not list(private.parent.glob(".*.tmp"))  # written atomically: no temporary left
    assert stat.S_IMODE(init_certs(tmp_path / "certs").key.stat().st_mode) == 0o600
    with Registry(tmp_path / "server" / "registry.sqlite") as registry:
        registry.save_global(initial_arrays(), round_=0)  # WAL files appear with writes
    for suffix in ("", "-wal", "-shm"):
        path = tmp_path / "server" / f"registry.sqlite{suffix}"
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


class KeyedNode(ToyNode):
    """A toy node with a real ECDSA key; `claims` is the fingerprint it says is its own."""

    def __init__(self, *args: object, claims: str | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.private = ec.generate_private_key(ec.SECP384R1())
        self.pem = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.claims = claims

    @property
    def key(self) -> str:
        return self.claims or key_fingerprint(self.pem)


class KeyedGrid(InProcessGrid):
    """An in-process Grid that, like the SuperLink, reports each node's authenticated key."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: dict[int, bytes] = {}

    def get_nodes(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(node_id=n, public_key=self.keys[n]) for n in self.nodes]


def test_a_node_cannot_upload_an_expert_under_another_nodes_name(tmp_path: Path) -> None:
    owner = KeyedNode("gpu", 1000, value=1.0)
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, toy_similarity, k_experts=1)
    grid = KeyedGrid()
    grid.add_node(1, owner.app(), {})
    grid.keys[1] = owner.pem
    roster = Roster()  # one run: the impostor joins it
    run_rounds(grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0, roster=roster)
    before = registry.expert("gpu")
    # the impostor has its own registered key but claims the owner's fingerprint and name
    impostor = KeyedNode("gpu", 9999, value=50.0, claims=owner.key)
    grid.add_node(2, impostor.app(), {})
    grid.keys[2] = impostor.pem
    [outcome] = run_rounds(
        grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0, roster=roster
    )
    assert outcome.accepted == [owner.key]  # only the real owner's update counts
    reasons = [r["reason"] for r in [*registry.refusals(), *registry.rejections()]]
    assert any("does not match the node's registered key" in r for r in reasons)
    after = registry.expert("gpu")
    assert registry.experts()[0].version == 2  # the owner's second round, not the impostor's
    assert not np.array_equal(after["head.w"], np.full((2, 2), 9999, np.float32))
    assert before is not None
