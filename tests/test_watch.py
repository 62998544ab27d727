"""`simoe-server watch`: the fleet in one screen, refreshed in place (issue 25, the live view).

A registry filled by a toy federation (two nodes, one sending NaN), shown once; then the
real command in a real terminal (tmux), which must redraw in place as rounds go by.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_main
from federation_helpers import ToyNode, initial_arrays, toy_similarity

from server.cli import main as server_main
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.roster import Roster
from server.server_app import run_rounds
from server.strategy import SiMoEStrategy

SERVER = str(Path(sys.executable).with_name("simoe-server"))


def fleet(state: Path) -> tuple[InProcessGrid, SiMoEStrategy, Registry]:
    registry = Registry(state / "registry.sqlite")
    strategy = SiMoEStrategy(registry, toy_similarity)
    grid = InProcessGrid()
    good = ToyNode("t4-good", 8000)
    bad = ToyNode("v100-bad", 14000, corrupt=lambda a: {k: v * np.nan for k, v in a.items()})
    for i, node in enumerate((good, bad)):
        grid.add_node(1000 + i, node.app(), {"state-dir": str(state / node.name)})
    return grid, strategy, registry


def test_watch_once_shows_nodes_round_experts_and_rejections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    grid, strategy, registry = fleet(tmp_path)
    run_rounds(grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0)
    registry.close()
    monkeypatch.setenv("COLUMNS", "120")
    code, out, err = run_main(
        server_main, "simoe-server", ["watch", "--state-dir", str(tmp_path), "--once"],
        monkeypatch, capsys,
    )  # fmt: skip
    assert code == 0, err
    for words in ("2 nodes", "round 1: done", "t4-good", "sim:t4-good", "s ago",
                  "experts", "recent rejections", "v100-bad"):  # fmt: skip
        assert words in out, (words, out)


def test_watch_without_a_registry_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    code, out, err = run_main(
        server_main, "simoe-server", ["watch", "--state-dir", str(tmp_path)], monkeypatch, capsys
    )
    assert code == 2 and "no registry" in err and len(err.strip().splitlines()) == 1


def pane(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal)")
def test_watch_redraws_in_place_in_a_real_terminal(tmp_path: Path) -> None:
    grid, strategy, registry = fleet(tmp_path)
    roster = Roster()  # one run, continued for round 2
    run_rounds(grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0, roster=roster)
    session = f"simoe-watch-{tmp_path.name}"[:40]
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "50",
         SERVER, "watch", "--state-dir", str(tmp_path), "--interval", "0.5"],
        check=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "round 1" not in pane(session) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "round 1" in pane(session), pane(session)
        run_rounds(grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0, roster=roster)
        deadline = time.monotonic() + 30
        while "round 2" not in pane(session) and time.monotonic() < deadline:
            time.sleep(0.5)
        screen = pane(session)
        assert "round 2" in screen and "round 1:" not in screen, screen  # redrawn, not appended
        assert screen.count("SiMoE fleet") == 1, screen  # one frame on screen, in place
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
        registry.close()
