"""`simoe-agent model`: the SiMoE model this node tunes with, without a federation too."""

from __future__ import annotations

from pathlib import Path

import typer

from agent.cli.app import StateDir, command_group, node_state
from schemas.cli import Json, Verbose, print_json, print_table
from schemas.tuning import ModelUsed

model_app = command_group(
    "model",
    help="The SiMoE model `tune --cost-model simoe` uses: the federation's, an imported one, "
    "or the starter model that ships with the package.",
)


def _print(title: str, used: ModelUsed) -> None:
    rows = [("source", used.source), ("model", used.label), ("file", used.path or "none")]
    for key in ("trained_on", "records", "built_by", "imported_from"):
        if key in used.metadata:
            value = used.metadata[key]
            rows.append(
                (key.replace("_", " "), ", ".join(value) if isinstance(value, list) else value)
            )
    print_table(title, ["", ""], rows)


@model_app.command("show")
def model_show(
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Which model `tune --cost-model simoe` would use now, and what it was trained on."""
    from agent.model_choice import choose_model

    used = choose_model(node_state(state_dir))
    if json_out:
        print_json(used.model_dump(mode="json"))
    else:
        _print("SiMoE model of this node", used)


@model_app.command("import")
def model_import(
    file: Path = typer.Argument(..., help="a SiMoE model file (as `save_model` writes it)"),
    label: str | None = typer.Option(None, "--label", help="what it is, shown by every tune"),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Validate a SiMoE model and use it on this node when it has no federation model."""
    from agent.model_choice import import_model

    used = import_model(file, node_state(state_dir), label=label)
    if json_out:
        print_json(used.model_dump(mode="json"))
    else:
        _print("imported", used)
