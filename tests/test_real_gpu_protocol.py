"""A slice of the real-GPU protocol on the real benchmark_hub files (skipped where absent).

The files are not part of the repository (they are the public benchmark_hub data); the
product path on synthetic cache files is tests/test_kernel_tuner_path.py, which always runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.real_gpu import protocol, report
from bench.real_gpu.hub import Hub, hub_dir
from schemas import BadInputError
from simoe_model.kernel_model import KernelTraining

try:
    HUB_DIR = hub_dir()
except BadInputError as exc:
    HUB_DIR = None
    WHY = str(exc)

pytestmark = pytest.mark.skipif(HUB_DIR is None, reason="no benchmark_hub data on this machine")


@pytest.fixture(scope="module")
def small_hub() -> Hub:
    return Hub.load(HUB_DIR, ["convolution", "pnpoly"])


def test_one_target_every_method(small_hub, monkeypatch):
    monkeypatch.setattr(protocol, "_HUB", small_hub)
    monkeypatch.setattr(protocol, "TRAINING", KernelTraining(expert_steps=60, shared_epochs=2))
    monkeypatch.setattr(protocol, "BUDGET", 16)
    monkeypatch.setattr(protocol, "SCRATCH_BUDGET", 16)
    monkeypatch.setattr(protocol, "SCRATCH_BUDGETS", {})
    monkeypatch.setattr(protocol, "STRATEGIES", ("random_sample",))
    monkeypatch.setattr(protocol, "SHARE_TOP", 4)
    result = protocol.run_target("pnpoly", "rtx-3090", seed=0)
    cache = small_hub.caches["pnpoly"]["rtx-3090"]
    assert result["fleet"] == ["rtx-2080-ti", "rtx-3060-laptop", "titan-rtx"]
    for method, trace in result["traces"].items():
        assert len(trace) == 16 and len(set(trace)) == 16, method
        assert all(0 <= i < len(cache) for i in trace), method
    # choices were made on the fleet only, from the stated grids
    assert result["chosen"]["probes_per_kernel"] in protocol.PROBE_GRID
    assert result["chosen"]["sharpness"] in protocol.SHARPNESS_GRID
    assert result["chosen_sharing"]["share_weight"] in protocol.SHARE_GRID
    # the hindsight oracle is the best single source at its first pick, by construction
    first = {m: cache.time_ms[t[0]] for m, t in result["traces"].items()}
    sources = [m for m in first if m.startswith("transfer-") and m.endswith("-1")]
    assert all(first["oracle-source"] <= first[m] or np.isnan(first[m]) for m in sources)

    run = {
        "command": "test", "seeds": [0], "budget": 16, "scratch_budget": 16, "wall_s": 1.0,
        "jobs": 1, "load_average": [0.0, 0.0, 0.0], "results": [result],
    }  # fmt: skip
    text, data = report.render(run, report.score(run, small_hub), small_hub)
    assert "| simoe |" in text and "MEASURED" in text
    assert set(data.goals) == {"simoe", "simoe-sharing"}
    assert data.goals["simoe"]["fraction@1"].goal == 0.93  # type: ignore[union-attr]
    summary = data.summary["simoe"].geomean
    assert all(0 < summary[n] <= 1 for n in report.NS)
