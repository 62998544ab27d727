"""The benchmark report's typed rows: what `python -m bench.run` writes to report.json and
what bench/report/report_md.py renders BENCHMARKS.md from.

One model per section. A report.json that does not validate is an old one: rerun the
section (or `python -m bench.run --merge` its parts again) rather than render it with
guesses for its missing keys.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- compile and budget sections (bench/compile/compile_time.py) ------------------------------
class CompileSettings(_Row):
    """What one run of the compile (or budget) section does (compile_time's --quick and
    --full presets)."""

    networks: list[str]
    max_tasks: int | None  # top tasks by FLOPs share (weight x FLOPs); None = all
    train_gpus: list[str]
    unseen_gpus: list[str]
    samples_per_task: int
    full_budget: int  # trials per task of MetaSchedule-full and SiMoE-full
    small_budgets: list[int]  # trials per task of the small-budget peers
    tlm_budget: int = 32
    population: int  # MetaSchedule's evolutionary search population
    genetic_iters: int
    simoe_fast_population: int  # SiMoE fast mode's model-only search (simoe_model.model_search)
    simoe_fast_genetic_iters: int
    simoe_fast_rounds: int = 5  # chained model-only searches of simoe_fast_per_round each
    simoe_fast_per_round: int = 32
    # the training GPUs' tuning records: a chained search steered by their simulated latencies
    fleet_rounds: int = 6
    fleet_per_round: int = 32
    expert_epochs: int
    shared_epochs: int
    mlp_epochs: int
    long_budget: int = 1000  # the budget section: MetaSchedule's trials on one task
    # ... and SiMoE full mode's there: a quarter of it (64-trial searches, as MetaSchedule's)
    long_simoe_budget: int = 256
    trials_per_iter: int = 64  # measurements per evolutionary search (MetaSchedule: 64)
    xgb_warmup: int = 100  # measurements before XGB's scores are used (MetaSchedule: 100)
    # a small-budget XGB peer (ms-xgb-<k>) runs k in this many searches of k / rounds, its
    # warm-up one search's measurements: XGB is fitted after the first and ranks the rest.
    # None (reports before issue 24): one search of k, where XGB was never used (random).
    xgb_small_rounds: int | None = None
    # random valid schedules each search samples before evolving: MetaSchedule's 50 for its
    # default population of 512; scaled with the population when True (the same share)
    scale_init_min: bool = False
    seed: int = 0
    # the methods run (None: every one of bench/compile/compile_time.py); --quick runs a subset
    methods: list[str] | None = None
    # networks no model trains on and no fleet record exists for (unseen operators)
    held_out_networks: list[str] = Field(default_factory=list)
    # per network, the fewest top tasks covering this share of its FLOPs (capped by
    # max_tasks); None: max_tasks alone decides
    flops_share: float | None = None

    def runs(self, method: str) -> bool:
        """Whether this run includes `method` (every method when `methods` is None)."""
        return self.methods is None or method in self.methods

    def xgb_snapshot_budgets(self) -> list[int]:
        """The small budgets ms-xgb-full's run stopped there serves: a whole number of its
        searches, and at least one search after XGB's warm-up (its model ranked something)."""
        per_iter = self.trials_per_iter
        budgets = sorted({self.tlm_budget, *self.small_budgets})
        return [b for b in budgets if b % per_iter == 0 and b - per_iter >= self.xgb_warmup]

    def init_min(self, population: int) -> int:
        """Random valid schedules a search samples first: 50 (MetaSchedule's), or scaled."""
        return min(50, max(8, round(50 * population / 512))) if self.scale_init_min else 50


class MethodRow(_Row):
    """One method's tuning run of one network's tasks on one simulated GPU."""

    network: str
    gpu: str
    method: str
    trials_per_task: int
    measured: int
    search_wall_s: float
    modelled_measure_s: float
    compile_s: float
    network_latency_s: float | None
    task_best_s: dict[str, float | None]
    curve: list[tuple[float, float]]  # (compile seconds so far, best network latency so far)
    simulated: bool = True
    # never worse than the default (issue 12, as `tune` does it: TaskResult.kept): each task's
    # default schedule is measured once, and the task keeps it unless a tuned one beat it
    task_default_s: dict[str, float | None] = Field(default_factory=dict)
    task_kept: dict[str, str | None] = Field(default_factory=dict)
    search_cpu_s: float | None = None  # CPU seconds of the run (this process, its threads)


class RunCost(_Row):
    """Where one run's compile time went."""

    measured: int
    search_wall_s: float
    modelled_measure_s: float


class PairSummary(_Row):
    """The paper's claims on one network x GPU, computed from the rows (compile_time.summarize).

    perf = MetaSchedule-full's network latency / the method's; to_95pct = compile seconds
    at which the method first held a latency within 95% of MetaSchedule-full's final one."""

    network: str
    gpu: str
    ms_full_latency_s: float | None = None
    ms_full_compile_s: float | None = None
    simoe_fast_perf_vs_ms_full: float | None = None
    simoe_fast_compile_s_to_95pct: float | None = None
    simoe_fast_speedup_to_95pct: float | None = None
    simoe_full_perf_vs_ms_full: float | None = None
    simoe_full_compile_s_to_95pct: float | None = None
    simoe_full_speedup_to_95pct: float | None = None
    simoe_fast_compile_speedup: float | None = None  # MetaSchedule-full's compile s / fast's
    ms_full_cost: RunCost | None = None
    simoe_fast_cost: RunCost | None = None
    # peer method -> the peer's network latency / SiMoE fast's, at the same budget
    speedup_vs: dict[str, float] = Field(default_factory=dict)


class TunedTask(_Row):
    name: str
    weight: float
    gflops: float


class NetworkInfo(_Row):
    tasks_total: int
    tasks_tuned: list[TunedTask]
    flops_share_tuned: float | None
    candidates_per_task: list[int]
    seconds: dict[str, float]  # extract, sample_and_label


class FailedRun(_Row):
    network: str
    gpu: str
    method: str
    error: str


class CompileSection(_Row):
    """The compile section (every network x unseen GPU x method), or the budget section (one
    task, MetaSchedule at a realistic budget)."""

    settings: CompileSettings
    networks: dict[str, NetworkInfo] = Field(default_factory=dict)
    prep_seconds: dict[str, float] = Field(default_factory=dict)
    rows: list[MethodRow] = Field(default_factory=list)
    summary: list[PairSummary] = Field(default_factory=list)
    curves_png: str | None = None  # the report's one curve figure (bench.report.curves)
    failed: list[FailedRun] = Field(default_factory=list)


class Repeat(_Row):
    """The same section in another invocation (same settings and seed): the spread."""

    command: str
    rows: list[MethodRow]
    settings: CompileSettings
    load_average_at_start: list[float]
    cpu_s: float | None = None  # the section's CPU seconds in its invocation (None: older)


# -- the other sections --------------------------------------------------------------------------
class OfflineResult(_Row):
    held_out: list[str]
    train_gpus: list[str]
    budgets: list[int]
    # method -> budget (as a string) -> metric (top1, top5, pairwise, aps) -> value
    results: dict[str, dict[str, dict[str, float | None]]]


class OfflineSection(_Row):
    command: str
    data: str
    wall_s: float
    markdown: str  # bench/transfer/offline_transfer.py's own table
    plot: str
    result: OfflineResult


class FederationRow(_Row):
    nodes: int
    rounds: int
    round_s: list[float]
    median_round_s: float | None
    steady_round_s: float | None
    total_s: float
    bytes_down_per_node_per_round: float
    bytes_up_per_node_per_round: float


class FederationSection(_Row):
    engine: str
    shared_arrays_bytes: int
    model_parameters: int
    profiles_from: list[str]
    results: list[FederationRow]
    # the same with the strategy `simoe-server start`'s defaults build (empty in old reports)
    deployment_defaults: list[FederationRow] = []


class CpuRow(_Row):
    op: str
    trials: int
    tune_wall_s: float
    search_wall_s: float
    tvm_tuned_s: float | None
    tvm_untuned_s: float | None
    numpy_s: float | None
    pytorch_s: float | None
    gflop: float
    tvm_gflops: float | None
    peak_share: float | None
    pytorch_peak_share: float | None


class CpuFailure(_Row):
    op: str
    error: str


class CpuSection(_Row):
    device: str
    hardware: str
    target: str
    threads: int
    peak_fp32_gflops: float
    peak_from: str
    peak: dict[str, Any] | None = None  # bench/compile/cpu_peak.py's derivation and measurement
    torch_version: str
    numpy_version: str
    rows: list[CpuRow]
    failed: list[CpuFailure]


# -- the report ----------------------------------------------------------------------------------
class Machine(_Row):
    cpu_model: str
    logical_cores: int | None
    python: str
    system: str
    load_average_at_start: list[float]
    load_average_now: list[float] | None = None


class Sections(_Row):
    compile: CompileSection | None = None
    offline: OfflineSection | None = None
    federation: FederationSection | None = None
    cpu: CpuSection | None = None
    budget: CompileSection | None = None


class OtherRun(_Row):
    """Sections that came from another invocation (`python -m bench.run --merge`)."""

    command: str
    sections: list[str]
    elapsed_s: float | None
    load_average_at_start: list[float]


class EarlierRun(_Row):
    """A section's run that a merge replaced (`bench.run --merge ... --replace`, or a merged
    run's federation or CPU section over this report's): a report adds runs and never drops
    one, so it is kept here, with the invocation that ran it, and listed in the report."""

    section: str
    command: str  # the invocation that ran it
    replaced_by: str  # what replaced it
    sections: Sections  # that one section, as it was
    repeats: list[Repeat] = Field(default_factory=list)  # its repeats (compile, budget)
    wall_s: float | None = None
    cpu_s: float | None = None


class ReferenceSummary(_Row):
    """One MetaSchedule-20K reference's progress (bench/compile/reference.py's summary.json)."""

    network: str
    unit: str
    trials: int
    target_trials: int
    in_database: int
    tasks: int
    tasks_with_records: int
    network_latency_s: float | None
    cpu_s_total: float
    modelled_measure_s_total: float
    cpu_s_per_trial: float | None
    projected_cpu_h_to_finish: float | None
    metaschedule_defaults: bool
    pieces: int
    last_command: str
    last_load: list[float]
    last_wall_s: float | None
    # each task's best latency so far (the curves compare the tuned tasks with it)
    task_best_s: dict[str, float | None] = Field(default_factory=dict)


class TrialCost(_Row):
    """Where a reference trial's CPU goes (bench/compile/reference_cost.py's trial_cost.json)."""

    command: str
    network: str
    unit: str
    task: str
    trials: int
    cpu_s: float
    cpu_s_per_trial: float | None
    wall_s: float
    profiled_wall_s: float
    share_of_profiled_wall: dict[str, float]
    load_start: list[float]
    load_end: list[float]
    note: str = ""


class BenchReport(_Row):
    """bench/reports/report.json."""

    mode: str
    command: str
    machine: Machine
    started_utc: str
    sections: Sections = Field(default_factory=Sections)
    section_seconds: dict[str, float | None] = Field(default_factory=dict)
    section_cpu_s: dict[str, float | None] = Field(default_factory=dict)
    errors: dict[str, str] = Field(default_factory=dict)
    elapsed_s: float = 0.0
    other_runs: list[OtherRun] = Field(default_factory=list)
    compile_repeats: list[Repeat] = Field(default_factory=list)
    budget_repeats: list[Repeat] = Field(default_factory=list)
    cpu_s: float | None = None  # CPU seconds of this run (process and children)
    references: list[ReferenceSummary] = Field(default_factory=list)
    reference_trial_cost: TrialCost | None = None
    merge_commands: list[str] = Field(default_factory=list)  # `bench.run --merge` runs
    earlier_runs: list[EarlierRun] = Field(default_factory=list)  # replaced, never dropped


def own_sections(report: BenchReport) -> set[str]:
    """The report's sections that its own invocation ran (not merged from another)."""
    have = {n for n in type(report.sections).model_fields if getattr(report.sections, n)}
    return have - {x for o in report.other_runs for x in o.sections}


# -- bench/compile/user_spec_tune.py: `simoe-agent tune` on user spec files -----------------
class UserSpecRow(_Row):
    """One `simoe-agent tune` call: the operator's task as the CLI reported it."""

    gpu: str  # the spec file's key
    spec_file: str
    operator: str
    method: str
    trials: int  # --trials
    seed: int
    command: str
    task: str | None = None
    measured: int | None = None  # candidates the CLI measured for the task
    default_s: float | None = None  # TVM's default (DLight) schedule
    tuned_s: float | None = None  # the best tuned schedule, re-measured
    kept: str | None = None  # "tuned" or "default" (the never-worse rule)
    wall_s: float
    cpu_s: float  # the CLI process's CPU seconds (user + system)
    error: str | None = None  # the CLI's one line where it exited non-zero
    model_used: str | None = None
    # fast mode's hedge: the first batch's Spearman rho (model scores against measured
    # latencies) and whether the rest of the trials went to MetaSchedule's evolutionary search
    hedge_spearman: float | None = None
    hedged: bool | None = None


class UserSpecReport(_Row):
    simulated: bool = True
    commands: list[str]  # every invocation that added rows (a rerun adds the rest)
    note: str
    # which code the rows came from (e.g. "range fix"): bench.report.beats_default shows it
    # after the method name, so runs of different code are never pooled into one row
    label: str | None = None
    rows: list[UserSpecRow]
