"""Section 5 over seeds and units (issue 24, Build item 4): the budget section runs per
(unit, seed) with schedule transfer beside SiMoE; the ratio at 95% / 99% of MetaSchedule-1000
per run and across runs; the runs merged and rendered. No tuning."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from bench import run
from bench.compile import compile_data, compile_time, presets
from bench.report import budget_seeds
from bench.report.report_md import markdown
from bench.report.report_model import BenchReport, CompileSection, Machine, MethodRow


def _row(method: str, gpu: str, latency: float, compile_s: float, curve: list) -> MethodRow:
    return MethodRow(
        network="resnet50", gpu=gpu, method=method, trials_per_task=32, measured=32,
        search_wall_s=compile_s / 2, modelled_measure_s=compile_s / 2, compile_s=compile_s,
        network_latency_s=latency, task_best_s={}, curve=curve,
    )  # fmt: skip


def _rows(gpu: str, ms_latency: float, fast_latency: float) -> list[MethodRow]:
    return [
        _row("simoe-fast", gpu, fast_latency, 40.0, [(20.0, 2e-3), (40.0, fast_latency)]),
        _row("schedule-transfer", gpu, 2e-3, 30.0, [(30.0, 2e-3)]),  # never reaches 95%
        _row("ms-xgb-1000", gpu, ms_latency, 2000.0,
             [(100.0, 3e-3), (500.0, 1.02e-3), (2000.0, ms_latency)]),
    ]  # fmt: skip


MACHINE = Machine(
    cpu_model="a CPU", logical_cores=2, python="3.11", system="Linux",
    load_average_at_start=[1.0, 1.0, 1.0], load_average_now=[1.0, 1.0, 1.0],
)  # fmt: skip


def _report(gpu: str, seed: int, rows: list[MethodRow], cpu_s: float) -> BenchReport:
    settings = presets.QUICK_BUDGET.model_copy(update={"seed": seed, "unseen_gpus": [gpu]})
    return BenchReport(
        mode="quick", command=f"python -m bench.run --sections budget --units {gpu} --seed {seed}",
        machine=MACHINE, started_utc="2026-01-01 00:00:00", elapsed_s=60.0,
        sections={"budget": CompileSection(settings=settings, rows=rows)},
        section_seconds={"budget": 60.0}, section_cpu_s={"budget": cpu_s},
    )  # fmt: skip


def test_ratio_per_run_at_95_and_99_against_the_seed_and_the_unit_reference() -> None:
    a0 = _report("a30-u1", 0, _rows("a30-u1", 1.0e-3, 1.04e-3), 3600.0)
    a1 = _report("a30-u1", 1, _rows("a30-u1", 0.9e-3, 1.04e-3), 3600.0)
    parts = [(r.command, r.sections.budget, 3600.0, [1.0]) for r in (a0, a1)]
    runs = budget_seeds.runs_of(parts)  # type: ignore[arg-type]
    assert [(r.unit, r.seed) for r in runs] == [("a30-u1", 0), ("a30-u1", 1)]
    assert runs[0].unit_best_s == pytest.approx(0.9e-3)
    fast = {m.method: m for m in runs[0].methods}["simoe-fast"]
    # 95% of seed 0's ms-xgb-1000: latency <= 1.0e-3 / 0.95, reached at 40 s: 2000 / 40
    assert fast.seconds["95"]["seed"] == pytest.approx(40.0)
    assert fast.ratio["95"]["seed"] == pytest.approx(50.0)
    # like-for-like: ms-xgb-1000 itself reached 1.0526e-3 at 500 s
    assert fast.like_for_like["95"]["seed"] == pytest.approx(500.0 / 40.0)
    # 99% (<= 1.0101e-3) is never reached by 1.04e-3; nor 95% of the unit's best (0.947e-3)
    assert fast.ratio["99"]["seed"] is None and fast.ratio["95"]["unit"] is None
    st = {m.method: m for m in runs[0].methods}["schedule-transfer"]
    assert st.ratio["95"]["seed"] is None
    # across runs: a miss counts as 0, so the median does not forget it
    sp = budget_seeds.spread(runs, "simoe-fast", "95", "seed")
    assert sp.runs == 2 and sp.reached == 1 and sp.median == pytest.approx(25.0)
    assert (sp.low, sp.high) == (0.0, pytest.approx(50.0))
    assert sp.ci is not None and sp.ci[0] <= sp.median <= sp.ci[1]
    assert budget_seeds.verdict_ratio(25.0, 30.0).startswith("MISSED by 17%")
    assert budget_seeds.verdict_ratio(61.0, 30.0).startswith("met")


def test_budget_runs_merge_and_render_over_seeds_with_their_cpu(tmp_path: Path) -> None:
    """Runs of other units and seeds merged as the budget section's repeats: the over-seeds
    block lists each (unit, seed) with its ratio, the spread and the CPU hours; the
    run-to-run table (same unit and seed only) is not filled with other units' runs."""
    out = tmp_path / "out"
    out.mkdir()
    paths = []
    for gpu, seed in (("a30-u1", 0), ("a30-u1", 1), ("2080ti-ref", 0)):
        d = tmp_path / f"{gpu}_{seed}"
        d.mkdir()
        run.write_report(_report(gpu, seed, _rows(gpu, 1.0e-3, 1.04e-3), 1800.0),
                         d / "report.json")  # fmt: skip
        paths.append(d / "report.json")
    run.write_report(_report("a30-u1", 0, _rows("a30-u1", 1e-3, 5e-3), 10.0), out / "report.json")
    run.merge_reports(out, paths, ["budget"], command="MERGE")
    merged = run.load_report(out / "report.json")
    assert [r.cpu_s for r in merged.budget_repeats] == [1800.0, 1800.0]
    assert len(merged.earlier_runs) == 1  # the replaced run is kept
    runs = budget_seeds.from_report(merged)
    assert {(r.unit, r.seed) for r in runs} == {("a30-u1", 0), ("a30-u1", 1), ("2080ti-ref", 0)}
    md = markdown(merged)
    assert "### Over seeds and units (issue 24)" in md
    assert "| 2080ti-ref | 0 | simoe-fast | 1.0400 | 40 | 50.0x |" in md
    assert "1.50 CPU hours over 3 run(s)" in md
    assert "- ms-xgb-1000 on a30-u1: 1.0000 - 1.0000 ms over 2 seed(s); 2 of 2" in md
    assert "**Run to run.**" not in md
    n = len(presets.QUICK_BUDGET.train_gpus)
    assert f"All 3 runs: {n} training units, SiMoE " in md


def test_runs_made_with_other_protocol_settings_are_flagged_not_mixed_silently() -> None:
    """Budget runs take the protocol's training units and SiMoE's validated epochs: a run made
    with others is named as such in the over-seeds block, per run."""
    a0 = _report("a30-u1", 0, _rows("a30-u1", 1.0e-3, 1.04e-3), 600.0)
    a1 = _report("a30-u1", 1, _rows("a30-u1", 1.0e-3, 1.04e-3), 600.0)
    sec = a1.sections.budget
    assert sec is not None
    sec.settings = sec.settings.model_copy(update={"expert_epochs": 99, "train_gpus": ["x"]})
    parts = [(r.command, r.sections.budget, 600.0, [1.0]) for r in (a0, a1)]
    runs = budget_seeds.runs_of(parts)  # type: ignore[arg-type]
    assert [(r.train_units, r.simoe_epochs.split("/")[0]) for r in runs][1] == (1, "99")
    md = "\n".join(budget_seeds.markdown(runs))
    assert "**They differ between runs**" in md
    assert "- a30-u1 seed 1 (1 training units, SiMoE 99/" in md


def test_the_budget_section_runs_schedule_transfer_on_each_unit(monkeypatch: Any) -> None:
    """Schedule transfer joins the budget section, from the records SiMoE trains on, on the
    unit of the run; a method left out of --methods is not run."""
    settings = presets.QUICK_BUDGET.model_copy(update={"unseen_gpus": ["titanxp-u1"]})
    data = compile_data.Prepared(
        networks={}, prep_seconds={}, tasks={"resnet50": ["task"]}, simoe=None, mlp=None,
        hv={"titanxp-u1": None}, sampled={"resnet50": []}, train_gpus=[],
    )  # fmt: skip
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(compile_time, "prepare", lambda *a, **k: data)
    monkeypatch.setattr(
        compile_time,
        "_run_simoe",
        lambda case, *a, **k: calls.append(("simoe", case.gpu, k["full"] is not None)),
    )
    monkeypatch.setattr(
        compile_data,
        "fleet_best",
        lambda d, net, gpu, n: calls.append(("best", d, gpu, n)) or [["t"]],
    )
    row = _row("schedule-transfer", "titanxp-u1", 1e-3, 30.0, [(30.0, 1e-3)])
    monkeypatch.setattr(
        compile_time,
        "schedule_transfer",
        lambda tasks, gpu, best, st, net: calls.append(("st", gpu, best)) or row,
    )
    monkeypatch.setattr(
        compile_time,
        "_run_plans",
        lambda plans, *a, **k: calls.append(("plans", [p[0] for p in plans])),
    )
    section = compile_time.run_budget_section(settings, Path("/tmp"), say=print,
                                              on_row=lambda s: None)  # fmt: skip
    assert ("simoe", "titanxp-u1", True) in calls
    assert ("best", data, "titanxp-u1", settings.tlm_budget) in calls
    assert ("st", "titanxp-u1", [["t"]]) in calls
    assert ("plans", ["ms-xgb-1000"]) in calls
    assert [r.method for r in section.rows] == ["schedule-transfer"]
    calls.clear()
    fast_only = settings.model_copy(update={"methods": ["simoe-fast", "ms-xgb-1000"]})
    compile_time.run_budget_section(fast_only, Path("/tmp"), say=print, on_row=lambda s: None)
    assert ("simoe", "titanxp-u1", False) in calls and not [c for c in calls if c[0] == "st"]


def test_the_budget_section_takes_units_and_methods_from_the_command_line(
    monkeypatch: Any,
) -> None:
    got: list[Any] = []
    monkeypatch.setattr(
        compile_time,
        "run_budget_section",
        lambda st, work, **k: got.append(st) or CompileSection(settings=st),
    )
    report = type("R", (), {"data": type("D", (), {"sections": type("S", (), {})()})(),
                            "save": lambda self: None})()  # fmt: skip
    args = argparse.Namespace(full=False, seed=2, units=["2080ti-ref"], methods=None,
                              work=Path("/tmp"))  # fmt: skip
    run.section_budget(report, args, print)  # type: ignore[arg-type]
    assert got[0].unseen_gpus == ["2080ti-ref"] and got[0].seed == 2
    assert got[0].runs("schedule-transfer") and not got[0].runs("mlp-fast")


def test_presets_read_a_choices_file_whose_fleet_has_no_mlp_choice_yet(tmp_path: Path) -> None:
    """Selection runs per method: a choices file with SiMoE's budget but no MLP one yet
    (a new fleet mid-selection) gives the MLP TVM's default instead of breaking every import
    of the presets; a chosen MLP budget is used as chosen."""
    path = tmp_path / "choices.json"
    simoe = {"expert_epochs": 4, "shared_epochs": 12, "adapt_epochs": 10}
    path.write_text(json.dumps({"chosen": {"simoe": simoe}}))
    assert presets.validated_epochs(path) == {
        "expert_epochs": 4, "shared_epochs": 12, "mlp_epochs": presets.MLP_DEFAULT_EPOCHS
    }  # fmt: skip
    path.write_text(json.dumps({"chosen": {"simoe": simoe, "mlp-finetune": {"mlp_epochs": 10}}}))
    assert presets.validated_epochs(path)["mlp_epochs"] == 10
