"""What both command lines (`simoe-agent`, `simoe-server`) share, declared once.

The Typer app's settings, the `--json` and `--verbose` options as `Annotated` types
(a command writes `json_out: Json = False`), the two consoles and the output helpers:
a rich table by default, one JSON document on stdout with `--json`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.console import Console

from schemas import tables
from schemas.tables import Column

console = Console()
err_console = Console(stderr=True)

Json = Annotated[bool, typer.Option("--json", help="print JSON for scripts instead of a table")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="show tracebacks on errors")]


def typer_app(name: str, help: str) -> typer.Typer:
    """A top-level CLI: help when called bare, no shell completion, one-line errors (run_cli)."""
    return typer.Typer(
        name=name,
        help=help,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )


def print_json(data: Any) -> None:
    """Machine-readable output: exactly one JSON document on stdout."""
    print(json.dumps(data, indent=2, default=str))


def print_table(title: str, columns: Sequence[str | Column], rows: Sequence[Sequence[Any]]) -> None:
    """A table that fits the console (80 columns when piped); see `schemas.tables`."""
    tables.print_table(console, title, columns, rows)
