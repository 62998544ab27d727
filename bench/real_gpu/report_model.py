"""The real-GPU report as typed models (`bench.real_gpu.report` scores the traces into them and
writes `docs/results/real_transfer.json`; BENCHMARKS section 0 reads it back).

The JSON is the one the dicts before the models wrote: the same keys and values
(measurement counts n and fractions f of the optimum are numbers here and strings in JSON,
"1" and "0.95", as `json.dumps` wrote them).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class MethodScore(_Model):
    """One method on one (kernel, target GPU), means and medians over its seeds."""

    fraction: dict[int, float]  # n -> fraction of the optimum after n measurements
    # f -> measurements (seconds) until the fraction f was reached; None: never, the median
    measurements_to: dict[float, float | None]
    seconds_to: dict[float, float | None]
    seeds: int


class MethodSummary(_Model):
    """One method over the targets it ran on."""

    targets: int
    geomean: dict[int, float]  # n -> geometric mean fraction over the targets
    median_measurements_to: dict[float, float | None]
    median_seconds_to: dict[float, float | None]
    methodology_score_64: float


class RunInfo(_Model):
    """What `bench.real_gpu.protocol` ran (its traces' header): what the report shows, and
    the choices' grids and training settings it carries (None: not in the traces)."""

    command: str
    seeds: list[int]
    budget: int  # measurements of the fleet-based methods
    scratch_budget: int  # of the from-scratch peers
    scratch_budgets: dict[str, int] | None = None  # peers with another budget
    probe_grid: list[int] | None = None
    sharpness_grid: list[float] | None = None
    temperature_grid: list[float] | None = None
    share_grid: list[float] | None = None
    share_top: int | None = None
    training: dict[str, int | float | str | bool] | None = None
    wall_s: float
    jobs: int
    load_average: list[float]


class FractionGoal(_Model):
    goal: float
    value: float
    met: bool


class IntervalGoal(_Model):  # a mean log-ratio and its 95% interval
    mean: float
    lo: float
    hi: float
    met: bool


class AblationGoal(_Model):  # the same at n = 1, against an ablation
    mean_at_1: float = Field(alias="mean@1")
    lo: float
    hi: float
    met: bool


class CountGoal(_Model):
    reached: int
    of: int


class BestKtGoal(_Model):  # measurements to 95%, against Kernel Tuner's best strategy
    simoe: float | None
    best_kt: float | None
    ratio: float | None
    met: bool


class XgbGoal(_Model):  # measurements to 95%, against XGBoost
    simoe: float | None
    xgb: float | None
    met: bool


Goal = FractionGoal | IntervalGoal | AblationGoal | CountGoal | BestKtGoal | XgbGoal


class Gain(_Model):
    mean_log_ratio: float | None  # None: no run changed
    better: int
    worse: int


class OnlineEffect(_Model):
    """Do measurements move SiMoE: runs whose first 16 picks differ from simoe-no-online's."""

    runs: int
    changed_within_16: int
    gain: dict[int, Gain]  # n -> over the changed runs


class RealTransferReport(_Model):
    run: RunInfo
    summary: dict[str, MethodSummary]  # method ->
    pairs: dict[str, tuple[float, float, float]]  # "a vs b @n[ nvidia]" -> mean, lo, hi
    goals: dict[str, dict[str, Goal]]  # SiMoE variant -> goal name ->
    online: OnlineEffect | None = None  # None: a report written before it was measured
    hard_targets: list[tuple[str, str]]  # (kernel, GPU): spec transfer below 0.95 at 16
    rows: dict[str, dict[str, MethodScore]]  # "kernel/GPU" -> method ->


def report_json(report: RealTransferReport) -> str:
    """As the dict before it was written (`json.dumps`, indent 1)."""
    return json.dumps(report.model_dump(by_alias=True, exclude_unset=True), indent=1, default=str)


def read(path: Path) -> RealTransferReport:
    return RealTransferReport.model_validate_json(path.read_text())
