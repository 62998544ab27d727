"""The hardware vector h of a device: analytical specs plus the empirical residual.

Layout (fixed length `HARDWARE_DIM`, so one encoder serves every device):

- `ANALYTICAL_FIELDS`, log-scaled (compute capability linear);
- the measured bandwidth and FMA rate against the spec peaks, as log ratios;
- `MAX_PROBES` probe slots, probes in name order of the suite: the residual
  log(probe latency) minus log(what the specs predict), zero where a slot is empty.

Why a residual: the analytical half already says how fast the device is on
paper; the empirical half should carry only what the spec sheet does not tell
(cache behaviour, launch overhead, achieved occupancy). The fingerprint does not
carry each probe's FLOPs and bytes, so the spec prediction is a per-device speed
estimate, the geometric mean of peak FP32 rate and peak bandwidth. What remains
of the spec scale is removed by the normalization the model fits on its
training devices (simoe_model.model.Normalizer), saved with the model.
"""

from __future__ import annotations

import math

import numpy as np

from schemas import AnalyticalSpecs, HardwareProfile

ANALYTICAL_FIELDS: tuple[str, ...] = (
    "compute_units",
    "clock_mhz",
    "fp32_gflops",
    "fp16_gflops",
    "mem_bandwidth_gbs",
    "l2_cache_kb",
    "shared_mem_per_unit_kb",
    "registers_per_unit",
    "max_threads_per_unit",
    "max_blocks_per_unit",
    "warp_size",
    "compute_capability",
)
N_ANALYTICAL = len(ANALYTICAL_FIELDS)
N_MEASURED_RATES = 2  # bandwidth, FMA throughput
MAX_PROBES = 24
HARDWARE_DIM = N_ANALYTICAL + N_MEASURED_RATES + MAX_PROBES

# Index ranges of the two halves, used by the ablations (analytical-only, empirical-only).
ANALYTICAL_SLICE = slice(0, N_ANALYTICAL)
EMPIRICAL_SLICE = slice(N_ANALYTICAL, HARDWARE_DIM)


def analytical_vector(profile: HardwareProfile) -> np.ndarray:
    """Spec-sheet values, log-scaled so that 2x faster is the same step at any scale."""
    return analytical_values(profile.analytical)


def analytical_values(specs: AnalyticalSpecs) -> np.ndarray:
    """`analytical_vector` of a spec sheet alone (a real GPU known by its specs)."""
    values = []
    for field in ANALYTICAL_FIELDS:
        value = float(getattr(specs, field))
        values.append(value if field == "compute_capability" else math.log(value))
    return np.asarray(values, dtype=np.float32)


def spec_speed_log(profile: HardwareProfile) -> float:
    """log of the spec-predicted speed scale: geometric mean of peak FP32 and bandwidth."""
    specs = profile.analytical
    return 0.5 * (math.log(specs.fp32_gflops) + math.log(specs.mem_bandwidth_gbs))


def empirical_vector(profile: HardwareProfile) -> np.ndarray:
    """Measured rates and probe latencies as residuals against the specs."""
    specs, emp = profile.analytical, profile.empirical
    out = np.zeros(N_MEASURED_RATES + MAX_PROBES, dtype=np.float32)
    out[0] = math.log(emp.bandwidth_gbs / specs.mem_bandwidth_gbs)
    out[1] = math.log(emp.fma_gflops / specs.fp32_gflops)
    speed = spec_speed_log(profile)
    for slot, name in enumerate(sorted(emp.probe_latency_us)[:MAX_PROBES]):
        # latency x speed: a device that is k times faster on paper and k times faster
        # on the probe gets the same residual.
        out[N_MEASURED_RATES + slot] = math.log(emp.probe_latency_us[name]) + speed
    return out


def hardware_vector(profile: HardwareProfile) -> np.ndarray:
    """The device's hybrid hardware vector, float32 of length HARDWARE_DIM."""
    return np.concatenate([analytical_vector(profile), empirical_vector(profile)])


def kernel_hardware_vector(specs: AnalyticalSpecs, probe_values: np.ndarray) -> np.ndarray:
    """h of a real GPU for parameter-space kernels: its spec sheet and its probe values.

    The same layout as `hardware_vector`, so one model class serves both kinds of
    program: the analytical half, then the two measured-rate slots (zero: kernel data has
    no streaming or FMA measurement), then the probe slots, here the centered log times
    of the kernel probe set (`agent.kernels.probes`).
    """
    probes = np.asarray(probe_values, dtype=np.float32).reshape(-1)
    if len(probes) > MAX_PROBES:
        raise ValueError(f"{len(probes)} probe values, the vector has {MAX_PROBES} slots")
    out = np.zeros(HARDWARE_DIM, dtype=np.float32)
    out[ANALYTICAL_SLICE] = analytical_values(specs)
    start = N_ANALYTICAL + N_MEASURED_RATES
    out[start : start + len(probes)] = probes
    return out
