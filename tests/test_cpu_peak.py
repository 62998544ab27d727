"""The CPU peak: FMA pipes by core, and a measured FMA loop that the peak never falls under."""

from __future__ import annotations

import shutil

import pytest

from agent.devices.cpu import fma_pipes
from bench.compile.cpu_peak import cpu_peak, measure_fma_gflops


def test_fma_pipes_by_core() -> None:
    assert fma_pipes("znver3", {"fma", "avx2"}) == 2
    assert fma_pipes("znver1", {"fma", "avx2"}) == 1  # 256-bit FMA split over 128-bit pipes
    assert fma_pipes("x86-64", {"sse2"}) == 1


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_peak_is_never_below_the_measured_fma_loop() -> None:
    assert measure_fma_gflops(1, 8, seconds=0.02, repeat=1) > 0.1
    row = cpu_peak(1, "znver3", clock_mhz=1.0)  # an absurdly low OS clock
    assert row["measured_gflops"] > row["analytical_gflops"]
    assert row["peak_gflops"] == row["measured_gflops"]
    assert row["implied_clock_mhz"] > 1.0
