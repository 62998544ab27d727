"""`simoe-agent`: the node's command line."""

from __future__ import annotations

from agent.cli.app import app
from schemas.errors import run_cli
from schemas.protocol import prepare_flower_env
from simoe_model import tvm_compat

# Each module registers its commands on `app` when imported, in this order (--help's).
from agent.cli import profile, tune, records, kernels, status, dataset, evaluate  # noqa: E402, F401, I001  # isort: skip
from agent.cli import federation, sharing, bundle, model, probe_set  # noqa: E402, F401, I001  # isort: skip


def main() -> None:
    prepare_flower_env()
    tvm_compat.install()
    run_cli(lambda: app(standalone_mode=True), "simoe-agent")
