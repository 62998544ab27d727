"""How the server checks a node's reply before anything of it is kept or averaged.

Every check raises `UpdateRejected` with a one-line reason: the reply is rejected, told
why, and the round goes on (wrong keys or shapes, NaN/Inf, a name another key holds, a
schedule share that does not validate).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from schemas.sharing import REC_SCHEDULES, SHARE_FIELD, ScheduleShare, short_error
from server.registry import Registry


class UpdateRejected(ValueError):
    """A reply that must not be averaged (wrong keys or shapes, NaN/Inf, bad weight)."""


class AlreadyServed(UpdateRejected):
    """A leaving node answered a hello again before it stopped: it has what it came for."""


class NameTaken(UpdateRejected):
    """A node claimed a name another key holds: refused, and told why."""


class NameBook:
    """Which key holds each node name: the registry's, then the claims of this batch of
    replies (read before the recorder writes any of them, so they must see each other)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.claims: dict[str, str] = {}  # name -> key, claimed in this batch
        self.renamed: dict[str, str] = {}  # key -> the name it claimed in this batch

    def holder(self, name: str) -> str | None:
        if name in self.claims:
            return self.claims[name]
        row = self.registry.node_by_name(name)
        if row is None:
            return None
        key = str(row["node_key"])
        return key if self.renamed.get(key, name) == name else None  # renamed since: free

    def claim(self, name: str, key: str) -> None:
        holder = self.holder(name)
        if holder is not None and holder != key:
            raise NameTaken(f"node name {name!r} is already taken by another key")
        old = self.renamed.get(key)
        if old is not None and old != name:
            self.claims.pop(old, None)
        self.claims[name] = key
        self.renamed[key] = name


def check_update(update: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]) -> None:
    """Raise UpdateRejected unless `update` has exactly the reference's keys and shapes."""
    missing = sorted(set(reference) - set(update))
    extra = sorted(set(update) - set(reference))
    if missing or extra:
        raise UpdateRejected(f"keys differ (missing {missing[:3]}, extra {extra[:3]})")
    for key, ref in reference.items():
        value = update[key]
        if value.shape != ref.shape:
            raise UpdateRejected(f"{key}: shape {value.shape} != {ref.shape}")
        if not np.issubdtype(value.dtype, np.floating):
            raise UpdateRejected(f"{key}: dtype {value.dtype} is not floating point")
        if not np.all(np.isfinite(value)):
            raise UpdateRejected(f"{key}: contains NaN or Inf")


def read_share(content: RecordDict) -> ScheduleShare | None:
    """A reply's schedule share (opt-in schedule sharing), None when it carries none;
    UpdateRejected, in one line, when it does not validate."""
    record = content.get(REC_SCHEDULES)
    if record is None:
        return None
    if not isinstance(record, ConfigRecord) or set(record) != {SHARE_FIELD}:
        raise UpdateRejected(f"schedule share: record {REC_SCHEDULES!r} is not {{share}}")
    try:
        return ScheduleShare.model_validate_json(str(record[SHARE_FIELD]))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise UpdateRejected(f"schedule share refused: {short_error(exc)}") from None


def check_finite(arrays: Mapping[str, np.ndarray], what: str) -> None:
    if not arrays:
        raise UpdateRejected(f"{what}: empty")
    for key, value in arrays.items():
        if not np.issubdtype(value.dtype, np.floating) or not np.all(np.isfinite(value)):
            raise UpdateRejected(f"{what} {key}: not finite floating point")
