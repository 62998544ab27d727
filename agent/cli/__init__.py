"""`simoe-agent`: the node's command line."""

from __future__ import annotations

import importlib

from agent.cli.app import app
from schemas.errors import run_cli

# Each module registers its commands on `app`; a module not written yet is skipped.
_COMMAND_MODULES = [
    "profile", "tune", "records", "status", "dataset", "evaluate", "federation", "bundle",
    "model",
]  # fmt: skip
for _name in _COMMAND_MODULES:
    try:
        importlib.import_module(f"agent.cli.{_name}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"agent.cli.{_name}":
            raise


def main() -> None:
    run_cli(lambda: app(standalone_mode=True), "simoe-agent")
