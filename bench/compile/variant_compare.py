"""Two fast-mode variants of `bench.compile.user_spec_tune` side by side, and the rule that
picks between them (issue 23: the hedge on or off). SIMULATED GPUs: every latency is modelled.

    python -m bench.compile.variant_compare --a bench/reports/user_spec_dev_det_hedge \\
        --b bench/reports/user_spec_dev_det_nohedge --seeds 0,1,2

Each report directory holds `user_spec_seed{S}.json` (one per seed). A row's speedup is
DLight's default latency over the best tuned one (below 1: the never-worse rule kept the
default). The rule, written before the runs (docs/results/fast_mode_hedge.md): variant A
stays if the geometric mean of its speedups over the (GPU, operator, seed) rows both variants
ran is not below B's. A row one variant lacks is listed as missing, never dropped silently.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from pydantic import ValidationError

from bench.report.report_model import UserSpecReport, UserSpecRow

Key = tuple[str, str, int]  # (GPU, operator, seed)


def load_rows(folder: Path, seeds: list[int]) -> dict[Key, UserSpecRow]:
    """The finished rows of one variant's report directory, by (GPU, operator, seed)."""
    rows: dict[Key, UserSpecRow] = {}
    for seed in seeds:
        path = folder / f"user_spec_seed{seed}.json"
        if not path.is_file():
            continue
        for row in UserSpecReport.model_validate_json(path.read_text()).rows:
            if row.error is None and row.default_s and row.tuned_s:
                rows[(row.gpu, row.operator, row.seed)] = row
    return rows


def speedup(row: UserSpecRow) -> float:
    assert row.default_s is not None and row.tuned_s is not None
    return row.default_s / row.tuned_s


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def _cell(row: UserSpecRow | None) -> str:
    if row is None:
        return "not run"
    rho = "" if row.hedge_spearman is None else f" (rho {row.hedge_spearman:.2f}"
    rho += ", hedged)" if row.hedged else (")" if rho else "")
    return f"{speedup(row):.2f}x{rho}, {row.cpu_s:.0f} CPU s"


def table(
    a: dict[Key, UserSpecRow],
    b: dict[Key, UserSpecRow],
    names: tuple[str, str],
    planned: int | None = None,
) -> str:
    """The markdown table of every row either variant ran, then the rule's verdict;
    `planned`: how many (GPU, operator, seed) pairs the plan has."""
    keys = sorted(set(a) | set(b), key=lambda k: (k[0], k[1], k[2]))
    lines = [
        f"| GPU | operator | seed | {names[0]} | {names[1]} |",
        "|---|---|---|---|---|",
        *(f"| {g} | {op} | {s} | {_cell(a.get((g, op, s)))} | {_cell(b.get((g, op, s)))} |"
          for g, op, s in keys),
    ]  # fmt: skip
    both = [k for k in keys if k in a and k in b]
    ga, gb = geomean([speedup(a[k]) for k in both]), geomean([speedup(b[k]) for k in both])
    beat_a = sum(speedup(a[k]) > 1 for k in both)
    beat_b = sum(speedup(b[k]) > 1 for k in both)
    same = sum(a[k].tuned_s == b[k].tuned_s for k in both)
    missing = [f"{g} {op} seed {s}" for g, op, s in keys if (g, op, s) not in both]
    lines += [
        "",
        f"Rows both ran: {len(both)}"
        + (f" of the {planned} planned" if planned is not None else "")
        + "; geometric mean speedup over the default: "
        f"{names[0]} {ga:.3f}x, {names[1]} {gb:.3f}x; beat the default: {names[0]} "
        f"{beat_a}/{len(both)}, {names[1]} {beat_b}/{len(both)}; same tuned latency in both: "
        f"{same}/{len(both)}.",
        f"Rule: keep {names[0]} unless its geometric mean is below {names[1]}'s: "
        + (f"keep {names[0]}." if not ga < gb else f"switch to {names[1]}."),
        "Rows one variant lacks: " + ("; ".join(missing) if missing else "none") + ".",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="variant A's report directory")
    parser.add_argument("--b", type=Path, required=True, help="variant B's report directory")
    parser.add_argument("--names", default="hedge 0.3,no hedge", help="A's and B's names")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--planned", type=int, help="(GPU, operator, seed) pairs planned")
    args = parser.parse_args(argv)
    try:
        seeds = [int(x) for x in args.seeds.split(",") if x]
    except ValueError:
        parser.error(f"--seeds: whole numbers, comma-separated, not {args.seeds!r}")
    names = tuple(args.names.split(","))
    if len(names) != 2:
        parser.error(f"--names: two names, comma-separated, not {args.names!r}")
    for folder in (args.a, args.b):
        if not folder.is_dir():
            parser.error(f"no report directory {folder}")
    try:
        a, b = load_rows(args.a, seeds), load_rows(args.b, seeds)
    except ValidationError as exc:
        parser.error(f"not a user_spec_tune report: {str(exc).splitlines()[0]}")
    print(table(a, b, (names[0], names[1]), args.planned))
    return 0


if __name__ == "__main__":
    sys.exit(main())
