"""This CPU's FP32 peak: derived from its FMA pipes, vector width and clock, checked by a loop.

The analytical peak is cores x SIMD lanes x 2 FLOPs per FMA x FMA pipes x clock. The clock
the OS reports is often the base clock (under KVM, the TSC rate), while the cores boost
above it, so a kernel can reach more than "100%" of that peak. The measured side is a
loop of independent vector FMAs (12 accumulators per core, enough to cover the FMA latency
on every x86 core since Haswell and Zen 2), compiled here with the system C compiler and run
on every core at once. Its rate is the practical peak, and the clock it implies
(rate / (lanes x 2 x pipes x cores)) is the sustained clock under an all-core FMA load.

    python -m bench.compile.cpu_peak            # prints the JSON below
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agent.devices.cpu import fma_pipes
from bench import prepare

_CHAINS = 12

_KERNEL = r"""
#include <immintrin.h>
#define CHAINS %(chains)d
float fma_loop(long iters) {
    VEC acc[CHAINS];
    VEC mul = SET1(0.999999f), add = SET1(1e-7f);
    for (int c = 0; c < CHAINS; ++c) acc[c] = SET1((float)c);
    for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
        for (int c = 0; c < CHAINS; ++c) acc[c] = FMA(acc[c], mul, add);
    }
    float sink = 0.0f;
    float lanes[LANES];
    for (int c = 0; c < CHAINS; ++c) {
        STORE(lanes, acc[c]);
        for (int l = 0; l < LANES; ++l) sink += lanes[l];
    }
    return sink;
}
"""

_ISA = {
    16: (
        "-mavx512f",
        "#define VEC __m512\n#define LANES 16\n#define SET1 _mm512_set1_ps\n"
        "#define FMA _mm512_fmadd_ps\n#define STORE _mm512_storeu_ps\n",
    ),
    8: (
        "-mavx2 -mfma",
        "#define VEC __m256\n#define LANES 8\n#define SET1 _mm256_set1_ps\n"
        "#define FMA _mm256_fmadd_ps\n#define STORE _mm256_storeu_ps\n",
    ),
}


def _flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    match = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def _build(lanes: int, workdir: Path) -> ctypes.CDLL:
    flag, header = _ISA[lanes]
    source = workdir / "fma_loop.c"
    source.write_text(header + _KERNEL % {"chains": _CHAINS})
    library = workdir / "fma_loop.so"
    subprocess.run(
        ["cc", "-O2", *flag.split(), "-shared", "-fPIC", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(library))
    lib.fma_loop.argtypes = [ctypes.c_long]
    lib.fma_loop.restype = ctypes.c_float
    return lib


def measure_fma_gflops(threads: int, lanes: int, *, seconds: float = 0.5, repeat: int = 5) -> float:
    """Best all-core FP32 FMA rate of `repeat` runs of about `seconds` each, in GFLOP/s.

    The best, not the median: on a shared machine a run that loses a core to another job
    is slower, never faster, than the hardware allows.
    """
    with tempfile.TemporaryDirectory(prefix="simoe-fma-") as tmp:
        lib = _build(lanes, Path(tmp))
        t0 = time.perf_counter()
        lib.fma_loop(1_000_000)  # ctypes releases the GIL: threads run on separate cores
        per_iter = max((time.perf_counter() - t0) / 1_000_000, 1e-10)
        iters = max(1, int(seconds / per_iter))
        best = 0.0
        for _ in range(repeat):
            workers = [threading.Thread(target=lib.fma_loop, args=(iters,)) for _ in range(threads)]
            t0 = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            elapsed = time.perf_counter() - t0
            best = max(best, threads * iters * _CHAINS * lanes * 2 / elapsed / 1e9)
        return best


def cpu_peak(threads: int, mcpu: str, clock_mhz: float) -> dict[str, Any]:
    """The analytical peak at the OS clock, the measured FMA loop, and the peak to use."""
    flags = _flags()
    lanes = 16 if "avx512f" in flags else 8
    pipes = fma_pipes(mcpu, flags)
    per_cycle = threads * lanes * 2 * pipes
    analytical = per_cycle * clock_mhz / 1000
    row: dict[str, Any] = {
        "threads": threads,
        "mcpu": mcpu,
        "simd_lanes_fp32": lanes,
        "fma_pipes_per_core": pipes,
        "flops_per_cycle": per_cycle,
        "os_clock_mhz": clock_mhz,
        "analytical_gflops": analytical,
    }
    try:
        measured = measure_fma_gflops(threads, lanes)
    except (OSError, subprocess.CalledProcessError) as exc:
        row.update(measured_gflops=None, peak_gflops=analytical, error=str(exc)[:200])
        row["peak_from"] = "analytical (the FMA loop could not be built: no C compiler?)"
        return row
    row.update(
        measured_gflops=measured,
        implied_clock_mhz=measured / per_cycle * 1000,
        peak_gflops=max(analytical, measured),
        peak_from=(
            f"max(analytical {threads} cores x {lanes} lanes x 2 x {pipes} FMA pipes x "
            f"OS clock, measured all-core FMA loop)"
        ),
    )
    return row


def main() -> None:
    import argparse

    argparse.ArgumentParser(
        description="This CPU's FP32 peak: analytical (cores x lanes x 2 x FMA pipes x clock) "
        "against a measured all-core FMA loop; prints JSON."
    ).parse_args()
    from agent.devices import get_device

    device = get_device("cpu")
    specs = device.analytical_specs()
    print(json.dumps(cpu_peak(device.num_cores, device.mcpu, specs.clock_mhz), indent=2))


if __name__ == "__main__":
    prepare()
    main()
