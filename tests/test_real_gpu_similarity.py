"""bench/real_gpu/similarity.py: the alignment option and the per-target correlation."""

from __future__ import annotations

import pytest

from bench.real_gpu import similarity as sim


def _row(target: str, other: str, learned: float, agreement: float) -> sim.SimilarityPair:
    return sim.SimilarityPair(
        kernel="gemm", target=target, other=other, seed=0, learned=learned, spec=-learned,
        agreement=agreement,
    )  # fmt: skip


def test_per_target_correlation_is_within_one_target() -> None:
    """Pooled, the learned similarity follows the agreement (target a's pairs sit high, b's
    low); within each target it orders the fleet GPUs backwards: per target it is -1."""
    rows = [
        _row("a", "x", 0.93, 0.91), _row("a", "y", 0.92, 0.92), _row("a", "z", 0.91, 0.93),
        _row("b", "x", 0.13, 0.11), _row("b", "y", 0.12, 0.12), _row("b", "z", 0.11, 0.13),
    ]  # fmt: skip
    assert sim._rho(rows, "learned") > 0.5
    assert sim._per_target(rows, "learned") == pytest.approx(-1.0)
    report = sim.SimilarityReport(
        command="x", seeds=[0], pairs=len(rows), learned_vs_agreement=0.6, spec_vs_agreement=0.0,
        per_kernel={"gemm": sim.KernelCorrelation(learned=0.6, spec=0.0)}, wall_s=1.0, rows=rows,
    )  # fmt: skip
    # a report written before the per-target column: computed from its rows when rendered
    assert "| gemm | 0.600 | 0.000 | -1.000 |" in sim.markdown(report)
    assert report.alignment == "mse"


def test_an_unknown_alignment_is_one_line_and_exit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        sim.main(["--alignment", "cosine-magic"])
    assert "unknown --alignment" in str(exit_.value)


def test_a_run_against_an_earlier_one_says_which_is_better() -> None:
    """Per target, the earlier run orders target a's fleet backwards and this one forwards:
    this run minus that one is +2 per target, with an interval; itself minus itself is 0."""
    agree = {"x": 0.91, "y": 0.92, "z": 0.93}
    forward = [_row(t, o, a, a) for t in ("a", "b") for o, a in agree.items()]
    backward = [_row(t, o, 1.84 - a, a) for t in ("a", "b") for o, a in agree.items()]

    def report(rows: list[sim.SimilarityPair], alignment: str) -> sim.SimilarityReport:
        return sim.SimilarityReport(
            command="x", seeds=[0], alignment=alignment, pairs=len(rows),
            learned_vs_agreement=sim._rho(rows, "learned"), spec_vs_agreement=0.0,
            per_kernel={}, wall_s=1.0, rows=rows,
        )  # fmt: skip

    now, before = report(forward, "mse+pairwise"), report(backward, "mse")
    text = sim.markdown(now, before, "before.json")
    assert "per target +2.000 [+2.000, +2.000]" in text and "--versus before.json" in text
    assert "per target +0.000" in sim.markdown(now, now, "now.json")
