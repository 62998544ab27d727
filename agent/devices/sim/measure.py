"""MetaSchedule builder and runner of a simulated GPU.

`RunnerInput` carries no schedule, so the latency is computed in the builder, which
sees the scheduled IRModule and the target; it hands back a key as `artifact_path`
and the runner returns the stored seconds. Artifact paths are not files: tune
without MetaSchedule's `RemoveBuildArtifact` callback.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

if TYPE_CHECKING:
    from agent.devices.sim import SimulatedGPU

ARTIFACT_PREFIX = "sim-artifact:"


@derived_object
class SimBuilder(ms.builder.PyBuilder):
    """'Builds' a candidate by evaluating the latency model on its scheduled TIR."""

    def __init__(self, device: SimulatedGPU) -> None:
        super().__init__()
        self.device = device

    def build(self, build_inputs: list[ms.builder.BuilderInput]) -> list[ms.builder.BuilderResult]:
        results: list[ms.builder.BuilderResult] = []
        outcomes = self.device.simulate_batch([inp.mod for inp in build_inputs])
        for outcome in outcomes:
            if isinstance(outcome, str):
                results.append(ms.builder.BuilderResult(None, outcome))
            else:
                key = self.device.results.put(outcome)
                results.append(ms.builder.BuilderResult(key, None))
        return results


@derived_object
class SimRunner(ms.runner.PyRunner):
    """Returns the seconds the builder computed; each costs modelled GPU time."""

    def __init__(self, device: SimulatedGPU) -> None:
        super().__init__()
        self.device = device

    def run(self, runner_inputs: list[ms.runner.RunnerInput]) -> list[ms.runner.RunnerFuture]:
        futures: list[ms.runner.RunnerFuture] = []
        for inp in runner_inputs:
            secs = self.device.results.pop(str(inp.artifact_path))
            if secs is None:
                result = ms.runner.RunnerResult(None, f"unknown artifact {inp.artifact_path}")
            else:
                self.device.account_measurement(secs)
                result = ms.runner.RunnerResult([float(s) for s in secs], None)
            futures.append(ms.runner.RunnerFuture(f_done=lambda: True, f_result=lambda r=result: r))
        return futures


class ResultTable:
    """Seconds handed from the builder to the runner, by artifact key (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._table: dict[str, list[float]] = {}

    def put(self, secs: list[float]) -> str:
        with self._lock:
            key = f"{ARTIFACT_PREFIX}{next(self._counter)}"
            self._table[key] = secs
            return key

    def pop(self, key: str) -> list[float] | None:
        with self._lock:
            return self._table.pop(key, None)
