"""What `simoe-server demo` reports: its table rows, its nodes, the report file, the print.

The demo's newcomer tunes a network three ways (SiMoE zero-shot, MetaSchedule at the
same budget and at a larger one); on a simulated GPU every latency is modelled, and
the table says so.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class DemoRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: str
    cost_model: str
    trials_per_task: int
    search_wall_s: float
    modelled_measure_s: float | None = None  # what the measurements would cost on the GPU
    network_latency_s: float | None
    failed_tasks: list[str] = []  # tuned tasks without one successful candidate (no latency)
    simulated: bool
    # schedule sharing (opt-in): offered schedules that joined the candidates ranked before
    # the first measurement, and those that did not apply to this target's tasks
    shared_schedules: int = 0
    shared_skipped: int = 0

    def latency_text(self) -> str:
        """The latency, or which tasks had no successful candidate (why there is none)."""
        if self.network_latency_s is not None:
            return f"{self.network_latency_s * 1e6:.2f} us"
        named = ", ".join(self.failed_tasks) or "unknown"
        return f"no latency: no successful candidate for {named}"

    @property
    def compile_s(self) -> float:
        """Search wall time plus the modelled measurement time: a real GPU's compile time."""
        return self.search_wall_s + (self.modelled_measure_s or 0.0)


class DemoNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    device: str
    records: int  # tuning records in its store at the end
    job: str  # done / failed: why


class DemoReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    out_dir: str
    server_dir: str
    deployment: str = (
        "simoe-server start (SuperLink: TLS, node authentication) and one simoe-agent "
        "enroll + run daemon per node, separate processes on loopback"
    )
    nodes: list[DemoNode]
    network: str  # what the newcomer tuned
    fleet_network: str = "tiny_mlp"  # what the fleet tuned
    # the DemoPlan it ran (bench.federation.demo_newcomer reruns its newcomer)
    plan: dict[str, Any] = {}
    server_settings: str = ""  # the server's aggregation and step, in words
    server_overrides: list[str] = []  # the demo's departures from the deployment's defaults
    tuned_tasks: list[str] = []  # the newcomer's network: the tasks tuned (its largest)
    total_tasks: int = 0
    flops_share: float | None = None  # their share of the network's FLOPs
    fleet_trials: int
    new_gpu: str
    experts_delivered: list[str]
    rounds: int
    federation_wall_s: float
    rows: list[DemoRow]
    total_wall_s: float
    cpu_s: float  # CPU time of every process the demo started (user + system)
    load_average: tuple[float, float]  # 1-min load at the start and at the end
    report: str
    plot: str | None


def network_latency(result: dict[str, Any]) -> float | None:
    """Sum over the network's tasks of weight x best latency (the runtime of one inference)."""
    total = 0.0
    for task in result["tasks"]:
        if task.get("best_latency_s") is None:
            return None
        total += float(task["weight"]) * float(task["best_latency_s"])
    return total


def failed_tasks(result: dict[str, Any]) -> list[str]:
    """The tuned tasks of a `tune --json` result that had no successful candidate."""
    return [str(t["task_name"]) for t in result["tasks"] if t.get("best_latency_s") is None]


def sharing_text(report: DemoReport) -> str:
    """Whether the demo ran with schedule sharing, and what the newcomer's tunes got."""
    if not report.plan.get("share_schedules"):
        return "schedule sharing: off (every node enrolled without --share-schedules)"
    top_k = report.plan.get("share_top_k")
    used = "; ".join(
        f"{r.method}: {r.shared_schedules} shared schedules ranked with its candidates"
        + (f", {r.shared_skipped} did not apply" if r.shared_skipped else "")
        for r in report.rows
    )
    return (
        "schedule sharing: on (every node and the newcomer enrolled with --share-schedules"
        f"{'' if top_k is None else f' --share-top-k {top_k}'}); {used}"
    )


def _tasks_note(report: DemoReport) -> str:
    if not report.tuned_tasks or report.flops_share is None:
        return ""
    return (
        f"; its {len(report.tuned_tasks)} largest of {report.total_tasks} tasks, "
        f"{report.flops_share:.0%} of its FLOPs"
    )


def print_report(report: DemoReport, console: Any) -> None:
    from rich.table import Table

    table = Table(
        title=f"{report.network} on sim:{report.new_gpu}, a GPU none of the fleet is "
        f"(SIMULATED GPU: modelled latencies){_tasks_note(report)}"
    )
    for column in ("method", "trials", "search s", "measure s*", "compile s"):
        table.add_column(column, justify="left" if column == "method" else "right")
    table.add_column("latency us", justify="right")
    for r in report.rows:
        table.add_row(
            r.method,
            str(r.trials_per_task),
            f"{r.search_wall_s:.1f}",
            "n/a" if r.modelled_measure_s is None else f"{r.modelled_measure_s:.1f}",
            f"{r.compile_s:.1f}",
            "none" if r.network_latency_s is None else f"{r.network_latency_s * 1e6:.2f}",
        )
    console.print(table)
    console.print(
        "trials per task; search s: real wall time of the search here; measure s*: modelled "
        "time the measurements would take on the real GPU; compile s: their sum; latency: "
        "the modelled latency of the tuned tasks (sum of weight x best)"
    )
    for r in report.rows:
        if r.network_latency_s is None:
            console.print(f"{r.method}: {r.latency_text()}")
    console.print(sharing_text(report))
    simoe, same, larger = (r.network_latency_s for r in report.rows)
    if simoe and same and larger:
        verdict = "beats" if simoe < same else "does NOT beat"
        console.print(
            f"SiMoE zero-shot {verdict} MetaSchedule at the same budget "
            f"({same / simoe:.3f}x its latency); against the larger budget: "
            f"{larger / simoe:.3f}x (>1: SiMoE faster)"
        )
        console.print(
            f"one search per method: at {report.rows[0].trials_per_task} trials/task a result "
            "varies widely between runs; `python -m bench.federation.demo_newcomer --data "
            f"{report.out_dir}` reruns the three over several seeds"
        )
    if report.tuned_tasks:
        console.print(f"tasks tuned: {', '.join(report.tuned_tasks)}")
    fleet = ", ".join(f"{n.name} ({n.device}, {n.records} records)" for n in report.nodes)
    console.print(
        f"fleet ({report.fleet_network}): {fleet}; {report.rounds} rounds in "
        f"{report.federation_wall_s:.0f} s; experts delivered to the newcomer: "
        f"{', '.join(report.experts_delivered) or 'none'}"
    )
    if report.server_settings:
        console.print(
            f"server: {report.server_settings}; off the deployment's defaults: "
            f"{'; '.join(report.server_overrides) or 'nothing'}"
        )
    console.print(
        f"total {report.total_wall_s:.0f} s wall, {report.cpu_s:.0f} s CPU in all processes "
        f"(load average {report.load_average[0]:.1f} at the start, "
        f"{report.load_average[1]:.1f} at the end)"
    )
    console.print(f"report: {report.report}")
    console.print(f"similarity plot: {report.plot or 'not written'}")
