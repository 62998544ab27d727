"""The `simoe-agent` Typer app and what only its commands share.

Commands live one module per command group (profile, tune, records, ...); each
registers itself on `app`. What `simoe-server` shares too (the `--json`/`--verbose`
options, the consoles, table and JSON output) is in `schemas.cli`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agent.node_state import NodeState
from schemas.cli import err_console, state_folder, typer_app

app = typer_app(
    "simoe-agent",
    help="A SiMoE node: profile the hardware, tune tensor programs, keep the measurements.",
)
StateDir = Annotated[
    Path | None,
    typer.Option("--state-dir", help="the node's state directory (default $SIMOE_HOME/agent)"),
]


def node_state(state_dir: Path | None) -> NodeState:
    """The node of `--state-dir` (default $SIMOE_HOME/agent); a file there is refused."""
    node = NodeState(state_dir)
    state_folder(node.dir)
    return node


def command_group(name: str, help: str, *, invoke_without_command: bool = False) -> typer.Typer:
    """A `simoe-agent NAME ...` group of subcommands, registered on `app`.

    Bare `simoe-agent NAME` prints the group's help, or runs its callback when
    `invoke_without_command`.
    """
    group = typer.Typer(help=help, no_args_is_help=not invoke_without_command)
    app.add_typer(group, name=name, invoke_without_command=invoke_without_command)
    return group


def progress_bar(
    label: str = "{task.description}", *, transient: bool = True, disable: bool = False
) -> Progress:
    """The bar a long command draws on stderr: label, bar, done/total, elapsed time."""
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=transient,
        disable=disable,
    )


@app.callback()
def _root() -> None:
    """A SiMoE node: profile the hardware, tune tensor programs, keep the measurements."""
