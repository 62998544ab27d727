"""The latency model: bounds, occupancy rules, deterministic noise, MetaSchedule plumbing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.devices import get_device
from agent.devices.sim import latency, tir_analysis
from agent.devices.sim.catalog import load_catalog, load_units, lookup

# every model and every unit (a factory-overclocked unit's bound is its own peak)
CATALOG = list(load_catalog().values()) + list(load_units().values())
FLEET = latency.GpuParams.from_specs(CATALOG)


@pytest.fixture(scope="module")
def candidates() -> list:
    """A few dozen real postprocessed CUDA candidates of a small matmul (sampled once)."""
    from agent.fleet_dataset import generic_target, sample_workload

    target = generic_target(CATALOG)
    sampled = sample_workload("matmul:64,64,128", target, 24, seed=3)
    assert len(sampled.candidates) >= 8
    return [c.sch.mod for c in sampled.candidates]


def _random_kernels(n: int, seed: int) -> np.ndarray:
    """A dense random sample of kernel records consistent with what the analysis emits."""
    rng = np.random.default_rng(seed)
    cols = {name: np.zeros(n) for name in latency.COLUMNS}
    cols["grid"] = np.exp(rng.uniform(0, np.log(1e5), n)).round() + 1
    cols["threads"] = rng.choice([32, 64, 96, 128, 256, 384, 512, 768, 1024, 2048], n)
    cols["vthreads"] = rng.choice([1, 2, 4, 8], n)
    cols["smem_bytes"] = rng.choice([0, 1024, 8192, 32768, 49152, 65536], n)
    cols["local_words"] = rng.integers(0, 400, n)
    cols["fp_instrs"] = np.exp(rng.uniform(0, np.log(1e6), n))
    cols["flops"] = cols["fp_instrs"] * rng.uniform(0.0, 2.0, n) * cols["grid"] * cols["threads"]
    cols["sfu_instrs"] = rng.uniform(0, 10, n)
    cols["int_instrs"] = cols["fp_instrs"] * rng.uniform(0, 3, n)
    cols["gld_instrs"] = cols["fp_instrs"] * rng.uniform(0, 1, n)
    total = cols["grid"] * cols["threads"]
    cols["gld_bytes"] = cols["gld_instrs"] * total * 4 * rng.uniform(0.1, 1, n)
    cols["gld_sector_bytes"] = cols["gld_bytes"] * rng.uniform(1, 8, n)
    cols["gst_bytes"] = total * 4 * rng.uniform(0, 4, n)
    cols["gst_sector_bytes"] = cols["gst_bytes"] * rng.uniform(1, 8, n)
    cols["block_footprint_bytes"] = cols["gld_bytes"] * rng.uniform(0.01, 1, n)
    cols["unique_bytes"] = np.exp(rng.uniform(np.log(1e3), np.log(1e9), n))
    cols["shared_instrs"] = cols["fp_instrs"] * rng.uniform(0, 2, n)
    cols["shared_wavefronts"] = cols["shared_instrs"] * rng.uniform(1, 32, n)
    cols["syncs"] = rng.uniform(0, 1000, n)
    cols["ilp"] = rng.choice([1, 2, 4, 8, 16, 64], n)
    cols["unroll"] = rng.choice([0, 16, 64, 512, 1024], n)
    cols["vector_bytes"] = rng.choice([4, 8, 16], n)
    cols["fp16"] = rng.choice([0, 1], n, p=[0.8, 0.2])
    return np.stack([cols[name] for name in latency.COLUMNS], axis=1)


def _check_bounds(matrix: np.ndarray, owner: np.ndarray, keys: np.ndarray) -> int:
    secs = latency.simulate(matrix, owner, keys, FLEET, repeats=3)
    flop, dram = latency.lower_bounds(matrix, owner, len(keys), FLEET)
    finite = np.isfinite(secs)
    assert np.all(secs[finite] > 0)
    assert np.all(secs >= flop[:, :, None]), "a latency beats its GPU's FLOP bound"
    assert np.all(secs >= dram[:, :, None]), "a latency beats its GPU's DRAM bound"
    return int(finite.sum())


def test_no_latency_beats_flop_or_dram_bound_dense_sample() -> None:
    n = 5000
    matrix = _random_kernels(n, seed=7)
    keys = np.arange(n, dtype=np.uint64) * np.uint64(2654435761)
    checked = _check_bounds(matrix, np.arange(n), keys)
    assert checked > n * len(CATALOG)  # thousands of candidates x every GPU x repeats


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 50))
def test_no_latency_beats_bounds_property(seed: int, n: int) -> None:
    matrix = _random_kernels(n, seed)
    keys = np.random.default_rng(seed).integers(0, 2**63, n).astype(np.uint64)
    _check_bounds(matrix, np.arange(n), keys)


def test_real_candidates_respect_bounds(candidates: list) -> None:
    target = get_device("sim:a100").target()
    kernels = [tir_analysis.analyse(mod, target) for mod in candidates]
    matrix, owner = latency.kernel_matrix(kernels)
    keys = np.arange(len(kernels), dtype=np.uint64)
    assert _check_bounds(matrix, owner, keys) > 0
    # matmul 64x64x128: every candidate does the same FLOPs and touches the same bytes
    flops = {round(sum(k.flops for k in ks)) for ks in kernels}
    assert flops == {2 * 64 * 64 * 128}
    compulsory = 4 * (64 * 128 * 2 + 64 * 64)
    assert all(abs(sum(k.unique_bytes for k in ks) - compulsory) < 1 for ks in kernels)


def _occupancy(gpu_key: str, threads: int, regs: int, smem: int) -> float:
    params = latency.GpuParams.from_specs([lookup(gpu_key)])
    blocks = latency.occupancy(
        np.array([[threads]], float), np.array([[regs]], float), np.array([[smem]], float), params
    )
    return float(blocks[0, 0])


def test_occupancy_rules_known_cases() -> None:
    # 256 threads x 64 registers = 16384 registers a block; 65536 per SM -> 4 blocks
    assert _occupancy("a100", 256, 64, 0) == 4
    # registers allocated per warp in units of 256: 33 regs -> 40*32... 1280 a warp
    assert _occupancy("v100", 128, 33, 0) == 12
    # warps: T4 has 32 warps per SM -> two 512-thread blocks; A100 (64 warps) -> four
    assert _occupancy("t4", 512, 16, 0) == 2
    assert _occupancy("a100", 512, 16, 0) == 4
    # shared memory: 40 KB blocks -> 2 on a 96 KB V100 SM, 4 on a 164 KB A100 SM
    assert _occupancy("v100", 64, 16, 40 * 1024) == 2
    assert _occupancy("a100", 64, 16, 40 * 1024) == 4
    # block limit: tiny blocks stop at max blocks per SM (16 on T4, 32 on A100)
    assert _occupancy("t4", 32, 16, 0) == 16
    assert _occupancy("a100", 32, 16, 0) == 32
    # K80 (cc 3.7) has twice the registers: 256 threads x 128 regs -> 4 blocks
    assert _occupancy("k80", 256, 128, 0) == 4


def test_noise_is_deterministic_and_a_few_percent(candidates: list) -> None:
    first = get_device("sim:t4").measure(candidates[0], repeat=5)
    again = get_device("sim:t4").measure(candidates[0], repeat=5)
    assert first == again  # same GPU, candidate and repeat -> same value
    assert len(set(first)) == 5  # different repeats -> different values
    mean = float(np.mean(first))
    assert max(first) / min(first) < 1.1
    assert all(abs(s / mean - 1) < 0.05 for s in first)
    other = get_device("sim:a100").measure(candidates[0], repeat=5)
    assert other != first


def test_modelled_measurement_time_accumulates(candidates: list) -> None:
    device = get_device("sim:v100")
    assert device.modelled_measure_seconds == 0
    device.measure(candidates[0], repeat=3)
    device.measure(candidates[1], repeat=3)
    assert device.measurements == 2
    # a compile (~1 s) plus runs of at least 100 ms per repeat, for each measurement
    assert device.modelled_measure_seconds >= 2 * (1.0 + 3 * 0.1)


def test_builder_and_runner_hand_back_the_modelled_seconds(candidates: list) -> None:
    from tvm.s_tir import meta_schedule as ms

    device = get_device("sim:a100")
    builder, runner = device.builder(), device.runner()
    built = builder.build([ms.builder.BuilderInput(mod, device.target()) for mod in candidates[:4]])
    assert all(b.error_msg is None for b in built)
    futures = runner.run([ms.runner.RunnerInput(b.artifact_path, "cuda", []) for b in built])
    secs = [[float(s) for s in f.result().run_secs] for f in futures]
    direct = [get_device("sim:a100").measure(mod, repeat=3) for mod in candidates[:4]]
    assert secs == direct
    assert device.measurements == 4


def test_launch_limits_fail_on_the_smaller_gpu() -> None:
    matrix = np.zeros((1, len(latency.COLUMNS)))
    col = latency.COL
    matrix[0, col["grid"]] = 80
    matrix[0, col["threads"]] = 256
    matrix[0, col["smem_bytes"]] = 80 * 1024  # over every GPU's 48 KB static limit
    matrix[0, col["fp_instrs"]] = 100
    secs = latency.candidate_latency(matrix, np.array([0]), 1, FLEET)
    assert np.all(np.isinf(secs))
    matrix[0, col["smem_bytes"]] = 40 * 1024
    secs = latency.candidate_latency(matrix, np.array([0]), 1, FLEET)
    assert np.all(np.isfinite(secs))
