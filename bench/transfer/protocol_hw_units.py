"""Hybrid against the one-sided hardware representations on the units that differ inside a
model in hardware (issue 24): the units of every GPU model of which some unit states its own
SM count, L2 or memory bandwidth (MIG slices, board variants: agent/devices/sim/units.json,
bench/protocol_specs/), read from a protocol_transfer report's JSON (its ablations).

    python -m bench.transfer.protocol_hw_units docs/results/protocol_transfer_test.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bench import protocol
from bench.reporting import read_report
from bench.transfer.protocol_report import model_of, paired_interval, seed_mean
from bench.transfer.protocol_result import TransferResult

VARIANTS = ("simoe-analytical-only", "simoe-empirical-only", "simoe-no-prior")


def hardware_differs(unit: str) -> bool:
    """Whether the unit states SMs, L2 or bandwidth of its own beside its model's sheet."""
    from agent.devices.sim.catalog import resolve

    spec = resolve(protocol.device_of(unit.removeprefix("sim:")).removeprefix("sim:"))
    return bool(spec.hardware_overrides)


def units_differing_in_hardware(units: list[str]) -> list[str]:
    """Every unit of a GPU model of which at least one of `units` differs in hardware."""
    models = {model_of(u) for u in units if hardware_differs(u)}
    return [u for u in units if model_of(u) in models]


def markdown(result: TransferResult) -> list[str]:
    units = units_differing_in_hardware(result.units)
    hybrid = seed_mean(result, "simoe-hybrid", 0)
    if hybrid is None or not units:
        return ["No ablation results, or no unit differing in hardware, in this report."]
    lines = [
        f"Units of the GPU models with units of their own hardware ({len(units)}: "
        f"{', '.join(u.removeprefix('sim:') for u in units)}; "
        f"{len({model_of(u) for u in units})} models), budget 0, seeds "
        f"{sorted(result.fidelity)}: hybrid minus each variant, paired bootstrap "
        "clustered by GPU model. Command: `python -m bench.transfer.protocol_hw_units "
        "<report>.json`.",
        "",
        "| variant | top-1 hybrid | top-1 variant | hybrid minus variant | 95% interval |",
        "|---|---|---|---|---|",
    ]
    mine = {u: hybrid[u] for u in units}
    for label in VARIANTS:
        got = seed_mean(result, label, 0)
        if got is None:
            continue
        theirs = {u: got[u] for u in units}
        mean, lo, hi = paired_interval(mine, theirs)
        lines.append(
            f"| {label} | {np.mean(np.concatenate(list(mine.values()))):.3f} | "
            f"{np.mean(np.concatenate(list(theirs.values()))):.3f} | {mean:+.3f} | "
            f"[{lo:+.3f}, {hi:+.3f}] |"
        )
    lines += [
        "",
        "| unit | hardware of its own | top-1 hybrid | analytical-only | empirical-only |",
    ]
    lines.append("|---|---|---|---|---|")
    an, em = seed_mean(result, VARIANTS[0], 0), seed_mean(result, VARIANTS[1], 0)
    for u in units:
        lines.append(
            f"| {u.removeprefix('sim:')} | {'yes' if hardware_differs(u) else 'no'} | "
            f"{hybrid[u].mean():.3f} | "
            f"{an[u].mean() if an else float('nan'):.3f} | "
            f"{em[u].mean() if em else float('nan'):.3f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a protocol_transfer report's JSON")
    args = parser.parse_args()
    if not args.report.exists():
        parser.exit(2, f"error: no such report: {args.report}\n")
    print("\n".join(markdown(read_report(args.report, TransferResult))))


if __name__ == "__main__":
    main()
