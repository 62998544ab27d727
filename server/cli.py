"""`simoe-server`: start the federation and watch it."""

from __future__ import annotations

import typer

from schemas.errors import run_cli

app = typer.Typer(
    name="simoe-server",
    help="The SiMoE federation server: start it, watch nodes, rounds and experts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """The SiMoE federation server."""


def main() -> None:
    run_cli(lambda: app(standalone_mode=True), "simoe-server")
