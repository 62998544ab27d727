"""The benchmark report on a made-up report: the claims' numbers computed, misses said, the
typed report rendered and merged; no tuning (but for the one slow test of SiMoE fast/full)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import run
from bench.compile import compile_data, compile_time, presets, tuning_run
from bench.report import claims
from bench.report.report_md import markdown
from bench.report.report_model import BenchReport, CompileSection, Machine, MethodRow, Repeat


def _row(method: str, latency: float | None, compile_s: float, curve: list) -> MethodRow:
    return MethodRow(
        network="net",
        gpu="a10",
        method=method,
        trials_per_task=32,
        measured=64,
        search_wall_s=compile_s / 2,
        modelled_measure_s=compile_s / 2,
        compile_s=compile_s,
        network_latency_s=latency,
        task_best_s={},
        curve=curve,
    )


ROWS = [
    _row("ms-xgb-full", 1.0e-3, 1000.0, [(100.0, 2e-3), (1000.0, 1.0e-3)]),
    _row("ms-xgb-32", 1.5e-3, 100.0, [(100.0, 1.5e-3)]),
    _row("ms-mlp-pretrained-32", 1.2e-3, 100.0, [(100.0, 1.2e-3)]),
    _row("simoe-fast", 1.04e-3, 20.0, [(10.0, 1.3e-3), (20.0, 1.04e-3)]),
    _row("simoe-full", 0.99e-3, 900.0, [(30.0, 1.05e-3), (900.0, 0.99e-3)]),
]
MACHINE = Machine(
    cpu_model="a CPU", logical_cores=2, python="3.11", system="Linux",
    load_average_at_start=[1.0, 1.0, 1.0], load_average_now=[1.0, 1.0, 1.0],
)  # fmt: skip


def _report(**sections: CompileSection) -> BenchReport:
    return BenchReport(mode="quick", command="python -m bench.run --quick",
                       machine=MACHINE, started_utc="2026-01-01 00:00:00", elapsed_s=60.0,
                       sections=sections, section_seconds={"compile": 1.0})  # fmt: skip


def test_summary_computes_the_papers_claims() -> None:
    [entry] = claims.summarize(ROWS, 32)
    assert entry.simoe_fast_compile_speedup == pytest.approx(50.0)
    assert entry.simoe_fast_perf_vs_ms_full == pytest.approx(1.0 / 1.04)
    # 95% of MS-full = latency <= 1.0e-3 / 0.95 = 1.0526e-3: simoe-fast gets there at 20 s
    assert entry.simoe_fast_compile_s_to_95pct == pytest.approx(20.0)
    assert entry.simoe_full_compile_s_to_95pct == pytest.approx(30.0)
    assert entry.speedup_vs == pytest.approx({"ms-xgb-32": 1.5 / 1.04,
                                              "ms-mlp-pretrained-32": 1.2 / 1.04})  # fmt: skip
    assert entry.ms_full_cost is not None and entry.ms_full_cost.measured == 64


def test_claims_say_which_targets_are_missed() -> None:
    """50x against the 61x target: missed by 18%; 1.15x against 1.25x vs the MLP: by 8%."""
    summary = claims.summarize(ROWS, 32)
    got = claims.Claims(summary, 32)
    assert got.speedup == pytest.approx(50.0)
    assert claims.verdict(got.speedup, claims.TARGET_COMPILE_SPEEDUP) == "MISSED by 18%"
    mlp, xgb = got.vs_peer["ms-mlp-pretrained-32"], got.vs_peer["ms-xgb-32"]
    assert claims.verdict(mlp, claims.TARGET_TLM_SPEEDUP) == "MISSED by 8%"
    assert claims.verdict(xgb, claims.TARGET_TLM_SPEEDUP) == "met"
    assert got.pairs_met == {"ms-xgb-32": 1, "ms-mlp-pretrained-32": 0}
    assert got.pairs_kept_95 == 1
    # the report renders those numbers: the claims row of the pair
    section = CompileSection(settings=presets.QUICK, rows=ROWS, summary=summary)
    text = markdown(_report(compile=section))
    assert "| net | a10 | 50.00x | 96.2% | 1.442x | 1.154x | 20 | 30 | 1000 |" in text


def test_budget_section_reports_the_ratio_and_when_metaschedule_catches_up() -> None:
    long = _row("ms-xgb-1000", 1.0e-3, 2000.0, [(50.0, 3e-3), (400.0, 1.2e-3), (2000.0, 1e-3)])
    long.trials_per_task = 1000
    fast = _row("simoe-fast", 1.02e-3, 40.0, [(40.0, 1.02e-3)])
    [entry] = claims.summarize([long, fast], 32, full_method="ms-xgb-1000")
    assert entry.simoe_fast_compile_speedup == pytest.approx(50.0)
    assert entry.simoe_fast_compile_s_to_95pct == pytest.approx(40.0)
    # MetaSchedule first matches SiMoE fast's latency at its last point
    assert claims.crossing(long.curve, fast.network_latency_s) == pytest.approx(2000.0)


def test_verdict_when_never_reached() -> None:
    assert claims.verdict(None, 61.0) == "not reached"
    assert claims.verdict(70.0, 61.0) == "met"


def test_mlp_peer_trains_with_fewer_than_ten_epochs(tmp_path: Path, monkeypatch: Any) -> None:
    """TVM's trainer sets StepLR(step_size=epochs // 10): 0 below 10 epochs (a crash). The
    trained weights are cached: a second call with the cache file predicts the same."""

    from simoe_model.task_data import DeviceDataset, TaskData

    rng = np.random.default_rng(0)
    tasks = [
        TaskData(
            f"t{i}",
            [rng.random((3, 164), dtype=np.float32) for _ in range(40)],
            rng.random(40) * 1e-3 + 1e-4,
            [f"t{i}/{j}" for j in range(40)],
        )
        for i in range(2)
    ]
    # TVM holds out whole groups (device x task) for validation: at least 5 groups needed
    train = [DeviceDataset(f"sim:{g}", np.zeros(8, np.float32), tasks) for g in "abcde"]
    cache = tmp_path / "mlp.pt"
    trainer = compile_data.pretrained_mlp_trainer(train, epochs=2, seed=0, cache=cache)
    assert trainer.scheduler.last_epoch == 2  # both epochs ran (the scheduler stepped twice)
    predicted = trainer.predict_incremental(list(tasks[0].features))
    assert predicted.shape == (40,) and np.all(np.isfinite(predicted))
    assert len(np.unique(predicted)) > 1  # a trained model tells the candidates apart
    from tvm.s_tir.meta_schedule.cost_model import mlp_model

    def no_training(_self: Any) -> None:
        raise AssertionError("trained again")

    monkeypatch.setattr(mlp_model.SegmentSumMLPTrainer, "train_full", no_training)
    again = compile_data.pretrained_mlp_trainer(train, epochs=2, seed=0, cache=cache)
    assert np.array_equal(again.predict_incremental(list(tasks[0].features)), predicted)


@pytest.mark.slow
def test_simoe_fast_then_full_continues_its_measurements(tmp_path: Any) -> None:
    """SiMoE fast's chained model-only search measures its top k; full mode continues from
    those measurements (their time and best latencies count) up to the full budget."""
    import tvm

    from agent.tune_harness import TuneTask
    from agent.workloads import parse_workload, prim_func
    from simoe_model.model import SiMoE

    task = TuneTask(
        "matmul", tvm.IRModule({"main": prim_func(parse_workload("matmul:64,64,64"))}), 2.0, 0.0
    )
    settings = presets.QUICK.model_copy(
        update={"tlm_budget": 4, "full_budget": 8, "trials_per_iter": 4, "population": 16,
                "simoe_fast_population": 16, "simoe_fast_rounds": 2, "simoe_fast_per_round": 4}
    )  # fmt: skip
    torch_model = SiMoE()  # untrained: scores are arbitrary, the mechanics are under test
    hv = np.zeros(torch_model.config.hardware_dim, np.float32)
    fast, database = tuning_run.simoe_fast(
        [task], "a100-40gb", lambda: compile_time._simoe_model(torch_model, hv, False),
        settings, "net",
    )  # fmt: skip
    assert fast.measured == 4 and fast.network_latency_s is not None
    assert fast.network_latency_s == pytest.approx(2.0 * fast.task_best_s["matmul"])
    # never worse than the default: measured first (the curve's first point), kept unless beaten
    default = fast.task_default_s["matmul"]
    assert default is not None and fast.task_best_s["matmul"] <= default
    assert fast.curve[0][1] == pytest.approx(2.0 * default)
    assert fast.task_kept["matmul"] == ("default" if fast.task_best_s["matmul"] == default
                                        else "tuned")  # fmt: skip
    assert len(database.get_all_tuning_records()) == 4
    assert fast.modelled_measure_s > 0 and fast.compile_s > fast.search_wall_s
    run = tuning_run.TuningRun(
        [task], "net", "a100-40gb", "simoe-full", trials=4, seed=0, trials_per_iter=4,
        work_dir=tmp_path, population=16, genetic_iters=1, init_min_unmeasured=4,
    )  # fmt: skip
    [full] = tuning_run.tune_method(
        run, compile_time._simoe_model(torch_model, hv, True), start=(fast, database)
    )
    assert full.measured == 8
    assert full.compile_s > fast.compile_s
    assert full.network_latency_s <= fast.network_latency_s
    assert full.curve[: len(fast.curve)] == fast.curve
    times = [t for t, _ in full.curve]
    assert times == sorted(times)
    # the fleet methods: schedule transfer measures the given schedules; the warm start
    # seeds SiMoE fast's search with them
    traces = [r.trace for r in database.get_all_tuning_records()]
    moved = compile_time.schedule_transfer([task], "a100-40gb", [traces[:3]], settings, "net")
    assert moved.method == "schedule-transfer" and moved.measured == 3
    assert moved.network_latency_s is not None
    warm, _db = tuning_run.simoe_fast(
        [task], "a100-40gb", lambda: compile_time._simoe_model(torch_model, hv, False),
        settings, "net", method="simoe-fast-warm", seeds=[traces],
    )  # fmt: skip
    assert warm.method == "simoe-fast-warm" and warm.measured == 4


def test_fleet_best_ranks_by_the_most_similar_training_gpus(monkeypatch: Any) -> None:
    monkeypatch.setattr(compile_data, "transfer_k", lambda: 1)
    hv = {"near": np.array([1.0, 0.0]), "far": np.array([0.0, 1.0]),
          "x": np.array([0.5, 0.5]), "target": np.array([0.9, -0.2])}  # fmt: skip
    part = compile_data.Sampled(
        task=None,  # type: ignore[arg-type]
        traces=["a", "b", "c", "d"],
        features=[],
        latency={
            "near": np.array([3.0, 1.0, np.inf, 2.0]),
            "far": np.array([1.0, 2.0, 3.0, 4.0]),
            "x": np.ones(4),
        },  # fmt: skip
    )
    data = compile_data.Prepared(
        networks={}, prep_seconds={}, tasks={}, simoe=None, mlp=None, hv=hv,
        sampled={"net": [part]}, train_gpus=["near", "far", "x"],
    )  # fmt: skip
    # ranked by "near"'s latencies; "c" failed there, so it is never picked
    assert compile_data.fleet_best(data, "net", "target", 3) == [["b", "d", "a"]]
    assert compile_data.fleet_best(data, "net", "target", 1) == [["b"]]


def test_a_task_whose_tuned_schedule_loses_keeps_the_default() -> None:
    tasks = [type("T", (), {"name": n, "weight": 1.0})() for n in ("a", "b")]
    run = tuning_run.TuningRun(tasks, "net", "a10", "m", trials=4, seed=0)  # type: ignore[arg-type]
    row = tuning_run.method_row(
        run, "m", 4, [1.0, 0.5], measured=8, wall=1.0, modelled=2.0, curve=[],
        default=[1.0, 3.0], tuned=[2.0, 0.5],
    )  # fmt: skip
    assert row.task_kept == {"a": "default", "b": "tuned"}
    assert row.network_latency_s == pytest.approx(1.5)


def test_resume_keeps_finished_runs_but_not_orphans() -> None:
    """A simoe-fast without its simoe-full, or a snapshot without its run, is run again."""
    names = ["simoe-fast", "ms-xgb-64", "ms-xgb-32", "ms-mlp-pretrained-32"]
    rows = [_row(name, 1e-3, 1.0, []) for name in names]
    every = presets.QUICK.model_copy(update={"methods": None, "small_budgets": [32, 64]})
    # 64 is two searches of 32, the second after XGB's warm-up: a snapshot of ms-xgb-full;
    # 32 is its own run (4 searches of 8)
    assert every.xgb_snapshot_budgets() == [64]
    kept = compile_time._resumable(rows, every)
    assert [r.method for r in kept] == ["ms-xgb-32", "ms-mlp-pretrained-32"]
    assert len(compile_time._resumable(ROWS, every)) == len(ROWS)
    # --quick runs neither simoe-full nor ms-xgb-full: its fast and 32-trial rows stand alone
    assert len(compile_time._resumable(rows, presets.QUICK)) == 4


def test_units_outside_the_test_split_are_refused(capsys: Any) -> None:
    """The compile section tunes on test units only: a training unit is one line, exit 2."""
    with pytest.raises(SystemExit) as info:
        run.main(["--sections", "compile", "--units", "a30-u1,k80-u1"])
    assert info.value.code == 2
    assert "k80-u1 not in the protocol's test split" in capsys.readouterr().err


def test_budget_claims_are_also_read_against_metaschedules_best_run() -> None:
    long = _row("ms-xgb-1000", 2.0e-3, 2000.0, [(2000.0, 2e-3)])
    long.trials_per_task = 1000
    other = long.model_copy(update={"network_latency_s": 1.0e-3})
    section = CompileSection(
        settings=presets.QUICK_BUDGET,
        rows=[long, _row("simoe-fast", 1.1e-3, 40.0, [(40.0, 1.1e-3)])],
    )
    repeats = [Repeat(command="again", rows=[other], load_average_at_start=[1.0, 1.0, 1.0],
                      settings=section.settings)]  # fmt: skip
    spread = claims.RunToRun(section, repeats, "ms-xgb-1000")
    assert spread.best == pytest.approx(1.0e-3)  # the repeat's run is MetaSchedule's best
    assert spread.latencies("simoe-fast") == [pytest.approx(1.1e-3), None]
    # 1.0 / 1.1 = 90.9% of the best run, from SiMoE fast's one run
    [(keep, runs)] = spread.keeps().values()
    assert keep == pytest.approx(1.0 / 1.1) and runs == 1
    # a repeat with another SiMoE fast mode does not count for SiMoE
    older = section.settings.model_copy(update={"simoe_fast_rounds": 1})
    repeats[0].rows = [other, _row("simoe-fast", 0.5e-3, 40.0, [])]
    repeats[0].settings = older
    assert claims.RunToRun(section, repeats, "ms-xgb-1000").latencies("simoe-fast")[1] is None


def test_report_merges_and_renders_from_its_json(tmp_path: Path) -> None:
    """--merge adds another invocation's sections (a compile section it has: a repeat), and
    --render-only re-renders BENCHMARKS.md from the JSON alone."""
    out, other = tmp_path / "out", tmp_path / "other"
    out.mkdir()
    other.mkdir()
    section = CompileSection(settings=presets.QUICK, rows=ROWS)
    run.write_report(_report(compile=section), out / "report.json")
    again = section.model_copy(update={"rows": ROWS[:2]})
    run.write_report(_report(compile=again), other / "report.json")
    run.merge_reports(out, [other / "report.json"])
    md = tmp_path / "BENCHMARKS.md"
    assert run.render_only(out, md) == 0
    merged = run.load_report(out / "report.json")
    assert [r.method for r in merged.compile_repeats[0].rows] == ["ms-xgb-full", "ms-xgb-32"]
    [entry] = merged.sections.compile.summary  # recomputed from the rows
    assert entry.simoe_fast_compile_speedup == pytest.approx(50.0)
    assert md.read_text() == markdown(merged)


def test_an_old_report_is_refused_not_guessed_at(tmp_path: Path) -> None:
    """A report.json with keys the typed report does not know is not rendered."""
    path = tmp_path / "report.json"
    data = json.loads(_report().model_dump_json())
    data["sections"]["compile"] = {"settings": {}, "rows": []}
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError):
        run.load_report(path)


def test_training_candidates_are_cached_and_a_damaged_entry_is_resampled(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """The section's preparation keeps each task's labelled candidates: the second call reads
    the same traces, features and latencies back without sampling; a damaged entry is
    sampled again."""
    import tvm

    from agent.tune_harness import TuneTask
    from agent.workloads import parse_workload, prim_func

    sampled: list[int] = []  # the seed of every real sampling
    sample_task = compile_data.sample_task

    def counting(task: Any, gpus: Any, count: int, seed: int) -> Any:
        sampled.append(seed)
        return sample_task(task, gpus, count, seed)

    monkeypatch.setattr(compile_data, "sample_task", counting)
    task = TuneTask(
        "matmul", tvm.IRModule({"main": prim_func(parse_workload("matmul:64,64,64"))}), 1.0, 0.0
    )
    settings = presets.QUICK.model_copy(
        update={"samples_per_task": 6, "fleet_rounds": 0, "train_gpus": ["t4"]}
    )
    gpus = ["t4", "a10"]
    first = compile_data.training_candidates(task, gpus, settings, 0, tmp_path)
    [entry] = tmp_path.glob("matmul-*.pkl")
    assert sampled == [0]
    again = compile_data.training_candidates(task, gpus, settings, 0, tmp_path)
    assert sampled == [0]  # the cache was hit: nothing sampled
    assert [str(t) for t in again.traces] == [str(t) for t in first.traces]
    assert all(np.array_equal(a, b) for a, b in zip(again.features, first.features, strict=True))
    assert np.array_equal(again.latency["a10"], first.latency["a10"])
    other = compile_data.training_candidates(task, gpus, settings, 1, tmp_path)  # another seed
    assert len(list(tmp_path.glob("matmul-*.pkl"))) == 2 and other is not None
    assert sampled == [0, 1]
    entry.write_bytes(b"damaged")
    redone = compile_data.training_candidates(task, gpus, settings, 0, tmp_path)
    assert sampled == [0, 1, 0]  # the damaged entry was sampled again
    assert [str(t) for t in redone.traces] == [str(t) for t in first.traces]


def test_a_flops_share_keeps_the_fewest_top_tasks_covering_it() -> None:
    from agent.devices import get_device

    target = get_device("cpu").target()
    tasks, total, share = compile_data.network_tasks("tiny_mlp", target, None, 0.5)
    assert total == 2 and len(tasks) == 1 and share is not None and 0.5 <= share < 1.0
    tasks, _total, share = compile_data.network_tasks("tiny_mlp", target, None, 0.99)
    assert len(tasks) == 2 and share == pytest.approx(1.0)


def test_merge_with_replace_takes_the_section_from_the_merged_runs(tmp_path: Path) -> None:
    """--merge A B --replace compile: the report's own compile section and its repeats make
    way (kept as an earlier run); A's becomes the section and B's its repeat (two seeds of one
    section)."""
    out, a, b = tmp_path / "out", tmp_path / "a", tmp_path / "b"
    for d in (out, a, b):
        d.mkdir()
    old = CompileSection(settings=presets.QUICK, rows=ROWS[:1])
    run.write_report(_report(compile=old), out / "report.json")
    seed1 = presets.QUICK.model_copy(update={"seed": 1})
    run.write_report(_report(compile=CompileSection(settings=presets.QUICK, rows=ROWS)),
                     a / "report.json")  # fmt: skip
    run.write_report(_report(compile=CompileSection(settings=seed1, rows=ROWS[:2])),
                     b / "report.json")  # fmt: skip
    run.merge_reports(out, [a / "report.json", b / "report.json"], ["compile"])
    merged = run.load_report(out / "report.json")
    assert [o.sections for o in merged.other_runs] == [["compile"]]  # from A, once
    assert len(merged.sections.compile.rows) == len(ROWS)
    [repeat] = merged.compile_repeats
    assert repeat.settings.seed == 1 and len(repeat.rows) == 2
    with pytest.raises(SystemExit):
        run.main(["--replace", "compile"])  # only with --merge


def test_a_report_never_drops_a_run_it_only_adds(tmp_path: Path) -> None:
    """--merge --replace used to drop the replaced section's runs (the budget section's earlier
    runs that missed were gone from the report): they are kept as earlier runs, with the
    command that ran them and their repeats, listed in BENCHMARKS.md; a merged run's second
    offline or federation section is kept alike."""
    from bench.report.report_model import FederationRow, FederationSection

    out, a, b = tmp_path / "out", tmp_path / "a", tmp_path / "b"
    for d in (out, a, b):
        d.mkdir()
    missed = _row("simoe-fast", 9.9e-3, 20.0, [])  # the earlier run that missed
    old = CompileSection(settings=presets.QUICK, rows=[missed])
    fed = FederationSection(
        engine="in-process", shared_arrays_bytes=1, model_parameters=1, profiles_from=[],
        results=[FederationRow(nodes=4, rounds=3, round_s=[1.0], median_round_s=1.0,
                               steady_round_s=1.0, total_s=3.0, bytes_down_per_node_per_round=7.0,
                               bytes_up_per_node_per_round=7.0)],
    )  # fmt: skip
    report = _report(budget=old)
    report.sections.federation = fed
    report.budget_repeats = [
        Repeat(command="python -m bench.run --seed 1", rows=[missed], settings=old.settings,
               load_average_at_start=[1.0])
    ]  # fmt: skip
    run.write_report(report, out / "report.json")
    new = _report(budget=CompileSection(settings=presets.QUICK, rows=ROWS))
    new.command = "python -m bench.run --sections budget --seed 2"
    run.write_report(new, a / "report.json")
    again = _report()
    again.sections.federation = fed.model_copy(update={"engine": "again"})
    again.command = "python -m bench.run --sections federation"
    run.write_report(again, b / "report.json")
    run.merge_reports(out, [a / "report.json", b / "report.json"], ["budget"], command="MERGE")
    merged = run.load_report(out / "report.json")
    assert merged.sections.budget.rows == ROWS and merged.sections.federation.engine == "again"
    budget, federation = merged.earlier_runs
    assert budget.section == "budget" and budget.command == "python -m bench.run --quick"
    assert budget.sections.budget.rows == [missed] and len(budget.repeats) == 1
    assert budget.replaced_by == "MERGE"
    assert federation.section == "federation" and federation.sections.federation == fed
    md = markdown(merged)
    assert "## Earlier runs (replaced by a later merge, kept)" in md
    assert "9.9000" in md  # the missed run's network latency (ms) is still in the report
    # a later merge keeps what the earlier ones kept
    run.merge_reports(out, [a / "report.json"], ["budget"], command="MERGE 2")
    assert len(run.load_report(out / "report.json").earlier_runs) == 3


def test_the_small_budget_xgb_peer_trains_and_ranks_within_its_budget(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """ms-xgb-32 used to be one search of 32 with XGB's warm-up of 32: XGB was fitted only
    after the budget was spent and never ranked a candidate (random search in effect; now
    ms-random-32). Now it searches 4 x 8 with a warm-up of 8: XGB is fitted after the first
    search and its model ranks the candidates of the later ones, within the 32."""
    import tvm
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    from agent.tune_harness import TuneTask
    from agent.workloads import parse_workload, prim_func

    # the bench's population of 64: at 16 a later search sometimes sampled fewer than 8 valid
    # schedules and ended ("Cannot sample enough initial population"; CI, about 1 run in 6)
    settings = presets.QUICK
    name, make_model, trials, pop, iters, _snaps, per_iter = compile_time.small_xgb_plan(
        settings, settings.tlm_budget
    )
    assert (name, trials, per_iter) == ("ms-xgb-32", 32, 8)
    assert "ms-xgb-32" not in {f"ms-xgb-{b}" for b in settings.xgb_snapshot_budgets()}
    events: list[tuple[str, int]] = []  # (fit | ranked, measurements seen so far)
    cls = XGBModel._cls
    train, predict = cls._train, cls.predict

    def counting_train(self: Any, *a: Any, **k: Any) -> Any:
        events.append(("fit", self.data_size))
        return train(self, *a, **k)

    def counting_predict(self: Any, context: Any, candidates: Any) -> Any:
        if self.data_size >= self.num_warmup_samples and self.booster is not None:
            events.append(("ranked", self.data_size))
        return predict(self, context, candidates)

    monkeypatch.setattr(cls, "_train", counting_train)
    monkeypatch.setattr(cls, "predict", counting_predict)
    task = TuneTask(
        "matmul", tvm.IRModule({"main": prim_func(parse_workload("matmul:64,64,64"))}), 1.0, 0.0
    )
    run = tuning_run.TuningRun(
        [task], "net", "a100-40gb", name, trials=trials, seed=0, trials_per_iter=per_iter,
        work_dir=tmp_path, population=pop, genetic_iters=iters, init_min_unmeasured=8,
    )  # fmt: skip
    [row] = tuning_run.tune_method(run, make_model())
    assert row.measured <= trials
    fits = [n for e, n in events if e == "fit"]
    ranked = [n for e, n in events if e == "ranked"]
    assert fits and fits[0] < trials, events  # fitted within the budget
    assert ranked and ranked[0] < trials, events  # and its model chose what was measured next


def test_trials_sets_every_methods_budget_and_renames_the_presets_methods(capsys: Any) -> None:
    settings = run.with_trials(presets.QUICK, 8)
    assert (settings.tlm_budget, settings.small_budgets) == (8, [8])
    assert settings.methods is not None and "ms-xgb-8" in settings.methods
    assert "ms-random-8" in settings.methods and "ms-xgb-32" not in settings.methods
    assert presets.QUICK.tlm_budget == 32 and "ms-xgb-32" in (presets.QUICK.methods or [])
    with pytest.raises(SystemExit):
        run.main(["--sections", "compile", "--trials", "0"])
    assert "a positive whole number" in capsys.readouterr().err
