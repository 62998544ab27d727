"""`simoe-agent tune --seed S` in fast mode gives the same schedules when run again (issue 23).

Before: MetaSchedule's evolutionary search ran on one thread per physical core, each with
its own random state and taking work in whatever order the threads ran, so two runs of one
command at one seed measured different candidates (fast mode on a 4096x1024 projection, 8
trials, seed 0: none in common)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agent.store import Store

DEVICE = "sim:t4"
WORKLOAD = "matmul:64,64,64"


def _fast_mode_call(state: Path, hash_seed: str) -> subprocess.Popen[str]:
    """A fresh node's one fast-mode tune call (it profiles the simulated GPU first), its hedge
    always switching (`--hedge-spearman 2`) so that the model's picks and MetaSchedule's
    evolutionary search are both measured; `hash_seed`: the process's PYTHONHASHSEED (set
    and dict order must not matter)."""
    args = [
        sys.executable, "-c", "from agent.cli import main; main()", "tune", "--workload",
        WORKLOAD, "--device", DEVICE, "--trials", "10", "--cost-model", "simoe",
        "--model-rounds", "1", "--population", "16", "--hedge-spearman", "2", "--seed", "3",
        "--no-baseline", "--json", "--state-dir", str(state),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _measured(
    state: Path, call: subprocess.Popen[str]
) -> tuple[list[tuple[str, list[float]]], dict]:
    """The call's measured candidates in order (trace, seconds) and its JSON."""
    out, err = call.communicate(timeout=300)
    assert call.returncode == 0, err[-2000:]
    with Store(state / "store.sqlite") as store:
        records = store.records(device=DEVICE)
    return [(json.dumps(r.trace, sort_keys=True), r.run_secs) for r in records], json.loads(out)


def test_fast_mode_at_a_fixed_seed_measures_and_keeps_the_same_candidates(
    tmp_path: Path,
) -> None:
    """Two runs at once (as two users would), so they also compete for the cores."""
    calls = {
        name: _fast_mode_call(tmp_path / name, seed) for name, seed in [("a", "1"), ("b", "2")]
    }
    first, first_result = _measured(tmp_path / "a", calls["a"])
    second, second_result = _measured(tmp_path / "b", calls["b"])
    assert len(first) == 10 and first_result["hedged"] == [WORKLOAD]
    assert [t for t, _ in first] == [t for t, _ in second]  # the same candidates, in order
    assert [s for _, s in first] == [s for _, s in second]
    assert first_result["hedge_spearman"] == second_result["hedge_spearman"]
    [task_a], [task_b] = first_result["tasks"], second_result["tasks"]
    assert task_a["tuned_latency_s"] == task_b["tuned_latency_s"]
