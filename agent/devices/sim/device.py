"""`SimulatedGPU`: a simulated NVIDIA GPU, an analytical latency model of scheduled CUDA TIR.

Nothing it produces is a measurement: records and profiles from it say `simulated`.
A simulated measurement is free here but would cost a CUDA compile and repeated
runs on a real GPU; `modelled_measure_seconds` adds that cost up so that tuning
reports search wall time and modelled measurement time separately.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import tvm
import tvm_ffi

from agent.devices.base import Device
from agent.devices.sim import latency, tir_analysis
from agent.devices.sim.catalog import load_catalog, lookup, resolve
from agent.devices.sim.measure import ResultTable, SimBuilder, SimRunner
from schemas import AnalyticalSpecs, RunFailure
from schemas.gpu import GpuSpec

# What one measurement would cost on a real GPU (MetaSchedule's LocalRunner defaults:
# number=3 runs per repeat, at least 100 ms per repeat), plus an nvcc/NVRTC compile.
MODELLED_COMPILE_S = 1.0
MODELLED_MIN_REPEAT_S = 0.1
MODELLED_RUNS_PER_REPEAT = 3
MODELLED_OVERHEAD_S = 0.05


def cuda_target(spec: GpuSpec) -> tvm.target.Target:
    """TVM's cuda target with the GPU's arch and limits (no GPU needed to generate code)."""
    return tvm.target.Target(
        {
            "kind": "cuda",
            "arch": spec.cuda_arch,
            "max_threads_per_block": spec.max_threads_per_block,
            "max_num_threads": spec.max_threads_per_block,
            "max_shared_memory_per_block": int(spec.shared_mem_per_block_kb * 1024),
            "thread_warp_size": spec.warp_size,
            "registers_per_block": spec.registers_per_sm,
            "l2_cache_size_bytes": int(spec.l2_cache_kb * 1024),
        }
    )


def candidate_key(mod: tvm.IRModule) -> int:
    """A stable 64-bit key of a scheduled module: seeds its measurement noise."""
    return int(tvm_ffi.structural_hash(mod)) & 0xFFFFFFFFFFFFFFFF


def modelled_cost_seconds(run_secs: Sequence[float]) -> float:
    """Seconds one measurement of these runs would take on a real GPU."""
    runs = sum(max(MODELLED_MIN_REPEAT_S, MODELLED_RUNS_PER_REPEAT * s) for s in run_secs)
    return MODELLED_COMPILE_S + runs + MODELLED_OVERHEAD_S


class SimulatedGPU(Device):
    """A GPU of the catalog (or a user's spec file), simulated."""

    kind = "sim"
    simulated = True

    def __init__(self, spec: GpuSpec, *, name: str | None = None) -> None:
        super().__init__(name or f"sim:{spec.key}")
        self.spec = spec
        self.params = latency.GpuParams.from_specs([spec])
        self.results = ResultTable()
        self.modelled_measure_seconds = 0.0
        self.measurements = 0
        self.model_wall_seconds = 0.0  # real time spent here analysing and evaluating
        self._lock = threading.Lock()
        self._target: tvm.target.Target | None = None

    @classmethod
    def from_spec(cls, name_or_path: str) -> SimulatedGPU:
        """`sim:t4` (catalog name or alias, any case) or `sim:path/to/spec.json`."""
        spec = resolve(name_or_path)
        text = name_or_path.strip()
        is_file = text.endswith(".json") or "/" in text
        return cls(spec, name=f"sim:{text}" if is_file else f"sim:{spec.key}")

    @property
    def hardware_name(self) -> str:
        return f"{self.spec.name} (simulated)"

    def target(self) -> tvm.target.Target:
        if self._target is None:
            self._target = cuda_target(self.spec)
        return self._target

    def analytical_specs(self) -> AnalyticalSpecs:
        return self.spec.analytical_specs()

    def builder(self) -> SimBuilder:
        return SimBuilder(self)

    def runner(self) -> SimRunner:
        return SimRunner(self)

    def simulate_batch(self, mods: Sequence[tvm.IRModule], repeat: int = 3) -> list[Any]:
        """Seconds per run of each scheduled module, or an error message for one that fails."""
        started = time.perf_counter()
        target = self.target()
        analysed: list[list[tir_analysis.KernelRecord]] = []
        errors: dict[int, str] = {}
        for i, mod in enumerate(mods):
            try:
                analysed.append(tir_analysis.analyse(mod, target))
            except Exception as exc:  # noqa: BLE001 - a module the model cannot read fails alone
                errors[i] = f"simulated build failed: {type(exc).__name__}: {exc}"
                analysed.append([])
        matrix, owner = latency.kernel_matrix(analysed)
        keys = np.asarray([candidate_key(m) for m in mods], dtype=np.uint64)
        secs = latency.simulate(matrix, owner, keys, self.params, repeats=repeat)[:, 0, :]
        out: list[Any] = []
        for i in range(len(mods)):
            if i in errors:
                out.append(errors[i])
            elif not np.all(np.isfinite(secs[i])):
                out.append(
                    f"simulated launch failed on {self.spec.key}: exceeds threads per block, "
                    "shared memory per block or per-SM resources"
                )
            else:
                out.append([float(s) for s in secs[i]])
        with self._lock:
            self.model_wall_seconds += time.perf_counter() - started
        return out

    def measure(self, mod: tvm.IRModule, repeat: int = 5) -> list[float]:
        """Modelled seconds per run of an already scheduled module (simulated, with noise)."""
        (outcome,) = self.simulate_batch([mod], repeat=repeat)
        if isinstance(outcome, str):
            raise RunFailure(outcome)
        self.account_measurement(outcome)
        return outcome

    def account_measurement(self, run_secs: Sequence[float]) -> None:
        """Add what this measurement would have cost on the real GPU."""
        with self._lock:
            self.modelled_measure_seconds += modelled_cost_seconds(run_secs)
            self.measurements += 1


__all__ = ["SimulatedGPU", "cuda_target", "load_catalog", "lookup"]
