"""Operator workloads: a `WorkloadSpec` (or a MetaSchedule `te:FAMILY:INDEX`) -> TIR PrimFunc.

Two spellings are accepted on the command line:
- `op:d1,d2,...[:dtype]`, e.g. `matmul:512,512,512` (see `schemas.OPERATOR_DIMS`);
- `te:FAMILY:INDEX`, e.g. `te:C2D:0`: one of MetaSchedule's built-in TE workload families
  (`ms.testing.te_workload.CONFIGS`, the shapes its own benchmarks use).

The `te:` form lives here, not in `WorkloadSpec`, because its dimensions are positional
arguments of MetaSchedule's functions, not a shape this project defines.

`OPERATOR_SUITE` is a fixed list of representative shapes from ResNet-50, MobileNetV2 and
BERT-base (batch 1), the operators the fleet datasets are built from.
"""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from schemas import BadInputError, WorkloadSpec

if TYPE_CHECKING:
    from tvm import te, tirx

TE_PREFIX = "te:"


class TEWorkload(BaseModel):
    """One entry of MetaSchedule's `te_workload.CONFIGS`, written `te:FAMILY:INDEX`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str = Field(description="a key of ms.testing.te_workload.CONFIGS, e.g. C2D")
    index: int = Field(ge=0, description="which of the family's shapes")
    dtype: str = "float32"

    def __str__(self) -> str:
        return f"{TE_PREFIX}{self.family}:{self.index}"


Workload = WorkloadSpec | TEWorkload


@cache
def _te_configs() -> dict[str, tuple[object, list[tuple[object, ...]]]]:
    from tvm.s_tir.meta_schedule.testing import te_workload

    return dict(te_workload.CONFIGS)


def te_families() -> dict[str, int]:
    """Each MetaSchedule TE family and how many shapes it has."""
    return {name: len(shapes) for name, (_, shapes) in _te_configs().items()}


def parse_workload(text: str) -> Workload:
    """`op:dims[:dtype]` or `te:FAMILY:INDEX`; anything else raises a one-line BadInputError."""
    text = text.strip()
    if not text.startswith(TE_PREFIX):
        return WorkloadSpec.parse(text)
    parts = text.split(":")
    families = te_families()
    if len(parts) != 3 or not parts[2].isdigit():
        raise BadInputError(f"workload {text!r}: expected te:FAMILY:INDEX, e.g. te:C2D:0")
    family, index = parts[1], int(parts[2])
    if family not in families:
        raise BadInputError(
            f"workload {text!r}: unknown TE family {family!r} (known: {', '.join(families)})"
        )
    if index >= families[family]:
        raise BadInputError(
            f"workload {text!r}: {family} has shapes 0..{families[family] - 1}, not {index}"
        )
    return TEWorkload(family=family, index=index)


def workload_tensors(spec: WorkloadSpec) -> list[te.Tensor]:
    """The TE graph of an operator: its inputs, then its output (the PrimFunc's signature)."""
    from tvm import te, topi

    dt = spec.dtype
    d = spec.named_dims
    if spec.op == "matmul":
        a = te.placeholder((d["M"], d["K"]), dt, name="A")
        b = te.placeholder((d["K"], d["N"]), dt, name="B")
        k = te.reduce_axis((0, d["K"]), name="k")
        c = te.compute((d["M"], d["N"]), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
        return [a, b, c]
    if spec.op == "batch_matmul":
        a = te.placeholder((d["B"], d["M"], d["K"]), dt, name="A")
        b = te.placeholder((d["B"], d["K"], d["N"]), dt, name="B")
        return [a, b, topi.nn.batch_matmul(a, b, transpose_b=False)]
    if spec.op == "dense":  # x @ W^T, the layout of torch.nn.Linear
        x = te.placeholder((d["M"], d["K"]), dt, name="X")
        w = te.placeholder((d["N"], d["K"]), dt, name="W")
        return [x, w, topi.nn.dense(x, w)]
    if spec.op in ("conv2d", "conv2d_bias_relu"):
        x = te.placeholder((d["N"], d["C"], d["H"], d["W"]), dt, name="X")
        w = te.placeholder((d["K"], d["C"], d["R"], d["S"]), dt, name="W")
        y = topi.nn.conv2d_nchw(x, w, d["stride"], d["pad"], 1)
        if spec.op == "conv2d":
            return [x, w, y]
        bias = te.placeholder((d["K"],), dt, name="bias")
        z = te.compute(y.shape, lambda n, k, h, w_: y[n, k, h, w_] + bias[k], name="bias_add")
        return [x, w, bias, topi.nn.relu(z)]
    if spec.op == "depthwise_conv2d":
        x = te.placeholder((d["N"], d["C"], d["H"], d["W"]), dt, name="X")
        w = te.placeholder((d["C"], 1, d["R"], d["S"]), dt, name="W")
        return [x, w, topi.nn.depthwise_conv2d_nchw(x, w, d["stride"], d["pad"], 1)]
    if spec.op == "softmax":
        x = te.placeholder((d["rows"], d["cols"]), dt, name="X")
        return [x, topi.nn.softmax(x, axis=1)]
    if spec.op == "layer_norm":  # torch.nn.LayerNorm over the last axis (BERT, GPT-2)
        x = te.placeholder((d["rows"], d["cols"]), dt, name="X")
        gamma = te.placeholder((d["cols"],), dt, name="gamma")
        beta = te.placeholder((d["cols"],), dt, name="beta")
        return [x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[1], epsilon=1e-5)]
    raise BadInputError(f"workload {spec}: no TE definition for operator {spec.op!r}")


def prim_func(workload: Workload) -> tirx.PrimFunc:
    """The workload as an unscheduled TIR PrimFunc, ready for MetaSchedule."""
    from tvm import te

    if isinstance(workload, TEWorkload):
        func, shapes = _te_configs()[workload.family]
        return te.create_prim_func(func(*shapes[workload.index]))  # type: ignore[operator]
    return te.create_prim_func(workload_tensors(workload))


def output_shape(spec: WorkloadSpec) -> tuple[int, ...]:
    """Shape of the operator's output."""
    return spec.output_shape


def flops(workload: Workload) -> float:
    """Floating-point operations of one run (a multiply-add counts 2), for GFLOP/s figures."""
    if isinstance(workload, TEWorkload):
        import tvm
        from tvm.s_tir.analysis import estimate_tir_flops

        return float(estimate_tir_flops(tvm.IRModule({"main": prim_func(workload)})))
    d = workload.named_dims
    out = math.prod(output_shape(workload))
    if workload.op in ("matmul", "dense"):
        return 2.0 * out * d["K"]
    if workload.op == "batch_matmul":
        return 2.0 * out * d["K"]
    if workload.op == "conv2d":
        return 2.0 * out * d["C"] * d["R"] * d["S"]
    if workload.op == "conv2d_bias_relu":
        return 2.0 * out * d["C"] * d["R"] * d["S"] + 2.0 * out
    if workload.op == "depthwise_conv2d":
        return 2.0 * out * d["R"] * d["S"]
    if workload.op == "layer_norm":  # mean, variance (sub, square, add), normalise, scale+shift
        return 8.0 * out
    # softmax: max, subtract+exp, sum, divide per element
    return 5.0 * out


def _spec(text: str) -> WorkloadSpec:
    return WorkloadSpec.parse(text)


# Representative shapes, batch 1; conv2d dims are N,C,H,W,K,R,S,stride,pad.
OPERATOR_SUITE: list[WorkloadSpec] = [
    # ResNet-50: stem, bottleneck 1x1/3x3 convs of each stage, the classifier
    _spec("conv2d:1,3,224,224,64,7,7,2,3"),
    _spec("conv2d:1,64,56,56,64,1,1,1,0"),
    _spec("conv2d_bias_relu:1,64,56,56,64,3,3,1,1"),
    _spec("conv2d:1,64,56,56,256,1,1,1,0"),
    _spec("conv2d_bias_relu:1,256,56,56,128,1,1,1,0"),
    _spec("conv2d_bias_relu:1,128,28,28,128,3,3,1,1"),
    _spec("conv2d:1,512,28,28,256,1,1,1,0"),
    _spec("conv2d_bias_relu:1,256,14,14,256,3,3,1,1"),
    _spec("conv2d:1,1024,14,14,512,1,1,1,0"),
    _spec("conv2d_bias_relu:1,512,7,7,512,3,3,1,1"),
    _spec("dense:1,1000,2048"),
    # MobileNetV2: depthwise 3x3 at each resolution, expand and project 1x1 convs
    _spec("depthwise_conv2d:1,32,112,112,3,3,1,1"),
    _spec("depthwise_conv2d:1,96,112,112,3,3,2,1"),
    _spec("depthwise_conv2d:1,144,56,56,3,3,1,1"),
    _spec("depthwise_conv2d:1,192,28,28,3,3,1,1"),
    _spec("depthwise_conv2d:1,384,14,14,3,3,1,1"),
    _spec("depthwise_conv2d:1,960,7,7,3,3,1,1"),
    _spec("conv2d_bias_relu:1,16,112,112,96,1,1,1,0"),
    _spec("conv2d:1,144,56,56,24,1,1,1,0"),
    _spec("conv2d:1,320,7,7,1280,1,1,1,0"),
    # BERT-base encoder layer, sequence 128: projections, FFN, attention
    _spec("dense:128,768,768"),
    _spec("dense:128,3072,768"),
    _spec("dense:128,768,3072"),
    _spec("batch_matmul:12,128,128,64"),
    _spec("batch_matmul:12,128,64,128"),
    _spec("softmax:1536,128"),
    # plain GEMMs
    _spec("matmul:512,512,512"),
    _spec("matmul:1024,1024,1024"),
]
