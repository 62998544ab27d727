"""An idle federation stays idle (issue 25, item 7): rounds start only on news.

News is a newcomer, new records (a reply's num-examples changed), a node still tuning
(`queued-jobs` > 0) or an operator's request (`simoe-server round`); otherwise the loop
waits up to `idle_probe_s`. Run in process with toy nodes and a fast poll.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from federation_helpers import ToyNode, initial_arrays, toy_similarity

import server.server_app as server_app
from schemas.messages import BUSY_METRIC
from server.idle import request_round
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.server_app import run_rounds
from server.strategy import SiMoEStrategy

INTERVAL = 0.05  # --round-interval: without the idle rule, a round every 50 ms


class SlowJoinGrid(InProcessGrid):
    """Nodes added `hidden` come online when the test says so (from another thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden: set[int] = set()

    def get_node_ids(self):  # noqa: ANN201
        return [n for n in list(self.nodes) if n not in self.hidden]


def later(seconds: float, action) -> None:  # noqa: ANN001
    timer = threading.Timer(seconds, action)
    timer.daemon = True
    timer.start()


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "JOIN_POLL_S", 0.05)
    monkeypatch.setattr(server_app, "IDLE_JOIN_POLL_S", 0.05, raising=False)


def test_rounds_start_only_on_news(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, toy_similarity)
    grid = SlowJoinGrid()
    grid.add_node(1000, ToyNode("a", 1000).app(), {"state-dir": str(tmp_path / "a")})
    stop = threading.Event()
    started: list[float] = []

    def on_round(outcome) -> None:  # noqa: ANN001 - RoundOutcome
        started.append(time.monotonic())
        if len(started) == 2:  # nothing new since round 1: idle; an operator asks for one
            later(0.6, lambda: request_round(registry.path))
        elif len(started) == 3:  # idle again; a newcomer comes online
            grid.add_node(1001, ToyNode("b", 2000).app(), {"state-dir": str(tmp_path / "b")})
            grid.hidden.add(1001)
            later(0.6, lambda: grid.hidden.discard(1001))
        elif len(started) == 5:  # the newcomer's data is in: idle for good
            later(1.5, stop.set)

    outcomes = run_rounds(
        grid, strategy, initial_arrays(), num_rounds=0, wait_nodes_s=0, stop=stop,
        on_round=on_round, min_interval_s=INTERVAL, idle_probe_s=3600,
    )  # fmt: skip
    gaps = [b - a for a, b in zip(started, started[1:], strict=False)]
    assert len(outcomes) == 5, gaps  # 1 (start), 2 (saw nothing new), request, join, 5
    assert gaps[0] < 0.5  # round 1 brought news (a first reply): the next at the interval
    assert gaps[1] >= 0.55 and gaps[2] >= 0.55  # idle until the request, until the newcomer
    assert gaps[3] < 0.5  # the newcomer's first reply was news
    assert not (tmp_path / "round.request").exists()  # the request was taken


def test_a_node_still_tuning_keeps_rounds_going(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, toy_similarity)
    grid = InProcessGrid()
    busy = ToyNode("a", 1000, extra_metrics={BUSY_METRIC: 1.0})
    grid.add_node(1000, busy.app(), {"state-dir": str(tmp_path / "a")})
    outcomes = run_rounds(
        grid, strategy, initial_arrays(), num_rounds=4, wait_nodes_s=0,
        min_interval_s=INTERVAL, idle_probe_s=3600,
    )  # fmt: skip
    assert len(outcomes) == 4  # none waited an idle probe (the test would hang an hour)


class CountingGrid(InProcessGrid):
    """Counts the looks for online nodes (each one a request the SuperLink serves)."""

    def __init__(self) -> None:
        super().__init__()
        self.looks: list[float] = []

    def get_node_ids(self):  # noqa: ANN201
        self.looks.append(time.monotonic())
        return super().get_node_ids()


def test_an_idle_wait_looks_for_newcomers_less_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_app, "IDLE_JOIN_POLL_S", 0.5, raising=False)  # 10x the busy poll
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, toy_similarity)
    grid = CountingGrid()
    grid.add_node(1000, ToyNode("a", 1000).app(), {"state-dir": str(tmp_path / "a")})
    stop = threading.Event()
    idle_from: list[float] = []

    def on_round(outcome) -> None:  # noqa: ANN001 - RoundOutcome
        if outcome.round == 2:  # nothing new since round 1: idle from here
            idle_from.append(time.monotonic())
            later(2.0, stop.set)

    run_rounds(
        grid, strategy, initial_arrays(), num_rounds=0, wait_nodes_s=0, stop=stop,
        on_round=on_round, min_interval_s=INTERVAL, idle_probe_s=3600,
    )  # fmt: skip
    idle_looks = [t for t in grid.looks if t > idle_from[0]]
    assert 2 <= len(idle_looks) <= 5, len(idle_looks)  # 2 s / 0.5 s, not 2 s / 0.05 s
