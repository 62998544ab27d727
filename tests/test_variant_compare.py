"""bench.compile.variant_compare: the geometric means over paired rows and the rule's verdict."""

from __future__ import annotations

import pytest

from bench.compile.variant_compare import table
from bench.report.report_model import UserSpecRow


def _row(op: str, seed: int, default: float, tuned: float) -> UserSpecRow:
    return UserSpecRow(
        gpu="user-l4", spec_file="l4.json", operator=op, method="simoe-fast", trials=32,
        seed=seed, command="simoe-agent tune", wall_s=1.0, cpu_s=1.0, default_s=default,
        tuned_s=tuned,
    )  # fmt: skip


@pytest.mark.parametrize(("b_tuned", "verdict"), [(1.0, "keep A"), (0.25, "switch to B")])
def test_the_rule_compares_geometric_means_over_the_rows_both_ran(
    b_tuned: float, verdict: str
) -> None:
    a = {("user-l4", "x", 0): _row("x", 0, 1.0, 0.5), ("user-l4", "y", 0): _row("y", 0, 1.0, 2.0)}
    b = {
        ("user-l4", "x", 0): _row("x", 0, 1.0, b_tuned),
        ("user-l4", "z", 1): _row("z", 1, 1.0, 0.1),
    }
    text = table(a, b, ("A", "B"), planned=4)
    # only x pairs: A 2.0x; B 1.0x or 4.0x; z (B only) and y (A only) are listed, not pooled
    assert "Rows both ran: 1 of the 4 planned" in text
    assert f"B {1.0 / b_tuned:.3f}x" in text and "A 2.000x" in text
    assert f"{verdict}." in text
    assert "user-l4 y seed 0; user-l4 z seed 1" in text
    assert "| user-l4 | z | 1 | not run | 10.00x, 1 CPU s |" in text
