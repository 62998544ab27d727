"""Scores of a measurement trace on a brute-forced space (issue 22's section 5).

Why: every method on the real GPUs (SiMoE, Kernel Tuner's strategies, the XGBoost
recipe, transfer) yields the same thing, the configurations it measured on the target in
order; scoring them all with one module keeps the comparison equal. The exact optimum of
each space is known, so every score is against it.

A trace is a sequence of config indices into the target's arrays: `times` (ms; NaN for a
failed configuration, which still spends a measurement) and `cost_s` (seconds to measure
the config: its recorded compile_time + verification_time + benchmark_time, which the
cache files hold in ms; checked on gemm/RTX_2080_Ti: benchmark_time 1962.8 ms for a config
whose mean time is 60.88 ms over 32 runs, 32 x 60.88 = 1948 ms).

The autotuning-methodology score (Willemsen, van Nieuwpoort, van Werkhoven: "Tuning the
Tuner", arXiv 2509.26300, and the package `autotuning_methodology` 1.1.0) is computed with
the package's own functions where they take in-memory data, and with its formula where
they only read experiment files (its `Curve` objects load results from its on-disk cache):
- used as is: `baseline.RandomSearchCalculatedBaseline` (the calculated random-search
  curve without replacement, red-white index), its `get_standardised_curve`
  ((curve - baseline) / (optimum - baseline): 0 = random search, 1 = the optimum),
  `SearchspaceStatistics.cutoff_point_fevals_time_start_end` (the range: from where random
  search reaches 1% to where it reaches 95% of the way from the median to the optimum,
  `experiments_defaults.json` cutoff_percentile_start 0.01, cutoff_percentile 0.95) and
  `curves.get_indices_in_distribution`;
- reimplemented on arrays: the statistics loader (`SearchspaceStatistics._load`, which
  reads a T4 file: here the same attributes are set from `times`), the strategy curve
  (`curves.StochasticOptimizationAlgorithm.get_curve_over_fevals` with a distribution:
  per function evaluation, the median over repeats of the best-so-far value's index in
  the sorted valid times; a run that ends early keeps its last value, as the package
  does), and the aggregate (`report_experiments.get_strategies_aggregated_performance`:
  the mean of the standardised curve over the range, then the mean over search spaces).
The package's default x-axis is time (`cutoff_type: "time"`); here it is function
evaluations (measurements), the unit of the issue's budgets. Before a run has measured
a valid configuration, its best-so-far is the worst valid time of the space.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

NS: tuple[int, ...] = (1, 4, 16, 64)


def _best_so_far(trace: Sequence[int], times: np.ndarray) -> np.ndarray:
    """Best valid time after each measurement of `trace` (inf until one is valid)."""
    vals = np.asarray(times, dtype=float)[np.asarray(trace, dtype=int)] if len(trace) else []
    vals = np.where(np.isnan(vals), np.inf, vals)
    return np.minimum.accumulate(vals) if len(vals) else np.array([])


def optimum(times: np.ndarray) -> float:
    """The exact optimum (smallest valid time) of a brute-forced space."""
    return float(np.nanmin(np.asarray(times, dtype=float)))


def fraction_at(
    trace: Sequence[int], times: np.ndarray, ns: Iterable[int] = NS
) -> dict[int, float]:
    """Fraction of the optimum (optimum / best measured) after n measurements, per n.

    0 if nothing valid was measured by then; a trace shorter than n is scored on what
    it measured.
    """
    best = _best_so_far(trace, times)
    opt = optimum(times)
    out: dict[int, float] = {}
    for n in ns:
        b = best[min(n, len(best)) - 1] if len(best) and n >= 1 else math.inf
        out[n] = 0.0 if not math.isfinite(b) else float(opt / b)
    return out


def measurements_to(trace: Sequence[int], times: np.ndarray, fraction: float) -> int | None:
    """Measurements until the best reaches `fraction` of the optimum; None if never."""
    best = _best_so_far(trace, times)
    target = optimum(times) / fraction
    hit = np.nonzero(best <= target * (1 + 1e-12))[0]
    return int(hit[0]) + 1 if len(hit) else None


def seconds_to(
    trace: Sequence[int],
    times: np.ndarray,
    cost_s: np.ndarray,
    fraction: float,
    overhead_s: float | Sequence[float] = 0.0,
) -> float | None:
    """Seconds of measuring (plus the method's own overhead) until `fraction` is reached.

    `cost_s[i]`: seconds to compile, verify and benchmark config i. `overhead_s`: the
    method's own seconds, one number in all or one per measurement (e.g. model time).
    None if the fraction is never reached.
    """
    n = measurements_to(trace, times, fraction)
    if n is None:
        return None
    spent = float(np.sum(np.asarray(cost_s, dtype=float)[np.asarray(trace[:n], dtype=int)]))
    if np.ndim(overhead_s) == 0:
        return spent + float(overhead_s)
    return spent + float(np.sum(np.asarray(overhead_s, dtype=float)[:n]))


def cost_seconds(entries: Iterable[Mapping[str, object]]) -> np.ndarray:
    """Per-config measuring cost in seconds from Kernel Tuner cache entries (ms fields)."""
    out = []
    for e in entries:
        total = 0.0
        for key in ("compile_time", "verification_time", "benchmark_time"):
            v = e.get(key, 0.0)
            total += float(v) if isinstance(v, int | float) else 0.0
        out.append(total / 1000.0)
    return np.asarray(out, dtype=float)


def geomean(values: Iterable[float]) -> float:
    """Geometric mean (0 if any value is 0, NaN for no values)."""
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        return math.nan
    if np.any(arr <= 0):
        return 0.0
    return float(np.exp(np.mean(np.log(arr))))


def clustered_bootstrap(
    diff_by_target: Mapping[str, Sequence[float]], n: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of paired differences with a 95% bootstrap interval resampling target GPUs.

    `diff_by_target`: per target, the paired differences (method A - method B, one per
    seed or per kernel on that GPU). Targets are resampled with replacement, all of a
    target's differences going with it (the cluster); the statistic is the mean over
    the resampled targets of each target's mean. Returns (mean, 2.5%, 97.5%).
    """
    keys = [k for k, v in diff_by_target.items() if len(v)]
    if not keys:
        raise ValueError("no target has a difference")
    means = np.array([float(np.mean(diff_by_target[k])) for k in keys])
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(keys), size=(n, len(keys)))
    boot = means[draws].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(means.mean()), float(lo), float(hi)


# --- the autotuning-methodology aggregate score -------------------------------------


def _stats(times: np.ndarray, cost_s: np.ndarray | None = None) -> object:
    """An in-memory `SearchspaceStatistics` (the attributes its `_load` sets from a file)."""
    from autotuning_methodology.searchspace_statistics import SearchspaceStatistics

    class InMemoryStatistics(SearchspaceStatistics):
        """SearchspaceStatistics from arrays instead of a T4 file (minimisation of time)."""

        def __init__(self, perf: np.ndarray, cost: np.ndarray) -> None:
            self.loaded = True
            self.application_name = "in-memory"
            self.device_name = "in-memory"
            self.minimization = True
            self.objective_time_keys = ["all"]
            self.objective_performance_keys = ["time"]
            self.size = perf.shape[0]
            self.objective_times_total = cost
            self.objective_times_total_sorted = np.sort(cost[~np.isnan(cost)])
            self.objective_times_number_of_nan = int(np.count_nonzero(np.isnan(cost)))
            self.objective_performances_total = perf
            nan_mask = np.isnan(perf)
            self.objective_performances_number_of_nan = int(np.count_nonzero(nan_mask))
            self.objective_performances_total_sorted = np.sort(perf[~nan_mask])
            self.objective_performances_total_sorted_nan = np.concatenate(
                (self.objective_performances_total_sorted, [np.nan] * int(nan_mask.sum()))
            )

    perf = np.asarray(times, dtype=float)
    cost = np.ones_like(perf) if cost_s is None else np.asarray(cost_s, dtype=float)
    return InMemoryStatistics(perf, cost)


def methodology_range(times: np.ndarray) -> np.ndarray:
    """The package's function-evaluation range for a space (its default cutoffs)."""
    stats = _stats(times)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start, end, _, _ = stats.cutoff_point_fevals_time_start_end(0.01, 0.95)
    return np.arange(start, end + 1)


def methodology_curve(
    traces: Sequence[Sequence[int]], times: np.ndarray, fevals_range: np.ndarray
) -> np.ndarray:
    """Standardised performance per function evaluation (median over `traces`' repeats)."""
    from autotuning_methodology.baseline import RandomSearchCalculatedBaseline
    from autotuning_methodology.curves import get_indices_in_distribution

    stats = _stats(times)
    dist = stats.objective_performances_total_sorted
    worst = float(dist[-1])
    fevals_range = np.asarray(fevals_range, dtype=int)
    values = np.empty((fevals_range.shape[0], len(traces)))
    for j, trace in enumerate(traces):
        best = _best_so_far(trace, times)
        best = np.where(np.isfinite(best), best, worst)
        if best.size == 0:
            best = np.array([worst])
        # an early-ending run keeps its last value (the package extends curves likewise)
        values[:, j] = best[np.minimum(fevals_range, best.size) - 1]
    indices = get_indices_in_distribution(values, dist)
    curve = dist[np.array(np.round(np.nanmedian(indices, axis=1)), dtype=int)]
    baseline = RandomSearchCalculatedBaseline(stats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return baseline.get_standardised_curve(fevals_range, curve, x_type="fevals")


def methodology_score(
    traces_by_space: Mapping[str, tuple[Sequence[Sequence[int]], np.ndarray]],
    fevals_range: np.ndarray | None = None,
) -> tuple[float, dict[str, float]]:
    """The aggregate score: mean over spaces of the mean standardised curve over the range.

    `traces_by_space[name] = (the traces of the repeats (seeds), the space's times)`.
    `fevals_range`: None for each space's own range from the package's cutoffs (see
    `methodology_range`), or one range for all (e.g. `np.arange(1, 65)` for a budget of
    64). Returns (aggregate, per-space score).
    """
    per_space: dict[str, float] = {}
    for name, (traces, times) in traces_by_space.items():
        rng = methodology_range(times) if fevals_range is None else fevals_range
        per_space[name] = float(np.mean(methodology_curve(traces, times, rng)))
    return float(np.mean(list(per_space.values()))), per_space
