"""bench/reliability/chaos.py's report: its typed rows (one `Fault` per kill and restart, the
`ChaosReport`) and the Markdown rendered from them (`python -m bench.reliability.chaos --render
REPORT.json` re-renders it)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from bench.reporting import load_text


# -- the rows --------------------------------------------------------------------------------
class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cycle: int
    at_s: float  # seconds after the first fault was scheduled
    target: str  # "server" or a node name
    processes_killed: int
    restart_s: float  # until the restart command was running (server: port listening)
    restarted_at: datetime
    back_in_round: int | None = None  # first round after the restart it replied in / closed
    back_after_s: float | None = None  # from the restart to the start of that round
    records_before: dict[str, int]
    records_after: dict[str, int]
    integrity_after: dict[str, str]
    lost: int  # sum over stores of max(0, before - after)
    last_round_before: int


class ChaosReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    simulated_devices: bool = True
    command: str
    nodes: dict[str, str]  # name -> device
    interval_s: tuple[float, float]
    faults_for_s: float
    seed: int
    faults: list[Fault]
    cycles_survived: int
    records_start: dict[str, int]  # when the faults began
    records_end: dict[str, int]  # after the clean stop
    integrity_end: dict[str, str]
    lost_total: int
    registry_integrity: str
    registry_problems: list[str]
    rounds_total: int
    rounds_closed: int
    rounds_interrupted: list[int]  # marked interrupted at the restart after a server kill
    rounds_open: list[int]  # still "running": at most the one the final stop cut short
    server_kills: int
    rounds_after_each_server_restart: list[int]
    nodes_back: dict[str, bool]
    last_reply_round: dict[str, int]
    verdict: str
    wall_s: float
    load_average_start: list[float]
    load_average_end: list[float]


def markdown(report: ChaosReport) -> str:
    nodes = list(report.nodes)
    lines = [
        "# Chaos on loopback",
        "",
        f"Command: `{report.command}`  ",
        "Real processes: `simoe-server start` (SuperLink, TLS, node auth, ServerApp, "
        f"registry) and {len(nodes)} nodes, each `simoe-agent enroll` then `simoe-agent run` "
        f"(daemon, SuperNode, ClientApps, tuning jobs) on a SIMULATED GPU "
        f"({', '.join(f'{n}: sim:{d}' for n, d in report.nodes.items())}).  ",
        f"Every {report.interval_s[0]:.0f}-{report.interval_s[1]:.0f} s for "
        f"{report.faults_for_s:.0f} s (seed {report.seed}), one target (the server with "
        "probability 1/2, else a node drawn uniformly) is killed with SIGKILL together "
        "with every process it started, then restarted with the same command.  ",
        f"Wall time {report.wall_s:.0f} s; load average at start "
        f"{load_text(report.load_average_start)}, at end {load_text(report.load_average_end)}.",
        "",
        f"**Verdict: {report.verdict}. Cycles survived: {report.cycles_survived} of "
        f"{len(report.faults)}. Records lost: {report.lost_total}.**",
        "",
        "## Every fault: committed records in each node's store, before and after",
        "",
        "| cycle | at (s) | killed | processes | restart (s) | round before | back in round "
        "(s after restart) | "
        + " | ".join(f"{n} before → after" for n in nodes)
        + " | integrity | lost |",
        "|---|---|---|---|---|---|---|" + "---|" * len(nodes) + "---|---|",
    ]
    for f in report.faults:
        cells = " | ".join(f"{f.records_before[n]} → {f.records_after[n]}" for n in nodes)
        integrity = ", ".join(sorted(set(f.integrity_after.values())))
        back = (
            "never" if f.back_in_round is None else f"{f.back_in_round} ({f.back_after_s or 0:.0f})"
        )
        lines.append(
            f"| {f.cycle} | {f.at_s:.0f} | {f.target} | {f.processes_killed} | {f.restart_s:.0f} "
            f"| {f.last_round_before} | {back} | {cells} | {integrity} | {f.lost} |"
        )
    lines += [
        "",
        "## Afterwards",
        "",
        "| check | result |",
        "|---|---|",
        _per_node("records when the faults began", report.records_start),
        _per_node("records after the clean stop", report.records_end),
        _per_node("stores' integrity_check", report.integrity_end),
        f"| registry integrity_check | {report.registry_integrity} |",
        "| registry consistency | "
        + ("; ".join(report.registry_problems) if report.registry_problems else "consistent")
        + " |",
        f"| rounds | {report.rounds_total} ({report.rounds_closed} closed; interrupted by a "
        f"server kill: {report.rounds_interrupted or 'none'}; cut short by the final stop: "
        f"{report.rounds_open or 'none'}) |",
        f"| rounds completed after each of the {report.server_kills} server restarts | "
        f"{report.rounds_after_each_server_restart or 'no server kill drawn'} |",
        _per_node(
            "every node back (replied after its last restart)",
            {n: "yes" if back else "NO" for n, back in report.nodes_back.items()},
        ),
        _per_node("last round each node replied in", report.last_reply_round),
    ]
    return "\n".join(lines) + "\n"


def _per_node(label: str, values: dict[str, object]) -> str:
    return f"| {label} | " + ", ".join(f"{n} {v}" for n, v in values.items()) + " |"
