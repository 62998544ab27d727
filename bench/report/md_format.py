"""The cells and lines every Markdown section of BENCHMARKS.md shares: numbers formatted
or "n/a", and SiMoE fast against each peer (section 1, section 5 and the repeats)."""

from __future__ import annotations

from bench.report.claims import Claims, peer_target, verdict
from bench.report.report_model import PairSummary


def fmt(value: float | int | None, spec: str = ".3g", none: str = "n/a") -> str:
    return none if value is None else format(float(value), spec)


def pct(value: float | None, spec: str = ".1f") -> str:
    return fmt(None if value is None else value * 100, spec)


def ms(value: float | None, spec: str = ".4f") -> str:
    return fmt(None if value is None else value * 1e3, spec)


def peer_lines(
    summary: list[PairSummary], claims: Claims, k: int, lead: str = "", unit: str = "pair(s)"
) -> list[str]:
    """SiMoE fast against each peer at k: the geometric mean, its verdict, pairs that met it."""
    lines = []
    for peer in claims.peers:
        value = claims.vs_peer.get(peer)
        target = peer_target(peer)
        met = sum(1 for e in summary if e.speedup_vs.get(peer, 0) >= target)
        have = sum(1 for e in summary if e.speedup_vs.get(peer))
        lines.append(
            f"- {lead}At {k} measurements per task, SiMoE fast's networks are "
            f"{fmt(value, '.3f')}x as fast as {peer}'s (target >= {target}x: "
            f"{verdict(value, target)}; met on {met} of {have} {unit})."
        )
    return lines
