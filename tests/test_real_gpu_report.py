"""bench/real_gpu/report.py's count of runs whose order measurements changed (no hub data)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

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
    assert data["runs"] == 2 and data["changed_within_16"] == 1
    assert data["gain"][16]["better"] == 1 and data["gain"][16]["worse"] == 0
    assert data["gain"][16]["mean_log_ratio"] == np.log(1.0) - np.log(1.0 / 51.0)
    assert any("1 of 2" in line for line in lines)
