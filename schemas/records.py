"""Tuning records: one measured candidate schedule of one workload on one device."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# MetaSchedule reports a failed build or run as this latency.
FAILED_RUN_SECS = 1e10
# Program features: MetaSchedule's PerStoreFeature gives this many per buffer store.
FEATURE_DIM = 164


def failed_run(run_secs: Sequence[float] | None) -> bool:
    """The one test of a failed measurement: no seconds, a non-finite one, or the sentinel."""
    return not run_secs or any((not math.isfinite(s)) or s >= FAILED_RUN_SECS for s in run_secs)


class TuningRecord(BaseModel):
    """A measurement as the node's store keeps it. It never leaves the node."""

    model_config = ConfigDict(extra="forbid")

    workload_key: str = Field(description="structural hash of the workload's IRModule")
    task_name: str = Field(description="human name: a workload spec or a network task")
    trace: Any = Field(description="the MetaSchedule trace, as its JSON")
    run_secs: list[float] = Field(description="seconds of each repeat; 1e10 marks a failure")
    target: dict[str, Any]
    args_info: list[Any] = Field(default_factory=list)
    device: str
    profile_id: str | None = None
    simulated: bool = False
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def failed(self) -> bool:
        return failed_run(self.run_secs)

    @property
    def latency_s(self) -> float | None:
        """Mean seconds per run, None for a failed candidate."""
        return None if self.failed else sum(self.run_secs) / len(self.run_secs)
