"""bench/transfer/protocol_similarity.py: the rule that picks the alignment loss, its
statistics and its command line (the runs themselves: tests/test_protocol.py's tiny fleet)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import protocol
from bench.transfer import protocol_similarity as ps


def _variant(name: str, per_unit: float, top1: float) -> ps.VariantResult:
    corr = ps.Correlation(
        per_unit=per_unit, per_unit_interval=(0, 1), pooled=per_unit, pooled_interval=(0, 1),
        per_unit_by_seed=[per_unit], by_unit={}, by_model={},
    )  # fmt: skip
    return ps.VariantResult(
        variant=name, correlation=corr, minus_mse=0.0, minus_mse_interval=(0, 0),
        top1_budget0=top1, top1_by_seed=[top1], nearest={}, nearest_agreement=0.9,
        cos_spread=0.1, shared_seconds=[1.0],
    )  # fmt: skip


def _all(scores: dict[str, tuple[float, float]]) -> list[ps.VariantResult]:
    return [_variant(v, *scores[v]) for v in protocol.SIMILARITY_VARIANTS]


def test_the_rule_keeps_mse_unless_a_variant_beats_it_by_more_than_0_02() -> None:
    base = {v: (0.70, 0.90) for v in protocol.SIMILARITY_VARIANTS}
    assert ps.choose(_all({**base, "pairwise": (0.715, 0.90)})) == "mse"
    assert ps.choose(_all({**base, "pairwise": (0.73, 0.90)})) == "pairwise"


def test_the_rule_refuses_a_variant_that_costs_top1_at_budget_0() -> None:
    base = {v: (0.70, 0.90) for v in protocol.SIMILARITY_VARIANTS}
    scores = {**base, "listwise": (0.90, 0.894), "pairwise": (0.80, 0.896)}
    assert ps.choose(_all(scores)) == "pairwise"  # listwise: best, but 0.006 lower top-1


def test_a_tie_goes_to_the_simpler_variant_and_a_partial_run_chooses_nothing() -> None:
    base = {v: (0.70, 0.90) for v in protocol.SIMILARITY_VARIANTS}
    scores = {**base, "pairwise": (0.780, 0.90), "mse+pairwise": (0.784, 0.90)}
    assert ps.choose(_all(scores)) == "pairwise"  # within 0.005: the earlier one
    assert ps.choose(_all(scores)[:2]) is None


def test_paired_difference_resamples_gpu_models() -> None:
    """Two units of one model gain, one unit of another loses: only two independent models,
    so the interval of the mean difference must reach below 0."""
    ours = np.array([[0.9, 0.9, 0.5]])
    theirs = np.array([[0.5, 0.5, 0.7]])
    mean, (lo, hi) = ps.paired_difference(ours, theirs, ["t4", "t4", "a10"])
    assert mean == pytest.approx((0.4 + 0.4 - 0.2) / 3)
    assert lo < 0 < hi


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variants", "cosine-magic"], "unknown variants"),
        (["--seeds", "a"], "--seeds wants integers"),
        (["--adapt-budgets", "x"], "--adapt-budgets wants integers"),
        (["--adapt-budgets", "0"], "--adapt-budgets must lie in"),
        (["--render", "no/such.json"], "no report"),
    ],
)
def test_bad_input_is_one_line_and_exit(argv: list[str], message: str, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit) as exit_:
        ps.main([*argv, "--data", str(tmp_path)])
    assert message in str(exit_.value)
