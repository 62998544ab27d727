"""ptxas facts in the simulator: the parser (on captured ptxas output), the cache, the
alignment with kernel rows, the latency model's use of them, and (where nvcc exists)
a real compile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.bundle.lowering import Launch, LoweredProgram
from agent.devices.cuda_env import nvcc_path
from agent.devices.sim import latency
from agent.devices.sim.catalog import lookup
from agent.devices.sim.compiler_facts import (
    FactArrays,
    FactsCache,
    KernelFacts,
    ProgramFacts,
    fact_arrays,
    parse_ptxas,
    program_facts,
    source_hash,
)
from agent.devices.sim.tir_analysis import KernelRecord

# `nvcc -O3 --cubin -Xptxas -v -arch=sm_80` on six real conv2d candidates (CUDA 13.0)
CAPTURED = (Path(__file__).parent / "data" / "ptxas_v_sm80.txt").read_text()


def test_parser_reads_captured_ptxas_output() -> None:
    facts = parse_ptxas(CAPTURED)
    assert set(facts) == {"sm_80"}
    kernels = facts["sm_80"]
    assert len(kernels) == 6
    assert kernels["c5_main_kernel"] == KernelFacts(233, 41984, 0, 0, 0)
    # a spilling kernel: its line also names a cumulative stack size before the smem
    assert kernels["c2_main_kernel"] == KernelFacts(128, 9280, 2024, 2192, 3952)
    assert kernels["c1_main_kernel"].spill_bytes == 9340 + 9324


def test_parser_reads_older_lines_and_several_archs() -> None:
    log = (
        "ptxas info    : Compiling entry function 'k' for 'sm_75'\n"
        "ptxas info    : Function properties for k\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 32 registers, 4096 bytes smem, 356 bytes cmem[0]\n"
        "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 384 bytes cmem[0]\n"
    )
    facts = parse_ptxas(log)
    assert facts["sm_75"]["k"] == KernelFacts(32, 4096)
    assert facts["sm_90"]["k"] == KernelFacts(40, 0)
    assert parse_ptxas("nvcc fatal : garbage") == {}


def test_cache_round_trip_and_damaged_entry(tmp_path: Path) -> None:
    cache = FactsCache(tmp_path)
    digest = source_hash("__global__ void k() {}")
    assert cache.get(digest, "sm_80") is None
    cache.put(digest, "sm_80", ProgramFacts({"k": KernelFacts(24, 128, 4, 4, 8)}))
    cache.put(digest, "sm_90", ProgramFacts({}, "error: bad"))
    assert cache.get(digest, "sm_80").kernels["k"].registers == 24
    assert cache.get(digest, "sm_90").error == "error: bad"
    next(tmp_path.glob("*sm_80*")).write_text("{not json")
    assert cache.get(digest, "sm_80") is None  # compiled again, never a crash


def test_facts_align_with_kernel_rows() -> None:
    owner = np.array([0, 1, 1, 2])  # candidate 1 has two kernels
    facts = [
        {"sm_80": ProgramFacts({"a": KernelFacts(64, 1024)})},
        {"sm_80": ProgramFacts({"a": KernelFacts(32), "b": KernelFacts(96, 0, 8, 8)})},
        {"sm_80": ProgramFacts({}, "ptxas error")},
    ]
    order = [["a"], ["a", "b"], ["a"]]
    arrays, unmapped = fact_arrays(owner, order, facts, ["sm_80", "sm_61"])
    assert unmapped == 0
    assert arrays.registers[:, 0].tolist()[:3] == [64, 32, 96]
    assert arrays.spill_bytes[2, 0] == 16
    assert arrays.rejected[3, 0] and not arrays.rejected[3, 1]
    assert np.isnan(arrays.registers[:, 1]).all()  # sm_61: the estimate stays
    # a candidate whose kernel count differs from its rows keeps the estimate
    arrays, unmapped = fact_arrays(owner, [["a"], ["a"], None], facts, ["sm_80"])
    assert unmapped == 2 and np.isnan(arrays.registers[1:, 0]).all()


def _kernel() -> np.ndarray:
    record = KernelRecord(
        grid=4096, threads=256, smem_bytes=8192, local_words=30, flops=4e9, fp_instrs=2000,
        int_instrs=500, gld_instrs=200, gld_bytes=2e7, gld_sector_bytes=3e7, gst_bytes=4e6,
        gst_sector_bytes=4e6, block_footprint_bytes=2e7, unique_bytes=8e6, shared_instrs=800,
        shared_wavefronts=900, syncs=40, ilp=4,
    )  # fmt: skip
    return latency.kernel_matrix([[record]])[0]


def test_latency_uses_facts_where_given() -> None:
    gpu = latency.GpuParams.from_specs([lookup("a100"), lookup("1080ti")])
    matrix = _kernel()
    base = latency.kernel_times(matrix, gpu).seconds
    none = FactArrays.empty(1, 2)
    assert np.array_equal(latency.kernel_times(matrix, gpu, none).seconds, base)
    heavy = FactArrays.empty(1, 2)
    heavy.registers[0, 0] = 255  # ptxas: 255 registers and spills on the A100 only
    heavy.spill_bytes[0, 0] = 512
    heavy.smem_bytes[0, 0] = 8192
    times = latency.kernel_times(matrix, gpu, heavy)
    assert times.registers[0, 0] == 255 and times.registers[0, 1] < 255
    assert times.blocks_per_sm[0, 0] < latency.kernel_times(matrix, gpu).blocks_per_sm[0, 0]
    assert times.seconds[0, 0] > base[0, 0] and times.seconds[0, 1] == base[0, 1]
    rejected = FactArrays.empty(1, 2)
    rejected.rejected[0, 1] = True  # nvcc refused it for this arch: a failed build
    secs = latency.kernel_times(matrix, gpu, rejected).seconds
    assert np.isinf(secs[0, 1]) and secs[0, 0] == base[0, 0]


GOOD = """extern "C" __global__ void __launch_bounds__(64) main_kernel(float* __restrict__ a) {
  __shared__ float s[256];
  s[threadIdx.x] = a[threadIdx.x];
  __syncthreads();
  a[threadIdx.x] = s[(threadIdx.x * 3) & 255] * 2.0f;
}
"""


def _program(source: str) -> LoweredProgram:
    return LoweredProgram(source, ["main_kernel"], [Launch("main_kernel")], [])


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed")
def test_real_ptxas_facts_cached_and_rejection(tmp_path: Path) -> None:
    cache = FactsCache(tmp_path)
    bad = _program(GOOD.replace("2.0f;", "2.0f"))  # a syntax error: nvcc rejects it
    got = program_facts([_program(GOOD), bad], ["sm_80"], cache)
    facts = got[0]["sm_80"].kernels["main_kernel"]
    assert facts.smem_bytes == 1024 and 1 <= facts.registers <= 64
    assert got[1]["sm_80"].error and not got[1]["sm_80"].kernels
    # a second call is served from the cache: no nvcc is run at all
    again = program_facts([_program(GOOD)], ["sm_80"], cache, nvcc=Path("/nonexistent/nvcc"))
    assert again[0]["sm_80"].kernels["main_kernel"] == facts
