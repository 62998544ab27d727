"""One seed of the federation benchmark gives the same report when run again.

Before: a seed-0 rerun of bench/federation/federation_helps.py on validation sent three
newcomers other experts (their similarities differed in the third decimal). The server's
similarity fit took its units and pairs in the order of the node keys, which every
enrolment draws afresh, and its float sums follow that order. Here two fresh processes
(other key draws, other PYTHONHASHSEEDs) run a tiny federation with what the real runs use
(the fit on probe agreements, FedAdam, personal fine-tunes, several newcomers) and must
agree on every field of the report but the wall and CPU times, in the same order (the
report's traffic was listed by node key)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# a tiny synthetic fleet, 4 nodes and 2 newcomers, 3 rounds: ~10 s of CPU per process
RUN = """
import json, sys, tempfile
from pathlib import Path
from bench import prepare
prepare()
import torch
torch.set_num_threads(1)
from bench.federation import federation_helps as fh
fleet = fh.synthetic_gpus(6, 6, 16)
names = list(fleet)
settings = fh.FederationHelpsSettings(
    rounds=3, epochs=1, k_experts=2, central_epochs=1, similarity_steps=10,
    similarity_source="probes", personal_epochs=2, server_optimizer="adam", server_lr=0.01,
    command="tiny", data="synthetic",
)
with tempfile.TemporaryDirectory() as work:
    report = fh.run_federation_helps(
        [fleet[n] for n in names[:4]], [fleet[n] for n in names[4:]], Path(work), settings
    )
print(report.model_dump_json())
"""


def _run(hash_seed: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen(
        [sys.executable, "-c", RUN], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _timeless(value: object) -> object:
    """The report without its wall and CPU times and load averages (they never repeat)."""
    if isinstance(value, dict):
        return {
            k: _timeless(v)
            for k, v in value.items()
            if not k.endswith(("_wall_s", "_cpu_s")) and not k.startswith("load_average")
        }
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def test_a_seed_of_the_federation_benchmark_repeats_bit_for_bit() -> None:
    calls = [_run(seed) for seed in ("1", "2")]  # at once, as the pattern of issue 23's test
    reports = []
    for call in calls:
        out, err = call.communicate(timeout=600)
        assert call.returncode == 0, err[-2000:]
        reports.append(json.loads(out))
    first, second = (_timeless(r) for r in reports)
    assert len(first["newcomers"]) == 2 and first["newcomers"][0]["similarity_to_nodes"]
    assert first["nodes"][0]["federated_global_top1"] is not None  # the personal fine-tune ran
    assert first == second
    assert json.dumps(first) == json.dumps(second)  # the report's text too: keys in one order
