"""`simoe-agent`: the node's command line."""

from __future__ import annotations

import importlib

from agent.cli.app import app
from schemas.errors import run_cli
from schemas.protocol import prepare_flower_env
from simoe_model import tvm_compat

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
    prepare_flower_env()
    tvm_compat.install()
    run_cli(lambda: app(standalone_mode=True), "simoe-agent")
