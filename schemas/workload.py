"""Workload specs: one operator instance, written `op:d1,d2,...` on the command line."""

from __future__ import annotations

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
}
# Dimensions that may be zero (everything else must be positive).
ZERO_ALLOWED = {"pad"}

Operator = Literal[
    "matmul", "batch_matmul", "dense", "conv2d", "conv2d_bias_relu", "depthwise_conv2d", "softmax"
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
        return self

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
