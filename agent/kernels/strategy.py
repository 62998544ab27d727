"""SiMoE as a Kernel Tuner strategy: tune a kernel on a new GPU with the fleet's experts.

    from agent.kernels.strategy import SiMoEStrategy
    strategy = SiMoEStrategy.from_files("gemm.simoe.pt", gpu="rtx-a4000", probes=probe_files)
    kernel_tuner.tune_kernel(..., strategy=strategy, strategy_options={"max_fevals": 16})

Kernel Tuner 1.5 takes any object with a `tune(searchspace, runner, tuning_options)`
method as a strategy. This one ranks the whole search space with the SiMoE kernel model
(zero-shot: the gate's mixture of the experts of similar GPUs), measures the best
configurations in growing batches through Kernel Tuner's own cost function, and lets each
measurement move the experts' weights (`simoe_model.kernel_model.RankedSearch`).

A kernel model file is a SiMoE model (`simoe_model.model.save_model`) whose metadata
says what it ranks: the search space, the probe set, the GPUs of its experts.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent.kernels.cache_file import read_cache_file
from agent.kernels.gpus import find_gpu
from agent.kernels.probes import gpu_probe_vector
from schemas import BadInputError
from schemas.kernels import KernelSpace
from simoe_model.hardware import kernel_hardware_vector
from simoe_model.kernel_model import RankedSearch, expert_scores, gate_weights, run_search
from simoe_model.model import SiMoE, load_model, model_metadata
from simoe_model.param_features import ParamFeaturizer

MODEL_KIND = "simoe-kernel-model"


class SiMoEStrategy:
    """A Kernel Tuner strategy object (see the module docstring).

    Args:
        model: a SiMoE kernel model whose experts are the fleet's GPUs.
        space: the search space it ranks (from the model file's metadata).
        hardware: the new GPU's hardware vector (its spec sheet and probe values).
        sharpness: how fast measurements move the experts' weights (0: never).
    """

    def __init__(
        self, model: SiMoE, space: KernelSpace, hardware: np.ndarray, sharpness: float = 2.0
    ) -> None:
        self.model = model
        self.featurizer = ParamFeaturizer(space)
        self.hardware = hardware
        self.sharpness = sharpness
        self.measured: list[tuple[Any, ...]] = []

    @classmethod
    def from_files(
        cls,
        model_path: str | Path,
        *,
        gpu: str,
        probes: Mapping[str, str | Path],
        sharpness: float | None = None,
    ) -> SiMoEStrategy:
        """Load a kernel model and describe the new GPU: its catalog key (spec sheet) and
        its probe measurements, one Kernel Tuner cache file per probe kernel."""
        model = load_model(model_path)
        meta = model_metadata(model_path)
        if meta.get("kind") != MODEL_KIND:
            raise BadInputError(f"{model_path}: not a SiMoE kernel model")
        space = KernelSpace.model_validate(meta["space"])
        probe_set: dict[str, list[str]] = meta["probes"]
        missing = sorted(set(probe_set) - set(probes))
        if missing:
            raise BadInputError(f"the model's probe set needs measurements of {missing}")
        caches = {k: read_cache_file(probes[k], device_name=gpu) for k in probe_set}
        hardware = kernel_hardware_vector(
            find_gpu(gpu).analytical, gpu_probe_vector(probe_set, caches)
        )
        chosen = float(meta.get("sharpness", 2.0)) if sharpness is None else sharpness
        return cls(model, space, hardware, chosen)

    def rank(self, configs: Sequence[Sequence[Any]]) -> RankedSearch:
        """The search over `configs` (values in the space's parameter order)."""
        features = self.featurizer.features(configs)
        names, scores = expert_scores(self.model, features)
        prior = gate_weights(self.model, features, self.hardware, names)
        return RankedSearch(scores, prior, self.sharpness)

    def tune(self, searchspace: Any, runner: Any, tuning_options: Any) -> list[dict]:
        """Kernel Tuner's strategy entry point."""
        from kernel_tuner.strategies.common import CostFunc
        from kernel_tuner.util import StopCriterionReached

        names = list(searchspace.tune_params)
        if names != self.featurizer.space.param_names:
            raise BadInputError(
                f"the model ranks parameters {self.featurizer.space.param_names}, "
                f"Kernel Tuner's space has {names}"
            )
        configs = list(searchspace.list)
        cost = CostFunc(searchspace, tuning_options, runner)
        search = self.rank(configs)
        budget = int(tuning_options.get("max_fevals", len(configs)))

        def measure(i: int) -> float:
            value = cost(list(configs[i]), check_restrictions=False)
            self.measured.append(tuple(configs[i]))
            ok = isinstance(value, (int, float)) and math.isfinite(value)
            return float(value) if ok and value < sys.float_info.max else math.nan

        # StopCriterionReached: the budget (evaluations or time) is spent
        with contextlib.suppress(StopCriterionReached):
            run_search(search, measure, min(budget, len(configs)))
        return cost.results
