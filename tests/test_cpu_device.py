from __future__ import annotations

import pytest

from agent.devices import get_device
from schemas import BadInputError


def test_cpu_target_names_the_host_cpu() -> None:
    device = get_device("cpu")
    target = device.target()
    assert target.kind.name == "llvm"
    assert str(target.attrs["mcpu"]) == device.mcpu != ""
    specs = device.analytical_specs()
    assert specs.compute_capability == 0 and specs.fp32_gflops > 0


def test_cpu_measures_a_real_kernel() -> None:
    import tvm
    from tvm import te

    device = get_device("cpu")
    n = 64
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    small = device.measure(tvm.IRModule({"main": te.create_prim_func([a, b, c])}), repeat=3)
    assert len(small) == 3 and all(0 < s < 1 for s in small)


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "tpu:0", ""])
def test_unknown_devices_are_bad_input(spec: str) -> None:
    with pytest.raises(BadInputError):
        get_device(spec)
