"""The analytical latency model: kernel records x GPUs -> seconds, vectorized with numpy.

Every quantity is an array of shape [n_kernels, n_gpus]; a candidate's latency is
the sum of its kernels. The equations are documented in docs/simulator.md. What a
spec sheet does not say is a per-architecture parameter (`ARCH_PARAMS`), chosen
from published microbenchmark studies and NVIDIA's tuning guides, never fitted to
the real measurements the benchmark compares against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agent.devices.sim.compiler_facts import FactArrays
from agent.devices.sim.tir_analysis import KernelRecord
from schemas.gpu import INLINE_ECC_MEMORY, GpuSpec, UnitState

COLUMNS = KernelRecord.columns()
COL = {name: i for i, name in enumerate(COLUMNS)}


@dataclass(frozen=True)
class ArchParams:
    """Behaviour of one GPU generation that spec sheets do not show."""

    l1_caches_global: float  # share of intra-block reuse of global loads that L1 catches
    fma_latency: float  # cycles from issue to a dependent FP instruction
    smem_latency: float  # cycles of a shared-memory load
    dram_latency_ns: float  # loaded DRAM latency
    l2_bytes_per_clk_per_sm: float  # L2 -> SM bandwidth
    issue_efficiency: float  # best fraction of the FP peak a real instruction mix reaches
    dram_efficiency: float  # best fraction of the DRAM peak a streaming kernel reaches
    launch_us: float  # launch + first-wave ramp seen by a timer around the kernel
    sync_cycles: float  # one __syncthreads
    noise: float  # relative run-to-run spread (uniform half-width)
    clock_factor: float  # sustained clock under load / rated boost clock (GPU Boost behaviour)


# Sources: Jia et al., "Dissecting the NVIDIA Volta/Turing GPU architecture via
# microbenchmarking" (2018/2019) for latencies; Mei & Chu, "Dissecting GPU memory
# hierarchy through microbenchmarking" (2016) for Kepler/Maxwell; NVIDIA's Kepler,
# Maxwell, Pascal, Volta and Ampere tuning guides for L1 caching of global loads.
ARCH_PARAMS: dict[str, ArchParams] = {
    "kepler": ArchParams(0.0, 9.0, 47.0, 600.0, 16.0, 0.66, 0.75, 5.0, 40.0, 0.02, 1.0),
    "maxwell": ArchParams(0.0, 6.0, 28.0, 550.0, 24.0, 0.8, 0.80, 4.0, 30.0, 0.02, 1.0),
    "pascal": ArchParams(0.3, 6.0, 24.0, 500.0, 32.0, 0.88, 0.82, 4.0, 28.0, 0.02, 1.08),
    "volta": ArchParams(1.0, 4.0, 19.0, 450.0, 64.0, 0.88, 0.88, 3.5, 20.0, 0.02, 1.0),
    "turing": ArchParams(1.0, 4.0, 22.0, 480.0, 64.0, 0.88, 0.85, 3.5, 20.0, 0.02, 1.05),
    "ampere": ArchParams(1.0, 4.0, 23.0, 470.0, 64.0, 0.9, 0.88, 3.0, 20.0, 0.02, 1.0),
    "ada": ArchParams(1.0, 4.0, 23.0, 460.0, 64.0, 0.9, 0.86, 3.0, 20.0, 0.02, 1.0),
    "hopper": ArchParams(1.0, 4.0, 23.0, 450.0, 96.0, 0.9, 0.9, 3.0, 20.0, 0.02, 1.0),
}
# Embedded modules share LPDDR with the CPU and launch through a slower driver path.
EMBEDDED_LAUNCH_US = 12.0
EMBEDDED_DRAM_EFFICIENCY = 0.7
EMBEDDED_NOISE = 0.04
# Jetson modules under their default power mode (nvpmodel, DVFS governor) do not hold
# the maximum GPU clock the datasheet names; the desktop boost overshoot does not apply.
EMBEDDED_CLOCK_FACTOR = 0.75
MAX_PEAK_SHARE = 0.95  # no kernel reaches more of the datasheet FP peak
MAX_DRAM_EFFICIENCY = 0.9  # no streaming kernel reaches more of the unit's DRAM bandwidth
# Inline ECC (GDDR, LPDDR) ECC bits are kept in a carved-out region of
# 1/16 of the memory (NVIDIA Tesla V100 whitepaper: "6.25% of the overall GDDR5 is
# reserved for ECC bits" on the K40; HBM2's sideband ECC costs no bandwidth): the ECC
# bytes travel on the same bus, so at least that share of the bandwidth is lost.
ECC_INLINE_COST = 0.0625
# Same-SKU GPUs differ: Sinha et al., "Not All GPUs Are Created Equal" (SC'22) measured
# 8 % average performance variation among identical V100s (power management and
# manufacturing variability). A unit's seeded clock spread: it holds between 92 % and
# 100 % of its stated (or default) sustained clock, uniformly; never above it.
UNIT_CLOCK_SPREAD = 0.08
MAX_REGISTERS = 255
BASE_REGISTERS = 18  # indices, pointers, loop counters beside the local buffers
SMEM_GRANULE = 256  # bytes: shared memory is allocated per block in these units
L2_USABLE = 0.75  # share of the L2 a kernel's working set can keep


@dataclass(frozen=True)
class GpuParams:
    """The catalog as arrays of shape [1, n_gpus], ready to broadcast against kernels."""

    keys: tuple[str, ...]
    sms: np.ndarray
    clock_hz: np.ndarray
    cores_per_sm: np.ndarray
    fp32_flops: np.ndarray
    fp16_flops: np.ndarray
    bandwidth: np.ndarray
    l2_bytes: np.ndarray
    smem_sm: np.ndarray
    smem_block: np.ndarray
    regs_sm: np.ndarray
    max_threads_block: np.ndarray
    max_blocks_sm: np.ndarray
    max_warps_sm: np.ndarray
    schedulers: np.ndarray
    l1_caches_global: np.ndarray
    fma_latency: np.ndarray
    smem_latency: np.ndarray
    dram_latency_s: np.ndarray
    l2_bandwidth: np.ndarray
    issue_efficiency: np.ndarray
    dram_efficiency: np.ndarray
    launch_s: np.ndarray
    sync_cycles: np.ndarray
    noise: np.ndarray
    key_hashes: np.ndarray

    @classmethod
    def from_specs(cls, specs: Sequence[GpuSpec]) -> GpuParams:
        def row(values: Sequence[float]) -> np.ndarray:
            return np.asarray(values, dtype=np.float64)[None, :]

        arch = [ARCH_PARAMS[s.architecture] for s in specs]
        units = [unit_behaviour(s) for s in specs]
        clock = row([u.clock_hz for u in units])
        sms = row([s.sms for s in specs])
        return cls(
            keys=tuple(s.key for s in specs),
            sms=sms,
            clock_hz=clock,
            cores_per_sm=row([s.fp32_cores_per_sm for s in specs]),
            # the unit's own peak: a factory overclock raises it above the reference sheet
            fp32_flops=row([u.fp32_flops for u in units]),
            fp16_flops=row([u.fp16_flops for u in units]),
            bandwidth=row([u.bandwidth for u in units]),
            l2_bytes=row([s.l2_cache_kb * 1024 for s in specs]),
            smem_sm=row([s.shared_mem_per_sm_kb * 1024 for s in specs]),
            smem_block=row([s.shared_mem_per_block_kb * 1024 for s in specs]),
            regs_sm=row([s.registers_per_sm for s in specs]),
            max_threads_block=row([s.max_threads_per_block for s in specs]),
            max_blocks_sm=row([s.max_blocks_per_sm for s in specs]),
            max_warps_sm=row([s.max_warps_per_sm for s in specs]),
            schedulers=row([s.warp_schedulers_per_sm for s in specs]),
            l1_caches_global=row([a.l1_caches_global for a in arch]),
            fma_latency=row([a.fma_latency for a in arch]),
            smem_latency=row([a.smem_latency for a in arch]),
            dram_latency_s=row([a.dram_latency_ns * 1e-9 for a in arch]),
            l2_bandwidth=row([u.l2_bytes_per_clk_per_sm for u in units]) * sms * clock,
            issue_efficiency=row([u.issue_efficiency for u in units]),
            dram_efficiency=row([u.dram_efficiency for u in units]),
            launch_s=row([u.launch_s for u in units]),
            sync_cycles=row([a.sync_cycles for a in arch]),
            noise=row([u.noise for u in units]),
            key_hashes=np.asarray([_fnv1a(s.key) for s in specs], dtype=np.uint64)[None, :],
        )


@dataclass(frozen=True)
class UnitBehaviour:
    """One GPU's effective parameters: its architecture's defaults, then its unit state."""

    clock_hz: float
    fp32_flops: float  # the unit's own peak: a factory overclock raises it above the sheet
    fp16_flops: float
    bandwidth: float  # bytes/s the unit's memory can deliver (ECC, memory clock)
    issue_efficiency: float
    dram_efficiency: float
    l2_bytes_per_clk_per_sm: float
    launch_s: float
    noise: float


def unit_spread(seed: int) -> float:
    """The seeded clock spread of one unit: a factor in (1 - UNIT_CLOCK_SPREAD, 1]."""
    h = int(_splitmix(np.asarray([seed], dtype=np.uint64))[0])
    return 1.0 - UNIT_CLOCK_SPREAD * ((h >> 11) / float(1 << 53))


def unit_behaviour(spec: GpuSpec) -> UnitBehaviour:
    """The architecture's parameters for this GPU, modified by its unit state (if any).

    Without a unit state the result is the model's default behaviour (boost clock x the
    architecture's sustained factor, embedded modules at their default power mode).
    """
    a = ARCH_PARAMS[spec.architecture]
    embedded = spec.form_factor == "embedded"
    unit = spec.unit or UnitState()
    default_clock = spec.boost_clock_mhz * (EMBEDDED_CLOCK_FACTOR if embedded else a.clock_factor)
    clock_mhz = unit.sustained_clock_mhz or default_clock
    if unit.spread_seed is not None:
        clock_mhz *= unit_spread(unit.spread_seed)
    # a factory overclock above the rated boost raises the unit's own peak
    peak_scale = max(1.0, clock_mhz / spec.boost_clock_mhz)
    inline_ecc = spec.memory_type.upper().startswith(INLINE_ECC_MEMORY)
    ecc_scale = 1.0 - ECC_INLINE_COST if (unit.ecc and inline_ecc) else 1.0
    dram_eff = min(a.dram_efficiency, EMBEDDED_DRAM_EFFICIENCY) if embedded else a.dram_efficiency
    launch_us = unit.launch_us or (EMBEDDED_LAUNCH_US if embedded else a.launch_us)
    return UnitBehaviour(
        clock_hz=clock_mhz * 1e6,
        fp32_flops=spec.fp32_gflops * 1e9 * peak_scale,
        fp16_flops=spec.fp16_gflops * 1e9 * peak_scale,
        bandwidth=spec.mem_bandwidth_gbs * 1e9 * unit.memory_clock_factor * ecc_scale,
        # never above 95 % of the unit's FP peak, whatever the sustained clock
        issue_efficiency=min(
            a.issue_efficiency, MAX_PEAK_SHARE * peak_scale * spec.boost_clock_mhz / clock_mhz
        ),
        dram_efficiency=min(MAX_DRAM_EFFICIENCY, dram_eff * unit.memory_efficiency),
        l2_bytes_per_clk_per_sm=a.l2_bytes_per_clk_per_sm * unit.l2_efficiency,
        launch_s=launch_us * 1e-6,
        noise=EMBEDDED_NOISE if embedded else a.noise,
    )


def _fnv1a(text: str) -> int:
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def kernel_matrix(candidates: Sequence[Sequence[KernelRecord]]) -> tuple[np.ndarray, np.ndarray]:
    """Stack the kernels of many candidates: ([n_kernels, n_columns], owner candidate index)."""
    rows: list[list[float]] = []
    owner: list[int] = []
    for i, kernels in enumerate(candidates):
        for kernel in kernels:
            rows.append(kernel.as_row())
            owner.append(i)
    matrix = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(COLUMNS))
    return matrix, np.asarray(owner, dtype=np.int64)


@dataclass
class KernelTimes:
    """The model's intermediate terms, [n_kernels, n_gpus] each (for docs, tests, debugging)."""

    valid: np.ndarray
    registers: np.ndarray
    blocks_per_sm: np.ndarray
    occupancy: np.ndarray
    waves: np.ndarray
    t_compute: np.ndarray
    t_shared: np.ndarray
    t_dram: np.ndarray
    t_l2: np.ndarray
    t_latency: np.ndarray
    t_launch: np.ndarray
    seconds: np.ndarray


def occupancy(
    threads: np.ndarray,
    registers: np.ndarray,
    smem_bytes: np.ndarray,
    gpu: GpuParams,
) -> np.ndarray:
    """Resident blocks per SM by the CUDA occupancy rules (warps, registers, shared memory)."""
    warps = np.ceil(threads / 32.0)
    regs_per_warp = np.ceil(registers * 32.0 / 256.0) * 256.0
    by_warps = np.floor(gpu.max_warps_sm / warps)
    by_regs = np.floor(gpu.regs_sm / (regs_per_warp * warps))
    smem_alloc = np.ceil(smem_bytes / SMEM_GRANULE) * SMEM_GRANULE
    with np.errstate(divide="ignore"):
        by_smem = np.where(smem_alloc > 0, np.floor(gpu.smem_sm / smem_alloc), np.inf)
    return np.minimum(np.minimum(gpu.max_blocks_sm, by_warps), np.minimum(by_regs, by_smem))


def kernel_times(
    matrix: np.ndarray, gpu: GpuParams, facts: FactArrays | None = None
) -> KernelTimes:
    """Seconds of every kernel on every GPU (inf where the kernel cannot launch).

    `facts` (ptxas's registers, spills and static shared memory per kernel and GPU,
    `compiler_facts`) replace the estimate wherever they are given; a kernel nvcc
    rejected for a GPU's arch cannot run there.
    """

    def col(name: str) -> np.ndarray:
        return matrix[:, COL[name]][:, None]

    grid, threads = col("grid"), col("threads")
    warps_pb = np.ceil(threads / 32.0)
    regs_raw = col("local_words") + BASE_REGISTERS
    registers = np.minimum(np.ceil(regs_raw / 8.0) * 8.0, MAX_REGISTERS)
    spill_share = np.clip((regs_raw - MAX_REGISTERS) / regs_raw, 0.0, 1.0)
    smem = col("smem_bytes")
    rejected = np.zeros((1, 1), bool)
    if facts is not None:
        known = np.isfinite(facts.registers)
        registers = np.where(known, facts.registers, registers)
        # ptxas's spill traffic as a share of the thread's working set (registers + spills)
        spilled = np.nan_to_num(facts.spill_bytes)
        fact_share = spilled / np.maximum(spilled + 4.0 * facts.registers, 1.0)
        spill_share = np.where(known, np.nan_to_num(fact_share), spill_share)
        smem = np.where(np.isfinite(facts.smem_bytes), facts.smem_bytes, smem)
        rejected = facts.rejected
    blocks_sm = occupancy(threads, registers, smem, gpu)
    valid = (threads <= gpu.max_threads_block) & (smem <= gpu.smem_block) & (blocks_sm >= 1)
    valid = valid & ~rejected
    blocks_sm = np.maximum(blocks_sm, 1.0)

    # waves and the tail: the busiest SM runs `waves` rounds of `resident` blocks
    resident = np.minimum(blocks_sm, np.ceil(grid / gpu.sms))
    waves = np.ceil(grid / (blocks_sm * gpu.sms))
    busy_blocks = waves * resident
    active_warps = resident * warps_pb
    occ = active_warps / gpu.max_warps_sm

    # compute: FP pipe and issue slots, with latency hiding by warps x ILP
    fp16 = col("fp16") > 0
    fp_rate = np.where(fp16, gpu.fp16_flops / gpu.fp32_flops, 1.0)
    fp_instrs = col("fp_instrs") / fp_rate + 4.0 * col("sfu_instrs")
    other = col("int_instrs") + col("gld_instrs") + col("shared_instrs") + col("syncs")
    warp_instrs_fp = busy_blocks * warps_pb * fp_instrs
    warp_instrs_all = busy_blocks * warps_pb * (fp_instrs + other)
    unroll_ilp = np.where(col("unroll") >= 16, 2.0, 1.0)
    ilp = np.minimum(col("ilp") * unroll_ilp, 8.0)
    fp_per_sched = gpu.cores_per_sm / 32.0 / gpu.schedulers
    hiding = np.minimum(1.0, active_warps / gpu.schedulers * ilp / (gpu.fma_latency * fp_per_sched))
    cycles_compute = np.maximum(
        warp_instrs_fp / (gpu.cores_per_sm / 32.0), warp_instrs_all / gpu.schedulers
    ) / (gpu.issue_efficiency * np.maximum(hiding, 1e-3))
    t_compute = cycles_compute / gpu.clock_hz

    # shared memory: one wavefront per clock per SM, conflicts add wavefronts
    t_shared = busy_blocks * warps_pb * col("shared_wavefronts") / gpu.clock_hz

    # global memory: L1 (per architecture) keeps a block's reuse, else every sector goes to L2
    gld_sectors = col("gld_sector_bytes")
    waste = gld_sectors / np.maximum(col("gld_bytes"), 1.0)
    footprint = col("block_footprint_bytes")
    block_reuse = np.minimum(gld_sectors, footprint)
    l2_traffic = (
        gpu.l1_caches_global * block_reuse
        + (1.0 - gpu.l1_caches_global) * gld_sectors
        + col("gst_sector_bytes")
    )
    total_threads = grid * threads
    l2_traffic = l2_traffic + spill_share * col("fp_instrs") * 8.0 * total_threads
    unique = col("unique_bytes")
    l2_traffic = np.maximum(l2_traffic, unique)
    # DRAM: compulsory bytes, plus blocks re-reading what other blocks read when the
    # working set does not fit the L2 (sector waste within a block hits in L2)
    miss = np.clip(1.0 - L2_USABLE * gpu.l2_bytes / np.maximum(unique, 1.0), 0.0, 1.0)
    dram = unique + np.maximum(footprint - unique, 0.0) * miss
    # memory-level parallelism (Little's law): enough bytes in flight to cover the latency?
    bytes_per_request = 32.0 * np.minimum(col("vector_bytes"), 16.0) / np.maximum(waste, 1.0)
    in_flight = np.minimum(grid, blocks_sm * gpu.sms) * warps_pb * 4.0 * bytes_per_request
    mlp = np.clip(in_flight / (gpu.bandwidth * gpu.dram_latency_s), 0.05, 1.0)
    t_dram = dram / (gpu.bandwidth * gpu.dram_efficiency * mlp)
    t_l2 = l2_traffic / (gpu.l2_bandwidth * np.clip(occ * 4.0, 0.25, 1.0))

    # the latency chain of one warp, paid once per wave
    chain_cycles = (
        col("fp_instrs") * gpu.fma_latency / np.maximum(ilp, 1.0)
        + col("shared_instrs") * gpu.smem_latency / np.maximum(ilp, 1.0)
        + col("syncs") * gpu.sync_cycles
    )
    t_latency = waves * chain_cycles / gpu.clock_hz + gpu.dram_latency_s

    terms = np.stack([t_compute, t_shared, t_dram, t_l2, t_latency])
    t_max = terms.max(axis=0)
    overlap_loss = 0.1 + 0.4 * (1.0 - np.clip(occ, 0.0, 1.0))
    seconds = t_max + overlap_loss * (terms.sum(axis=0) - t_max) + gpu.launch_s
    seconds = np.where(valid, seconds, np.inf)
    return KernelTimes(
        valid=valid,
        registers=np.broadcast_to(registers, seconds.shape),
        blocks_per_sm=blocks_sm,
        occupancy=occ,
        waves=waves,
        t_compute=t_compute,
        t_shared=t_shared,
        t_dram=t_dram,
        t_l2=t_l2,
        t_latency=t_latency,
        t_launch=np.broadcast_to(gpu.launch_s, seconds.shape),
        seconds=seconds,
    )


def candidate_latency(
    matrix: np.ndarray,
    owner: np.ndarray,
    n_candidates: int,
    gpu: GpuParams,
    facts: FactArrays | None = None,
) -> np.ndarray:
    """Noise-free seconds, [n_candidates, n_gpus]; inf where a kernel cannot run."""
    out = np.zeros((n_candidates, len(gpu.keys)))
    if matrix.shape[0]:
        np.add.at(out, owner, kernel_times(matrix, gpu, facts).seconds)
    no_kernel = np.bincount(owner, minlength=n_candidates) == 0
    out[no_kernel] = np.inf
    return out


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def noise_factors(candidate_keys: np.ndarray, gpu: GpuParams, repeats: int) -> np.ndarray:
    """Multiplicative noise [n_candidates, n_gpus, repeats], seeded by GPU, candidate, repeat.

    Uniform in 1 +- gpu.noise: a few percent, as the spread of repeated runs on a real GPU.
    """
    keys = np.asarray(candidate_keys, dtype=np.uint64)[:, None, None]
    rep = np.arange(repeats, dtype=np.uint64)[None, None, :]
    with np.errstate(over="ignore"):
        h = _splitmix(keys ^ _splitmix(gpu.key_hashes[:, :, None] + rep * np.uint64(0x632BE5AB)))
    unit = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return 1.0 + gpu.noise[:, :, None] * (2.0 * unit - 1.0)


def simulate(
    matrix: np.ndarray,
    owner: np.ndarray,
    candidate_keys: np.ndarray,
    gpu: GpuParams,
    repeats: int = 3,
    facts: FactArrays | None = None,
) -> np.ndarray:
    """Seconds per run [n_candidates, n_gpus, repeats], with noise; inf marks a failure."""
    base = candidate_latency(matrix, owner, len(candidate_keys), gpu, facts)
    return base[:, :, None] * noise_factors(candidate_keys, gpu, repeats)


def lower_bounds(
    matrix: np.ndarray, owner: np.ndarray, n_candidates: int, gpu: GpuParams
) -> tuple[np.ndarray, np.ndarray]:
    """(FLOP bound, DRAM bound) in seconds [n_candidates, n_gpus]: what no schedule can beat."""

    def col(name: str) -> np.ndarray:
        return matrix[:, COL[name]][:, None]

    peak = np.where(col("fp16") > 0, np.maximum(gpu.fp16_flops, gpu.fp32_flops), gpu.fp32_flops)
    flop = np.zeros((n_candidates, len(gpu.keys)))
    byte = np.zeros_like(flop)
    np.add.at(flop, owner, col("flops") / peak)
    np.add.at(byte, owner, col("unique_bytes") / gpu.bandwidth)
    return flop, byte
