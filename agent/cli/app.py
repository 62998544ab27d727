"""The `simoe-agent` Typer app and the output helpers its commands share.

Commands live one module per command group (profile, tune, records, ...); each
registers itself on `app`. Output: a rich table by default, `--json` for scripts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from agent.node_state import NodeState
from schemas import tables
from schemas.tables import Column

app = typer.Typer(
    name="simoe-agent",
    help="A SiMoE node: profile the hardware, tune tensor programs, keep the measurements.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

# Options every command shares, declared once.
StateDirOption = typer.Option(
    None, "--state-dir", help="the node's state directory (default $SIMOE_HOME/agent)"
)
JsonOption = typer.Option(False, "--json", help="print JSON for scripts instead of a table")
VerboseOption = typer.Option(False, "--verbose", "-v", help="show tracebacks on errors")


def node_state(state_dir: Path | None) -> NodeState:
    """The node of `--state-dir` (default $SIMOE_HOME/agent)."""
    return NodeState(state_dir)


def print_json(data: Any) -> None:
    """Machine-readable output: exactly one JSON document on stdout."""
    print(json.dumps(data, indent=2, default=str))


def print_table(title: str, columns: Sequence[str | Column], rows: Sequence[Sequence[Any]]) -> None:
    """A table that fits the console (80 columns when piped); see `schemas.tables`."""
    tables.print_table(console, title, columns, rows)


@app.callback()
def _root() -> None:
    """A SiMoE node: profile the hardware, tune tensor programs, keep the measurements."""
