"""The deployment's defaults are the federation rounds' validated pick in its product form
(bench/protocol.py PRODUCT_DEFAULTS_RULE), and the shipped probe set is the file that pick's
validation runs recorded, as `simoe-agent probes build` writes it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from bench import protocol
from bench.federation.federation_helps import FederationHelpsSettings
from server.run_config import DEFAULTS, ServerRunConfig
from simoe_model.probe_file import SUITE_PROBES, load_probes, probe_file_path

ROOT = Path(__file__).resolve().parent.parent
VALIDATION = ROOT / "docs" / "results" / "federation_helps_validation"


def _pick_options() -> dict[str, str]:
    options = protocol.FEDERATION_VARIANTS_DA10_R6[protocol.PRODUCT_DEFAULTS_VARIANT].split()
    return dict(zip(options[::2], options[1::2], strict=True))


def test_the_deployments_defaults_are_the_validated_picks_options() -> None:
    flags = _pick_options()
    assert DEFAULTS.epochs == int(flags["--epochs"])
    assert DEFAULTS.server_optimizer == flags["--server-optimizer"]
    assert DEFAULTS.server_lr == float(flags["--server-lr"])
    assert DEFAULTS.personal_epochs == int(flags["--personal-epochs"])
    assert DEFAULTS.similarity_steps == int(flags["--similarity-steps"])
    assert DEFAULTS.similarity_source == flags["--similarity-source"]
    assert flags["--probe-file"] == "runs/probes/suite_seed0.npz"  # shipped as `suite`
    assert DEFAULTS.probes == "suite" and probe_file_path("suite") == SUITE_PROBES
    # what the pick left at the bench's own defaults, the deployment has too
    bench = FederationHelpsSettings()
    for name in (
        "k_experts", "local_batch", "prox_mu", "transfer_weight", "matched_global",
        "distill_steps", "teacher_epochs", "teacher_distill_steps",
    ):  # fmt: skip
        assert getattr(DEFAULTS, name) == getattr(bench, name), name


def test_the_shipped_probe_set_is_the_one_the_picks_validation_runs_read() -> None:
    report = json.loads(
        (
            VALIDATION / f"federation_helps_validation_{protocol.PRODUCT_DEFAULTS_VARIANT}.json"
        ).read_text()
    )
    recorded = {run["probe_file_sha256"] for run in report["runs"]}
    assert recorded == {hashlib.sha256(SUITE_PROBES.read_bytes()).hexdigest()}
    assert len(load_probes("suite")) == 28


def test_the_shipped_probe_set_is_what_probes_build_writes(tmp_path: Path) -> None:
    """Task i of the file is workload i of the suite sampled with seed 0 + i: rebuild one
    cheap task (softmax) and compare its arrays exactly."""
    from agent.fleet_dataset import resolve_workloads
    from agent.probe_set import build_probe_set, probe_target

    suite = resolve_workloads("suite")
    index = next(i for i, name in enumerate(suite) if name.startswith("softmax"))
    out = tmp_path / "one.npz"
    build_probe_set(out, [suite[index]], per_task=32, seed=index, target=probe_target(None))
    with np.load(SUITE_PROBES) as shipped, np.load(out) as rebuilt:
        for kind in ("rows", "offsets"):
            np.testing.assert_array_equal(shipped[f"{kind}_{index}"], rebuilt[f"{kind}_0"])


def test_none_turns_the_probe_set_off() -> None:
    off = {"similarity_source": "reported"}  # the default source reads the probes
    assert ServerRunConfig(probes="none", **off).probes == ""
    assert ServerRunConfig(probes="None ", **off).probes == ""
