"""Which SiMoE model a node tunes with, and how it says so.

A node with a federation uses the model the federation gave it. A node without one (a user
with one GPU and no server) uses a model imported with `simoe-agent model import FILE`, or
else the starter model that ships with the package: a SiMoE trained offline on simulated
training units by `python -m bench.transfer.train_starter`, whose metadata says on what. Only when
none of them exists does it start from an untrained model, and it says that too.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path

from agent.node_state import NodeState
from schemas import BadInputError
from schemas.tuning import ModelUsed
from simoe_model.model import load_model, model_metadata, save_model


def starter_model_path() -> Path:
    """The starter model that ships with the package (package data of `simoe_model`)."""
    import simoe_model

    return Path(simoe_model.__file__).resolve().parent / "starter" / "starter.pt"


def describe(path: Path, source: str) -> ModelUsed:
    """A model file as `tune` reports it: where it is and what it is (from its metadata)."""
    metadata = model_metadata(path)
    experts = load_model(path).expert_names
    label = metadata.get("label")
    if not label:
        label = {
            "personal": "this node's personal fine-tune of its federation model",
            "federation": "this node's federation model",
            "imported": "an imported model",
            "starter": "the starter model",
        }[source]
    label += f" ({len(experts)} experts)"
    return ModelUsed(source=source, path=str(path), label=label, metadata=metadata)


def choose_model(node: NodeState) -> ModelUsed:
    """The model `--cost-model simoe` uses on this node: personal (its fine-tune of the
    federation's), federation, imported, starter."""
    for source, path in (
        ("personal", node.personal_model_path),
        ("federation", node.model_path),
        ("imported", node.imported_model_path),
        ("starter", starter_model_path()),
    ):
        if path.is_file():
            return describe(path, source)
    return ModelUsed(
        source="untrained",
        path=None,
        label="an untrained SiMoE (no federation, imported or starter model): it learns from "
        "this run's measurements only",
    )


def import_model(file: Path, node: NodeState, label: str | None = None) -> ModelUsed:
    """Validate a SiMoE model file and make it this node's imported model.

    The file is loaded (a corrupt or foreign file is one line, exit 2) and saved again,
    atomically, with where it came from added to its metadata; nothing is changed when it
    is bad."""
    if not file.is_file():
        raise BadInputError(f"{file}: no such model file")
    model = load_model(file)  # BadInputError, one line, for anything that is not a model
    metadata = dict(model_metadata(file))
    metadata["imported_from"] = str(file.resolve())
    metadata["imported_sha256"] = hashlib.sha256(file.read_bytes()).hexdigest()
    metadata["imported_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if label:
        metadata["label"] = label
    elif not metadata.get("label"):
        metadata["label"] = f"imported from {file.name}"
    save_model(model, node.imported_model_path, metadata=metadata)
    return describe(node.imported_model_path, "imported")
