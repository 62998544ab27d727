"""bench/protocol_choices.json under parallel selection runs (issue 24): method parts run
side by side each merge their own choices; none overwrites another's."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from bench import protocol
from bench.transfer import protocol_transfer as pt
from bench.transfer.protocol_result import TransferResult


def test_parallel_selections_keep_each_others_choices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two selection runs of different methods, both started before either finishes: both
    methods' choices survive, and so does one chosen earlier on the same fleet."""
    choices = tmp_path / "choices.json"
    monkeypatch.setattr(pt, "CHOICES", choices)
    monkeypatch.setattr(protocol, "fleet_hashes", lambda *_a, **_k: {"digest": "fleet-x"})
    monkeypatch.setattr(pt, "GRID", {"pooled": [{"expert_epochs": 1}], "mlp-finetune": [{}]})
    pt.save_choices(choices, "fleet-x", [0], 0, {"simoe": {"expert_epochs": 15}}, {})
    both_started = threading.Barrier(2, timeout=30)

    def fake_evaluate(split, hps, seeds, methods, ablations, labels, per_task):  # noqa: ANN001, ANN202
        both_started.wait()  # each run has read whatever it reads before either writes
        (method,) = methods
        return TransferResult(
            split=split,
            units=["sim:u"],
            seeds=seeds,
            hyperparameters=hps,
            per_task_top1={s: {method: {0: {"sim:u": [0.5]}}} for s in seeds},
        )

    monkeypatch.setattr(pt, "evaluate", fake_evaluate)
    labels = protocol.UnitLabels(tmp_path)
    runs = [
        threading.Thread(target=pt.select, args=(labels, [0], 0, [m]))
        for m in ("pooled", "mlp-finetune")
    ]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    saved = json.loads(choices.read_text())
    assert saved["fleet"] == "fleet-x"
    assert set(saved["chosen"]) == {"simoe", "pooled", "mlp-finetune"}
    assert set(saved["grid_scores"]) == {"pooled", "mlp-finetune"}
    assert not list(tmp_path.glob("*.partial"))


def test_choices_of_another_fleet_or_scale_are_not_kept(tmp_path: Path) -> None:
    choices = tmp_path / "choices.json"
    pt.save_choices(choices, "fleet-old", [0], 0, {"simoe": {"expert_epochs": 8}}, {})
    pt.save_choices(choices, "fleet-new", [0], 0, {"pooled": {"expert_epochs": 40}}, {})
    assert set(json.loads(choices.read_text())["chosen"]) == {"pooled"}
    pt.save_choices(choices, "fleet-new", [0], 48, {"xgb": {}}, {})
    assert set(json.loads(choices.read_text())["chosen"]) == {"xgb"}
    pt.save_choices(choices, "fleet-new", [0], None, {"simoe": {}}, {})  # None: all, as 0
    pt.save_choices(choices, "fleet-new", [0], 0, {"pooled": {}}, {})
    assert set(json.loads(choices.read_text())["chosen"]) == {"simoe", "pooled"}


def test_a_run_names_the_recorded_fleet_only_when_every_unit_it_read_is_that_fleets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest of a subset of units names no fleet: a report says the recorded fleet's
    digest when each unit read matches it, and marks anything else as unrecorded."""
    hashes = tmp_path / "protocol_fleet_hash.json"
    recorded = {"a": "ha", "b": "hb", "c": "hc"}
    hashes.write_text(json.dumps({"build": {"digest": "FLEET", "units": recorded}}))
    monkeypatch.setattr(protocol, "HASHES", hashes)
    read = {"a": "ha", "b": "hb"}
    monkeypatch.setattr(
        protocol, "fleet_hashes", lambda _d, names: {"digest": "SUBSET", "units": read}
    )
    assert pt.fleet_check(tmp_path, ["a", "b"]) == {
        "fleet": "FLEET",
        "units_equal_to_recorded_fleet": "2/2",
    }
    read["b"] = "changed"
    assert pt.fleet_check(tmp_path, ["a", "b"]) == {
        "fleet": "unrecorded:SUBSET",
        "units_equal_to_recorded_fleet": "1/2",
    }
