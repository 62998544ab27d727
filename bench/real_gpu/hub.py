"""The real measured spaces of benchmark_hub, loaded once: kernels, GPUs, features, probes.

The files stay where the user put them (`--hub DIR`, `$SIMOE_BENCHMARK_HUB`, or
`../shared/data/benchmark_hub` beside the repository); nothing of them is copied into
the project. Each kernel's layout (which parameters set the thread block and what one
block covers) comes from its T1 description where that names the parameters, and from
the kernel's Kernel Tuner call where it does not (CLBlast's GEMM: MDIMC x NDIMC threads,
an MWG x NWG tile per block).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from agent.kernels.cache_file import KernelCache, read_cache_file, read_t1_layout
from agent.kernels.gpus import find_gpu
from agent.kernels.probes import gpu_probe_vector, probe_keys
from schemas import BadInputError
from schemas.kernels import KernelGpu
from simoe_model.hardware import kernel_hardware_vector
from simoe_model.kernel_model import KernelDevice
from simoe_model.param_features import ParamFeaturizer

REPO = Path(__file__).resolve().parents[2]
DEFAULT_HUB = REPO.parent / "shared" / "data" / "benchmark_hub"

# kernel folder -> T1 description, and layout the T1 file does not give
KERNELS: dict[str, dict] = {
    "convolution_milo": {"t1": "convolution_milo.json"},
    "dedispersion_milo": {"t1": "dedispersion_milo.json"},
    "convolution": {"t1": "convolution.json"},
    "pnpoly": {"t1": "pnpoly.json"},
    # CLBlast's Xgemm: its T1 file (gemm_milo) names block_size_x, not a parameter here
    "gemm": {"block_size_names": ["MDIMC", "NDIMC"], "grid_div": {"x": ["MWG"], "y": ["NWG"]}},
}


def hub_dir(path: str | Path | None = None) -> Path:
    """Where the benchmark_hub files are; BadInputError with what to do if nowhere."""
    chosen = Path(path or os.environ.get("SIMOE_BENCHMARK_HUB") or DEFAULT_HUB)
    if not (chosen / "search_spaces").is_dir():
        raise BadInputError(
            f"{chosen}: no benchmark_hub data here (get it from the public repository "
            "AutoTuningAssociation/benchmark_hub and pass --hub DIR or set SIMOE_BENCHMARK_HUB)"
        )
    return chosen


@dataclass
class Hub:
    """Every kernel's cache files by GPU key, read once."""

    root: Path
    caches: dict[str, dict[str, KernelCache]] = field(default_factory=dict)
    gpus: dict[str, KernelGpu] = field(default_factory=dict)
    _probe_sets: dict[tuple[str, int], dict[str, list[str]]] = field(default_factory=dict)

    @classmethod
    def load(cls, root: str | Path | None = None, kernels: list[str] | None = None) -> Hub:
        hub = cls(hub_dir(root))
        for kernel in kernels or list(KERNELS):
            layout = KERNELS[kernel]
            block, grid = layout.get("block_size_names"), layout.get("grid_div")
            if "t1" in layout:
                block, grid = read_t1_layout(hub.root / "search_spaces" / layout["t1"])
            by_gpu = {}
            for path in sorted((hub.root / kernel).glob("*.json.gz")):
                gpu = find_gpu(path.name.removesuffix(".json.gz"))
                cache = read_cache_file(
                    path, device_name=gpu.name, block_size_names=block, grid_div=grid
                )
                by_gpu[gpu.key] = cache
                hub.gpus[gpu.key] = gpu
            hub.caches[kernel] = by_gpu
        return hub

    def gpus_of(self, kernel: str) -> list[str]:
        return list(self.caches[kernel])

    def kernels_of(self, gpu: str) -> list[str]:
        return [k for k, by_gpu in self.caches.items() if gpu in by_gpu]

    @cached_property
    def featurizers(self) -> dict[str, ParamFeaturizer]:
        return {k: ParamFeaturizer(next(iter(c.values())).space) for k, c in self.caches.items()}

    def features(self, kernel: str, gpu: str) -> np.ndarray:
        return self.featurizers[kernel].features(self.caches[kernel][gpu].values)

    def probe_set(self, kernel: str, per_kernel: int) -> dict[str, list[str]]:
        """The probes for predicting `kernel`: `per_kernel` configurations of each other
        kernel measured on the same GPUs (the fixed, versioned set of agent.kernels.probes);
        worked out once per kernel and count (every GPU's hardware vector reads it)."""
        if (kernel, per_kernel) in self._probe_sets:
            return self._probe_sets[(kernel, per_kernel)]
        gpus = set(self.gpus_of(kernel))
        others = [k for k in self.caches if k != kernel and gpus <= set(self.caches[k])]
        probes = {
            k: probe_keys(k, [self.caches[k][g] for g in sorted(gpus)], per_kernel) for k in others
        }
        self._probe_sets[(kernel, per_kernel)] = probes
        return probes

    def hardware_vector(self, kernel: str, gpu: str, per_kernel: int) -> np.ndarray:
        """The GPU's h for predicting `kernel`: its spec sheet and its probe values."""
        probes = self.probe_set(kernel, per_kernel)
        values = gpu_probe_vector(probes, {k: self.caches[k][gpu] for k in probes})
        return kernel_hardware_vector(self.gpus[gpu].analytical, values)

    def device(self, kernel: str, gpu: str, per_kernel: int) -> KernelDevice:
        cache = self.caches[kernel][gpu]
        return KernelDevice(
            name=gpu,
            hardware_vector=self.hardware_vector(kernel, gpu, per_kernel),
            features=self.features(kernel, gpu),
            time_ms=cache.time_ms,
            keys=cache.keys,
        )
