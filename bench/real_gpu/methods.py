"""Every method on a held-out real GPU, as the configurations it measures there, in order.

A method sees the training GPUs' measurements (the fleet) and the target's spec sheet
and probes; it never reads the target's times except through `measure`, one
configuration at a time, counted. Traces are indices into the target's cache.

- SiMoE (hybrid; analytical-only, empirical-only and pooled (no hardware input)
  ablations with their gate retrained at equal effort; nearest expert);
- best-configuration transfer (TopHub's way): the best configurations of the most
  similar GPU, or of the k most similar taken in turn, by spec-sheet similarity or by
  SiMoE's learned one;
- the hindsight oracle source: the single training GPU whose best configurations are
  best on the target (it reads the target's times: a ceiling, not a method);
- from scratch: Kernel Tuner's own strategies (`kt_replay`) and MetaSchedule's XGBoost
  recipe (`xgb_recipe`), which measure only on the target.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from agent.kernels.cache_file import KernelCache
from schemas.kernels import KernelGpu
from simoe_model.kernel_model import (
    RankedSearch,
    expert_scores,
    gate_weights,
    run_search,
    shared_matrix,
)
from simoe_model.model import SiMoE

# The spec-sheet similarity of the baseline: log SMs, clock, bandwidth, L2 and
# FP32 peak, and the vendor (a different vendor is one full unit away).
SPEC_FIELDS = ("compute_units", "clock_mhz", "mem_bandwidth_gbs", "l2_cache_kb", "fp32_gflops")


def spec_distance(a: KernelGpu, b: KernelGpu) -> float:
    diffs = [
        math.log(getattr(a.analytical, f)) - math.log(getattr(b.analytical, f)) for f in SPEC_FIELDS
    ]
    return math.sqrt(sum(d * d for d in diffs) + (0.0 if a.vendor == b.vendor else 1.0))


def spec_order(target: KernelGpu, sources: Sequence[KernelGpu]) -> list[str]:
    """Training GPUs from the most to the least similar by spec sheet."""
    return [g.key for g in sorted(sources, key=lambda g: (spec_distance(target, g), g.key))]


def learned_order(model: SiMoE, target_h: np.ndarray) -> list[str]:
    """Training GPUs (experts) from the most to the least similar by cos(z)."""
    sims = {
        n: model.similarity(target_h, model.expert(n).hardware.numpy()) for n in model.expert_names
    }
    return sorted(sims, key=lambda n: (-sims[n], n))


def best_keys(cache: KernelCache) -> list[str]:
    """A GPU's configurations from its fastest; failed ones left out."""
    ok = np.flatnonzero(cache.valid)
    return [cache.keys[i] for i in ok[np.argsort(cache.time_ms[ok], kind="stable")]]


def transfer_trace(target: KernelCache, sources: Sequence[KernelCache], budget: int) -> list[int]:
    """Measure the sources' best configurations in turn (1st of each, then 2nd, ...).

    A configuration the target's space does not hold is skipped (nothing is spent).
    """
    index = target.index()
    lists = [best_keys(s) for s in sources]
    trace: list[int] = []
    seen: set[int] = set()
    for rank in range(max(len(x) for x in lists)):
        for keys in lists:
            if rank < len(keys) and keys[rank] in index and index[keys[rank]] not in seen:
                seen.add(index[keys[rank]])
                trace.append(index[keys[rank]])
                if len(trace) == budget:
                    return trace
    return trace


def oracle_source(target: KernelCache, sources: dict[str, KernelCache], budget: int) -> str:
    """The source whose transfer curve is best on the target (hindsight: reads its times)."""

    def quality(key: str) -> tuple[float, ...]:
        trace = transfer_trace(target, [sources[key]], budget)
        times = target.time_ms[trace]
        best = np.fmin.accumulate(np.where(np.isfinite(times), times, np.inf))
        return tuple(-float(best[min(n, len(best)) - 1]) for n in (1, 4, 16, 64)) + (0.0,)

    return max(sorted(sources), key=quality)


@dataclass(frozen=True)
class SearchChoice:
    """The search's settings chosen on the fleet (bench.real_gpu.protocol)."""

    sharpness: float = 0.0
    temperature: float = 1.0
    share_weight: float = 0.0


@dataclass
class SiMoETarget:
    """A trained model's view of one target: the experts' scores and the gate's weights.

    `shared[name]`: the best configurations (keys) expert `name`'s GPU shared, for the
    opt-in sharing variant; `keys` are the target's configuration keys.
    """

    model: SiMoE
    features: np.ndarray
    hardware: np.ndarray
    exclude: Sequence[str] = ()
    keys: Sequence[str] = ()
    shared: dict[str, list[str]] | None = None

    def __post_init__(self) -> None:
        names, scores = expert_scores(self.model, self.features)
        keep = [i for i, n in enumerate(names) if n not in set(self.exclude)]
        self.names = [names[i] for i in keep]
        self.scores = scores[:, keep]
        self.prior = gate_weights(self.model, self.features, self.hardware, self.names)
        self.shared_matrix = (
            shared_matrix(self.keys, [self.shared.get(n, []) for n in self.names])
            if self.shared
            else None
        )

    def trace(
        self, measure: Callable[[int], float], budget: int, choice: SearchChoice
    ) -> list[int]:
        search = RankedSearch(
            self.scores,
            self.prior,
            sharpness=choice.sharpness,
            temperature=choice.temperature,
            shared=self.shared_matrix,
            share_weight=choice.share_weight,
        )
        return run_search(search, measure, budget)

    def expert_trace(self, name: str, budget: int) -> list[int]:
        """Measure in the order of one expert alone (the nearest-expert baseline)."""
        column = self.scores[:, self.names.index(name)]
        return [int(i) for i in np.argsort(-column, kind="stable")[:budget]]
