"""Every option is checked by its type at the CLI boundary, in the user's words.

Nonsense is refused with one line and exit code 2, before anything is written or
started (issue 25, item 5): no pydantic wording reaches the user.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from cli_helpers import one_line_error, run_main

import agent.enroll as enroll_module
from agent.cli import main as agent_main
from agent.node_state import NodeState
from schemas import AgentConfig, BadInputError
from server.cli import main as server_main
from server.superlink import init_certs


def agent(args: list[str], monkeypatch, capsys) -> str:  # noqa: ANN001
    code, out, err = run_main(agent_main, "simoe-agent", args, monkeypatch, capsys)
    line = one_line_error("simoe-agent", code, out, err)
    assert "Input should" not in line and "invalid " not in line, line
    return line


@pytest.fixture()
def ca(tmp_path: Path) -> Path:
    return init_certs(tmp_path / "certs").ca


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--timeout", "-1"], "--timeout must be more than 0"),
        (["--timeout", "0"], "--timeout must be more than 0"),
        (["--port", "70000"], "--port must be at most 65535 (got 70000)"),
        (["--port", "0"], "--port must be at least 1"),
    ],
)
def test_enroll_refuses_bad_numbers_before_anything(
    tmp_path: Path, ca: Path, options: list[str], words: str, monkeypatch, capsys
) -> None:
    state = tmp_path / "node"
    line = agent(
        ["enroll", "--server", "127.0.0.1:1", "--ca", str(ca), "--name", "n1",
         "--state-dir", str(state), *options],
        monkeypatch, capsys,
    )  # fmt: skip
    assert words in line
    assert not (state / "agent.json").exists() and not (state / "keys").exists()


def test_enroll_on_a_port_in_use_says_so_and_changes_nothing(
    tmp_path: Path, ca: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port in use has its own message (not 'key not registered, or server gone'), and
    the failed re-enroll leaves the node's config, so the device the server records,
    as it was: nothing is written and no SuperNode starts."""
    state = tmp_path / "node"
    node = NodeState(state)
    before = AgentConfig(name="n1", device="sim:t4", server="127.0.0.1:1", ca_cert=ca)
    node.save_config(before)
    started: list[object] = []
    monkeypatch.setattr(enroll_module, "fetch_model", lambda *a, **k: started.append(a))
    monkeypatch.setattr(enroll_module, "check_server", lambda *a, **k: None)  # reachable
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(BadInputError, match=f"--port {port} is in use on this host"):
            enroll_module.enroll(
                state_dir=state, server="127.0.0.1:1", ca=ca, name="n1",
                device="sim:a100-40gb", supernode_port=port,
            )  # fmt: skip
    assert node.config() == before and not started


def test_supernode_failures_are_told_apart(tmp_path: Path) -> None:
    log = tmp_path / "supernode.log"
    log.write_text("ERROR: [Errno 98] Address already in use\n")
    assert "port is in use" in enroll_module.supernode_failure(1, log)
    log.write_text("something\n")
    assert "could not connect to the SuperLink" in enroll_module.supernode_failure(49, log)
    assert "not a usable file" in enroll_module.supernode_failure(604, log)
    assert enroll_module.supernode_failure(9, log).endswith("something")


def test_enroll_port_is_kept_for_run(tmp_path: Path, ca: Path, monkeypatch) -> None:  # noqa: ANN001
    state = tmp_path / "node"
    monkeypatch.setattr(enroll_module, "check_server", lambda *a, **k: None)
    monkeypatch.setattr(enroll_module, "register_key", lambda *a, **k: "registered")
    monkeypatch.setattr(enroll_module, "fetch_model", lambda *a, **k: None)
    monkeypatch.setattr(NodeState, "profile", lambda *a, **k: None)
    steps: list[str] = []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    enroll_module.enroll(
        state_dir=state, server="127.0.0.1:1", ca=ca, name="n1", device="cpu",
        supernode_port=port, say=steps.append,
    )  # fmt: skip
    assert NodeState(state).config().supernode_port == port
    assert any("profiling" in s for s in steps) and any("first model" in s for s in steps)


def test_records_import_refuses_a_device_not_in_the_catalog(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    (tmp_path / "db").mkdir()
    line = agent(
        ["records", "import", str(tmp_path / "db"), "--device", "sim:nope",
         "--state-dir", str(tmp_path / "node")],
        monkeypatch, capsys,
    )  # fmt: skip
    assert "--device sim:nope" in line and "unknown GPU" in line
    assert not (tmp_path / "node" / "store.sqlite").exists()


def test_a_file_as_state_dir_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    afile = tmp_path / "notes.txt"
    afile.write_text("hello")
    line = agent(["status", "--state-dir", str(afile)], monkeypatch, capsys)
    assert "is a file, not a folder" in line
    code, out, err = run_main(
        server_main, "simoe-server", ["status", "--state-dir", str(afile)], monkeypatch, capsys
    )
    assert "is a file, not a folder" in one_line_error("simoe-server", code, out, err)
    assert afile.read_text() == "hello"


@pytest.mark.parametrize("command", ["tune", "submit"])
def test_huge_trials_are_refused_at_once(tmp_path: Path, command: str, monkeypatch, capsys) -> None:
    args = (
        ["tune", "--workload", "matmul:64,64,64", "--device", "cpu"]
        if command == "tune"
        else ["submit", "matmul:64,64,64"]
    )
    line = agent(
        [*args, "--trials", "999999999999999999999", "--state-dir", str(tmp_path / "n")],
        monkeypatch, capsys,
    )  # fmt: skip
    assert "--trials must be at most 100000" in line


def test_pydantic_wording_never_reaches_the_user(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    line = agent(
        ["submit", "matmul:64,64,64", "--trials", "0", "--state-dir", str(tmp_path / "n")],
        monkeypatch, capsys,
    )  # fmt: skip
    assert "--trials must be at least 1 (got 0)" in line
