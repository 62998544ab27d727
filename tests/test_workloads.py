"""Workloads: each operator's TE function computes what its name says (tiny shapes, vs torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from agent.workloads import (
    OPERATOR_SUITE,
    TEWorkload,
    flops,
    output_shape,
    parse_workload,
    prim_func,
    te_families,
)
from schemas import BadInputError, WorkloadSpec


def _run_default(spec: WorkloadSpec, inputs: list[np.ndarray]) -> np.ndarray:
    """Build the unscheduled PrimFunc for llvm and run it on `inputs`."""
    import tvm

    executable = tvm.compile(tvm.IRModule({"main": prim_func(spec)}), target="llvm")
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(output_shape(spec), spec.dtype), dev)
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    executable["main"](*args, out)
    return out.numpy()


def _rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype("float32")


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(x)


CASES = [
    ("matmul:5,7,3", lambda: [_rand(5, 3), _rand(3, 7)], lambda a, b: a @ b),
    ("batch_matmul:2,5,7,3", lambda: [_rand(2, 5, 3), _rand(2, 3, 7)], lambda a, b: a @ b),
    ("dense:5,7,3", lambda: [_rand(5, 3), _rand(7, 3)], lambda x, w: x @ w.T),
    (
        "conv2d:1,3,8,8,4,3,3,2,1",
        lambda: [_rand(1, 3, 8, 8), _rand(4, 3, 3, 3)],
        lambda x, w: F.conv2d(_t(x), _t(w), stride=2, padding=1).numpy(),
    ),
    (
        "conv2d_bias_relu:1,3,6,6,4,1,1,1,0",
        lambda: [_rand(1, 3, 6, 6), _rand(4, 3, 1, 1), _rand(4)],
        lambda x, w, b: F.relu(F.conv2d(_t(x), _t(w), _t(b))).numpy(),
    ),
    (
        "depthwise_conv2d:1,4,7,7,3,3,1,1",
        lambda: [_rand(1, 4, 7, 7), _rand(4, 1, 3, 3)],
        lambda x, w: F.conv2d(_t(x), _t(w), padding=1, groups=4).numpy(),
    ),
    ("softmax:3,9", lambda: [_rand(3, 9)], lambda x: F.softmax(_t(x), dim=1).numpy()),
    (
        "layer_norm:3,9",
        lambda: [_rand(3, 9), _rand(9), _rand(9) + 1],
        lambda x, g, b: F.layer_norm(_t(x), (9,), _t(g), _t(b), eps=1e-5).numpy(),
    ),
]


@pytest.mark.parametrize(("text", "make_inputs", "reference"), CASES, ids=[c[0] for c in CASES])
def test_operator_matches_reference(text, make_inputs, reference) -> None:
    spec = parse_workload(text)
    assert isinstance(spec, WorkloadSpec)
    inputs = make_inputs()
    expected = np.asarray(reference(*inputs))
    assert expected.shape == output_shape(spec)
    np.testing.assert_allclose(_run_default(spec, inputs), expected, rtol=1e-4, atol=1e-5)


def test_flops_of_matmul_and_conv() -> None:
    assert flops(parse_workload("matmul:2,3,4")) == 2 * 2 * 3 * 4
    # 1x1 conv of 2 channels to 5 on 4x4: 2 * out(5*4*4) * C(2)
    assert flops(parse_workload("conv2d:1,2,4,4,5,1,1,1,0")) == 2 * 5 * 16 * 2


def test_te_family_form() -> None:
    families = te_families()
    assert "C2D" in families and "GMM" in families
    workload = parse_workload("te:GMM:0")
    assert workload == TEWorkload(family="GMM", index=0)
    assert str(workload) == "te:GMM:0"
    assert flops(workload) > 0
    assert prim_func(workload) is not None


@pytest.mark.parametrize(
    "text",
    [
        "matmul:0,a",
        "nope:1,2",
        "matmul:1,2",
        "te:NOPE:0",
        "te:C2D:99",
        "te:C2D",
        "conv2d:1,1,2,2,1,5,5,1,0",
    ],
)
def test_bad_workloads_raise_one_line(text: str) -> None:
    with pytest.raises(BadInputError) as info:
        prim_func(parse_workload(text))
    assert "\n" not in str(info.value)


def test_operator_suite_builds() -> None:
    assert len(OPERATOR_SUITE) >= 20
    assert len({str(s) for s in OPERATOR_SUITE}) == len(OPERATOR_SUITE)
    for spec in OPERATOR_SUITE:
        assert flops(spec) > 0
        assert len(prim_func(spec).params) >= 2


def test_a_workload_no_device_can_hold_is_refused_when_parsed() -> None:
    """Defect 5 (issue 13): matmul:99999999,... was accepted; its buffers need ~1e17 bytes."""
    with pytest.raises(BadInputError, match="GiB") as info:
        parse_workload("matmul:99999999,99999999,99999999")
    assert "\n" not in str(info.value)
    with pytest.raises(BadInputError, match="GiB"):  # an input alone too large, fp16 counted
        parse_workload("conv2d:1,300000,100000,100000,1,1,1,1,0:float16")
    big_but_fine = parse_workload("matmul:16384,16384,16384")  # 3 GiB of buffers
    assert isinstance(big_but_fine, WorkloadSpec)
    assert big_but_fine.buffer_bytes == 3 * 16384 * 16384 * 4


def test_a_workload_larger_than_the_devices_memory_is_refused() -> None:
    from agent.devices import get_device
    from agent.tuner import check_fits

    cpu = get_device("cpu")
    memory = cpu.memory_bytes()
    assert memory is not None and memory > 2**30  # the host's RAM, read from the OS
    check_fits(parse_workload("matmul:64,64,64"), cpu)
    side = int((memory / 4) ** 0.5) + 1  # one M x N output alone is larger than RAM
    too_big = parse_workload(f"matmul:{side},{side},1")
    with pytest.raises(BadInputError, match="memory") as info:
        check_fits(too_big, cpu)
    assert "\n" not in str(info.value)
