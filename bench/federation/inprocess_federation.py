"""The in-process federation that federation_helps and poisoning both run: the ServerApp's
round loop (`server.server_app.run_rounds`), a real strategy and registry (SQLite), and the
agent's real ClientApp over each node's state directory, all through the in-process Grid
(`server.inprocess.InProcessGrid`). Members federate from the federation's seeded start
for every round but the last; newcomers (enrolled, no measurements) join at the last."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.federation.fleet import FleetGPU, write_node
from simoe_model.task_data import TaskData

MEMBER_IDS = 1000  # node ids: members from here, newcomers from NEWCOMER_IDS
NEWCOMER_IDS = 5000


class InProcessFederation:
    """Nodes written under `work` (nodes/NAME, newcomers/NAME), the registry under
    work/server; `node_config` goes to every node's ClientApp (its node config)."""

    def __init__(self, work: Path, node_config: Mapping[str, str] | None = None) -> None:
        from server.inprocess import InProcessGrid

        self.work = work
        self.node_config = dict(node_config or {})
        self.grid = InProcessGrid()

    def member_dir(self, name: str) -> Path:
        return self.work / "nodes" / name

    def newcomer_dir(self, name: str) -> Path:
        return self.work / "newcomers" / name

    def add_members(
        self,
        members: Sequence[tuple[FleetGPU, Sequence[TaskData]]],
        apps: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        """Each member's state directory with its training tasks, and its node in the Grid:
        the agent's ClientApp, or the app `apps` names for it (a lying node)."""
        from agent.client_app import app as client_app

        for index, (gpu, train) in enumerate(members):
            state_dir = self.member_dir(gpu.name)
            write_node(state_dir, gpu, list(train))
            app = (apps or {}).get(gpu.name, client_app)
            self.grid.add_node(
                MEMBER_IDS + index, app, {"state-dir": str(state_dir), **self.node_config}
            )

    def open_registry(self) -> Any:  # server.registry.Registry
        from server.registry import Registry

        return Registry(self.work / "server" / "registry.sqlite")

    def run(
        self,
        strategy: Any,  # server.strategy.SiMoEStrategy or a robust one
        seed: int,
        rounds: int,
        newcomers: Sequence[FleetGPU],
        on_round: Callable[[Any], None],  # called with each round's RoundOutcome
    ) -> Any:
        """Every round but the last with the members, then the last with the newcomers
        enrolled too; returns the last round's outcome."""
        from agent.client_app import app as client_app
        from server.roster import Roster
        from server.server_app import run_rounds
        from server.similarity import initial_shared_arrays

        roster = Roster()  # one run: the newcomers' round continues it
        run_rounds(
            self.grid,
            strategy,
            initial_shared_arrays(seed),
            num_rounds=rounds - 1,
            wait_nodes_s=0,
            on_round=on_round,
            roster=roster,
            ends_run=False,  # the newcomers' round below is the run's last
        )
        for index, gpu in enumerate(newcomers):  # enrolled: key and profile, no measurements
            state_dir = self.newcomer_dir(gpu.name)
            write_node(state_dir, gpu, [])
            self.grid.add_node(
                NEWCOMER_IDS + index, client_app, {"state-dir": str(state_dir), **self.node_config}
            )
        [last] = run_rounds(
            self.grid, strategy, {}, num_rounds=1, wait_nodes_s=0, on_round=on_round, roster=roster
        )
        return last
