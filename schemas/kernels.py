"""Tunable kernels with a parameter space (Kernel Tuner's search spaces and cache files).

The second kind of program SiMoE ranks (design: "Two kinds of program"): a hand-written
CUDA/OpenCL/HIP kernel whose configurations are values of named parameters (block sizes,
tiling, flags). A `KernelSpace` describes the space; a `KernelGpu` is a real GPU's spec
sheet with the public source of every figure. Validation only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.hardware import AnalyticalSpecs

ParamValue = int | float | str
# Kernel Tuner's default names of the thread-block dimensions (tune_kernel's block_size_names).
DEFAULT_BLOCK_SIZE_NAMES = ("block_size_x", "block_size_y", "block_size_z")


class KernelSpace(BaseModel):
    """A kernel's search space: what the program representation is derived from.

    `params` keeps Kernel Tuner's order (`tune_params_keys`): a configuration is the tuple
    of its values in that order, and its cache key is those values joined by commas.
    `block_size_names` are the parameters that set the thread block (Kernel Tuner's
    `block_size_names`; CLBlast's GEMM uses MDIMC and NDIMC); `grid_div` names, per axis,
    the parameters whose product one block covers (Kernel Tuner's `grid_div_x/y/z`, or a
    T1 description's GridDivX/Y). Both are optional: without them the representation has
    the parameter values only.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kernel_name: str = Field(min_length=1)
    problem_size: list[int] = Field(min_length=1)
    params: dict[str, list[ParamValue]] = Field(min_length=1)
    block_size_names: list[str] = Field(default_factory=lambda: list(DEFAULT_BLOCK_SIZE_NAMES))
    grid_div: dict[Literal["x", "y", "z"], list[str]] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def _values_present(cls, params: dict[str, list[ParamValue]]) -> dict[str, list[ParamValue]]:
        for name, values in params.items():
            if not values:
                raise ValueError(f"parameter {name!r} has no values")
            if len(set(map(str, values))) != len(values):
                raise ValueError(f"parameter {name!r} repeats a value")
        return params

    @model_validator(mode="after")
    def _grid_names_known(self) -> KernelSpace:
        for axis, names in self.grid_div.items():
            unknown = [n for n in names if n not in self.params]
            if unknown:
                raise ValueError(f"grid_div {axis} names unknown parameters {unknown}")
        return self

    @property
    def param_names(self) -> list[str]:
        return list(self.params)

    @property
    def space_id(self) -> str:
        """A stable id of the space: kernel, problem size, parameters and their values, and
        the layout the representation derives from (block-size names, grid divisors)."""
        body = json.dumps(
            [self.kernel_name, self.problem_size, self.params, self.block_size_names,
             self.grid_div],
            sort_keys=True, default=str,
        )  # fmt: skip
        return hashlib.sha256(body.encode()).hexdigest()[:16]


Vendor = Literal["nvidia", "amd"]


class KernelGpu(BaseModel):
    """A real GPU as its spec sheet describes it, for the hardware vector of kernel data.

    `names` are the device names Kernel Tuner writes into cache files (and the file stems
    of a benchmark collection) that mean this GPU. Every figure of `analytical` comes from
    `source`. AMD terms map onto the same fields: CUs as compute units, LDS per CU as
    shared memory, wavefront size as warp size, and `compute_capability` is 0 (no CUDA).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]*$")
    name: str = Field(min_length=1)
    vendor: Vendor
    names: list[str] = Field(min_length=1)
    analytical: AnalyticalSpecs
    source: str = Field(min_length=8)
