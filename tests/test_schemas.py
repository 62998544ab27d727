from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas import BadInputError, HardwareProfile, TuningRecord, WorkloadSpec
from schemas.errors import one_line


def test_workload_round_trip() -> None:
    spec = WorkloadSpec.parse("conv2d:1,64,56,56,64,3,3,1,1")
    assert spec.op == "conv2d"
    assert spec.named_dims["K"] == 64 and spec.named_dims["pad"] == 1
    assert WorkloadSpec.parse(str(spec)) == spec


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("matmul:0,a", "must be integers"),
        ("matmul:0,4,4", "dimension M must be positive"),
        ("matmul:4,4", "takes 3 dimensions"),
        ("frobnicate:1,2", "unknown operator"),
        ("matmul", "expected OP:D1"),
        ("matmul:4,4,4:int3", "dtype"),
    ],
)
def test_bad_workloads_name_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(BadInputError) as info:
        WorkloadSpec.parse(text)
    message = str(info.value)
    assert fragment in message and "\n" not in message


def _profile(**overrides: object) -> dict:
    body: dict = {
        "device_kind": "sim",
        "device": "sim:t4",
        "name": "Tesla T4",
        "analytical": {
            "compute_units": 40,
            "clock_mhz": 1590,
            "fp32_gflops": 8141,
            "fp16_gflops": 65000,
            "mem_bandwidth_gbs": 320,
            "l2_cache_kb": 4096,
            "shared_mem_per_unit_kb": 64,
            "registers_per_unit": 65536,
            "max_threads_per_unit": 1024,
            "max_blocks_per_unit": 16,
            "warp_size": 32,
            "compute_capability": 7.5,
        },
        "empirical": {
            "probe_suite_version": "1",
            "probe_latency_us": {"p": 3.0},
            "bandwidth_gbs": 250.0,
            "fma_gflops": 7000.0,
        },
        "simulated": True,
    }
    body.update(overrides)
    return body


def test_profile_id_ignores_time_and_flags_simulation() -> None:
    a = HardwareProfile.model_validate(_profile())
    b = HardwareProfile.model_validate(_profile())
    assert a.profile_id == b.profile_id
    with pytest.raises(ValidationError):
        HardwareProfile.model_validate(_profile(simulated=False))


def test_validation_error_is_one_line_naming_the_field() -> None:
    body = _profile()
    body["analytical"]["compute_units"] = -1
    with pytest.raises(ValidationError) as info:
        HardwareProfile.model_validate(body)
    line = one_line(info.value)
    assert "analytical.compute_units" in line and "\n" not in line


def test_failed_record_has_no_latency() -> None:
    common = {"workload_key": "k", "task_name": "t", "trace": [], "target": {}, "device": "cpu"}
    assert TuningRecord(run_secs=[1e10], **common).latency_s is None
    assert TuningRecord(run_secs=[1.0, 3.0], **common).latency_s == 2.0
