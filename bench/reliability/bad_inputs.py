"""Malformed command lines and files through the real CLIs: what does each one get?

`python -m bench.reliability.bad_inputs [--out docs/results/bad_inputs]` runs every case below
as a user would (a fresh process of `simoe-agent` / `simoe-server`, in a scratch
directory), and records its exit code, the first line of its error output, how many
lines it printed on stderr and whether a traceback appeared. The expectation
(the project's convention): exit 2 for bad input (1 for a failure at run time),
one line, no traceback. Writes OUT.json and OUT.md (the table in docs/reliability.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BIN = Path(sys.executable).parent
AGENT, SERVER = str(BIN / "simoe-agent"), str(BIN / "simoe-server")


@dataclass
class Outcome:
    case: str
    command: str
    exit_code: int
    first_line: str
    stderr_lines: int
    traceback: bool
    seconds: float
    when: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code in (1, 2) and self.stderr_lines == 1 and not self.traceback


def _tls_listener(cert: Path, key: Path) -> int:
    """A TLS server on loopback that presents `cert` (for enroll's certificate checks)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                pass

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def _expired_ca(now: dt.datetime) -> bytes:
    """A self-signed CA certificate that expired a month ago."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "expired CA")])
    builder = x509.CertificateBuilder().subject_name(name).issuer_name(name)
    cert = (
        builder.public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=400))
        .not_valid_after(now - dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def _files(root: Path) -> dict[str, Path]:
    """The malformed files the cases use."""
    from server.registry import Registry
    from server.superlink import init_certs

    now = dt.datetime.now(dt.timezone.utc)
    good = init_certs(root / "certs-good")
    other = init_certs(root / "certs-other")
    expired = init_certs(
        root / "certs-expired",
        not_before=now - dt.timedelta(days=30),
        not_after=now - dt.timedelta(days=1),
    )
    wrong_ca = root / "certs-wrong-ca"
    wrong_ca.mkdir()
    for src, name in ((good.ca, "ca.pem"), (other.cert, "server.pem"), (other.key, "server.key")):
        (wrong_ca / name).write_bytes(src.read_bytes())
    files = {
        "text": root / "notes.txt",
        "onnx": root / "garbage.onnx",
        "store-dir": root / "node-text-store",
        "config-dir": root / "node-bad-config",
        "model": root / "corrupt.pt",
        "empty-server": root / "server-empty",
        "server": root / "server",
        "existing": root / "existing.sqlite",
    }
    files["text"].write_text("not a certificate, not a database\n")
    files["expired-ca"] = root / "expired-ca.pem"
    files["expired-ca"].write_bytes(_expired_ca(now))
    files["onnx"].write_text("this is not an ONNX model\n")
    files["store-dir"].mkdir()
    (files["store-dir"] / "store.sqlite").write_text("plain text, not SQLite\n")
    files["config-dir"].mkdir()
    (files["config-dir"] / "agent.json").write_text('{"device": 42, "trials_per_task": -1}')
    files["model"].write_bytes(b"\x80\x02garbage")
    files["empty-server"].mkdir()
    Registry(files["server"] / "registry.sqlite").close()
    files["existing"].write_text("keep me")
    files["foreign-server"] = root / "server-foreign"  # another program's SQLite file
    files["foreign-server"].mkdir()
    conn = sqlite3.connect(files["foreign-server"] / "registry.sqlite")
    conn.execute("create table visits (url text)")
    conn.commit()
    conn.close()
    files["damaged-server"] = damaged_registry(root / "server-damaged" / "registry.sqlite").parent
    files["no-ca-node"] = root / "node-no-ca"  # enrolled, its CA file since deleted
    files["no-ca-node"].mkdir()
    (files["no-ca-node"] / "agent.json").write_text(
        json.dumps({"name": "n1", "server": "127.0.0.1:1", "ca_cert": str(root / "gone.pem")})
    )
    files.update(
        {
            "ca": good.ca,
            "certs-expired": expired.ca.parent,
            "certs-wrong-ca": wrong_ca,
            "certs-missing": root / "no-such-certs",
            "expired-port": Path(str(_tls_listener(expired.cert, expired.key))),
            "other-port": Path(str(_tls_listener(other.cert, other.key))),
        }
    )
    return files


def damaged_registry(path: Path) -> Path:
    """A registry at `path` whose last table pages are overwritten (header and schema intact):
    what a failing disk leaves; SQLite's quick_check finds it."""
    from server.registry import Registry

    with Registry(path) as registry:
        registry.db.conn.execute("create table filler (x)")
        registry.db.conn.executemany("insert into filler values (?)", [("x" * 200,)] * 500)
        registry.db.conn.commit()
    conn = sqlite3.connect(path)
    conn.execute("pragma wal_checkpoint(truncate)")
    conn.execute("pragma journal_mode = delete")
    conn.close()
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    pages = len(data) // size
    for page in range(pages - 5, pages - 1):
        data[page * size + 10 : page * size + 60] = b"\xff" * 50
    path.write_bytes(bytes(data))
    return path


def cases(f: dict[str, Path], scratch: Path) -> list[tuple[str, list[str]]]:
    """(what is wrong, the command line)."""
    node = ["--state-dir", str(scratch / "node")]
    tune = [AGENT, "tune", *node]
    mm = ["-w", "matmul:64,64,64"]
    enroll = [AGENT, "enroll", "--name", "n1", "--device", "sim:t4", *node]
    return [
        ("tune: no workload", tune),
        ("tune: zero dimension", [*tune, "-w", "matmul:0,64,64"]),
        ("tune: too few dimensions", [*tune, "-w", "matmul:64"]),
        ("tune: unknown operator", [*tune, "-w", "conv9:1,2,3"]),
        ("tune: absurd size", [*tune, "-w", "matmul:99999999,99999999,99999999"]),
        ("tune: --trials 0", [*tune, *mm, "--trials", "0"]),
        ("tune: --trials -3", [*tune, *mm, "--trials", "-3"]),
        ("tune: unknown simulated GPU", [*tune, *mm, "-d", "sim:no-such-gpu"]),
        ("tune: a GPU this machine lacks", [*tune, *mm, "-d", "cuda:7"]),
        ("tune: unknown cost model", [*tune, *mm, "--cost-model", "magic"]),
        ("tune: --population 0", [*tune, *mm, "--population", "0"]),
        ("tune: missing model file", [*tune, "-m", str(scratch / "missing.onnx")]),
        ("tune: a text file as .onnx", [*tune, "-m", str(f["onnx"])]),
        ("profile: an option it lacks (-d)", [AGENT, "profile", "-d", "tpu:0", *node]),
        ("profile: unknown device", [AGENT, "profile", "--device", "tpu:0", *node]),
        ("tune: --trials without its value", [AGENT, "tune", *node, "--trials"]),
        ("tune: --trials not a number", [AGENT, "tune", *node, "--trials", "many"]),
        ("agent: an unknown command", [AGENT, "nosuch"]),
        ("records import: no directory", [AGENT, "records", "import", *node]),
        ("server: an unknown option", [SERVER, "status", "--bogus"]),
        ("server start: --port without its value", [SERVER, "start", "--port"]),
        ("status --watch: --json", [AGENT, "status", "--watch", "--json", *node]),
        ("status --watch: --interval 0", [AGENT, "status", "--watch", "--interval", "0", *node]),
        (
            "status --watch: no node there",
            [AGENT, "status", "--watch", "--state-dir", str(scratch / "no-node")],
        ),
        ("records: store is a text file", [AGENT, "records", "--state-dir", str(f["store-dir"])]),
        ("status: invalid agent.json", [AGENT, "status", "--state-dir", str(f["config-dir"])]),
        ("evaluate: corrupt model file", [AGENT, "evaluate", "--model", str(f["model"]), *node]),
        ("submit: malformed workload", [AGENT, "submit", "matmul:64", *node]),
        ("submit: missing .onnx", [AGENT, "submit", str(scratch / "missing.onnx"), *node]),
        ("enroll: address without port", [*enroll, "--server", "localhost", "--ca", str(f["ca"])]),
        ("enroll: CA is a text file", [*enroll, "--server", "127.0.0.1:9", "--ca", str(f["text"])]),
        (
            "enroll: expired CA file",
            [*enroll, "--server", "127.0.0.1:9", "--ca", str(f["expired-ca"])],
        ),
        (
            "enroll: bad node name",
            [
                AGENT,
                "enroll",
                "--name",
                "no spaces!",
                "--server",
                "127.0.0.1:9",
                "--ca",
                str(f["ca"]),
                *node,
            ],
        ),
        ("enroll: nothing listening", [*enroll, "--server", "127.0.0.1:9", "--ca", str(f["ca"])]),
        (
            "enroll: server cert expired",
            [
                *enroll,
                "--server",
                f"127.0.0.1:{f['expired-port']}",
                "--ca",
                str(f["certs-expired"] / "ca.pem"),
            ],
        ),
        (
            "enroll: server cert of another CA",
            [*enroll, "--server", f"127.0.0.1:{f['other-port']}", "--ca", str(f["ca"])],
        ),
        ("server status: no registry", [SERVER, "status", "--state-dir", str(f["empty-server"])]),
        (
            "server similarity: empty registry",
            [SERVER, "similarity", "--state-dir", str(f["server"])],
        ),
        (
            "start: certs dir missing",
            [
                SERVER,
                "start",
                "--certs",
                str(f["certs-missing"]),
                "--state-dir",
                str(scratch / "s1"),
            ],
        ),
        (
            "start: expired certificate",
            [
                SERVER,
                "start",
                "--certs",
                str(f["certs-expired"]),
                "--state-dir",
                str(scratch / "s2"),
            ],
        ),
        (
            "start: certificate of another CA",
            [
                SERVER,
                "start",
                "--certs",
                str(f["certs-wrong-ca"]),
                "--state-dir",
                str(scratch / "s3"),
            ],
        ),
        (
            "backup: target exists",
            [SERVER, "backup", str(f["existing"]), "--state-dir", str(f["server"])],
        ),
        (
            "backup: no registry",
            [SERVER, "backup", str(scratch / "b.sqlite"), "--state-dir", str(f["empty-server"])],
        ),
        (
            "restore: a text file",
            [SERVER, "restore", str(f["text"]), "--state-dir", str(f["server"])],
        ),
        (
            "restore: missing file",
            [SERVER, "restore", str(scratch / "nope.sqlite"), "--state-dir", str(f["server"])],
        ),
        (
            "demo: newcomer is one of the nodes",
            [SERVER, "demo", "--gpus", "k80,t4", "--new-gpu", "t4", "--out", str(scratch / "demo")],
        ),
        # issue 25: nonsense once accepted, and the checks added with it
        ("tune: --trials 999999999999999999999", [*tune, *mm, "--trials", "9" * 21]),
        ("submit: --trials 0", [AGENT, "submit", "matmul:64,64,64", "--trials", "0", *node]),
        (
            "submit: --trials huge",
            [AGENT, "submit", "matmul:64,64,64", "--trials", "9" * 21, *node],
        ),
        # a job's search settings (stop 38: `submit --seed/--population`, `demo --fleet-seed`)
        (
            "submit: --population 1",
            [AGENT, "submit", "matmul:64,64,64", "--population", "1", *node],
        ),
        ("submit: --seed -1", [AGENT, "submit", "matmul:64,64,64", "--seed", "-1", *node]),
        (
            "demo: --fleet-seed -1",
            [SERVER, "demo", "--fleet-seed", "-1", "--out", str(scratch / "demo")],
        ),
        (
            "enroll: --timeout -1",
            [*enroll, "--server", "127.0.0.1:1", "--ca", str(f["ca"]), "--timeout", "-1"],
        ),
        (
            "enroll: --port 70000",
            [*enroll, "--server", "127.0.0.1:1", "--ca", str(f["ca"]), "--port", "70000"],
        ),
        (
            "records import: --device sim:nope",
            [AGENT, "records", "import", str(f["empty-server"]), "--device", "sim:nope", *node],
        ),
        ("status: --state-dir a file", [AGENT, "status", "--state-dir", str(f["text"])]),
        ("run: its CA file is gone", [AGENT, "run", "--state-dir", str(f["no-ca-node"])]),
        ("server status: --state-dir a file", [SERVER, "status", "--state-dir", str(f["text"])]),
        (
            "server status: another program's SQLite file",
            [SERVER, "status", "--state-dir", str(f["foreign-server"])],
        ),
        (
            "server nodes: a damaged registry",
            [SERVER, "nodes", "--state-dir", str(f["damaged-server"])],
        ),
        (
            "restore: another program's SQLite file",
            [
                SERVER,
                "restore",
                str(f["foreign-server"] / "registry.sqlite"),
                "--state-dir",
                str(scratch / "s9"),
            ],
        ),
        ("start: a damaged registry", [SERVER, "start", "--state-dir", str(f["damaged-server"])]),
        ("watch: no registry", [SERVER, "watch", "--state-dir", str(f["empty-server"])]),
        (
            "watch: --interval 0",
            [SERVER, "watch", "--interval", "0", "--state-dir", str(f["server"])],
        ),
        (
            "demo: a GPU that does not exist",
            [SERVER, "demo", "--gpus", "k80,nosuch", "--out", str(scratch / "demo2")],
        ),
        *(
            (
                f"start: {' '.join(option)}",
                [SERVER, "start", *option, "--state-dir", str(scratch / f"s-{option[0][2:]}")],
            )
            for option in (
                ["--rounds", "-1"],
                ["--k-experts", "0"],
                ["--k-experts", "-3"],
                ["--epochs", "0"],
                ["--min-nodes", "0"],
                ["--idle-probe", "-1"],
            )
        ),
    ]


def run_case(case: str, command: list[str], timeout: float) -> Outcome:
    started = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        code, stderr = result.returncode, result.stderr
    except subprocess.TimeoutExpired:
        code, stderr = -1, f"(no answer within {timeout:.0f} s)"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    shown = " ".join(Path(c).name if c.startswith("/") else c for c in command)
    return Outcome(
        case=case,
        command=shown,
        exit_code=code,
        first_line=lines[0].strip() if lines else "",
        stderr_lines=len(lines),
        traceback="Traceback" in stderr,
        seconds=round(time.perf_counter() - started, 1),
        when=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )


def markdown(outcomes: list[Outcome]) -> str:
    good = sum(o.ok for o in outcomes)
    stamps = sorted(o.when for o in outcomes if o.when)
    when = stamps[0] if stamps[0] == stamps[-1] else f"{stamps[0]} to {stamps[-1]}"
    out = [
        f"Bad inputs through the real CLIs ({when}; `python -m bench.reliability.bad_inputs`): "
        f"{good} of {len(outcomes)} got exit 1 or 2, one line on stderr, no traceback.",
        "",
        "| case | exit | stderr lines | traceback | first line |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        line = o.first_line.replace("|", "\\|")
        if len(line) > 160:
            line = line[:157] + "..."
        out.append(
            f"| {o.case} | {o.exit_code} | {o.stderr_lines} | {'yes' if o.traceback else 'no'} "
            f"| {line} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/bad_inputs"))
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="rerun only the cases whose name contains this (repeatable); the other rows "
        "of an existing OUT.json are kept",
    )
    args = parser.parse_args(argv)
    json_path = args.out.with_suffix(".json")
    kept: dict[str, Outcome] = {}
    if args.only and json_path.exists():
        kept = {o["case"]: Outcome(**o) for o in json.loads(json_path.read_text())["outcomes"]}
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="simoe-bad-inputs-") as tmp:
        root = Path(tmp)
        files = _files(root)
        for case, command in cases(files, root / "scratch"):
            if args.only and not any(word in case for word in args.only) and case in kept:
                outcomes.append(kept[case])
                continue
            outcome = run_case(case, command, args.timeout)
            mark = "ok " if outcome.ok else "BAD"
            print(f"{mark} {case}: {outcome.exit_code} {outcome.first_line}")
            outcomes.append(outcome)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"outcomes": [asdict(o) for o in outcomes]}, indent=2))
    args.out.with_suffix(".md").write_text(markdown(outcomes))
    print(f"{sum(o.ok for o in outcomes)} of {len(outcomes)} as expected; {args.out}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
