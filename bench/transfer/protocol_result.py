"""The protocol's results as typed models (bench/transfer/protocol_transfer.py writes them as
JSON, bench/transfer/protocol_report.py and online_gate_report.py render them): a split's
scores (`TransferResult`) and the online gate's sharpness selection (`OnlineGateReport`).

The JSON they write is the one the dicts before them wrote: the same keys (a field a run
did not set stays out, so older reports keep their keys) and the same values (seeds,
budgets and sharpness values are numbers here and strings in JSON, as `json.dumps` wrote
them). Floats go through `json.dumps` as before, so NaN stays NaN; `bench.reporting.read_report`
reads them back.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict

# method -> budget -> unit -> top-1 per test task
Scores = dict[str, dict[int, dict[str, list[float]]]]
# a selection grid point: its hyperparameters, mean validation top-1 (None: unfinished) and
# the mean of each seed (not kept by runs of seed 0 only)
GridPoint = (
    tuple[dict[str, int | float], float | None, list[float]]
    | tuple[dict[str, int | float], float | None]
)


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UnitGate(_Result):
    """One target unit's gate, nearest expert and measured twin at budget 0
    (bench/transfer/protocol_diagnostics.py)."""

    gate_top: str
    gate_top_weight: float
    gate_effective_experts: float
    nearest_expert: str
    gate_top_is_nearest: bool
    measured_twin: str | None  # None: no agreement measured
    twin_agreement: float | None
    nearest_agreement: float  # NaN where the nearest expert's agreement was not measured
    nearest_is_twin: bool


class TransferResult(_Result):
    """One split's scores: every method at every budget on every target unit and seed."""

    split: str
    units: list[str]
    seeds: list[int]
    hyperparameters: dict[str, dict[str, int | float]]
    per_task_top1: dict[int, Scores]  # seed -> scores
    fidelity: dict[int, dict[str, dict[str, float]]] = {}  # seed -> ablation -> unit -> rho
    gates: dict[int, dict[str, UnitGate]] = {}  # seed -> unit -> gate diagnostics
    seconds: dict[str, float] = {}  # "method/seed" -> wall seconds
    # candidates per task the training units kept ("all": the protocol's); None: a report
    # written before it was recorded
    train_per_task: int | Literal["all"] | None = None
    transfer_coverage: dict[int, dict[str, float]] = {}  # seed -> unit -> fraction rankable
    grid_scores: dict[str, list[GridPoint]] = {}  # --select: every grid point's score
    command: str = ""
    hyperparameters_source: str = ""
    load: str | None = None  # load averages while it ran, "1m 5m 15m" (" / " between runs)
    total_seconds: float | None = None
    label_reads: list[str] = []  # "unit:purpose" of every label read
    earlier_runs: list[TransferResult] = []  # the runs this report replaced, kept


class OnlineGateScores(_Result):
    """SiMoE at one budget on one unit with the online gate at each sharpness, per test task
    (bench/transfer/protocol_methods.online_gate_scores)."""

    top1: dict[float, list[float]]
    pick: dict[float, list[int]]
    top1_nofinetune: dict[float, list[float]]
    pick_nofinetune: dict[float, list[int]]
    pick0: list[int]
    top1_0: list[float]


class OnlineGateReport(_Result):
    """`--select-sharpness`: every sharpness on the validation units; the chosen one."""

    split: str
    simulated: bool
    units: list[str]
    seeds: list[int]
    budgets: list[int]
    grid: list[float]
    rule: str
    simoe_hyperparameters: dict[str, int | float]
    train_per_task: int | None
    fleet: str
    units_equal_to_recorded_fleet: str
    mean_top1: dict[float, float]
    mean_top1_nofinetune: dict[float, float]
    chosen: float
    runs: dict[int, dict[str, dict[int, OnlineGateScores]]]  # seed -> unit -> budget
    command: str = ""
    load: str | None = None
    total_seconds: float = 0.0
    label_reads: list[str] = []
    earlier_runs: list[OnlineGateReport] = []  # the runs this report replaced, kept


def result_json(result: BaseModel) -> str:
    """The report's JSON, as the dicts before the models wrote it (`json.dumps`, indent 1)."""
    return json.dumps(result.model_dump(exclude_unset=True), indent=1, default=float)
