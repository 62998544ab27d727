"""bench/real_gpu/report.py's count of runs whose order measurements changed, and the typed
report reading the committed ones (no hub data)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bench.real_gpu.report import online_md


def test_runs_whose_first_16_differ_are_counted_with_their_gain() -> None:
    times = np.arange(1.0, 101.0)  # configuration i takes i+1 ms: 0 is the optimum
    hub = SimpleNamespace(caches={"k": {"g": SimpleNamespace(time_ms=times)}})
    same = list(range(50, 100))
    run = {
        "results": [
            {"kernel": "k", "target": "g", "traces": {"simoe": same, "simoe-no-online": same}},
            {  # measurements moved SiMoE to the optimum at its 10th measurement
                "kernel": "k",
                "target": "g",
                "traces": {"simoe": same[:9] + [0] + same[9:], "simoe-no-online": same},
            },
        ]
    }
    lines, data = online_md(run, hub)
    assert data.runs == 2 and data.changed_within_16 == 1
    assert data.gain[16].better == 1 and data.gain[16].worse == 0
    assert data.gain[16].mean_log_ratio == np.log(1.0) - np.log(1.0 / 51.0)
    assert any("1 of 2" in line for line in lines)


@pytest.mark.parametrize(
    "name", ["real_transfer", "real_transfer_dev_seed0", "real_transfer_run1", "real_transfer_run2"]
)
def test_a_committed_report_loads_and_writes_back_byte_for_byte(name: str) -> None:
    """The typed report reads each committed real-GPU report and writes the same JSON."""
    from bench.real_gpu.report_model import read, report_json

    path = Path(__file__).resolve().parents[1] / "docs/results" / f"{name}.json"
    report = read(path)
    assert report.summary["simoe"].geomean[1] > 0 and report.goals["simoe"]
    assert report_json(report) == path.read_text()
