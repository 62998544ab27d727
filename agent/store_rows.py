"""What the node's store hands out: records without traces, counts, labelled candidates.

Plain values (pydantic models for the CLI's `--json`, a dataclass for training), kept apart
from `agent.store.Store` so the store module holds only the SQLite file's logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class LabelledCandidate:
    """One measured candidate as training reads it: its label and its cached features."""

    workload_key: str
    task_name: str
    candidate_id: str
    device: str
    latency_s: float | None  # None: the build or run failed
    features: np.ndarray | None  # float32 [n_stores, 164]; None: not extracted yet


class RecordSummary(BaseModel):
    """A record without its trace: what `simoe-agent records` lists."""

    model_config = ConfigDict(extra="forbid")

    candidate_id: str
    workload_key: str
    task_name: str
    device: str
    latency_s: float | None
    failed: bool
    simulated: bool
    profile_id: str | None
    created_at: datetime
    n_records: int = 1  # how many records of this workload and device (set by `best_summaries`)


class DeviceCounts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str
    workloads: int
    records: int
    failed: int
    simulated: bool


class StoreSummary(BaseModel):
    """Counts for `simoe-agent status`."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int
    workloads: int
    records: int
    features: int
    devices: list[DeviceCounts]
    profiles: list[dict[str, Any]]
