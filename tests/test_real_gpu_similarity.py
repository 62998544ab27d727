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
