"""GPU spec sheets: one entry of the simulated fleet's catalog, or a user's own spec file."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from schemas.hardware import AnalyticalSpecs

Architecture = Literal["kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper"]
FormFactor = Literal["datacenter", "desktop", "embedded"]


INLINE_ECC_MEMORY = ("GDDR", "LPDDR")  # ECC bits carved out of the data path (not HBM)


class UnitState(BaseModel):
    """One physical unit's own state, which no spec sheet of its model lists.

    Two units of one model share the spec sheet and differ here: how fast they really
    clock under their power limit and cooling, whether ECC is on, how well their memory
    and L2 perform, the driver's launch overhead, and a seeded unit-to-unit spread. Where
    a public source says a unit has other hardware than its model's sheet (a MIG slice, a
    Jetson power mode that gates TPCs, a board with another memory bus), `sms`, `l2_cache_kb`
    and `mem_bandwidth_gbs` state it; the unit's `GpuSpec` then presents that hardware (its
    FP peaks scale with the SM count), as the CUDA runtime and NVML report it on the unit.
    Every field is optional: an empty state is the model's default behaviour. `source`
    names where the stated figures come from.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    sustained_clock_mhz: PositiveFloat | None = Field(
        None, description="GPU clock held under sustained load (power limit, cooling, mode)"
    )
    power_limit_w: PositiveFloat | None = Field(None, description="board power limit")
    power_mode: str | None = Field(None, description="e.g. a Jetson nvpmodel mode")
    memory_clock_factor: float = Field(
        1.0, gt=0.2, le=1.3, description="memory clock / datasheet (EMC caps, memory OC)"
    )
    ecc: bool | None = Field(None, description="ECC on: inline ECC (GDDR, LPDDR) costs bandwidth")
    memory_efficiency: float = Field(
        1.0, gt=0.3, le=1.2, description="scales the architecture's DRAM efficiency"
    )
    l2_efficiency: float = Field(1.0, gt=0.3, le=1.2, description="scales L2 bandwidth")
    launch_us: PositiveFloat | None = Field(None, description="driver launch overhead")
    spread_seed: int | None = Field(
        None, ge=0, description="seed of this unit's clock spread among units of its model"
    )
    sms: PositiveInt | None = Field(
        None, description="SMs this unit has (a MIG compute slice, TPCs a power mode gates off)"
    )
    l2_cache_kb: PositiveFloat | None = Field(
        None, description="L2 this unit has (MIG memory slices, a board's narrower bus)"
    )
    mem_bandwidth_gbs: PositiveFloat | None = Field(
        None, description="DRAM bandwidth of this unit (MIG memory slices, bus width, GDDR6X)"
    )
    source: str = Field("", description="public sources of the stated figures")


class GpuSpec(BaseModel):
    """What NVIDIA's datasheets, whitepapers and the CUDA occupancy table say about one GPU.

    Only public spec-sheet numbers live here; behaviour a spec sheet does not show
    (L1 caching of global loads, instruction latencies, ...) is a per-architecture
    parameter of the latency model, keyed by `architecture`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="marketing name, e.g. 'Tesla T4'")
    key: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]*$", description="catalog key, e.g. 't4'")
    aliases: list[str] = Field(default_factory=list, description="other names for `sim:<name>`")
    architecture: Architecture
    form_factor: FormFactor
    compute_capability: float = Field(ge=3.0, le=10.0)
    sms: PositiveInt = Field(description="streaming multiprocessors")
    boost_clock_mhz: PositiveFloat
    fp32_gflops: PositiveFloat = Field(description="peak FP32, FMA = 2 FLOPs")
    fp16_gflops: PositiveFloat = Field(description="peak FP16 without tensor cores")
    mem_bandwidth_gbs: PositiveFloat
    memory_type: str = Field(min_length=1, description="GDDR5, HBM2, LPDDR4, ...")
    l2_cache_kb: PositiveFloat
    shared_mem_per_sm_kb: PositiveFloat
    shared_mem_per_block_kb: PositiveFloat = Field(description="static limit a kernel may use")
    registers_per_sm: PositiveInt = Field(description="32-bit registers per SM")
    max_registers_per_thread: PositiveInt = 255
    max_threads_per_sm: PositiveInt
    max_threads_per_block: PositiveInt = 1024
    max_blocks_per_sm: PositiveInt
    max_warps_per_sm: PositiveInt
    warp_schedulers_per_sm: PositiveInt
    warp_size: PositiveInt = 32
    source: str = Field(min_length=8, description="the public documents the numbers come from")
    model: str | None = Field(
        None, description="for a unit: the catalog key of its model (the spec sheet it shares)"
    )
    unit: UnitState | None = Field(None, description="this unit's own state, if stated")

    @model_validator(mode="before")
    @classmethod
    def _unit_hardware(cls, data: Any) -> Any:
        """A unit's stated SM count, L2 and bandwidth replace its model's sheet's figures.

        The FP peaks scale with the SM count (peak = 2 x SMs x lanes x clock). Applying it
        again changes nothing, so a dumped unit validates to itself."""
        if not isinstance(data, dict) or not data.get("unit"):
            return data
        unit = data["unit"]
        state = unit.model_dump() if isinstance(unit, UnitState) else unit
        if not isinstance(state, dict):
            return data
        data = dict(data)
        sms, sheet_sms = state.get("sms"), data.get("sms")
        if isinstance(sms, int) and isinstance(sheet_sms, int) and sms != sheet_sms:
            if not 0 < sms <= sheet_sms:
                raise ValueError(f"unit.sms: {sms} must be between 1 and the model's {sheet_sms}")
            for peak in ("fp32_gflops", "fp16_gflops"):
                if isinstance(data.get(peak), (int, float)):
                    data[peak] = data[peak] * sms / sheet_sms
            data["sms"] = sms
        for name in ("l2_cache_kb", "mem_bandwidth_gbs"):
            if state.get(name) is not None:
                data[name] = state[name]
        return data

    @property
    def hardware_overrides(self) -> dict[str, float]:
        """The hardware this unit states beside its model's sheet (empty for most units)."""
        if self.unit is None:
            return {}
        stated = {n: getattr(self.unit, n) for n in ("sms", "l2_cache_kb", "mem_bandwidth_gbs")}
        return {n: v for n, v in stated.items() if v is not None}

    @model_validator(mode="after")
    def _consistent(self) -> GpuSpec:
        if self.max_warps_per_sm * self.warp_size != self.max_threads_per_sm:
            raise ValueError("max_warps_per_sm * warp_size must equal max_threads_per_sm")
        if self.shared_mem_per_block_kb > self.shared_mem_per_sm_kb:
            raise ValueError("shared_mem_per_block_kb exceeds shared_mem_per_sm_kb")
        if self.max_threads_per_block > self.max_threads_per_sm:
            raise ValueError("max_threads_per_block exceeds max_threads_per_sm")
        cores_per_sm = self.fp32_cores_per_sm
        if not 16 <= cores_per_sm <= 256:
            raise ValueError(
                f"fp32_gflops implies {cores_per_sm:.0f} FP32 lanes per SM "
                "(expected 16..256): check fp32_gflops, sms and boost_clock_mhz"
            )
        return self

    @property
    def fp32_cores_per_sm(self) -> float:
        """FP32 lanes per SM implied by the peak: GFLOPS / (2 * SMs * GHz)."""
        return self.fp32_gflops / (2.0 * self.sms * self.boost_clock_mhz / 1000.0)

    def analytical_specs(self) -> AnalyticalSpecs:
        """The spec-sheet half of a hardware profile."""
        return AnalyticalSpecs(
            compute_units=self.sms,
            clock_mhz=self.boost_clock_mhz,
            fp32_gflops=self.fp32_gflops,
            fp16_gflops=self.fp16_gflops,
            mem_bandwidth_gbs=self.mem_bandwidth_gbs,
            l2_cache_kb=self.l2_cache_kb,
            shared_mem_per_unit_kb=self.shared_mem_per_sm_kb,
            registers_per_unit=self.registers_per_sm,
            max_threads_per_unit=self.max_threads_per_sm,
            max_blocks_per_unit=self.max_blocks_per_sm,
            warp_size=self.warp_size,
            compute_capability=self.compute_capability,
        )

    @property
    def cuda_arch(self) -> str:
        """`sm_XY` for TVM's cuda target."""
        major, minor = divmod(round(self.compute_capability * 10), 10)
        return f"sm_{major}{minor}"
