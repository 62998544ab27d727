"""`sim:<gpu>`: simulated NVIDIA GPUs, an analytical latency model of scheduled CUDA TIR.

Nothing it produces is a measurement: records and profiles from it say `simulated`.
The device (`device.SimulatedGPU`) imports TVM; the catalog (`catalog`) does not. So the
names below are imported when first used, and reading the catalog (`simoe-agent dataset
gpus`) never pays for importing TVM.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.devices.sim.catalog import load_catalog, lookup
    from agent.devices.sim.device import (
        MODELLED_COMPILE_S,
        MODELLED_MIN_REPEAT_S,
        MODELLED_OVERHEAD_S,
        MODELLED_RUNS_PER_REPEAT,
        SimulatedGPU,
        candidate_key,
        cuda_target,
        modelled_cost_seconds,
    )

_LAZY = {
    "SimulatedGPU": "device",
    "cuda_target": "device",
    "candidate_key": "device",
    "modelled_cost_seconds": "device",
    "MODELLED_COMPILE_S": "device",
    "MODELLED_MIN_REPEAT_S": "device",
    "MODELLED_RUNS_PER_REPEAT": "device",
    "MODELLED_OVERHEAD_S": "device",
    "load_catalog": "catalog",
    "lookup": "catalog",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MODELLED_COMPILE_S",
    "MODELLED_MIN_REPEAT_S",
    "MODELLED_OVERHEAD_S",
    "MODELLED_RUNS_PER_REPEAT",
    "SimulatedGPU",
    "candidate_key",
    "cuda_target",
    "load_catalog",
    "lookup",
    "modelled_cost_seconds",
]
