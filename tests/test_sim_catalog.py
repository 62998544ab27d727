"""The simulated GPU catalog: validated, sourced, looked up by name, user spec files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.devices import get_device
from agent.devices.sim.catalog import load_catalog, load_spec_file, lookup
from schemas import BadInputError
from schemas.gpu import GpuSpec

ISSUE_GPUS = [
    "k80", "m40", "p4", "p100", "1080ti", "titanxp", "v100", "titanv", "t4", "2080ti",
    "a100-40gb", "a100-80gb", "a10", "a30", "a40", "3090", "a2", "l4", "4090", "l40s",
    "h100-sxm", "h100-pcie", "h200", "tx2", "xavier", "orin", "jetson-nano", "titanx",
]  # fmt: skip


def test_catalog_has_every_gpu_of_the_issue_with_sources() -> None:
    catalog = load_catalog()
    assert len(catalog) >= 24
    assert set(ISSUE_GPUS) <= set(catalog)
    for spec in catalog.values():
        assert "NVIDIA" in spec.source or "CUDA" in spec.source
        assert spec.max_warps_per_sm * 32 == spec.max_threads_per_sm
    archs = {spec.architecture for spec in catalog.values()}
    assert {"kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper"} <= archs
    assert {spec.form_factor for spec in catalog.values()} == {"datacenter", "desktop", "embedded"}


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("t4", "t4"),
        ("T4", "t4"),
        ("Tesla T4", "t4"),
        ("a100", "a100-40gb"),
        ("V100", "v100"),
        ("1080ti", "1080ti"),
        ("GTX-1080-Ti", "1080ti"),
        ("titanx", "titanx"),
        ("tx2", "tx2"),
        ("jetson-nano", "jetson-nano"),
        ("nano", "jetson-nano"),
    ],
)
def test_lookup_is_case_insensitive_with_aliases(name: str, key: str) -> None:
    assert lookup(name).key == key


def test_unknown_gpu_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="unknown GPU"):
        get_device("sim:rtx9999")


def test_device_is_simulated_cuda_target_with_limits() -> None:
    device = get_device("sim:t4")
    assert device.kind == "sim" and device.simulated
    target = device.target()
    assert target.kind.name == "cuda"
    assert str(target.attrs["arch"]) == "sm_75"
    assert int(target.attrs["max_shared_memory_per_block"]) == 48 * 1024
    specs = device.analytical_specs()
    assert specs.compute_units == 40 and specs.compute_capability == 7.5


def test_user_spec_file_is_accepted(tmp_path: Path) -> None:
    data = lookup("t4").model_dump()
    data.update(key="my-t4-oc", name="Overclocked T4", aliases=[], boost_clock_mhz=1800.0)
    path = tmp_path / "my.json"
    path.write_text(json.dumps(data))
    device = get_device(f"sim:{path}")
    assert device.spec.key == "my-t4-oc"
    assert isinstance(load_spec_file(path), GpuSpec)


def test_bad_spec_file_names_the_field(tmp_path: Path) -> None:
    data = lookup("t4").model_dump()
    data["sms"] = -4
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BadInputError, match="sms"):
        load_spec_file(path)


def test_bad_spec_file_through_the_cli_is_one_line_exit_2(tmp_path: Path) -> None:
    data = lookup("t4").model_dump()
    data["shared_mem_per_sm_kb"] = "lots"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    proc = subprocess.run(
        [sys.executable, "-c", "from agent.cli import main; main()", "dataset", "gpus",
         "--spec", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "shared_mem_per_sm_kb" in lines[0]
    assert "Traceback" not in proc.stderr
