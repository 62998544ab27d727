"""`simoe-server watch`: a live view of the fleet, refreshed in place (rich Live).

One screen from the registry, opened read-only at each refresh (so it runs beside the
server, over ssh, and never writes): the nodes with their device and last contact, the
current or last round, the experts, and the most recent rejected updates and refused
hellos. `--once` prints one frame and exits (scripts, tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from schemas import SimoeError
from schemas.cli import live_view
from schemas.tables import ago


@dataclass
class Fleet:
    """What one frame shows, read from the registry."""

    registry: str
    nodes: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[Any] = field(default_factory=list)  # RoundInfo, oldest first
    experts: list[Any] = field(default_factory=list)  # ExpertInfo
    rejections: list[dict[str, Any]] = field(default_factory=list)
    refusals: list[dict[str, Any]] = field(default_factory=list)
    global_version: int = 0
    error: str | None = None  # the registry could not be read this time (one line)


def read_fleet(path: Path) -> Fleet:
    """The registry's state now; an unreadable registry is a frame that says why."""
    from server.registry import Registry

    try:
        with Registry(path, read_only=True) as registry:
            return Fleet(
                registry=str(path),
                nodes=registry.nodes(),
                rounds=registry.rounds(),
                experts=registry.experts(),
                rejections=registry.rejections()[-5:],
                refusals=registry.refusals()[-5:],
                global_version=registry.global_version(),
            )
    except SimoeError as exc:
        return Fleet(registry=str(path), error=str(exc))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def render(fleet: Fleet, now: datetime | None = None) -> Group:
    """One frame: a header line, then nodes, the round, experts and rejections."""
    clock = (now or datetime.now(timezone.utc)).strftime("%H:%M:%S UTC")
    header = Text.assemble(("SiMoE fleet", "bold"), f"  {fleet.registry}  {clock}")
    if fleet.error:
        return Group(header, Text(f"cannot read the registry: {fleet.error}", style="red"))
    last = fleet.rounds[-1] if fleet.rounds else None
    if last is None:
        round_line = "no round yet (waiting for nodes)"
    else:
        state = "running" if last.status == "running" else last.status
        round_line = (
            f"round {last.round}: {state}, {last.replied}/{last.sampled} replied, "
            f"{last.rejected} rejected, {last.failed} failed; started {ago(last.started_at, now)}"
        )
    summary = Text(
        f"{_count(len(fleet.nodes), 'node')}, {_count(len(fleet.experts), 'expert')}, "
        f"global model v{fleet.global_version}, {_count(len(fleet.rounds), 'round')}\n"
        f"{round_line}"
    )
    nodes = Table(title="nodes", title_justify="left", expand=False)
    for column in ("name", "device", "rounds", "last contact"):
        nodes.add_column(column, justify="right" if column == "rounds" else "left")
    for n in fleet.nodes:
        nodes.add_row(n["name"], n["device"], str(n["rounds"]), ago(n["last_seen"], now))
    experts = Table(title="experts", title_justify="left", expand=False)
    for column in ("name", "device", "version", "round", "examples"):
        experts.add_column(column)
    for e in fleet.experts:
        experts.add_row(e.name, e.device, str(e.version), str(e.round), str(e.num_examples))
    parts: list[Any] = [header, summary, nodes, experts]
    if fleet.rejections or fleet.refusals:
        recent = Table(title="recent rejections", title_justify="left", expand=False)
        for column in ("when", "round", "who", "why"):
            recent.add_column(column)
        names = {n["node_key"]: n["name"] for n in fleet.nodes}
        for r in fleet.rejections:
            who = names.get(r["node_key"], str(r["node_key"])[:12])
            recent.add_row(ago(r["at"], now), str(r["round"]), who, r["reason"])
        for r in fleet.refusals:
            recent.add_row(ago(r["at"], now), "-", f"node {r['flower_node_id']}", r["reason"])
        parts.append(recent)
    else:
        parts.append(Text("no rejected updates", style="dim"))
    return Group(*parts)


def watch(path: Path, console: Console, *, interval: float = 2.0, once: bool = False) -> None:
    """Show the fleet until Ctrl-C, redrawn in place every `interval` seconds."""
    live_view(lambda: render(read_fleet(path)), console, interval=interval, once=once)
