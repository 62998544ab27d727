"""Program features of a parameter-space kernel: its parameter values and what follows.

The second kind of program (a Kernel Tuner search space) gets one representation per
search-space description, derived the same way for every kernel:

- each parameter that varies: its value, and one column per value it takes (a string-
  valued one: those columns only): a tuned space is a grid of few values per parameter
  whose effects interact sharply (a tile that just fits, a flag that fails on one GPU),
  which a small MLP fits far better from indicators than from magnitudes alone;
- the thread block: threads per block (the product of the block-size parameters) and
  whether it fills whole 32- and 64-wide warps;
- the work of one thread per axis: the product of the axis' grid divisors over its block
  dimension (a tiling factor), and their product;
- the grid: blocks along each axis of the problem, and in all.

Rows are raw (non-negative) values; `features.log_transform` (applied by `pack_rows`, as
for MetaSchedule's features) turns them into the log scale the encoder reads. A candidate
is one row, so the model's per-store sum is the identity here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from schemas.kernels import KernelSpace

AXES = ("x", "y", "z")


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


class ParamFeaturizer:
    """Features of configurations of one `KernelSpace` (see the module docstring)."""

    def __init__(self, space: KernelSpace) -> None:
        self.space = space
        self._columns: list[tuple[str, int, Any]] = []  # (name, param index, one-hot value)
        names = space.param_names
        for i, (name, values) in enumerate(space.params.items()):
            if len(values) < 2:
                continue  # a constant says nothing about one configuration against another
            if _numeric(values):
                self._columns.append((name, i, None))
            self._columns += [(f"{name}={v}", i, v) for v in values]
        self._block = [names.index(n) for n in space.block_size_names if n in names]
        self._grid = {a: [names.index(n) for n in space.grid_div.get(a, [])] for a in AXES}
        self._block_of_axis = {
            axis: names.index(space.block_size_names[k])
            for k, axis in enumerate(AXES)
            if k < len(space.block_size_names) and space.block_size_names[k] in names
        }
        derived: list[str] = []
        if self._block:
            derived += ["threads_per_block", "full_warps_32", "full_warps_64"]
        tiled = [a for a in AXES if self._grid[a]]
        derived += [f"work_per_thread_{a}" for a in tiled]
        if tiled:
            derived += ["work_per_thread", *[f"blocks_{a}" for a in tiled], "blocks"]
        self._tiled = tiled
        self.names = [c[0] for c in self._columns] + derived

    @property
    def dim(self) -> int:
        return len(self.names)

    def _row(self, config: Sequence[Any]) -> list[float]:
        row = [
            float(config[i]) if value is None else float(config[i] == value)
            for _, i, value in self._columns
        ]
        threads = 1.0
        if self._block:
            threads = math.prod(float(config[i]) for i in self._block)
            row += [threads, float(threads % 32 == 0), float(threads % 64 == 0)]
        per_thread, blocks = [], []
        for k, axis in enumerate(self._tiled):
            covered = math.prod(float(config[i]) for i in self._grid[axis])
            block_dim = (
                float(config[self._block_of_axis[axis]]) if axis in (self._block_of_axis) else 1.0
            )
            per_thread.append(covered / block_dim if block_dim > 0 else covered)
            size = self.space.problem_size[k] if k < len(self.space.problem_size) else 1
            blocks.append(math.ceil(size / covered) if covered > 0 else 0.0)
        if self._tiled:
            row += per_thread + [math.prod(per_thread)] + blocks + [math.prod(blocks)]
        return row

    def features(self, configs: Sequence[Sequence[Any]]) -> np.ndarray:
        """[n, dim] raw feature rows of the configurations (values in `space` order)."""
        width = len(self.space.params)
        for config in configs:
            if len(config) != width:
                raise ValueError(f"a configuration has {len(config)} values, the space {width}")
        return np.asarray([self._row(c) for c in configs], dtype=np.float32).reshape(
            len(configs), self.dim
        )

    def candidate_features(self, configs: Sequence[Sequence[Any]]) -> list[np.ndarray]:
        """One [1, dim] array per configuration: the shape the model's packing takes."""
        rows = self.features(configs)
        return [rows[i : i + 1] for i in range(len(rows))]
