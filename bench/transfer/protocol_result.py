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
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Literal, TypeVar

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


Kept = TypeVar("Kept", bound=BaseModel)


def write_keeping_earlier(
    report: Kept,
    out: Path,
    stem: str,
    markdown: Callable[[Kept], str],
    identity: Callable[[Kept], Hashable],
) -> Kept:
    """OUT/STEM.json and .md. A report adds runs and never drops one: the run the file held
    before, unless `identity` says it is this run written again, is kept in the new report's
    `earlier_runs` as it was written (less its own earlier runs, listed here)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.json"
    model = type(report)
    earlier: list[Kept] = []
    if path.exists():
        previous = model.model_validate_json(path.read_text())
        earlier = previous.earlier_runs  # type: ignore[attr-defined]
        if identity(previous) != identity(report):
            kept = previous.model_dump(exclude_unset=True, exclude={"earlier_runs"})
            earlier.append(model.model_validate(kept))
    own = report.earlier_runs  # type: ignore[attr-defined]
    # a report read back from this file already lists the file's earlier runs: once is enough
    report = report.model_copy(
        update={"earlier_runs": [*own, *(e for e in earlier if e not in own)]}
    )
    path.write_text(result_json(report))
    (out / f"{stem}.md").write_text(markdown(report))
    return report
