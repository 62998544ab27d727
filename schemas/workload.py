"""Workload specs: one operator instance, written `op:d1,d2,...` on the command line."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.errors import BadInputError

# The dimensions each operator takes, in the order they are written.
OPERATOR_DIMS: dict[str, tuple[str, ...]] = {
    "matmul": ("M", "N", "K"),
    "batch_matmul": ("B", "M", "N", "K"),
    "dense": ("M", "N", "K"),
    "conv2d": ("N", "C", "H", "W", "K", "R", "S", "stride", "pad"),
    "conv2d_bias_relu": ("N", "C", "H", "W", "K", "R", "S", "stride", "pad"),
    "depthwise_conv2d": ("N", "C", "H", "W", "R", "S", "stride", "pad"),
    "softmax": ("rows", "cols"),
    "layer_norm": ("rows", "cols"),  # normalised over cols, with a scale and a shift per col
}
# Dimensions that may be zero (everything else must be positive).
ZERO_ALLOWED = {"pad"}
DTYPE_BYTES = {"float32": 4, "float16": 2}
# No single device holds more than this: the largest GPUs have 141-192 GB (H200, B200,
# MI300X). A workload whose buffers exceed it is refused when parsed; a device that knows
# its own memory refuses smaller ones too (the tuner's `check_fits`).
MAX_WORKLOAD_BYTES = 256 * 2**30

Operator = Literal[
    "matmul",
    "batch_matmul",
    "dense",
    "conv2d",
    "conv2d_bias_relu",
    "depthwise_conv2d",
    "softmax",
    "layer_norm",
]


class WorkloadSpec(BaseModel):
    """One operator with concrete shapes, e.g. `matmul:512,512,512` (M, N, K)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: Operator
    dims: tuple[int, ...] = Field(description="the operator's dimensions, see OPERATOR_DIMS")
    dtype: Literal["float32", "float16"] = "float32"

    @field_validator("dims")
    @classmethod
    def _positive(cls, dims: tuple[int, ...]) -> tuple[int, ...]:
        if any(d < 0 for d in dims):
            raise ValueError("dimensions must not be negative")
        return dims

    @model_validator(mode="after")
    def _arity(self) -> WorkloadSpec:
        names = OPERATOR_DIMS[self.op]
        if len(self.dims) != len(names):
            raise ValueError(
                f"{self.op} takes {len(names)} dimensions ({','.join(names)}), got {len(self.dims)}"
            )
        for name, value in zip(names, self.dims, strict=True):
            if value == 0 and name not in ZERO_ALLOWED:
                raise ValueError(f"{self.op} dimension {name} must be positive")
        if any(n <= 0 for n in self.output_shape):
            raise ValueError("the kernel is larger than the padded input")
        if self.buffer_bytes > MAX_WORKLOAD_BYTES:
            raise ValueError(
                f"its buffers need {self.buffer_bytes / 2**30:.3g} GiB, more than any device "
                f"holds (limit {MAX_WORKLOAD_BYTES // 2**30} GiB); use smaller dimensions"
            )
        return self

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Shape of the operator's output."""
        d = self.named_dims
        if self.op in ("matmul", "dense"):
            return (d["M"], d["N"])
        if self.op == "batch_matmul":
            return (d["B"], d["M"], d["N"])
        if self.op in ("softmax", "layer_norm"):
            return (d["rows"], d["cols"])
        oh = (d["H"] + 2 * d["pad"] - d["R"]) // d["stride"] + 1
        ow = (d["W"] + 2 * d["pad"] - d["S"]) // d["stride"] + 1
        channels = d["C"] if self.op == "depthwise_conv2d" else d["K"]
        return (d["N"], channels, oh, ow)

    @property
    def buffer_shapes(self) -> list[tuple[int, ...]]:
        """Every buffer the kernel reads or writes: its inputs, then its output."""
        d = self.named_dims
        inputs: list[tuple[int, ...]]
        if self.op == "matmul":
            inputs = [(d["M"], d["K"]), (d["K"], d["N"])]
        elif self.op == "batch_matmul":
            inputs = [(d["B"], d["M"], d["K"]), (d["B"], d["K"], d["N"])]
        elif self.op == "dense":
            inputs = [(d["M"], d["K"]), (d["N"], d["K"])]
        elif self.op == "softmax":
            inputs = [(d["rows"], d["cols"])]
        elif self.op == "layer_norm":
            inputs = [(d["rows"], d["cols"]), (d["cols"],), (d["cols"],)]
        else:
            image = (d["N"], d["C"], d["H"], d["W"])
            if self.op == "depthwise_conv2d":
                inputs = [image, (d["C"], 1, d["R"], d["S"])]
            else:
                inputs = [image, (d["K"], d["C"], d["R"], d["S"])]
            if self.op == "conv2d_bias_relu":
                inputs.append((d["K"],))
        return [*inputs, self.output_shape]

    @property
    def buffer_bytes(self) -> int:
        """Bytes of all its buffers: what a device must hold to run it once."""
        return DTYPE_BYTES[self.dtype] * sum(math.prod(s) for s in self.buffer_shapes)

    @property
    def named_dims(self) -> dict[str, int]:
        return dict(zip(OPERATOR_DIMS[self.op], self.dims, strict=True))

    def __str__(self) -> str:
        text = f"{self.op}:{','.join(map(str, self.dims))}"
        return text if self.dtype == "float32" else f"{text}:{self.dtype}"

    @classmethod
    def parse(cls, text: str) -> WorkloadSpec:
        """Parse `op:d1,d2,...[:dtype]`; a malformed string raises BadInputError."""
        parts = text.strip().split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise BadInputError(
                f"workload {text!r}: expected OP:D1,D2,...[:DTYPE], e.g. matmul:512,512,512"
            )
        op = parts[0]
        if op not in OPERATOR_DIMS:
            known = ", ".join(OPERATOR_DIMS)
            raise BadInputError(f"workload {text!r}: unknown operator {op!r} (known: {known})")
        try:
            dims = tuple(int(d) for d in parts[1].split(","))
        except ValueError:
            raise BadInputError(
                f"workload {text!r}: dimensions must be integers, got {parts[1]!r}"
            ) from None
        try:
            if len(parts) == 3:
                return cls(op=op, dims=dims, dtype=parts[2])
            return cls(op=op, dims=dims)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            err = exc.errors()[0] if hasattr(exc, "errors") else {"loc": (), "msg": str(exc)}
            field = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            raise BadInputError(
                f"workload {text!r}: {field + ': ' if field else ''}{msg}"
            ) from None
