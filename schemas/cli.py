"""What both command lines (`simoe-agent`, `simoe-server`) share, declared once.

The Typer app's settings, the `--json` and `--verbose` options as `Annotated` types
(a command writes `json_out: Json = False`), the two consoles and the output helpers:
a rich table by default, one JSON document on stdout with `--json`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click
import typer
from pydantic import Field, TypeAdapter, ValidationError
from rich.console import Console

from schemas import tables
from schemas.errors import BadInputError, plain_problem
from schemas.tables import Column

T = TypeVar("T")

# What an option's value may be, checked at the CLI boundary (`checked`), before any work.
MAX_TRIALS = 100_000  # per task: far beyond any useful search, far below TVM's int64 limits
Trials = Annotated[int, Field(ge=1, le=MAX_TRIALS)]
Port = Annotated[int, Field(ge=1, le=65535)]
Seconds = Annotated[float, Field(gt=0, le=7 * 24 * 3600)]
Seed = Annotated[int, Field(ge=0, le=2**31 - 1)]  # a search's random state (TVM's int32)
Population = Annotated[int, Field(ge=2)]  # a search's candidates per round (`--population`)

console = Console()
err_console = Console(stderr=True)

Json = Annotated[bool, typer.Option("--json", help="print JSON for scripts instead of a table")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="show tracebacks on errors")]


def checked(option: str, value: T, kind: Any) -> T:
    """`value` if it is a valid `kind` (e.g. `Port`), else one line naming `option` (exit 2).

    `--port must be at most 65535 (got 70000)`: the user's words, not pydantic's.
    """
    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise BadInputError(f"{option} {plain_problem(error)} (got {value!r})") from None


def state_folder(path: Path, option: str = "--state-dir") -> Path:
    """`path` unless it exists and is not a folder (a file given as a state directory)."""
    if path.exists() and not path.is_dir():
        raise BadInputError(f"{option} {path} is a file, not a folder")
    return path


class OneLineUsageErrors(typer.core.TyperGroup):
    """A top-level command group whose usage errors are one line (exit 2), not a usage box.

    Click raises `UsageError` (an option without its value, an unknown option or command,
    a value of the wrong type, a missing argument) while parsing this group's arguments
    and, inside `invoke`, every subcommand's; Typer would print it as a usage panel.
    Raised again as `BadInputError`, `run_cli` prints it as `PROG: error: ...`. Bare
    groups (`NoArgsIsHelpError`) still print their help.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _one_line_usage(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line_usage(exc) from None


def _one_line_usage(exc: click.UsageError) -> click.UsageError | BadInputError:
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        return exc
    message = " ".join(exc.format_message().split()).rstrip(".")
    where = exc.ctx.command_path if exc.ctx is not None else ""
    return BadInputError(f"{message} (see '{where} --help')" if where else message)


def typer_app(name: str, help: str) -> typer.Typer:
    """A top-level CLI: help when called bare, no shell completion, one-line errors (run_cli)."""
    return typer.Typer(
        name=name,
        help=help,
        cls=OneLineUsageErrors,
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


def live_view(draw: Callable[[], Any], console: Console, *, interval: float, once: bool) -> None:
    """Print `draw()` once (`once`), or redraw it in place every `interval` seconds until
    Ctrl-C (rich Live: usable over ssh, no alternate screen). Both CLIs' `watch` use it."""
    from rich.live import Live

    if once:
        console.print(draw())
        return
    with Live(draw(), console=console, screen=False, refresh_per_second=4) as live:
        while True:
            time.sleep(interval)
            live.update(draw())
