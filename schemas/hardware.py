"""Hardware profiles: the analytical specs and the empirical fingerprint of one device."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

DeviceKind = Literal["cpu", "cuda", "sim"]
TargetKind = Literal["cpu", "gpu"]


class AnalyticalSpecs(BaseModel):
    """What a spec sheet says. GPU terms; a CPU maps onto them (unit = core, warp = SIMD lanes)."""

    model_config = ConfigDict(extra="forbid")

    compute_units: PositiveInt = Field(description="SMs of a GPU, physical cores of a CPU")
    clock_mhz: PositiveFloat = Field(description="boost clock")
    fp32_gflops: PositiveFloat = Field(description="peak FP32 rate (FMA counted as 2 FLOPs)")
    fp16_gflops: PositiveFloat = Field(description="peak FP16 rate without tensor cores")
    mem_bandwidth_gbs: PositiveFloat = Field(description="peak DRAM bandwidth, GB/s")
    l2_cache_kb: PositiveFloat = Field(description="L2 of a GPU, last-level cache of a CPU")
    shared_mem_per_unit_kb: PositiveFloat = Field(description="shared memory per SM, L1d per core")
    registers_per_unit: PositiveInt = Field(description="32-bit registers per SM or core")
    max_threads_per_unit: PositiveInt = Field(description="resident threads per SM; CPU: 1-2")
    max_blocks_per_unit: PositiveInt = Field(description="resident blocks per SM; CPU: 1")
    warp_size: PositiveInt = Field(description="threads per warp; CPU: FP32 SIMD lanes")
    compute_capability: float = Field(ge=0, description="CUDA compute capability; 0 for a CPU")


class EmpiricalFingerprint(BaseModel):
    """What running the probe suite on the device measured."""

    model_config = ConfigDict(extra="forbid")

    probe_suite_version: str
    probe_latency_us: dict[str, PositiveFloat] = Field(
        description="median latency of each probe of the suite, microseconds"
    )
    bandwidth_gbs: PositiveFloat = Field(description="measured streaming bandwidth")
    fma_gflops: PositiveFloat = Field(description="measured FP32 FMA throughput")


class HardwareProfile(BaseModel):
    """A device's hybrid hardware representation, as stored and as sent to the server."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    device_kind: DeviceKind
    device: str = Field(description="the device as requested: cpu, cuda:0, sim:t4")
    name: str = Field(min_length=1, description="the hardware's name, e.g. 'Tesla T4'")
    analytical: AnalyticalSpecs
    empirical: EmpiricalFingerprint
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    simulated: bool = Field(description="True for sim:<gpu>: nothing here was measured on a GPU")

    @model_validator(mode="after")
    def _simulated_iff_sim(self) -> HardwareProfile:
        if self.simulated != (self.device_kind == "sim"):
            raise ValueError("simulated must be true exactly for device_kind 'sim'")
        return self

    @property
    def target_kind(self) -> TargetKind:
        """What TVM compiles for: a simulated GPU is tuned as CUDA, like a real one.

        Records (and so experts) of one target kind say nothing about the other: their
        schedules and the features MetaSchedule extracts from them differ.
        """
        return "cpu" if self.device_kind == "cpu" else "gpu"

    @property
    def profile_id(self) -> str:
        """A stable id of the hardware's content (not of when it was taken)."""
        body = self.model_dump_json(exclude={"created_at"})
        return hashlib.sha256(body.encode()).hexdigest()[:16]
