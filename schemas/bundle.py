"""A measurement bundle for a thin GPU node: its manifest and the rows its runner writes.

The runner on the GPU node reads and writes these as plain JSON (it has no
pydantic); this module is the contract both sides keep, checked on the build host
when a bundle is written and when its results come home.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BUNDLE_FORMAT = "simoe-bundle"
BUNDLE_VERSION = 1

EntryKind = Literal["probe", "default", "candidate"]


class Evaluator(BaseModel):
    """MetaSchedule's evaluator settings, as the cuda device's runner uses them."""

    model_config = ConfigDict(extra="forbid")

    number: int = Field(3, ge=1, description="runs per repeat (grown to min_repeat_ms)")
    repeat: int = Field(1, ge=1, description="timed repeats, one latency each")
    min_repeat_ms: float = Field(20.0, ge=0, description="shortest timed repeat")


class KernelLaunch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernel: str
    grid: list[int] = Field(min_length=3, max_length=3)
    block: list[int] = Field(min_length=3, max_length=3)
    dyn_smem: int = Field(0, ge=0)
    args: list[dict[str, int]]


class BufferSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shape: list[int]
    dtype: str


class BundleEntry(BaseModel):
    """One program to time: its module, its buffers (parameters in order), its launches."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    kind: EntryKind
    group: str = Field(description="the workload spec, or the probe's name")
    module: int = Field(ge=0)
    buffers: list[BufferSpec]
    launches: list[KernelLaunch] = Field(min_length=1)


class BundleModule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str
    sha256: str
    bytes: int
    kernels: int


class Reference(BaseModel):
    """A vendor-library reference of a workload, timed through torch on the GPU node."""

    model_config = ConfigDict(extra="forbid")

    id: str
    group: str
    op: Literal["matmul", "bmm", "conv2d"]
    library: str
    shapes: list[list[int]]
    dtype: str = "float32"
    kwargs: dict[str, Any] = Field(default_factory=dict)


class BundleManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["simoe-bundle"] = BUNDLE_FORMAT
    version: Literal[1] = BUNDLE_VERSION
    bundle_id: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    arch: str = Field(pattern=r"^sm_\d+a?$")
    target: dict[str, Any]
    gpu: str = Field(description="the catalog GPU (or spec file) the code was generated for")
    toolkit: str = Field(description="nvcc's version")
    evaluator: Evaluator
    modules: list[BundleModule]
    entries: list[BundleEntry]
    references: list[Reference] = Field(default_factory=list)
    skipped: dict[str, str] = Field(
        default_factory=dict, description="candidates left out here, with the reason"
    )


class ResultRow(BaseModel):
    """One line of the runner's results.jsonl."""

    model_config = ConfigDict(extra="ignore")

    id: str
    kind: str
    group: str | None = None
    ok: bool
    run_secs: list[float] | None = None
    error: str | None = None
    seconds: float | None = None
    library: str | None = None
