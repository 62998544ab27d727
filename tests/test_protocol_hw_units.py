"""The hybrid-vs-one-sided table on units that differ inside a model in hardware (issue 24):
which units it keeps and the differences it reports. No training."""

from __future__ import annotations

import pytest

from bench.transfer import protocol_hw_units
from bench.transfer.protocol_result import TransferResult


def test_the_units_of_models_with_units_of_their_own_hardware_are_kept() -> None:
    units = ["sim:a30-u1", "sim:a30-mig-1g6gb", "sim:2080ti-ref", "sim:2080ti-strix-oc",
             "sim:rtx3060", "sim:rtx3060-8gb", "sim:xavier-maxn"]  # fmt: skip
    assert protocol_hw_units.hardware_differs("a30-mig-1g6gb")
    assert not protocol_hw_units.hardware_differs("2080ti-strix-oc")  # clock and power only
    kept = protocol_hw_units.units_differing_in_hardware(units)
    assert kept == ["sim:a30-u1", "sim:a30-mig-1g6gb", "sim:rtx3060", "sim:rtx3060-8gb"]


def test_hybrid_minus_each_variant_on_those_units_only() -> None:
    units = ["sim:a30-u1", "sim:a30-mig-1g6gb", "sim:2080ti-ref"]
    per_seed = {
        "simoe-hybrid": {0: {"sim:a30-u1": [1.0, 0.8], "sim:a30-mig-1g6gb": [0.9, 0.9],
                             "sim:2080ti-ref": [0.0, 0.0]}},
        "simoe-analytical-only": {0: {"sim:a30-u1": [0.9, 0.8], "sim:a30-mig-1g6gb": [0.7, 0.9],
                                      "sim:2080ti-ref": [1.0, 1.0]}},
    }  # fmt: skip
    result = TransferResult(
        split="test",
        units=units,
        seeds=[0],
        hyperparameters={},
        fidelity={0: {}},
        per_task_top1={0: per_seed},
    )
    md = "\n".join(protocol_hw_units.markdown(result))
    # (0.1 + 0 + 0.2 + 0) / 4 on the A30 units; 2080ti-ref (worse for hybrid) is not counted
    assert "| simoe-analytical-only | 0.900 | 0.825 | +0.075 |" in md
    assert "2080ti-ref" not in md
    assert "| a30-mig-1g6gb | yes | 0.900 | 0.800 | nan |" in md


def test_a_missing_report_is_a_one_line_error(tmp_path, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.setattr("sys.argv", ["x", str(tmp_path / "none.json")])
    with pytest.raises(SystemExit) as exc:
        protocol_hw_units.main()
    assert exc.value.code == 2
    assert "error: no such report" in capsys.readouterr().err
