"""Does the program-feature clamp (model format 3) change any protocol result?

SiMoE clamps every program feature to the range of the rows its encoder was trained on
(commit 04163b7; docs/results/starter_diagnosis.md). The protocol's reports were written
before it. The clamp changes a score only where a scored candidate has a feature outside
that range, so this counts such candidates on the validation and test units against the
range of the training units' rows (the central model's training data; SIMULATED fleet):

    python -m bench.transfer.clamp_coverage --out docs/results/clamp_coverage.md

Zero means the clamp is the identity on every candidate the protocol scores, so the
committed protocol figures are what today's code gives (same training, same scores).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bench.protocol import DATA_DIR, _load_unit, fleet_hashes, units


def unit_rows(unit: str, data_dir: Path) -> list[np.ndarray]:
    """Every candidate's [n_stores, 164] feature array of one unit's store."""
    return [f for task in _load_unit([data_dir], unit).tasks for f in task.features]


def coverage(data_dir: Path) -> tuple[int, dict[str, tuple[int, int, int]]]:
    """Training rows, and per split (candidates, those with a feature outside, units)."""
    train = np.concatenate([f for u in units("train") for f in unit_rows(u, data_dir)])
    low, high = train.min(0), train.max(0)
    result = {}
    for split in ("validation", "test"):
        candidates = outside = 0
        for unit in units(split):
            for f in unit_rows(unit, data_dir):
                candidates += 1
                outside += bool(((f < low) | (f > high)).any())
        result[split] = (candidates, outside, len(units(split)))
    return len(train), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA_DIR, help="the protocol fleet")
    parser.add_argument("--out", type=Path, help="markdown file (default: print)")
    args = parser.parse_args()
    train_rows, result = coverage(args.data)
    digest = str(fleet_hashes(args.data)["digest"])[:8]
    lines = [
        "# Program features outside the training range (SIMULATED fleet)",
        "",
        "Command: `python -m bench.transfer.clamp_coverage --out docs/results/clamp_coverage.md`"
        f" (the fleet in runs/protocol_fleet, digest {digest}). Range: the "
        f"{len(units('train'))} training units' {train_rows} store rows.",
        "",
        "| split | units | candidates | with a feature outside the range |",
        "|---|---|---|---|",
        *(f"| {s} | {n_units} | {n} | {out} ({out / max(n, 1):.2%}) |"
          for s, (n, out, n_units) in result.items()),
        "",
        "The protocol's central model trains on every row of the training units (train_per_task"
        " 0 in bench/protocol_choices.json), so this range is its clamp range: zero here means"
        " the clamp is the identity on every candidate it scores. Not counted: the federation,"
        " where each node clamps to its own rows' range (narrower than the fleet's).",
    ]  # fmt: skip
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
