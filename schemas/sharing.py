"""Opt-in schedule sharing: what a node shares, what it asks for, what the server offers.

Off by default (`AgentConfig.share_schedules`). A node that opted in adds one record to
its replies (`REC_SCHEDULES`, a ConfigRecord {"share": ScheduleShare JSON}): for each
workload it tuned, the workload's key (MetaSchedule's structural hash of the task) and
the traces of its k fastest records in rank order, plus the keys of the workloads it is
about to tune. Never latencies, features, task names or the workload's module.

The server answers an opted-in node in its train message (the same record key,
{"offer": ScheduleOffer JSON}): for the workloads it asked about (or, when it asked about
none, those the most similar units shared), the traces of the units most similar to it,
labelled by their similarity rank only (never a node name).

Both sides validate: a share or an offer that does not validate is refused in one line.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

# The record key both ways (node -> server: "share"; server -> node: "offer").
REC_SCHEDULES = "schedules"
SHARE_FIELD = "share"
OFFER_FIELD = "offer"

MAX_TOP_K = 8  # schedules per workload a node may share
MAX_WORKLOADS = 256  # workloads per share, per ask, per offer
MAX_TRACE_CHARS = 200_000  # one trace's JSON text (a network task's trace: ~10-30 KB)
MAX_OFFER_PER_WORKLOAD = 8  # traces per workload in an offer

# MetaSchedule's workload key: the structural hash, an unsigned 64-bit number in decimal.
WorkloadKey = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,20}$")]


def check_trace_json(text: str) -> str:
    """A trace's JSON text: [instructions, decisions], as MetaSchedule's Trace.as_json()."""
    if len(text) > MAX_TRACE_CHARS:
        raise ValueError(f"trace JSON of {len(text)} characters (at most {MAX_TRACE_CHARS})")
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError("trace is not JSON") from None
    if not (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], list)
        and isinstance(value[1], list)
        and value[0]
        and all(isinstance(inst, list) and inst and isinstance(inst[0], str) for inst in value[0])
    ):
        raise ValueError("trace JSON is not [instructions, decisions]")
    return text


class SharedTrace(BaseModel):
    """One shared schedule: a workload key, its rank on the sharing node, its trace."""

    model_config = ConfigDict(extra="forbid")

    workload_key: WorkloadKey
    rank: int = Field(ge=1, le=MAX_TOP_K, description="1: the node's fastest")
    trace: str = Field(description="the MetaSchedule trace's JSON text")

    @field_validator("trace")
    @classmethod
    def _trace(cls, text: str) -> str:
        return check_trace_json(text)


class ScheduleShare(BaseModel):
    """What an opted-in node sends: its top-k traces per workload and the keys it asks for."""

    model_config = ConfigDict(extra="forbid")

    top_k: int = Field(ge=1, le=MAX_TOP_K)
    schedules: list[SharedTrace] = Field(default_factory=list, max_length=MAX_WORKLOADS * MAX_TOP_K)
    wanted: list[WorkloadKey] = Field(default_factory=list, max_length=MAX_WORKLOADS)

    @field_validator("schedules")
    @classmethod
    def _ranks(cls, schedules: list[SharedTrace]) -> list[SharedTrace]:
        seen: set[tuple[str, int]] = set()
        for item in schedules:
            if (item.workload_key, item.rank) in seen:
                raise ValueError(f"workload {item.workload_key}: rank {item.rank} twice")
            seen.add((item.workload_key, item.rank))
        if len({s.workload_key for s in schedules}) > MAX_WORKLOADS:
            raise ValueError(f"more than {MAX_WORKLOADS} workloads")
        return schedules

    def workload_keys(self) -> list[str]:
        return sorted({s.workload_key for s in self.schedules})


class OfferedTrace(BaseModel):
    """A schedule the server offers: workload key, trace, and where it ranks."""

    model_config = ConfigDict(extra="forbid")

    workload_key: WorkloadKey
    trace: str
    source: str = Field(
        pattern=r"^similar-[0-9]{1,3}$",
        description="the unit's similarity rank to the receiver (similar-1: the most "
        "similar), never its name",
    )
    rank: int = Field(ge=1, le=MAX_TOP_K, description="its rank on that unit")

    @field_validator("trace")
    @classmethod
    def _trace(cls, text: str) -> str:
        return check_trace_json(text)


class ScheduleOffer(BaseModel):
    """What the server sends an opted-in node: the similar units' traces, best first."""

    model_config = ConfigDict(extra="forbid")

    round: int = Field(ge=0)
    schedules: list[OfferedTrace] = Field(
        default_factory=list, max_length=MAX_WORKLOADS * MAX_OFFER_PER_WORKLOAD
    )

    def by_workload(self) -> dict[str, list[str]]:
        """Workload key -> trace JSON texts, in the order offered (best first)."""
        out: dict[str, list[str]] = {}
        for item in self.schedules:
            out.setdefault(item.workload_key, []).append(item.trace)
        return out


def short_error(exc: Exception) -> str:
    """A refused share or offer in one short line: the first fault's place and problem
    (never the input itself: a trace is long)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or exc.title
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{where}: {err['msg']}{more}"
    if isinstance(exc, KeyError):
        return f"missing field {exc}"
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
