"""Running a CLI's real entry point as a user does: exit code, stdout, stderr; and
`simoe-agent tune` in-process, for its JSON result."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner


def run_main(
    main: Callable[[], None],
    prog: str,
    args: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> tuple[int, str, str]:
    """`prog args...` through `main` (one-line errors and exit codes included)."""
    monkeypatch.setattr(sys, "argv", [prog, *args])
    code = 0
    try:
        main()
    except SystemExit as exited:
        code = int(exited.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(prog: str, code: int, out: str, err: str, exit_code: int = 2) -> str:
    """The single error line of a refused command (and nothing on stdout, no traceback)."""
    assert code == exit_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err and out == ""
    return lines[0]


def tune_json(state: Path, *args: str) -> dict[str, Any]:
    """`simoe-agent tune ARGS --json --state-dir STATE` in-process, which must exit 0; its
    stdout, which must be exactly one JSON document: the result."""
    from agent.cli import app

    result = CliRunner().invoke(app, ["tune", *args, "--json", "--state-dir", str(state)])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)
