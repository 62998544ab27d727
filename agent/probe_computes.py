"""The probe suite's tensor programs: each probe's TE compute and, at a given size, its cost.

A `Variant` is a probe at the size and with the schedule for one target kind. FLOPs and
compulsory DRAM bytes follow from the size, which is what lets the profiler turn the
streaming probe into a bandwidth and the FMA probe into a throughput. The schedules
live in `agent.probe_schedules`, the suite itself in `agent.probes`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import te
from tvm.s_tir import Schedule

F32 = 4  # bytes per float32
F16 = 2


@dataclass(frozen=True)
class Variant:
    """A probe at the size and with the schedule for one target kind.

    Attributes:
        compute: builds the unscheduled PrimFunc.
        schedule: schedules that PrimFunc in place.
        flops: floating-point operations of one run (an FMA counts as 2).
        bytes: compulsory DRAM traffic of one run (inputs read once, outputs written once).
    """

    compute: Callable[[], tvm.tir.PrimFunc]
    schedule: Callable[[Schedule], None]
    flops: float
    bytes: float


# --------------------------------------------------------------------------- computes


def _prim(*tensors: te.Tensor) -> tvm.tir.PrimFunc:
    return te.create_prim_func(list(tensors))


def _elementwise_add(n: int, dtype: str = "float32") -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n,), dtype, name="A")
        b = te.placeholder((n,), dtype, name="B")
        c = te.compute((n,), lambda i: a[i] + b[i], name="C")
        return _prim(a, b, c)

    return compute


def _copy(n: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n,), "float32", name="A")
        c = te.compute((n,), lambda i: a[i], name="C")
        return _prim(a, c)

    return compute


def _strided_copy(n: int, stride: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n * stride,), "float32", name="A")
        c = te.compute((n,), lambda i: a[i * stride], name="C")
        return _prim(a, c)

    return compute


def _column_sum(rows: int, cols: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((rows, cols), "float32", name="A")
        k = te.reduce_axis((0, rows), name="k")
        c = te.compute((cols,), lambda j: te.sum(a[k, j], axis=k), name="C")
        return _prim(a, c)

    return compute


def _transpose(n: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n, n), "float32", name="A")
        c = te.compute((n, n), lambda i, j: a[j, i], name="C")
        return _prim(a, c)

    return compute


def _stencil5(n: int) -> Callable[[], tvm.tir.PrimFunc]:
    """5-point stencil over an (n+2)^2 padded grid: no boundary branches."""

    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n + 2, n + 2), "float32", name="A")
        c = te.compute(
            (n, n),
            lambda i, j: (
                (a[i, j + 1] + a[i + 2, j + 1] + a[i + 1, j] + a[i + 1, j + 2] + a[i + 1, j + 1])
                * 0.2
            ),
            name="C",
        )
        return _prim(a, c)

    return compute


def _matmul(m: int, n: int, k: int, dtype: str = "float32") -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((m, k), dtype, name="A")
        b = te.placeholder((k, n), dtype, name="B")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
        return _prim(a, b, c)

    return compute


def _fma_chain(n: int, steps: int, dtype: str = "float32") -> Callable[[], tvm.tir.PrimFunc]:
    """C[i] = sum_s A[i] * B[s]: `steps` dependent FMAs per element, operands in registers."""

    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n,), dtype, name="A")
        b = te.placeholder((steps,), dtype, name="B")
        s = te.reduce_axis((0, steps), name="s")
        c = te.compute((n,), lambda i: te.sum(a[i] * b[s], axis=s), name="C")
        return _prim(a, b, c)

    return compute


def _exp(n: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((n,), "float32", name="A")
        c = te.compute((n,), lambda i: te.exp(a[i]) * te.sqrt(te.abs(a[i]) + 1.0), name="C")
        return _prim(a, c)

    return compute


def _batch_matmul(batch: int, size: int) -> Callable[[], tvm.tir.PrimFunc]:
    def compute() -> tvm.tir.PrimFunc:
        a = te.placeholder((batch, size, size), "float32", name="A")
        b = te.placeholder((batch, size, size), "float32", name="B")
        r = te.reduce_axis((0, size), name="k")
        c = te.compute(
            (batch, size, size),
            lambda z, i, j: te.sum(a[z, i, r] * b[z, r, j], axis=r),
            name="C",
        )
        return _prim(a, b, c)

    return compute


# --------------------------------------------------------------------------- variants
# Each function returns the probe at one size with one schedule; FLOPs and bytes follow
# from the size.


def add_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_elementwise_add(n), schedule, flops=n, bytes=3 * n * F32)


def copy_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_copy(n), schedule, flops=0, bytes=2 * n * F32)


def strided_variant(n: int, stride: int, schedule: Callable[[Schedule], None]) -> Variant:
    # every strided read brings in its own 32-byte sector / 64-byte line; count the sector
    return Variant(_strided_copy(n, stride), schedule, flops=0, bytes=n * (32 + F32))


def column_sum_variant(rows: int, cols: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(
        _column_sum(rows, cols), schedule, flops=rows * cols, bytes=(rows + 1) * cols * F32
    )


def transpose_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_transpose(n), schedule, flops=0, bytes=2 * n * n * F32)


def stencil_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_stencil5(n), schedule, flops=5 * n * n, bytes=((n + 2) ** 2 + n * n) * F32)


def matmul_variant(
    m: int, n: int, k: int, schedule: Callable[[Schedule], None], dtype: str = "float32"
) -> Variant:
    size = F16 if dtype == "float16" else F32
    return Variant(
        _matmul(m, n, k, dtype),
        schedule,
        flops=2 * m * n * k,
        bytes=(m * k + k * n + m * n) * size,
    )


def fma_variant(n: int, steps: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(_fma_chain(n, steps), schedule, flops=2 * n * steps, bytes=(2 * n + steps) * F32)


def exp_variant(n: int, schedule: Callable[[Schedule], None]) -> Variant:
    # exp, abs, add, sqrt, multiply: counted as 5 operations
    return Variant(_exp(n), schedule, flops=5 * n, bytes=2 * n * F32)


def batch_matmul_variant(batch: int, size: int, schedule: Callable[[Schedule], None]) -> Variant:
    return Variant(
        _batch_matmul(batch, size),
        schedule,
        flops=2 * batch * size**3,
        bytes=3 * batch * size * size * F32,
    )
