"""The registry is checked on open (issue 25, item 4).

Every open runs SQLite's cheap `quick_check`; `simoe-server check` runs the full
`integrity_check`; a read-only command never writes (not even SiMoE's schema into
another program's SQLite file); `restore` refuses a file that is not a registry.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import one_line_error, run_main

from bench.reliability.bad_inputs import damaged_registry
from server.cli import main as server_main
from server.registry import Registry


def server(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:  # noqa: ANN001
    return run_main(server_main, "simoe-server", args, monkeypatch, capsys)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def foreign(path: Path) -> Path:
    """Another program's SQLite file (say, a browser's history)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("create table visits (url text, at text)")
    conn.execute("insert into visits values ('x', 'y')")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("command", ["status", "nodes", "rounds", "experts"])
def test_a_read_command_on_a_foreign_sqlite_file_refuses_and_writes_nothing(
    tmp_path: Path, command: str, monkeypatch, capsys
) -> None:
    path = foreign(tmp_path / "server" / "registry.sqlite")
    before = digest(path)
    code, out, err = server([command, "--state-dir", str(path.parent)], monkeypatch, capsys)
    assert "not a SiMoE registry (its tables: visits)" in one_line_error(
        "simoe-server", code, out, err
    )
    assert digest(path) == before  # no schema written into it
    assert sorted(p.name for p in path.parent.iterdir()) == ["registry.sqlite"]


def test_restore_refuses_a_file_that_is_not_a_registry(tmp_path: Path, monkeypatch, capsys) -> None:
    other = foreign(tmp_path / "other" / "registry.sqlite")
    server(["status", "--state-dir", str(other.parent)], monkeypatch, capsys)  # reads: no harm
    code, out, err = server(
        ["restore", str(other), "--state-dir", str(tmp_path / "server")], monkeypatch, capsys
    )
    assert "not a SiMoE registry" in one_line_error("simoe-server", code, out, err)
    assert not (tmp_path / "server" / "registry.sqlite").exists()


def test_a_damaged_registry_is_found_on_open_and_by_check(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    path = damaged_registry(tmp_path / "server" / "registry.sqlite")
    for command in ("status", "nodes"):
        code, out, err = server([command, "--state-dir", str(path.parent)], monkeypatch, capsys)
        line = one_line_error("simoe-server", code, out, err, exit_code=1)
        assert str(path) in line and "the registry is damaged" in line and "quick_check" in line
    code, out, err = server(["check", "--state-dir", str(path.parent)], monkeypatch, capsys)
    assert code == 1 and "damaged" in err
    with pytest.raises(Exception, match="damaged"):
        Registry(path)  # the ServerApp's open too


def test_start_refuses_a_damaged_registry_before_starting_anything(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    path = damaged_registry(tmp_path / "server" / "registry.sqlite")
    code, out, err = server(
        ["start", "--port", "1", "--state-dir", str(path.parent)], monkeypatch, capsys
    )
    assert "the registry is damaged" in one_line_error("simoe-server", code, out, err, 1)
    assert not (path.parent / "server.json").exists()  # no SuperLink was started
    assert not (path.parent / "certs").exists()  # nor anything written


def test_check_of_a_sound_registry_says_ok(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    Registry(tmp_path / "registry.sqlite").close()
    code, out, _ = server(["check", "--state-dir", str(tmp_path), "--json"], monkeypatch, capsys)
    assert code == 0 and '"integrity_check": "ok"' in out
