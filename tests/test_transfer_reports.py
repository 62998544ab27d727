"""The transfer benchmarks' committed reports (the protocol's, offline transfer's) load into
their models and come back as they were: the JSON with the same keys and values, the
Markdown byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.reporting import read_report
from bench.transfer import offline_transfer_report as offline
from bench.transfer.protocol_report import markdown, side_by_side
from bench.transfer.protocol_result import OnlineGateReport, TransferResult, result_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs/results"
OFFLINE = ROOT / "bench/reports/offline/offline_transfer.json"  # BENCHMARKS section 2's
SPLITS = sorted(RESULTS.rglob("protocol_transfer_*.json"))


def same_keys_and_values(a: str, b: str) -> bool:
    """Equal as JSON text with sorted keys: 1 and 1.0 differ, key order does not."""
    return json.dumps(json.loads(a), sort_keys=True) == json.dumps(json.loads(b), sort_keys=True)


@pytest.mark.parametrize("path", SPLITS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_committed_split_report_loads_and_writes_back_the_same_json(path: Path) -> None:
    text = path.read_text()
    assert same_keys_and_values(result_json(read_report(path, TransferResult)), text)


def test_the_online_gate_report_loads_and_writes_back_the_same_json() -> None:
    path = RESULTS / "protocol_online_gate_validation.json"
    report = read_report(path, OnlineGateReport)
    assert report.chosen in report.grid and report.runs
    assert same_keys_and_values(result_json(report), path.read_text())


@pytest.mark.parametrize("split", ["validation", "test"])
def test_the_current_split_reports_render_byte_for_byte(split: str) -> None:
    path = RESULTS / f"protocol_transfer_{split}.json"
    assert markdown(read_report(path, TransferResult)) == path.with_suffix(".md").read_text()


def test_the_side_by_side_renders_byte_for_byte() -> None:
    pair = [
        read_report(RESULTS / f"protocol_transfer_{s}.json", TransferResult)
        for s in ("validation", "test")
    ]
    assert side_by_side(*pair) == (RESULTS / "protocol_transfer.md").read_text()


def test_a_split_report_keeps_nan_and_int_keys_as_the_dicts_wrote_them() -> None:
    """What `evaluate` built before the models (int seeds and budgets, NaN agreement)."""
    gate = {
        "gate_top": "sim:a",
        "gate_top_weight": 0.5,
        "gate_effective_experts": 2.0,
        "nearest_expert": "sim:a",
        "gate_top_is_nearest": True,
        "measured_twin": None,
        "twin_agreement": None,
        "nearest_agreement": float("nan"),
        "nearest_is_twin": False,
    }
    as_dicts = {
        "split": "validation",
        "units": ["sim:t4-hot"],
        "seeds": [0],
        "hyperparameters": {"simoe-online": {"expert_epochs": 8, "sharpness": 2.0}},
        "per_task_top1": {0: {"simoe": {16: {"sim:t4-hot": [1.0, 0.5]}}}},
        "fidelity": {},
        "gates": {0: {"sim:t4-hot": gate}},
        "seconds": {"simoe/0": 1.5},
        "train_per_task": "all",
        "transfer_coverage": {0: {"sim:t4-hot": 0.75}},
    }
    written = json.dumps(as_dicts, indent=1)
    model = TransferResult.model_validate_json(written)
    assert model.per_task_top1[0]["simoe"][16]["sim:t4-hot"] == [1.0, 0.5]
    assert result_json(model) == written  # byte for byte, NaN included


def test_the_offline_report_loads_writes_back_and_renders_byte_for_byte() -> None:
    report = offline.read(OFFLINE)
    assert report.results and report.per_gpu["simoe"][0]
    assert same_keys_and_values(offline.report_json(report), OFFLINE.read_text())
    assert offline.markdown(report) == OFFLINE.with_suffix(".md").read_text()


def test_an_offline_transfer_run_repeats_with_its_seed(tmp_path: Path) -> None:
    """The same command twice gives the same scores: the models' initial weights come from
    --seed (they were drawn from torch's unseeded state, so two runs differed)."""
    from bench.transfer import offline_transfer

    def scores(out: Path) -> dict:
        tiny = "--synthetic --budgets 0 --methods simoe,pooled --expert-epochs 1 --shared-epochs 1"
        offline_transfer.main([*tiny.split(), "--adapt-epochs", "1", "--out", str(out)])
        [report] = out.glob("*.json")
        return json.loads(report.read_text())["per_task_top1"]

    assert scores(tmp_path / "a") == scores(tmp_path / "b")


def test_a_new_online_gate_run_keeps_the_report_it_replaces(tmp_path: Path) -> None:
    """The sharpness reselected on another fleet adds a run; the earlier one stays, listed."""
    from bench.transfer.protocol_transfer import write_gate_report

    committed = read_report(RESULTS / "protocol_online_gate_validation.json", OnlineGateReport)
    first = committed.model_copy(update={"earlier_runs": [], "fleet": "a" * 64})
    write_gate_report(first, tmp_path, "gate")
    again = write_gate_report(first, tmp_path, "gate")  # the same run written twice: once
    assert again.earlier_runs == []
    second = first.model_copy(update={"fleet": "b" * 64, "command": "python -m x --again"})
    written = write_gate_report(second, tmp_path, "gate")
    assert [r.fleet for r in written.earlier_runs] == ["a" * 64]
    back = read_report(tmp_path / "gate.json", OnlineGateReport)
    assert back.fleet == "b" * 64 and [r.fleet for r in back.earlier_runs] == ["a" * 64]
    assert "1. `" + first.command + "`: fleet aaaaaaaa" in (tmp_path / "gate.md").read_text()
    rewritten = write_gate_report(back, tmp_path, "gate")  # a report read back, written again
    assert [r.fleet for r in rewritten.earlier_runs] == ["a" * 64]


def test_a_report_sets_each_learned_peer_against_schedule_transfer() -> None:
    """Pooled (and the MLP, nearest expert) minus schedule transfer, clustered by model, as
    SiMoE's own rows: the trivial baseline every learned method has to beat."""
    from bench.transfer.protocol_report import paired_interval

    units = ["sim:t4-hot", "sim:t4-cool", "sim:a10-ecc-on"]
    rng = np.random.default_rng(0)

    def scores() -> dict:
        return {b: {u: list(rng.random(4)) for u in units} for b in (0, 16, 64)}

    by_method = {m: scores() for m in ("simoe", "pooled", "schedule-transfer")}
    result = TransferResult(
        split="test", units=units, seeds=[0], hyperparameters={}, per_task_top1={0: by_method}
    )
    text = markdown(result)
    assert "Each learned peer minus schedule-transfer" in text
    for b in (0, 16, 64):
        ours = {u: np.asarray(v) for u, v in by_method["pooled"][b].items()}
        theirs = {u: np.asarray(v) for u, v in by_method["schedule-transfer"][b].items()}
        mean, lo, hi = paired_interval(ours, theirs)
        assert f"| pooled | {b} | {mean:+.3f} | [{lo:+.3f}, {hi:+.3f}] |" in text


def test_rendering_a_missing_or_malformed_report_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.reporting import render
    from bench.transfer.protocol_result import TransferResult

    def markdown(report: TransferResult) -> str:
        raise AssertionError("never rendered")

    bad = tmp_path / "bad.json"
    bad.write_text('{"split": 3}')
    for path in (tmp_path / "missing.json", bad):
        with pytest.raises(SystemExit) as exit_:
            render(path, TransferResult, markdown)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and str(path) in err
