"""What a node accepts from the server: every received array is checked before it is used.

A broken or hostile server can send a global model or an expert with NaN or Inf, the
wrong keys or shapes, a payload of another protocol version, or bytes that do not
decode. The node refuses such a payload and keeps its last good model: the checks
run before anything touches the model (`load_shared_arrays` and `add_expert` are
all-or-nothing), the model file is only rewritten after a good round, and the
refusal goes to the node's federation log (NodeState.federation_log_path) and into its
federation state, which `simoe-agent status` shows.

A refused global model fails the round for this node (the server sees an error
reply, not an update built on a bad model). A refused expert is only left out: the
node keeps the version of it that it already holds, if any, and trains with the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import ValidationError

from schemas import BadInputError, RunFailure
from schemas.messages import PROTOCOL_VERSION
from schemas.protocol import Arrays, record_to_arrays
from schemas.sharing import OFFER_FIELD, ScheduleOffer, short_error

if TYPE_CHECKING:
    from flwr.app import ArrayRecord, ConfigRecord

    from simoe_model.model import SiMoE

log = logging.getLogger("simoe.agent.payload")


class PayloadRefused(RunFailure):
    """A server payload this node will not load (one line: what and why)."""


def check_protocol(version: object) -> None:
    if version != PROTOCOL_VERSION:
        raise PayloadRefused(
            f"payload protocol version {version!r}, this node speaks {PROTOCOL_VERSION}"
        )


def decode(record: ArrayRecord, what: str) -> dict[str, np.ndarray]:
    """The record's arrays; PayloadRefused if any does not decode (a corrupt payload)."""
    try:
        return record_to_arrays(record)
    except Exception as exc:  # noqa: BLE001 - any decoding failure means a corrupt payload
        raise PayloadRefused(f"{what}: corrupt arrays ({type(exc).__name__})") from None


def decode_offer(record: ConfigRecord) -> ScheduleOffer:
    """The schedules the server offered (schedule sharing); PayloadRefused if malformed."""
    try:
        return ScheduleOffer.model_validate_json(str(record[OFFER_FIELD]))
    except (KeyError, ValidationError, ValueError) as exc:
        raise PayloadRefused(f"schedule offer refused ({short_error(exc)})") from None


def adopt_global(model: SiMoE, arrays: Mapping[str, np.ndarray]) -> None:
    """Load the global shared arrays into `model`; on refusal the model is untouched."""
    from simoe_model.model import load_shared_arrays

    try:
        load_shared_arrays(model, arrays)
    except BadInputError as exc:
        raise PayloadRefused(f"global model refused ({exc})") from None


def decode_experts(records: Mapping[str, ArrayRecord]) -> tuple[Arrays, dict[str, str]]:
    """The delivered experts' arrays by name, and those that did not decode (name -> why)."""
    experts, unreadable = {}, {}
    for name, record in records.items():
        try:
            experts[name] = decode(record, f"expert {name!r}")
        except PayloadRefused as exc:
            unreadable[name] = str(exc)
    return experts, unreadable


def adopt_experts(
    model: SiMoE, experts: Mapping[str, Mapping[str, np.ndarray]]
) -> tuple[list[str], dict[str, str]]:
    """Add the delivered experts (name -> arrays); (accepted names, refused name -> why)."""
    from simoe_model.model import add_expert

    accepted, refused = [], {}
    for name, arrays in experts.items():
        try:
            add_expert(model, name, arrays)
        except BadInputError as exc:
            refused[name] = str(exc)
            continue
        accepted.append(name)
    return accepted, refused


def note_refusal(path: Path, text: str) -> None:
    """One line in the node's federation log `path` (and the process log): what was refused."""
    log.warning("refused a server payload: %s", text)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write(f"{stamp} WARNING refused a server payload: {text}\n")
    except OSError as exc:  # a full disk must not hide the refusal itself
        log.warning("cannot write %s (%s)", path, exc.strerror)
