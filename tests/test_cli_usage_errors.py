"""Click's usage errors (an option without its value, an unknown option or command, a value
of the wrong type, a missing argument) are one line and exit 2 in both CLIs, not a usage box."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import one_line_error, run_main

from agent.cli import main as agent_main
from server.cli import main as server_main

CASES = [
    ("simoe-agent", ["profile", "-d"], "'-d'"),
    ("simoe-agent", ["tune", "--trials"], "'--trials' requires an argument"),
    ("simoe-agent", ["tune", "--trials", "many"], "'many' is not a valid integer"),
    ("simoe-agent", ["status", "--bogus"], "No such option '--bogus'"),
    ("simoe-agent", ["records", "import"], "Missing argument"),
    ("simoe-agent", ["records", "nosuch"], "No such command 'nosuch'"),
    ("simoe-agent", ["nosuch"], "No such command 'nosuch'"),
    ("simoe-agent", ["--bogus"], "No such option '--bogus'"),
    ("simoe-server", ["start", "--rounds"], "'--rounds' requires an argument"),
    ("simoe-server", ["start", "--port", "x"], "'x' is not a valid integer"),
    ("simoe-server", ["watch", "--bogus"], "No such option '--bogus'"),
    ("simoe-server", ["rounds", "extra"], "unexpected extra argument"),
    ("simoe-server", ["demo", "--gpus"], "'--gpus' requires an argument"),
]


@pytest.mark.parametrize(("prog", "args", "words"), CASES)
def test_a_usage_error_is_one_line_and_exit_2(
    prog: str,
    args: list[str],
    words: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    main = agent_main if prog == "simoe-agent" else server_main
    code, out, err = run_main(main, prog, args, monkeypatch, capsys)
    assert words in one_line_error(prog, code, out, err)


def test_a_bare_group_still_prints_its_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    code, out, err = run_main(agent_main, "simoe-agent", ["records", "--help"], monkeypatch, capsys)
    assert code == 0 and "Usage" in out
    code, out, err = run_main(agent_main, "simoe-agent", ["dataset"], monkeypatch, capsys)
    assert code == 2 and "Usage" in out + err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"device": 42, "trials_per_task": -1}',
         "device must be a valid string (got 42); trials_per_task must be at least 1 (got -1)"),
        ("not json", "the file is not valid JSON"),
    ],
)  # fmt: skip
def test_an_invalid_agent_config_names_each_field_in_plain_words(
    text: str,
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    (tmp_path / "agent.json").write_text(text)
    args = ["status", "--state-dir", str(tmp_path)]
    code, out, err = run_main(agent_main, "simoe-agent", args, monkeypatch, capsys)
    line = one_line_error("simoe-agent", code, out, err)
    assert words in line and "validation error" not in line, line
