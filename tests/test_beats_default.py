"""bench.report.beats_default: the share of tasks where tuning beat TVM's default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.report.beats_default import (
    USER_GROUP,
    BeatsDefaultReport,
    _row_outcomes,
    main,
    markdown,
    never_beaten,
    summarize,
    user_spec_outcomes,
)
from bench.report.report_model import MethodRow, UserSpecReport, UserSpecRow

ROOT = Path(__file__).resolve().parents[1]


def row(
    method: str, gpu: str, kept: dict[str, str], best: dict[str, float], trials: int = 32
) -> MethodRow:
    return MethodRow(
        network="net",
        gpu=gpu,
        method=method,
        trials_per_task=trials,
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


def user_row(gpu: str, method: str, trials: int, kept: str, measured: int) -> UserSpecRow:
    return UserSpecRow(
        gpu=gpu, spec_file=f"{gpu}.json", operator="op", method=method, trials=trials, seed=0,
        command="simoe-agent tune ...", task="matmul", measured=measured, default_s=4.0,
        tuned_s=2.0 if kept == "tuned" else (8.0 if measured else None), kept=kept,
        wall_s=1.0, cpu_s=1.0,
    )  # fmt: skip


def test_each_trials_per_task_gets_its_own_table_and_the_user_spec_runs_their_own_group() -> None:
    outcomes = _row_outcomes(row("simoe-fast", "g1", {"t1": "tuned"}, {"t1": 1.0}, 8), 0)
    outcomes += _row_outcomes(row("simoe-fast", "g1", {"t1": "default"}, {"t1": 4.0}, 32), 0)
    user = UserSpecReport(
        commands=["c"],
        note="n",
        rows=[
            user_row("u1", "simoe-fast", 8, "tuned", 8),
            user_row("u2", "simoe-fast", 8, "default", 0),  # the search measured nothing
            user_row("u2", "ms-xgb", 8, "default", 8),
        ],
    )
    outcomes += user_spec_outcomes(user)
    shares = {(m.group, m.method, m.trials): m for m in summarize(outcomes)}
    test_group = "test units, suite networks"
    assert shares[(test_group, "simoe-fast", 8)].beaten == 1
    assert shares[(test_group, "simoe-fast", 32)].beaten == 0
    mine = shares[(USER_GROUP, "simoe-fast", 8)]
    assert (mine.beaten, mine.tasks, mine.unmeasured) == (1, 2, 1)
    assert shares[(USER_GROUP, "ms-xgb", 8)].unmeasured == 0
    never = never_beaten(outcomes, [])
    # t1 on g1 was beaten at 8 trials; on u2 no run won: the most measured there was 8
    assert [(t.gpu, t.most_trials, t.methods) for t in never] == [
        ("u2", 8, ["ms-xgb", "simoe-fast"])
    ]
    report = BeatsDefaultReport(
        command="c", sources=[], held_out_networks=[], outcomes=outcomes,
        methods=summarize(outcomes), never_beaten=never,
    )  # fmt: skip
    text = markdown(report)
    assert "### 8 trials per task" in text and "### 32 trials per task" in text
    assert text.index("## Test units") < text.index("## User-spec GPUs")
    assert "u2, op, `matmul`" in text and "not beaten within 8 trials" in text


def test_a_long_search_that_beat_a_default_is_named_beside_the_task() -> None:
    outcomes = _row_outcomes(row("ms-xgb-32", "g1", {"t1": "default"}, {"t1": 4.0}), 0)
    long = _row_outcomes(row("ms-xgb-1000", "g1", {"t1": "tuned"}, {"t1": 2.0}, 1000), 1)
    [task] = never_beaten(outcomes, long)
    assert task.long_runs == ["ms-xgb-1000 (seed 1): beat it 2.00x"]


def test_labelled_user_spec_runs_of_different_code_are_never_pooled() -> None:
    """Issue 23: the user-spec group was rerun after the starter model's fix; the earlier
    runs stay reported, each under the label of the code that made them."""
    before = UserSpecReport(
        commands=["c"], note="n", rows=[user_row("u1", "simoe-fast", 8, "default", 8)]
    )
    after = UserSpecReport(
        commands=["c2"], note="n", label="range-fix",
        rows=[user_row("u1", "simoe-fast", 8, "tuned", 8)],
    )  # fmt: skip
    outcomes = user_spec_outcomes(before) + user_spec_outcomes(after)
    outcomes += user_spec_outcomes(before, "initial-samples-fix")
    shares = {(m.method, m.trials): m for m in summarize(outcomes)}
    assert shares[("simoe-fast", 8)].beaten == 0 and shares[("simoe-fast", 8)].tasks == 1
    assert shares[("simoe-fast [range-fix]", 8)].beaten == 1
    assert shares[("simoe-fast [initial-samples-fix]", 8)].tasks == 1
