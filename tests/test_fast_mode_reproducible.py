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


def _fast_mode_run(state: Path, hash_seed: str) -> tuple[list[tuple[str, list[float]]], dict]:
    """One fresh node: profile the simulated GPU, then one fast-mode tune call whose hedge
    always switches (`--hedge-spearman 2`), so the model's picks and MetaSchedule's
    evolutionary search are both measured. Returns the measured candidates in order (trace,
    seconds) and the CLI's JSON."""
    cli = [sys.executable, "-c", "from agent.cli import main; main()"]
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}  # set and dict order must not matter
    for args in (
        ["profile", "--device", DEVICE],
        ["tune", "--workload", "matmul:128,128,128", "--device", DEVICE, "--trials", "12",
         "--cost-model", "simoe", "--model-rounds", "2", "--population", "32",
         "--hedge-spearman", "2", "--seed", "3", "--json"],
    ):  # fmt: skip
        proc = subprocess.run(
            [*cli, *args, "--state-dir", str(state)],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
    with Store(state / "store.sqlite") as store:
        records = store.records(device=DEVICE)
    measured = [(json.dumps(r.trace, sort_keys=True), r.run_secs) for r in records]
    return measured, json.loads(proc.stdout)


def test_fast_mode_at_a_fixed_seed_measures_and_keeps_the_same_candidates(
    tmp_path: Path,
) -> None:
    first, first_result = _fast_mode_run(tmp_path / "a", "1")
    second, second_result = _fast_mode_run(tmp_path / "b", "2")
    assert len(first) == 12 and first_result["hedged"] == ["matmul:128,128,128"]
    assert [t for t, _ in first] == [t for t, _ in second]  # the same candidates, in order
    assert [s for _, s in first] == [s for _, s in second]
    assert first_result["hedge_spearman"] == second_result["hedge_spearman"]
    [task_a], [task_b] = first_result["tasks"], second_result["tasks"]
    assert (task_a["kept"], task_a["tuned_latency_s"]) == (
        task_b["kept"],
        task_b["tuned_latency_s"],
    )
