"""`simoe-agent probes build`: a real probe file (TVM samples, features only) that the
server's loader accepts, and one-line refusals of a bad --per-task, workload or device."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_line_error, run_main

from agent.cli import main as agent_main
from simoe_model.features import FEATURE_DIM
from simoe_model.probe_file import load_probes

TINY = "matmul:64,64,64"


def test_build_writes_a_file_the_server_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "probes.npz"
    args = ["probes", "build", "--out", str(out), "--workloads", TINY, "--per-task", "4", "--json"]
    code, stdout, err = run_main(agent_main, "simoe-agent", args, monkeypatch, capsys)
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["candidates"] == {TINY: 4} and summary["per_task"] == 4
    (task,) = load_probes(out)  # the loader `simoe-server start --probes` runs
    assert task.n == 4 and task.rows.shape[1] == FEATURE_DIM
    assert task.rows.abs().sum() > 0  # real program features, not a zero placeholder
    # the same seed draws the same sample: the file is a function of its options; it is
    # written at --out exactly, with or without .npz
    again = tmp_path / "again"
    args[3] = str(again)
    assert run_main(agent_main, "simoe-agent", args, monkeypatch, capsys)[0] == 0
    assert np.array_equal(load_probes(again)[0].rows.numpy(), task.rows.numpy())


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--workloads", TINY, "--per-task", "1"], "--per-task 1"),
        (["--workloads", "nosuch:1,2"], "unknown operator 'nosuch'"),
        (["--workloads", TINY, "--device", "cpu"], "--device cpu"),
        (["--workloads", TINY, "--out", "{dir}"], "is a directory"),
    ],
)
def test_bad_options_are_one_line_errors(
    args: list[str],
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    out = tmp_path / "probes.npz"
    argv = ["probes", "build", "--out", str(out), *(a.format(dir=tmp_path) for a in args)]
    code, stdout, err = run_main(agent_main, "simoe-agent", argv, monkeypatch, capsys)
    assert words in one_line_error("simoe-agent", code, stdout, err)
    assert not out.exists()
