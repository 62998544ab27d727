"""`simoe-agent tune` on a tiny operator: measurements land in the store; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import tune_json
from typer.testing import CliRunner

from agent.cli import app, main
from agent.cost_models import COST_MODELS, check_cost_model, make_cost_model, register_cost_model
from agent.ms_database import ms_database
from agent.store import Store
from schemas import BadInputError

runner = CliRunner()


def test_cli_tunes_a_tiny_matmul_into_the_store(tmp_path: Path) -> None:
    state = tmp_path / "state"
    data = tune_json(
        state, "--workload", "matmul:32,32,32", "--device", "cpu", "--trials", "3",
        "--population", "32", "--cost-model", "random",
    )  # fmt: skip
    assert data["kind"] == "workload" and data["device"] == "cpu" and not data["simulated"]
    (task,) = data["tasks"]
    assert task["task_name"] == "matmul:32,32,32"
    assert task["trials"] == 3 and data["trials"] == 3
    assert task["flops"] == 2 * 32**3
    assert task["best_latency_s"] > 0 and task["untuned_latency_s"] > 0
    assert task["gflops"] == pytest.approx(task["flops"] / task["best_latency_s"] / 1e9)

    with Store(state / "store.sqlite") as store:
        records = store.records(task_name="matmul:32,32,32")
        assert 1 <= len(records) <= 3  # equal traces are one candidate
        assert {r.device for r in records} == {"cpu"}
        assert all(not r.simulated for r in records)
        assert store.workload(task["workload_key"])["spec"] == "matmul:32,32,32"

    listed = runner.invoke(app, ["records", "--json", "--state-dir", str(state)])
    assert listed.exit_code == 0
    assert {r["task_name"] for r in json.loads(listed.stdout)} == {"matmul:32,32,32"}


BAD_INPUTS = [
    ["--workload", "matmul:0,a"],
    ["--workload", "nosuchop:1,2"],
    ["--workload", "te:NOPE:0"],
    ["--model", "missing.onnx"],
    ["--model", "no_such_network"],
    ["--workload", "matmul:4,4,4", "--model", "tiny_mlp"],
    [],
    ["--workload", "matmul:4,4,4", "--trials", "0"],
    ["--workload", "matmul:4,4,4", "--cost-model", "nope"],
    ["--workload", "matmul:4,4,4", "--device", "tpu"],
    ["--workload", "matmul:4,4,4", "--population", "1"],
    ["--workload", "matmul:4,4,4", "--model-rounds", "-1"],
    ["--workload", "matmul:99999999,99999999,99999999"],  # issue 13 defect 5
    [
        "--workload",
        "matmul:4,4,4",
        "--device",
        "sim:t4",
        "--cost-model",
        "random",
        "--model-rounds",
        "2",
    ],
    # a GPU index no machine has: the same one-line error with or without GPUs
    ["--workload", "matmul:4,4,4", "--device", "cuda:4096"],
]


@pytest.mark.parametrize("args", BAD_INPUTS, ids=[" ".join(a) or "nothing" for a in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Through the real entry point (`main`), so exit code and stderr are what a user sees."""
    monkeypatch.setattr(sys, "argv", ["simoe-agent", "tune", *args, "--state-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    assert exited.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simoe-agent: error: "), err
    assert "Traceback" not in err and out == ""


def test_entry_point_script_reports_bad_input(tmp_path: Path) -> None:
    """The installed command itself, once, in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-c", "from agent.cli import main; main()", "tune", "--workload",
         "matmul:0,a", "--state-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "simoe-agent: error: workload 'matmul:0,a': dimensions must be integers, got '0,a'"
    ]


def test_simoe_cost_model_is_built_from_the_nodes_state(tmp_path: Path) -> None:
    """'simoe' needs a node; there it takes the device's profile once and keeps it."""
    from agent.devices import get_device
    from agent.node_state import NodeState

    device, node = get_device("sim:t4"), NodeState(tmp_path)
    check_cost_model("simoe")
    with pytest.raises(BadInputError, match="needs a node's state"):
        make_cost_model("simoe", device)
    assert node.cached_profile("sim:t4") is None
    model = make_cost_model("simoe", device, node)
    assert not isinstance(model, str) and model.model_used.source in ("starter", "untrained")
    assert node.cached_profile("sim:t4") is not None  # profiled once, kept
    with node.open_store() as store:
        assert store.latest_profile("sim:t4") is not None


def test_cost_model_registry_is_extensible() -> None:
    sentinel = object()
    register_cost_model("test-only", lambda device, store: sentinel)  # type: ignore[arg-type,return-value]
    try:
        check_cost_model("test-only")
        assert make_cost_model("test-only", None, None) is sentinel  # type: ignore[arg-type]
        assert make_cost_model("xgb", None, None) == "xgb"  # type: ignore[arg-type]
    finally:
        COST_MODELS.pop("test-only")
    with pytest.raises(BadInputError, match="unknown cost model"):
        check_cost_model("test-only")


def test_simulated_gpu_tuning_is_labelled_simulated(tmp_path: Path) -> None:
    state = tmp_path / "state"
    data = tune_json(
        state, "--workload", "matmul:64,64,64", "--device", "sim:t4", "--trials", "4",
        "--cost-model", "random", "--population", "16",
    )  # fmt: skip
    assert data["simulated"] is True and data["device"] == "sim:t4"
    assert data["modelled_measure_s"] is not None and data["modelled_measure_s"] > 0
    with Store(state / "store.sqlite") as store:
        records = store.records(device="sim:t4")
        assert records and all(r.simulated for r in records)
        assert store.count_records(device="cpu") == 0


def test_fast_mode_measures_only_the_models_picks(tmp_path: Path) -> None:
    """--model-rounds: chained model-only searches, then exactly --trials measured."""
    state = tmp_path / "state"
    profiled = runner.invoke(app, ["profile", "--device", "sim:t4", "--state-dir", str(state)])
    assert profiled.exit_code == 0, (profiled.output, profiled.exception)
    data = tune_json(
        state, "--workload", "matmul:64,64,64", "--device", "sim:t4", "--trials", "4",
        "--cost-model", "simoe", "--model-rounds", "2", "--population", "16", "--no-baseline",
    )  # fmt: skip
    assert data["trials"] == 4 and data["cost_model"] == "simoe"
    assert data["tasks"][0]["best_latency_s"] > 0
    with Store(state / "store.sqlite") as store:
        assert store.count_records(device="sim:t4") == 4


@pytest.mark.slow  # ~50 s on a loaded 2-core machine: 16 trials of a 256^3 matmul
def test_a_tuned_schedule_never_loses_to_the_default(tmp_path: Path) -> None:
    """Issue 12 item 2, its own example: matmul:256,256,256 on sim:t4 at 16 trials gave
    41.5 us tuned against 23.1 us untuned. The task now keeps whichever is faster."""
    state = tmp_path / "state"
    (task,) = tune_json(
        state, "--workload", "matmul:256,256,256", "--device", "sim:t4", "--trials", "16",
        "--cost-model", "xgb", "--population", "32",
    )["tasks"]  # fmt: skip
    default, tuned = task["untuned_latency_s"], task["tuned_latency_s"]
    assert default is not None and tuned is not None
    assert task["best_latency_s"] <= default and task["speedup"] >= 1.0
    # MetaSchedule's search differs from seed to seed: at 16 trials it usually loses to the
    # default (as in the issue), sometimes not. Either way the faster one is kept.
    assert task["best_latency_s"] == min(default, tuned)
    assert task["kept"] == ("default" if tuned > default else "tuned")


def test_a_seeded_metaschedule_search_repeats(tmp_path: Path) -> None:
    """MetaSchedule's XGB model scores with numpy's global random state until it has 100
    measurements, so at small budgets `--seed` did not make its search repeat (the demo's
    baseline drew 547.50 and 286.11 us at one seed). The same seed now measures the same
    candidates in the same order."""

    def measured(name: str, seed: str) -> list[list[float]]:
        state = tmp_path / name
        tune_json(
            state, "--workload", "matmul:64,64,64", "--device", "sim:t4", "--trials", "8",
            "--cost-model", "xgb", "--population", "16", "--seed", seed, "--no-baseline",
        )  # fmt: skip
        with Store(state / "store.sqlite") as store:
            return [r.run_secs for r in store.records(device="sim:t4")]

    first = measured("a", "0")
    assert len(first) == 8
    assert measured("b", "0") == first
    assert measured("c", "1") != first


def test_kept_database_holds_only_tasks_whose_tuned_schedule_won(tmp_path: Path) -> None:
    """What the compiled network is built from: no record where the default was kept."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from agent.devices import get_device
    from agent.tuner import kept_database, tune_workload
    from agent.workloads import parse_workload, prim_func

    device, spec = get_device("sim:t4"), parse_workload("matmul:64,64,64")
    with Store(tmp_path / "store.sqlite") as store:
        result = tune_workload(
            spec, device, store, trials=4, cost_model="random", population=16, baseline=False
        )
        (task,) = result.tasks
        assert task.kept == "tuned" and task.untuned_latency_s is None  # nothing to compare
        database = ms_database(store, device=device.name, simulated=True)
        mod, target = _normalize_mod(prim_func(spec)), device.target()
        as_tuned = kept_database([(mod, task)], database, target)
        assert len(as_tuned.get_top_k(as_tuned.commit_workload(mod), 1)) == 1
        lost = task.model_copy(update={"kept": "default"})
        as_default = kept_database([(mod, lost)], database, target)
        assert as_default.get_top_k(as_default.commit_workload(mod), 1) == []


def test_a_small_search_samples_fewer_random_schedules_first() -> None:
    """MetaSchedule's 50 initial random schedules scale with the population (at least 8, at
    most the population): at population 64 a search asking for 50 valid ones on a space with
    few valid schedules failed and measured nothing."""
    from agent.tune_harness import evolutionary, initial_samples
    from agent.tuner import search_population

    assert initial_samples(search_population()) == 50  # MetaSchedule's default, 512
    assert search_population(64) == 64  # `--population`
    assert initial_samples(64) == 8
    assert initial_samples(256) == 25
    assert initial_samples(4) == 4
    assert evolutionary(64).init_min_unmeasured == 8


def test_a_search_that_samples_nothing_runs_again_at_a_larger_population(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23: at population 64 the ViT patch embedding's search on a user-spec GPU sampled
    no valid schedule and measured nothing (only `--population 512` helped). The tuner now
    searches such a task once more at RETRY_POPULATION and says so. Here a first search that
    proposes nothing stands in for the one that sampled nothing."""
    import agent.tuner as tuner
    from agent.devices import get_device
    from agent.workloads import parse_workload
    from simoe_model.model_search import ProposedCandidates

    real = tuner.evolutionary
    sizes: list[int] = []

    def evolutionary(size: int, **kwargs: object) -> object:
        sizes.append(size)
        return real(size, **kwargs) if size >= tuner.RETRY_POPULATION else ProposedCandidates([])

    monkeypatch.setattr(tuner, "evolutionary", evolutionary)
    device, spec = get_device("sim:t4"), parse_workload("matmul:64,64,64")
    with Store(tmp_path / "store.sqlite") as store:
        result = tuner.tune_workload(
            spec, device, store, trials=2, cost_model="random", population=16, baseline=False
        )
    assert sizes == [16, tuner.RETRY_POPULATION]
    assert result.trials == 2 and result.tasks[0].trials == 2
    assert result.population_retried == ["matmul:64,64,64"]
    assert result.retry_population == tuner.RETRY_POPULATION


def _simulated_scorer(device: object, inverted: bool) -> object:
    """The simulator's latency as a cost model's score; `inverted`: ranked backwards."""
    import numpy as np

    from simoe_model.model_search import ScoreCostModel

    def score(_task: object, mods: list) -> np.ndarray:
        runs = device.simulate_batch(list(mods), repeat=1)  # type: ignore[attr-defined]
        lat = np.array([np.inf if isinstance(r, str) else r[0] for r in runs], dtype=float)
        return 1.0 / lat if inverted else lat

    return ScoreCostModel(score)


def _hedged_fast_tune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, trials: int, inverted: bool
) -> tuple[Any, int]:
    """Fast mode (one model round) with the hedge at 0.3 on a 64^3 matmul on sim:t4, the
    model scoring by the simulator (backwards if `inverted`): the result and the records
    measured."""
    import agent.tuner as tuner
    from agent.devices import get_device
    from agent.workloads import parse_workload

    device, spec = get_device("sim:t4"), parse_workload("matmul:64,64,64")
    model = _simulated_scorer(device, inverted)
    monkeypatch.setattr(tuner, "make_cost_model", lambda *_a, **_k: model)
    with Store(tmp_path / "store.sqlite") as store:
        result = tuner.tune_workload(
            spec, device, store, trials=trials, cost_model="simoe", population=16,
            model_rounds=1, baseline=False, hedge_below=0.3,
        )  # fmt: skip
        return result, store.count_records(device=device.name)


@pytest.mark.parametrize("inverted", [True, False])
def test_fast_mode_hands_a_contradicted_models_budget_to_evolutionary_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inverted: bool
) -> None:
    """Issue 23: fast mode measured only the model's picks, even where its first measured
    batch ranked backwards. With the hedge, a first batch whose Spearman rho is below the
    threshold hands the rest of the trials to MetaSchedule's evolutionary search; a model
    the measurements agree with keeps its picks."""
    result, measured = _hedged_fast_tune(tmp_path, monkeypatch, trials=16, inverted=inverted)
    rho = result.hedge_spearman["matmul:64,64,64"]
    assert result.hedge_below == 0.3
    if inverted:
        assert rho < 0.3 and result.hedged == ["matmul:64,64,64"]
        assert result.trials == 16 and measured == 16  # the evolutionary search measured 8
    else:
        assert rho > 0.3 and result.hedged == []


def test_the_hedges_search_measures_no_more_than_the_trials_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--trials 10 with the hedge switching: 8 model picks, then 2 by the evolutionary
    search (it handed back a full batch of 10: 18 measured for 10 trials)."""
    result, measured = _hedged_fast_tune(tmp_path, monkeypatch, trials=10, inverted=True)
    assert result.hedged == ["matmul:64,64,64"]
    assert result.trials == 10 and measured == 10


def test_fast_modes_retry_chains_one_model_only_search_at_the_larger_population(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23: the ViT patch embedding's retry ran all five model-only rounds at population
    512 (~700 CPU s); it needs only the larger population's sampling. Here the first
    search's picks are empty, standing in for one that sampled nothing."""
    import agent.tuner as tuner
    from agent.devices import get_device
    from agent.workloads import parse_workload
    from simoe_model.model_search import ProposedCandidates

    device, spec = get_device("sim:t4"), parse_workload("matmul:64,64,64")
    monkeypatch.setattr(
        tuner, "make_cost_model", lambda *_a, **_k: _simulated_scorer(device, False)
    )
    real = tuner.model_picks
    calls: list[tuple[int, int]] = []

    def model_picks(*args: object, rounds: int, population: int, **kwargs: object) -> object:
        calls.append((population, rounds))
        if population < tuner.RETRY_POPULATION:
            return ProposedCandidates([])
        return real(*args, rounds=rounds, population=population, **kwargs)

    monkeypatch.setattr(tuner, "model_picks", model_picks)
    with Store(tmp_path / "store.sqlite") as store:
        result = tuner.tune_workload(
            spec, device, store, trials=2, cost_model="simoe", population=16, model_rounds=5,
            baseline=False,
        )  # fmt: skip
    assert calls == [(16, 5), (tuner.RETRY_POPULATION, 1)]
    assert result.population_retried == ["matmul:64,64,64"] and result.trials == 2


def test_the_hedges_search_ranks_randomly_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """--hedge-ranking random: the hedge's evolutionary search ranks as MetaSchedule's XGB
    does before its warm-up (random scores), not with the contradicted model."""
    from types import SimpleNamespace

    from tvm.s_tir import meta_schedule as ms

    from agent import tune_harness

    found = [SimpleNamespace(score=float(i)) for i in range(64)]
    monkeypatch.setattr("simoe_model.model_search.model_only_search", lambda *a, **k: found)
    task, model = SimpleNamespace(mod=None, name="t"), SimpleNamespace(sharpness=0.0)
    picks = {
        ranking: tune_harness.model_picks(
            task,
            None,
            model,
            32,
            rounds=1,
            population=16,
            hedge_below=0.3,
            hedge_ranking=ranking,
        )  # fmt: skip
        for ranking in ("model", "random")
    }
    assert picks["model"].fallback_model is None
    assert isinstance(picks["random"].fallback_model, ms.cost_model.RandomModel)
    assert picks["random"].fallback is not None and picks["random"].first == 8
