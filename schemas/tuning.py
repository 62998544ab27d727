"""What `simoe-agent tune` reports: per task and, for a network, the compiled whole."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Fast mode's hedge (issue 23): after the first batch of the model's picks, a Spearman rho of
# its scores against the measured latencies below this means the measurements contradict
# the model, and the rest of the task's budget goes to MetaSchedule's evolutionary search
# (seeded from the measured batch through the database, ranked by the same cost model).
# Chosen on the development sets only (docs/results/beats_default.md); None: never hedge.
# Here, not in agent.tune_harness, so the CLI's help names it without importing torch.
HEDGE_SPEARMAN: float | None = 0.3
# What ranks the hedge's evolutionary search: "model" (the run's cost model, which has seen
# the first batch) or "random" (MetaSchedule's own ranking below its XGB warm-up).
HEDGE_RANKING = "model"


class TaskResult(BaseModel):
    """One tuned task (an operator, or one fused function of a network)."""

    model_config = ConfigDict(extra="forbid")

    task_name: str
    workload_key: str
    weight: float = Field(description="how often the network runs this task")
    trials: int = Field(description="candidates measured in this run")
    flops: float
    best_latency_s: float | None = Field(
        description="the schedule kept: the best tuned one, or TVM's default where that was "
        "faster (see `kept`); None if nothing ran"
    )
    best_measured_during_tuning_s: float | None
    untuned_latency_s: float | None = Field(description="the default schedule; None if unknown")
    tuned_latency_s: float | None = Field(
        default=None, description="the best tuned schedule, re-measured like the default one"
    )
    kept: Literal["tuned", "default"] | None = Field(
        default=None,
        description="which schedule the task keeps (also in the compiled network): 'default' "
        "where the best tuned one lost to TVM's untuned default; None if neither ran",
    )
    gflops: float | None
    speedup: float | None = Field(description="untuned / best (never below 1 when both ran)")


class NetworkCheck(BaseModel):
    """The network compiled from the store's best schedules, run and compared with PyTorch."""

    model_config = ConfigDict(extra="forbid")

    compiled: bool
    matches: bool | None = None
    max_abs_error: float | None = None
    reference_scale: float | None = Field(default=None, description="max |reference output|")
    latency_s: float | None = Field(default=None, description="end-to-end, one inference")
    reference: str | None = Field(default=None, description="what computed the expected output")
    reason: str | None = None


class TaskSelection(BaseModel):
    """Which of a network's tasks were tuned (`--largest-tasks`, `--flops-share`)."""

    model_config = ConfigDict(extra="forbid")

    rule: str = Field(description="e.g. 'the 3 largest tasks' or 'tasks covering 90% of FLOPs'")
    tuned: list[str] = Field(description="the tasks tuned; the others keep TVM's default")
    total_tasks: int
    flops_share: float = Field(
        description="the tuned tasks' share of the network's FLOPs (weight x FLOPs of a call)"
    )


class ModelUsed(BaseModel):
    """The cost model a tune searched with: where it came from and what it was trained on."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["personal", "federation", "imported", "starter", "untrained", "metaschedule"]
    path: str | None = Field(description="the model file; None for MetaSchedule's own models")
    label: str = Field(description="what it is, e.g. what the starter model was trained on")
    metadata: dict[str, Any] = Field(default_factory=dict, description="saved with the model")


class TuneResult(BaseModel):
    """The whole run; with a simulated device every latency is modelled, not measured."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(description="the workload spec, network name or model file name")
    kind: Literal["workload", "network"]
    device: str
    simulated: bool
    cost_model: str
    trials: int
    search_wall_s: float = Field(description="wall time of the search (build + measure + model)")
    modelled_measure_s: float | None = Field(
        default=None,
        description="simulated device only: what its measurements would have cost on the GPU "
        "(compile + repeated runs), not included in search_wall_s",
    )
    tasks: list[TaskResult]
    network: NetworkCheck | None = None
    model_used: ModelUsed | None = Field(default=None, description="which cost model searched")
    selection: TaskSelection | None = Field(
        default=None, description="a network tuned in part: which tasks, what share of FLOPs"
    )
    shared_schedules: int = Field(
        default=0,
        description="schedules of the most similar units (schedule sharing, opt-in) that "
        "joined the candidates ranked before the first measurement",
    )
    shared_skipped: int = Field(
        default=0, description="offered schedules that did not apply to this target's task"
    )
    population_retried: list[str] = Field(
        default_factory=list,
        description="tasks whose search sampled no valid schedule at the first population "
        "and were searched again at `retry_population`",
    )
    retry_population: int | None = Field(
        default=None, description="the population of that second search (None: none ran)"
    )
    hedge_below: float | None = Field(
        default=None,
        description="fast mode's hedge threshold: a first batch whose Spearman rho (model "
        "scores against measured latencies) is below it hands the rest of the budget to "
        "MetaSchedule's evolutionary search (None: not fast mode, or the hedge off)",
    )
    hedge_spearman: dict[str, float] | None = Field(
        default=None, description="fast mode: each task's first-batch Spearman rho"
    )
    hedge_ranking: str | None = Field(
        default=None, description="what ranked the hedge's evolutionary search (fast mode)"
    )
    hedged: list[str] = Field(
        default_factory=list,
        description="tasks whose measurements contradicted the model (rho below "
        "`hedge_below`): the rest of their budget went to MetaSchedule's evolutionary search",
    )
