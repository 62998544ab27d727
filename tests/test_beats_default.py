"""bench.report.beats_default: the share of tasks where tuning beat TVM's default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.report.beats_default import BeatsDefaultReport, _row_outcomes, main, summarize
from bench.report.report_model import MethodRow

ROOT = Path(__file__).resolve().parents[1]


def row(method: str, gpu: str, kept: dict[str, str], best: dict[str, float]) -> MethodRow:
    return MethodRow(
        network="net",
        gpu=gpu,
        method=method,
        trials_per_task=32,
        measured=64,
        search_wall_s=1.0,
        modelled_measure_s=1.0,
        compile_s=2.0,
        network_latency_s=1.0,
        task_best_s=best,  # type: ignore[arg-type]
        curve=[],
        task_default_s={t: 4.0 for t in kept},  # type: ignore[arg-type]
        task_kept=kept,  # type: ignore[arg-type]
    )


def test_only_tasks_where_the_tuned_schedule_won_count_and_a_kept_default_is_speedup_1() -> None:
    outcomes = _row_outcomes(
        row("a", "g1", {"t1": "tuned", "t2": "default"}, {"t1": 1.0, "t2": 9.0}), 0
    )
    outcomes += _row_outcomes(
        row("b", "g1", {"t1": "default", "t2": "default"}, {"t1": 8.0, "t2": 9.0}), 0
    )
    shares = {m.method: m for m in summarize(outcomes)}
    assert (shares["a"].beaten, shares["a"].tasks) == (1, 2)
    assert shares["a"].speedup_beaten == pytest.approx(4.0)
    assert shares["a"].speedup_all == pytest.approx(2.0)  # sqrt(4 x 1): the default kept counts 1
    assert shares["b"].beaten == 0 and shares["b"].speedup_beaten is None
    assert shares["b"].speedup_all == pytest.approx(1.0)
    assert shares["b"].share_interval == (0.0, 0.0)


def test_the_report_reads_a_committed_compile_report_and_renders(tmp_path: Path) -> None:
    source = ROOT / "bench" / "reports" / "compile_seed0" / "report.json"
    main([str(source), "--out", str(tmp_path)])
    report = BeatsDefaultReport.model_validate_json((tmp_path / "beats_default.json").read_text())
    assert report.outcomes and {m.method for m in report.methods} >= {"simoe-fast", "ms-xgb-32"}
    assert "| simoe-fast | 32 |" in (tmp_path / "beats_default.md").read_text()


def test_a_file_that_is_no_bench_report_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mode": "quick"}))
    with pytest.raises(SystemExit) as exit_:
        main([str(bad), "--out", str(tmp_path)])
    assert "is not a readable bench.run report" in str(exit_.value.code)
