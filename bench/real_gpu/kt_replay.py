"""Kernel Tuner's own strategies replayed on a brute-forced cache file (issue 22's peers).

Why: SiMoE's claims on real GPUs are measured against Kernel Tuner's optimisation
strategies run from scratch at the same measurement budget. To be fair to those peers,
the search is not reimplemented here: `kernel_tuner.tune_kernel` itself runs, in its
simulation mode, on a decompressed copy of the benchmark_hub cache file, and this module
only records the order in which Kernel Tuner evaluated configurations.

How Kernel Tuner matches a cache (kernel_tuner 1.5.0, `util.process_cache`): in
simulation mode the device name is taken from the file; `kernel_name` must equal the
file's, `problem_size` must equal it element-wise (`check_matching_problem_size`), and
`tune_params` must have the file's `tune_params_keys` in the same order (the cache key is
the values joined by commas). We pass all three from the file itself.

The search space equals the cached one: the T1 description's Conditions whose parameters
are all tuned in the file and that every cached configuration satisfies become string
restrictions (benchmark_hub's gemm caches were built without the T1 condition
`not (MWG == 128 and NWG == 128 and MDIMC == 8 and NDIMC == 8)`, so it is dropped); if the
resulting space is still larger than the cache (the RTX 3060 Laptop's gemm file holds
10,000 of the 17,956 configurations), a membership restriction over the cached keys is
added. Failed configurations (`"InvalidConfig"` etc.) stay in the space: measuring one
spends a measurement, as on a real GPU. (`kernel_tuner.tune_cache` is not used: its
inferred restriction drops failed configurations from the space.)

Speed: parsing a 16 MB cache takes ~0.75 s, so the parsed file is memoised per process
(Kernel Tuner's `read_cache` is wrapped, for our temporary files only, and each call
gets its own shallow copy of the `cache` dict, whose entries the simulation runner
copies before use), and the Searchspace is built once per (file, restrictions) and
shallow-copied per call with fresh neighbour caches (a deep copy costs more than
building it). Nothing else about the search changes.

Seeding: Kernel Tuner 1.5 strategies draw from Python's `random` and NumPy's global
generator (`searchspace.get_random_sample` uses `np.random.choice`; genetic_algorithm
uses `random` and `np.random`; dual_annealing calls `scipy.optimize.dual_annealing`
without a seed, which uses NumPy's global RandomState; greedy_ils uses `random`). Both
are seeded before each call. `bayes_opt` with its default Latin-hypercube initial sample
draws from an unseeded `scipy.stats.qmc.LatinHypercube`, so it is run here with
`samplingmethod="random"` to be reproducible. Strategy modules are imported before
seeding (Kernel Tuner loads them lazily, and an import may draw random numbers).

Strategies: random_sample, genetic_algorithm, dual_annealing (the issue's three) and
bayes_opt. Kernel Tuner's documentation does not recommend one strategy: its
optimisation-strategies page (doc/source/optimization.rst, published as
kerneltuner.github.io/kernel_tuner/stable/optimization.html) and the `strategy` option of
`tune_kernel` (kernel_tuner 1.5.0; repository commit 96a6abc) list them without a
preference, and its tutorials leave the choice to the user. The one strategy its
documentation singles out is Bayesian optimisation: the index page (doc/source/index.rst,
"Citation") asks users of "Kernel Tuner's Bayesian Optimization strategy" to cite
Willemsen, van Nieuwpoort, van Werkhoven, "Bayesian Optimization for auto-tuning GPU
kernels" (PMBS at SC21), the paper that introduced it; for
comparisons of the others it points to Schoonhoven et al., "Benchmarking optimization
algorithms for auto-tuning GPU kernels" (IEEE TEVC 2022). greedy_ils (EXTRA_STRATEGIES)
is a further local-search peer, cheap to run.
"""

from __future__ import annotations

import atexit
import copy
import gzip
import json
import random
import shutil
import tempfile
import warnings
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The issue's three strategies, then Kernel Tuner's Bayesian optimisation (see the
#: module docstring for why it is the fourth).
STRATEGIES: tuple[str, ...] = (
    "random_sample",
    "genetic_algorithm",
    "dual_annealing",
    "bayes_opt",
)
#: A further peer, cheap to run: greedy iterated local search.
EXTRA_STRATEGIES: tuple[str, ...] = ("greedy_ils",)

#: fill_budget raises max_fevals up to this multiple of the space size.
FILL_CAP = 64

#: Per-strategy options that make a run reproducible from the global seeds.
SEEDABLE_OPTIONS: dict[str, dict[str, Any]] = {"bayes_opt": {"samplingmethod": "random"}}

_SAFE_BUILTINS: dict[str, Any] = {"max": max, "min": min, "abs": abs}
_TMPDIR: Path | None = None
_PREPARED: dict[tuple[str, str], _Prepared] = {}
_READ_MEMO: dict[str, dict[str, Any]] = {}


@dataclass
class _Prepared:
    """What one cache file needs for every call: its copy, header, restrictions, space."""

    json_path: Path
    kernel_name: str
    problem_size: Any
    tune_params: dict[str, list[Any]]
    keys_order: list[str]
    restrictions: list[Any]
    searchspace: Any


def _tmpdir() -> Path:
    global _TMPDIR
    if _TMPDIR is None:
        _TMPDIR = Path(tempfile.mkdtemp(prefix="simoe_kt_replay_"))
        atexit.register(shutil.rmtree, _TMPDIR, True)
    return _TMPDIR


def _decompress(cache_file: Path) -> Path:
    """A plain-JSON copy of a (possibly gzipped) cache file, in this process's temp dir."""
    out = _tmpdir() / f"{len(list(_tmpdir().iterdir()))}_{cache_file.name.removesuffix('.gz')}"
    if out.suffix != ".json":
        out = out.with_suffix(".json")
    opener = gzip.open if cache_file.suffix == ".gz" else open
    with opener(cache_file, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def t1_conditions(search_space_file: Path | None) -> list[str]:
    """The Conditions (Python expressions) of a T1 search-space description."""
    if search_space_file is None:
        return []
    t1 = json.loads(Path(search_space_file).read_text())
    return [c["Expression"] for c in t1.get("ConfigurationSpace", {}).get("Conditions", [])]


def _holds_on_all(expr: str, names: list[str], configs: list[tuple[Any, ...]]) -> bool:
    """Whether `expr` is true on every config (evaluated once per distinct value tuple)."""
    code = compile(expr, "<condition>", "eval")
    used = [i for i, n in enumerate(names) if n in code.co_names]
    seen: set[tuple[Any, ...]] = set()
    for cfg in configs:
        sub = tuple(cfg[i] for i in used)
        if sub in seen:
            continue
        seen.add(sub)
        if not eval(code, {"__builtins__": _SAFE_BUILTINS}, {names[i]: cfg[i] for i in used}):
            return False
    return True


def _prepare(cache_file: Path, search_space_file: Path | None) -> _Prepared:
    key = (str(Path(cache_file).resolve()), str(search_space_file and Path(search_space_file)))
    if key in _PREPARED:
        return _PREPARED[key]
    from constraint import FunctionConstraint
    from kernel_tuner import util as kt_util
    from kernel_tuner.searchspace import Searchspace

    json_path = _decompress(Path(cache_file))
    data = kt_util.read_cache(str(json_path), open_cache=False)
    _READ_MEMO[str(json_path)] = data
    names = list(data["tune_params_keys"])
    tune_params = {n: list(data["tune_params"][n]) for n in names}
    cached = [tuple(entry[n] for n in names) for entry in data["cache"].values()]
    restrictions: list[Any] = [
        expr
        for expr in t1_conditions(search_space_file)
        if set(compile(expr, "<c>", "eval").co_names) <= set(names) | set(_SAFE_BUILTINS)
        and _holds_on_all(expr, names, cached)
    ]
    # the simulation device's max_threads (kernel_tuner.runners.simulation)
    max_threads = 1_000_000_000
    space = Searchspace(tune_params, restrictions or None, max_threads)
    cached_set = set(cached)
    if set(space.list) != cached_set:
        if not set(space.list) >= cached_set:
            raise ValueError(f"{cache_file}: cached configurations outside the search space")

        def in_cache(*values: Any) -> bool:
            return values in cached_set

        restrictions = [*restrictions, FunctionConstraint(in_cache)]
        space = Searchspace(tune_params, restrictions, max_threads)
        if set(space.list) != cached_set:
            raise ValueError(f"{cache_file}: search space differs from the cached one")
    prepared = _Prepared(
        json_path=json_path,
        kernel_name=data["kernel_name"],
        problem_size=data["problem_size"],
        tune_params=tune_params,
        keys_order=names,
        restrictions=restrictions,
        searchspace=space,
    )
    _PREPARED[key] = prepared
    return prepared


def _fresh_copy(space: Any) -> Any:
    """A copy of a built Searchspace that shares its read-only list and lookups.

    The neighbour caches are per-run state (`get_random_neighbor` pops from the partial
    cache), so the copy gets empty ones, as a newly built Searchspace has.
    """
    from kernel_tuner.searchspace import supported_neighbor_methods

    new = copy.copy(space)
    new._Searchspace__neighbor_cache = {m: {} for m in supported_neighbor_methods}
    new._Searchspace__neighbor_partial_cache = {
        m: defaultdict(list) for m in supported_neighbor_methods
    }
    new.neighbors_index = {}
    return new


@contextmanager
def _reuse(prepared: _Prepared) -> Iterator[None]:
    """Serve Kernel Tuner the parsed cache and the built Searchspace of `prepared`."""
    from kernel_tuner import interface as kt_interface
    from kernel_tuner import util as kt_util

    orig_read, orig_space = kt_util.read_cache, kt_interface.Searchspace

    def read_cache(cachefile: str, open_cache: bool = True) -> dict[str, Any]:
        memo = _READ_MEMO.get(str(cachefile))
        if memo is None or open_cache:
            return orig_read(cachefile, open_cache)
        return {**memo, "cache": dict(memo["cache"])}

    def searchspace(tune_params: dict, restrictions: Any, max_threads: int, **kw: Any) -> Any:
        if kw or tune_params != prepared.tune_params:
            return orig_space(tune_params, restrictions, max_threads, **kw)
        return _fresh_copy(prepared.searchspace)

    kt_util.read_cache, kt_interface.Searchspace = read_cache, searchspace
    try:
        yield
    finally:
        kt_util.read_cache, kt_interface.Searchspace = orig_read, orig_space


def kt_strategy_trace(
    cache_file: Path,
    search_space_file: Path | None,
    strategy: str | object,
    budget: int,
    seed: int,
    strategy_options: dict | None = None,
    fill_budget: bool = True,
) -> list[str]:
    """Cache keys in the order Kernel Tuner's `strategy` measured them, at most `budget`.

    Runs `kernel_tuner.tune_kernel(..., simulation_mode=True)` on the cache file (a
    `.json.gz` or `.json` Kernel Tuner cache). `strategy` is a Kernel Tuner strategy name
    or an object with a `tune(searchspace, runner, tuning_options)` method. A configuration
    Kernel Tuner evaluates again (served from its cache, not counted against max_fevals)
    appears once, at its first evaluation; failed configurations are included.

    Some strategies stop before `budget` distinct measurements: dual_annealing hands
    `max_fevals` to `scipy.optimize.dual_annealing` as `maxfun`, which counts every call,
    repeats included (at 64 it measures 7-15 distinct gemm configurations). With
    `fill_budget`, such a run is repeated with the same seed and `max_fevals` x4 (up to the
    space size x FILL_CAP: Kernel Tuner caps its own count of distinct measurements at
    the space size, not the option it hands the strategy) until it measures `budget`
    distinct configurations, and the first `budget`
    of them are returned, so every peer spends the same budget. The shorter run's trace is
    a prefix of the longer one's whenever only the stopping point differs (checked in the
    tests for dual_annealing).
    """
    prepared = _prepare(Path(cache_file), search_space_file)
    size = int(prepared.searchspace.size)
    max_fevals = budget
    while True:
        trace = _run(prepared, strategy, max_fevals, seed, strategy_options)
        if not fill_budget or len(trace) >= min(budget, size) or max_fevals >= FILL_CAP * size:
            return trace[:budget]
        max_fevals = 4 * max_fevals


def _run(
    prepared: _Prepared,
    strategy: str | object,
    max_fevals: int,
    seed: int,
    strategy_options: dict | None,
) -> list[str]:
    """One seeded `tune_kernel` call; the distinct keys in evaluation order."""
    from kernel_tuner import tune_kernel

    options: dict[str, Any] = (
        dict(SEEDABLE_OPTIONS.get(strategy, {})) if isinstance(strategy, str) else {}
    )
    options.update(strategy_options or {})
    options["max_fevals"] = max_fevals
    if isinstance(strategy, str):
        from kernel_tuner.interface import strategy_map

        # import the (lazily loaded) strategy module before seeding: importing one can
        # draw random numbers (bayes_opt's first run in a process differed otherwise)
        getattr(strategy_map[strategy], "tune", None)
    random.seed(seed)
    np.random.seed(seed)
    with _reuse(prepared), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _env = tune_kernel(
            prepared.kernel_name,
            "",
            prepared.problem_size,
            [],
            prepared.tune_params,
            restrictions=prepared.restrictions or None,
            strategy=strategy,
            strategy_options=options,
            cache=str(prepared.json_path),
            simulation_mode=True,
            quiet=True,
            verbose=False,
        )
    order: dict[str, None] = {}
    for result in results:
        order.setdefault(",".join(str(result[n]) for n in prepared.keys_order), None)
    return list(order)
