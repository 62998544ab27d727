"""Synthetic fleet data with a known, hardware-dependent ranking (tests, development).

Nothing here is a measurement. Each synthetic program has latent properties
(work, traffic, reuse, parallelism, shared memory, vector width); its
PerStoreFeature-like rows are a fixed random projection of them, a variable
number per candidate. Each synthetic device has spec-sheet values plus hidden
traits a spec sheet does not tell (cache efficiency, launch overhead, achieved
occupancy); its probe latencies reveal those traits. A candidate's latency is a
roofline-style function of both, so devices rank programs differently and how
differently depends on the hardware: similarity is learnable, and the empirical
half of the hardware vector carries information the analytical half lacks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schemas import AnalyticalSpecs, EmpiricalFingerprint, HardwareProfile
from simoe_model.features import FEATURE_DIM
from simoe_model.hardware import hardware_vector
from simoe_model.task_data import DeviceDataset, TaskData

N_LATENT = 6
N_PROBES = 12
PROBE_SUITE = "synthetic-1"


@dataclass(frozen=True)
class SyntheticDevice:
    name: str
    gflops: float
    bandwidth: float
    units: int
    smem_kb: float
    cache_eff: float  # hidden: how much data reuse saves traffic
    launch_us: float  # hidden: fixed overhead per kernel
    occupancy: float  # hidden: fraction of peak parallel slots reached

    def profile(self) -> HardwareProfile:
        """A HardwareProfile whose probes reflect the hidden traits (labelled simulated)."""
        specs = AnalyticalSpecs(
            compute_units=self.units,
            clock_mhz=1500.0,
            fp32_gflops=self.gflops,
            fp16_gflops=self.gflops * 2,
            mem_bandwidth_gbs=self.bandwidth,
            l2_cache_kb=4096.0,
            shared_mem_per_unit_kb=self.smem_kb,
            registers_per_unit=65536,
            max_threads_per_unit=2048,
            max_blocks_per_unit=32,
            warp_size=32,
            compute_capability=7.5,
        )
        probes = {}
        for p in range(N_PROBES):
            latent = _probe_latent(p)
            probes[f"probe{p:02d}"] = float(self.latency(latent[None, :])[0] * 1e6)
        empirical = EmpiricalFingerprint(
            probe_suite_version=PROBE_SUITE,
            probe_latency_us=probes,
            bandwidth_gbs=self.bandwidth * (0.6 + 0.3 * self.cache_eff),
            fma_gflops=self.gflops * self.occupancy,
        )
        return HardwareProfile(
            device_kind="sim",
            device=f"sim:{self.name}",
            name=self.name,
            analytical=specs,
            empirical=empirical,
            simulated=True,
        )

    def latency(self, latent: np.ndarray) -> np.ndarray:
        """Seconds of programs with latent properties [n, N_LATENT] on this device."""
        work, traffic, reuse, parallel, smem, vector = latent.T
        reuse = np.log1p(np.exp(reuse))  # softplus: reuse saves traffic, never adds
        flops = np.exp(work) * 1e6
        bytes_ = np.exp(traffic) * 1e5 / (1 + self.cache_eff * reuse)
        slots = self.units * 64 * self.occupancy
        par = np.exp(parallel) * 32
        utilization = np.minimum(1.0, par / slots) * (0.4 + 0.6 * np.clip(vector, 0, 1))
        smem_need = np.exp(smem) * 4
        spill = np.maximum(1.0, smem_need / self.smem_kb) ** 1.5
        compute_s = flops / (self.gflops * 1e9 * utilization) * spill
        memory_s = bytes_ / (self.bandwidth * 1e9)
        waves = np.ceil(par / slots)  # partial last wave wastes the device
        return (
            np.maximum(compute_s, memory_s) * (1 + 0.2 * (waves - par / slots))
            + 0.3 * np.minimum(compute_s, memory_s)
            + self.launch_us * 1e-6 * (1 + 0.1 * reuse)
        )


def _probe_latent(p: int) -> np.ndarray:
    rng = np.random.default_rng(10_000 + p)
    return rng.uniform(0, 1, N_LATENT) * np.array([3, 3, 4, 4, 2.5, 1])


def make_devices(n: int, seed: int = 0) -> list[SyntheticDevice]:
    """n devices spread over a few generations (scale) and families (hidden traits)."""
    rng = np.random.default_rng(seed)
    devices = []
    for i in range(n):
        scale = float(np.exp(rng.uniform(np.log(0.05), np.log(4.0))))
        devices.append(
            SyntheticDevice(
                name=f"gpu{i:02d}",
                gflops=8000 * scale * float(rng.uniform(0.7, 1.4)),
                bandwidth=400 * scale**0.7 * float(np.exp(rng.uniform(-1.2, 1.2))),
                units=max(2, int(40 * scale**0.8 * rng.uniform(0.7, 1.3))),
                smem_kb=float(rng.choice([48.0, 64.0, 96.0, 164.0])),
                cache_eff=float(rng.uniform(0.0, 5.0)),
                launch_us=float(np.exp(rng.uniform(0.5, 3.5))),
                occupancy=float(rng.uniform(0.3, 1.0)),
            )
        )
    return devices


@dataclass(frozen=True)
class SyntheticTask:
    name: str
    latent: np.ndarray  # [n, N_LATENT]
    features: list[np.ndarray]
    ids: list[str]


def make_tasks(n_tasks: int, per_task: int, seed: int = 0) -> list[SyntheticTask]:
    """Tasks of candidates; features are a fixed projection of the latent properties."""
    projection = np.random.default_rng(1234).normal(size=(N_LATENT + 1, FEATURE_DIM))
    rng = np.random.default_rng(seed)
    tasks = []
    for t in range(n_tasks):
        center = rng.uniform(0, 1, N_LATENT) * np.array([3, 3, 4, 4, 2.5, 1])
        latent = center + rng.normal(
            scale=[0.3, 0.3, 1.0, 1.0, 0.6, 0.3], size=(per_task, N_LATENT)
        )
        latent[:, 5] = np.clip(latent[:, 5], 0, 1)
        features = []
        for c in range(per_task):
            n_rows = int(rng.integers(2, 7))
            role = rng.normal(scale=0.3, size=(n_rows, 1))
            x = np.concatenate([np.repeat(latent[c][None, :], n_rows, 0), role], axis=1)
            rows = np.exp(np.clip(x @ projection * 0.3, -10, 12)).astype(np.float32)
            features.append(rows)
        tasks.append(
            SyntheticTask(
                f"task{seed}_{t:03d}", latent, features, [f"c{c}" for c in range(per_task)]
            )
        )
    return tasks


def device_dataset(
    device: SyntheticDevice, tasks: list[SyntheticTask], noise: float = 0.02, seed: int = 0
) -> DeviceDataset:
    """What `device` would measure on `tasks` (multiplicative noise), as a DeviceDataset."""
    rng = np.random.default_rng(seed)
    data = []
    for task in tasks:
        lat = device.latency(task.latent) * np.exp(rng.normal(scale=noise, size=len(task.ids)))
        data.append(TaskData(task.name, list(task.features), lat, list(task.ids)))
    return DeviceDataset(device.name, hardware_vector(device.profile()), data)
