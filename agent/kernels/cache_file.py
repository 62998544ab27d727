"""Kernel Tuner cache files: a tunable kernel's measured configurations on one GPU.

The format is Kernel Tuner's own (`tune_kernel(..., cache=FILE)`): `device_name`,
`kernel_name`, `problem_size`, `tune_params_keys`, `tune_params` and `cache`, keyed by
the configuration's values joined by commas. While Kernel Tuner is still tuning it leaves
the file without its closing braces; both forms are read, plain or gzipped. An entry whose
`time` is not a finite number (`"InvalidConfig"`, `"CompilationFailedConfig"`, ...) is a
configuration that failed on that GPU: it is kept as a failure, never as a latency.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from schemas import BadInputError
from schemas.errors import one_line
from schemas.kernels import KernelSpace

# The per-configuration costs Kernel Tuner records, in milliseconds: what measuring one
# configuration on the GPU cost (building, checking the output, timing the runs).
COST_FIELDS = ("compile_time", "verification_time", "benchmark_time")


@dataclass(frozen=True)
class KernelCache:
    """One cache file as arrays: configuration i is `keys[i]`, `values[i]`, `time_ms[i]`.

    Attributes:
        space: the search space, from the file (plus block/grid names if given).
        device_name: the GPU, as the file names it (or as the caller named it).
        keys: the cache keys, in file order.
        values: [n, p] parameter values in `space.param_names` order (strings kept).
        time_ms: mean time of each configuration; NaN where it failed.
        failure: why a configuration failed ("" where it ran).
        cost_s: seconds measuring it cost (compile + verification + benchmark).
        path: where it was read from.
    """

    space: KernelSpace
    device_name: str
    keys: list[str]
    values: list[tuple[Any, ...]]
    time_ms: np.ndarray
    failure: list[str]
    cost_s: np.ndarray
    path: Path

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def valid(self) -> np.ndarray:
        return np.isfinite(self.time_ms)

    @property
    def optimum_ms(self) -> float:
        return float(np.nanmin(self.time_ms))

    def index(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.keys)}


def _load_json(path: Path) -> dict[str, Any]:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        text = raw.decode()
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise BadInputError(f"{path}: cannot read a Kernel Tuner cache file ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # Kernel Tuner writes the closing braces only when tuning ends.
        try:
            data = json.loads(text.rstrip().rstrip(",") + "}}")
        except json.JSONDecodeError as exc:
            raise BadInputError(f"{path}: not a Kernel Tuner cache file ({exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cache"), dict):
        raise BadInputError(f"{path}: not a Kernel Tuner cache file (no 'cache' object)")
    return data


def _problem_size(value: Any) -> list[int]:
    sizes = value if isinstance(value, list) else [value]
    if not sizes or not all(isinstance(s, int) and s > 0 for s in sizes):
        raise ValueError(f"problem_size {value!r} is not a list of positive integers")
    return sizes


def _time(entry: dict[str, Any]) -> tuple[float, str]:
    value = entry.get("time")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        if value > 0:
            return float(value), ""
        return math.nan, "non-positive time"
    return math.nan, str(value) if value is not None else "no time"


def _cost_s(entry: dict[str, Any]) -> float:
    total = 0.0
    for name in COST_FIELDS:
        value = entry.get(name, 0.0)
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            total += float(value)
    return total / 1000.0


def read_cache_file(
    path: str | Path,
    *,
    device_name: str | None = None,
    block_size_names: list[str] | None = None,
    grid_div: dict[str, list[str]] | None = None,
) -> KernelCache:
    """Read a Kernel Tuner cache file; BadInputError (one line) for anything malformed.

    `device_name` names the GPU where the file does not (or overrides it).
    """
    path = Path(path)
    data = _load_json(path)
    name = device_name or str(data.get("device_name") or "").strip()
    if not name:
        raise BadInputError(f"{path}: the file names no GPU (device_name is empty); name it")
    try:
        keys_order = data["tune_params_keys"]
        tune_params = data["tune_params"]
        if not isinstance(keys_order, list) or not isinstance(tune_params, dict):
            raise ValueError("tune_params_keys must be a list and tune_params an object")
        params = {k: tune_params[k] for k in keys_order}
        extra: dict[str, Any] = {}
        if block_size_names is not None:
            extra["block_size_names"] = block_size_names
        if grid_div is not None:
            extra["grid_div"] = grid_div
        space = KernelSpace(
            kernel_name=str(data["kernel_name"]),
            problem_size=_problem_size(data["problem_size"]),
            params=params,
            **extra,
        )
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        why = one_line(exc) if isinstance(exc, ValidationError) else f"{type(exc).__name__}: {exc}"
        raise BadInputError(f"{path}: not a Kernel Tuner cache file ({why})") from None
    names = space.param_names
    keys, values, times, failures, costs = [], [], [], [], []
    for key, entry in data["cache"].items():
        if not isinstance(entry, dict) or any(n not in entry for n in names):
            raise BadInputError(f"{path}: cache entry {key!r} lacks parameter values")
        config = tuple(entry[n] for n in names)
        if ",".join(map(str, config)) != key:
            raise BadInputError(f"{path}: cache key {key!r} does not match its values {config}")
        t, why = _time(entry)
        keys.append(key)
        values.append(config)
        times.append(t)
        failures.append(why)
        costs.append(_cost_s(entry))
    if not keys:
        raise BadInputError(f"{path}: the cache holds no configuration")
    if not any(not f for f in failures):
        raise BadInputError(f"{path}: every configuration failed; nothing to learn from")
    return KernelCache(
        space=space,
        device_name=name,
        keys=keys,
        values=values,
        time_ms=np.asarray(times, dtype=np.float64),
        failure=failures,
        cost_s=np.asarray(costs, dtype=np.float64),
        path=path,
    )


def read_t1_layout(path: str | Path) -> tuple[list[str], dict[str, list[str]]]:
    """Block-size names and grid divisors from a T1 search-space description, if it has them.

    T1's `KernelSpecification` gives `LocalSize` (the block's dimensions as parameter
    names) and `GridDivX/Y/Z`; entries that are not parameter names (e.g. "1") are left out.
    """
    path = Path(path)
    try:
        spec = json.loads(path.read_text())["KernelSpecification"]
        params = {
            p["Name"]
            for p in json.loads(path.read_text())["ConfigurationSpace"]["TuningParameters"]
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInputError(f"{path}: not a T1 search-space description ({exc})") from None
    local = spec.get("LocalSize") or {}
    block = [str(local[a]) for a in ("X", "Y", "Z") if str(local.get(a, "")) in params]
    grid = {
        axis.lower(): [str(n) for n in spec.get(f"GridDiv{axis}", []) if str(n) in params]
        for axis in ("X", "Y", "Z")
    }
    return block, {a: n for a, n in grid.items() if n}
