"""The audit's fairness fixes of the evaluation protocol (issue 24, item 2): each test here
failed before its fix."""

from __future__ import annotations

import numpy as np

from bench.transfer import protocol_report


def test_bootstrap_intervals_resample_gpu_models_not_unit_tasks() -> None:
    """Two units of one model that gain alike and one unit of another model that loses: nine
    tasks each. Resampled by task, the 27 differences look like 27 independent draws and the
    interval sits above 0; there are only two independent models, so the clustered interval
    must reach below 0 (a resample may draw the losing model twice)."""
    rng = np.random.default_rng(0)
    units = {"sim:4090-ref": 0.10, "sim:4090-suprim": 0.10, "sim:a30-u1": -0.05}
    ours = {u: 0.8 + d + rng.normal(0, 0.005, 9) for u, d in units.items()}
    theirs = {u: np.full(9, 0.8) for u in units}
    assert protocol_report.model_of("sim:4090-ref") == protocol_report.model_of("4090-suprim")
    assert protocol_report.model_of("rtx3060") == "rtx3060"  # a user's spec: its own model
    assert protocol_report.clusters_of(list(units)) == 2
    mean, lo, hi = protocol_report.paired_interval(ours, theirs)
    assert abs(mean - (0.10 * 18 - 0.05 * 9) / 27) < 0.01  # the mean over tasks is unchanged
    assert lo < 0 < hi, (lo, hi)


def _fleet(names: list[str], tasks: int = 3, per_task: int = 128) -> list:
    """DeviceDatasets of the protocol's shape: the same candidates (ids) on every unit."""
    from simoe_model.task_data import DeviceDataset, TaskData

    rng = np.random.default_rng(1)
    out = []
    for name in names:
        items = [
            TaskData(
                f"task{t}",
                [np.zeros((1, 164), np.float32)] * per_task,
                rng.uniform(1e-4, 1e-3, per_task),
                [f"c{i:03d}" for i in range(per_task)],
            )
            for t in range(tasks)
        ]
        out.append(DeviceDataset(f"sim:{name}", rng.normal(size=8), items))
    return out


def test_schedule_transfer_can_rank_every_test_candidate_simoe_ranks() -> None:
    """At the protocol's settings the training units keep every candidate that a target's
    test set holds, so schedule transfer ranks all of them, as SiMoE does (with 48 of 128 it
    could rank about 24 of the 64)."""
    from bench import protocol
    from bench.transfer.baselines import ScheduleTransfer
    from bench.transfer.offline_transfer import split_device
    from bench.transfer.protocol_transfer import keep_per_task, transfer_coverage

    train = _fleet(["a100-sxm4-400w", "3090-fe", "v100-sxm2"])
    (target,) = _fleet(["4090-ref"])
    keep_per_task(train, protocol.TRAIN_PER_TASK)
    for seed in protocol.SEEDS:
        split = split_device(target, seed)
        assert all(len(t) == 64 for t in split.test)
        assert transfer_coverage(train, [split]) == {"sim:4090-ref": 1.0}
        score = ScheduleTransfer(train, k=1).at_budget(target.hardware_vector, [])
        assert all(np.isfinite(score(t)).all() for t in split.test)
    # scaled down, it cannot: the report says by how much
    keep_per_task(train, 48)
    assert transfer_coverage(train, [split_device(target, 0)])["sim:4090-ref"] < 0.5


# -- every bench path that trains reads labels through the protocol's reader -----------------
LABEL_READERS = {  # the agent's ways to read measured latencies out of a store
    "load_device_dataset", "load_store_file", "node_dataset", "labelled_candidates",
    "best_records", "best_summaries", "_load_unit",
}  # fmt: skip
NOT_TRAINING = {  # bench modules that read labels and train or select nothing
    "bench/compile/model_throughput.py": "times the model on stored features",
    "bench/simulator/sim_diversity.py": "the simulator's own statistics per unit",
    "bench/transfer/clamp_coverage.py": "counts feature values outside a range, no labels",
}


def test_only_the_protocol_reader_reads_labels_in_bench() -> None:
    """No bench module but bench/protocol.py (UnitLabels, whose guard refuses a test unit's
    labels to training and selection) names a label reader of the agent, so every bench path
    that trains is under the guard and under tests/test_protocol.py's leakage test by
    construction. (bench/real_gpu reads benchmark_hub's real cache files, not stores.)"""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    offenders = {}
    for path in sorted((root / "bench").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "bench/protocol.py" or rel in NOT_TRAINING:
            continue
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.ImportFrom):
                names.update(a.name for a in node.names)
        if names & LABEL_READERS:
            offenders[rel] = sorted(names & LABEL_READERS)
    assert not offenders, f"label reads outside bench/protocol.py's reader: {offenders}"


def test_offline_transfer_refuses_test_units_in_its_training_set(tmp_path, capsys) -> None:  # noqa: ANN001
    """BENCHMARKS section 2 ran `offline_transfer --held-out a30-u1` on the compile fleet,
    whose stores also hold the test units 2080ti-ref and titanxp-u1: it trained on them. It
    is refused now, before any label is read (the stores here are empty files)."""
    import pytest

    from bench.transfer import offline_transfer

    for unit in ("a30-u1", "2080ti-ref", "titanxp-u1", "a100-sxm4-400w", "3090-fe"):
        (tmp_path / f"{unit}.sqlite").write_bytes(b"")
    argv = ["--data", str(tmp_path), "--held-out", "a30-u1", "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_:
        offline_transfer.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "2080ti-ref" in err and "titanxp-u1" in err and "--train" in err
    # naming them in --train is refused alike
    with pytest.raises(SystemExit):
        offline_transfer.main([*argv, "--train", "a100-sxm4-400w,titanxp-u1"])


def test_fleet_loaders_and_the_compile_section_refuse_test_units_in_training(
    tmp_path,  # noqa: ANN001
) -> None:
    import pytest

    from bench import protocol
    from bench.compile import compile_data, presets
    from bench.federation.fleet import load_gpus

    for unit in ("4090-ref", "a100-sxm4-400w"):
        (tmp_path / f"{unit}.sqlite").write_bytes(b"")
    with pytest.raises(protocol.LeakageError, match="4090-ref"):
        load_gpus([tmp_path], ["a100-sxm4-400w", "4090-ref"])  # federation_helps, poisoning
    settings = presets.QUICK.model_copy(
        update={"train_gpus": [*presets.QUICK.train_gpus, "2080ti-ref"]}
    )
    with pytest.raises(protocol.LeakageError, match="2080ti-ref"):
        compile_data.prepare(settings, tmp_path, say=print, max_tasks=1, fleet_stores=False)


def test_the_offline_section_trains_on_the_training_split_only(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """bench/run.py's offline section names its training GPUs: the compile fleet's training
    units, none of the other test units the fleet directory holds."""
    import argparse
    import subprocess

    import pytest

    from bench import protocol
    from bench import run as bench_run
    from bench.compile import presets

    fleet = tmp_path / "fleet" / "suite"
    fleet.mkdir(parents=True)
    for unit in [*protocol.TRAIN_UNITS, *presets.TEST_UNITS_COMPILE]:
        (fleet / f"{unit}.sqlite").write_bytes(b"")
    seen: list[list[str]] = []

    def fake_run(command, **_kw):  # noqa: ANN001, ANN202
        seen.append(command)
        return subprocess.CompletedProcess(command, 1, "", "stopped by the test")

    monkeypatch.setattr(bench_run.subprocess, "run", fake_run)
    report = argparse.Namespace(out=tmp_path / "out")
    args = argparse.Namespace(full=False, work=tmp_path)
    with pytest.raises(RuntimeError, match="stopped by the test"):
        bench_run.section_offline(report, args, say=print)  # type: ignore[arg-type]
    (command,) = seen
    train = command[command.index("--train") + 1].split(",")
    assert train == list(protocol.TRAIN_UNITS)
    assert not {protocol.split_of(g) for g in train} - {"train"}


# -- federation helps: the own-only budget on validation, the variant rule written first --------
def test_the_rules_that_pick_variants_are_in_the_protocol_file() -> None:
    """bench/protocol.py states how federation-helps' own-only budget and its variant are
    chosen, and its report (docs/results/protocol.md, `python -m bench.protocol`) says so."""
    from pathlib import Path

    from bench import protocol

    for rule in (
        protocol.OWN_ONLY_RULE,
        protocol.FEDERATION_VARIANT_RULE,
        protocol.FEDERATION_VARIANT_RULE_R3,
        protocol.FEDERATION_VARIANT_RULE_R4,
        protocol.FEDERATION_VARIANT_RULE_R5,
        protocol.FEDERATION_VARIANT_RULE_R6,
        protocol.FEDERATION_VARIANT_RULE_R7,
        protocol.FEDERATION_VARIANT_RULE_R8,
        protocol.FEDERATION_VARIANT_RULE_R9,
        protocol.FEDERATION_VARIANT_RULE_R10,
        protocol.SIMILARITY_RULE,
    ):
        assert "validation" in rule
        assert rule in protocol.markdown()
    assert "federation_own_only.json" in protocol.OWN_ONLY_RULE
    written = Path(protocol.ROOT / "docs" / "results" / "protocol.md").read_text()
    assert protocol.markdown() == written, "regenerate it: python -m bench.protocol"


def test_own_only_budget_comes_from_the_validation_choice_file(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The own-only baseline was 12 optimizer epochs (the federation's rounds x epochs), a
    budget never chosen on validation. Under the protocol it is now read from the choice
    `--select-own-only` writes on the validation units; without it a run is refused."""
    import json

    import pytest

    from bench import protocol
    from bench.federation import federation_helps as fh
    from schemas import BadInputError

    fleet = fh.synthetic_gpus(3, 4, 16)
    units = list(fleet.values())
    held = sorted(t.task_name for t in units[0].dataset.tasks)[:1]
    choice = fh.select_own_only(units, held, seeds=[0], grid=[1, 2, 3])
    assert choice["chosen_on"] == "validation" and set(choice["mean_top1"]) == {"1", "2", "3"}
    best = max(choice["mean_top1"].values())
    assert choice["chosen"]["own_only_epochs"] == min(
        int(b) for b, v in choice["mean_top1"].items() if v == best
    )
    assert all(len(per_unit) == 3 for [per_unit] in choice["per_seed_unit_top1"].values())

    path = tmp_path / "federation_own_only.json"
    monkeypatch.setattr(fh, "OWN_ONLY_CHOICE", path)
    monkeypatch.setattr(protocol, "fleet_hashes", lambda *a, **k: {"digest": "FLEET"})
    with pytest.raises(BadInputError, match="select-own-only"):
        fh.main(["--protocol", "test"])  # not chosen yet: refused before anything runs
    path.write_text(json.dumps({**choice, "fleet": "ANOTHER"}))
    with pytest.raises(BadInputError, match="another fleet"):
        fh.main(["--protocol", "test"])
    path.write_text(json.dumps({**choice, "fleet": "FLEET", "chosen": {"own_only_epochs": 24}}))

    class Stop(Exception):
        pass

    seen: dict = {}

    def capture(*args, **_kw):  # noqa: ANN002, ANN003, ANN202
        seen.update(args[3].model_dump())  # the run's FederationHelpsSettings
        raise Stop

    monkeypatch.setattr(fh, "protocol_gpus", lambda split: (units[:2], units[2:]))
    monkeypatch.setattr(fh, "run_federation_helps", capture)
    with pytest.raises(Stop):
        fh.main(["--protocol", "validation", "--seeds", "0"])
    assert seen["own_only_epochs"] == 24


def test_own_only_trains_for_its_chosen_budget(monkeypatch) -> None:  # noqa: ANN001
    """run_federation_helps trains the own-only baseline for `own_only_epochs` rounds of one
    epoch (the chosen budget), not for the federation's rounds x epochs."""
    import tempfile
    from pathlib import Path

    from bench.federation import federation_helps as fh

    fleet = fh.synthetic_gpus(3, 4, 16)
    calls: list[tuple[int, int]] = []
    original = fh.own_only_model

    def spy(gpu, tasks, rounds, epochs, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append((rounds, epochs))
        return original(gpu, tasks, rounds, epochs, *a, **k)

    monkeypatch.setattr(fh, "own_only_model", spy)
    with tempfile.TemporaryDirectory() as work:
        settings = fh.FederationHelpsSettings(rounds=2, epochs=1, k_experts=1, own_only_epochs=5)
        report = fh.run_federation_helps(list(fleet.values()), [], Path(work), settings, seed=0)
    assert calls == [(5, 1)] * 3 and report.own_only_epochs == 5
    assert "5 epochs (its budget chosen on validation" in fh.markdown(report)


def test_a_reported_offline_run_that_trained_on_test_units_says_so() -> None:
    from bench.report.report_md import offline_md
    from bench.report.report_model import OfflineResult, OfflineSection

    def section(train: list[str]) -> OfflineSection:
        result = OfflineResult(held_out=["sim:a30-u1"], train_gpus=train, budgets=[0], results={})
        return OfflineSection(command="c", data="d", wall_s=1.0, markdown="# t\n", plot="p.png",
                              result=result)  # fmt: skip

    leaky = "\n".join(offline_md(section(["sim:a100-sxm4-400w", "sim:2080ti-ref"])))
    assert "trained on test units of bench/protocol.py (2080ti-ref)" in leaky
    assert "trained on test units" not in "\n".join(offline_md(section(["sim:a100-sxm4-400w"])))


def test_a_protocol_report_rewritten_keeps_the_run_it_held(tmp_path) -> None:  # noqa: ANN001
    """Rerunning a split used to overwrite protocol_transfer_<split>.json: the run it held is
    now kept in the new report's earlier_runs and listed in its Markdown."""
    import json

    from bench.transfer.protocol_result import TransferResult
    from bench.transfer.protocol_transfer import write_result

    def result(command: str, top1: float) -> TransferResult:
        scores = {0: {"simoe": {b: {"sim:t4-hot": [top1]} for b in (0, 16, 64)}}}
        return TransferResult(
            split="validation",
            units=["sim:t4-hot"],
            seeds=[0],
            command=command,
            hyperparameters_source="test",
            hyperparameters={},
            fidelity={},
            per_task_top1=scores,
        )

    write_result(result("first", 0.5), tmp_path, "protocol_transfer_validation")
    write_result(result("first", 0.5), tmp_path, "protocol_transfer_validation")  # the same run
    write_result(result("second", 0.7), tmp_path, "protocol_transfer_validation")
    saved = json.loads((tmp_path / "protocol_transfer_validation.json").read_text())
    assert [e["command"] for e in saved["earlier_runs"]] == ["first"]
    md = (tmp_path / "protocol_transfer_validation.md").read_text()
    assert "## Earlier runs of this report" in md and "`first`" in md and "0.500" in md
    write_result(result("third", 0.9), tmp_path, "protocol_transfer_validation")
    saved = json.loads((tmp_path / "protocol_transfer_validation.json").read_text())
    assert [e["command"] for e in saved["earlier_runs"]] == ["first", "second"]


def test_a_federation_helps_report_rewritten_keeps_the_run_it_held(tmp_path) -> None:  # noqa: ANN001
    """The same for federation helps' over-seeds report: a second run with the same --out and
    --tag keeps the first in earlier_runs, and the Markdown lists it."""
    from bench.federation import federation_helps as fh
    from bench.federation.federation_report import FederationHelpsSeeds

    out = tmp_path / "out"
    argv = ["--synthetic", "--rounds", "2", "--epochs", "1", "--central-epochs", "0",
            "--out", str(out), "--tag", "t"]  # fmt: skip
    fh.main([*argv, "--k-experts", "1"])
    fh.main([*argv, "--k-experts", "2"])
    saved = FederationHelpsSeeds.model_validate_json(
        (out / "federation_helps_synthetic_t.json").read_text()
    )
    assert [e.runs[0].k_experts for e in saved.earlier_runs] == [1]
    assert saved.runs[0].k_experts == 2
    md = (out / "federation_helps_synthetic_t.md").read_text()
    assert "## Earlier runs of this report" in md and "--k-experts 1" in md
