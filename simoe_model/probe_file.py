"""The public probe file: the format the server reads and the agent's `probes build` writes.

An .npz of `rows_<i>` (log-transformed PerStoreFeature rows [rows, FEATURE_DIM], float32)
and `offsets_<i>` (row offsets of the candidates [n + 1]) per probe task i = 0, 1, ...:
candidate programs of public workloads, program features only, no latency. Here, not in
`server` or `agent`, because both sides use it and neither may import the other.

SiMoE ships one: `suite` (`SUITE_PROBES`), the deployment's default probe set, written by
`simoe-agent probes build --out simoe_model/probe_sets/suite_seed0.npz` (the operator suite's
public workloads, 32 candidates each, seed 0). A server can read it without TVM.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from schemas import BadInputError
from simoe_model.features import FEATURE_DIM


@dataclass(frozen=True)
class ProbeTask:
    """One probe task's candidates: rows, segment ids, candidate count."""

    rows: torch.Tensor
    segment: torch.Tensor
    n: int


SUITE_PROBES = Path(__file__).resolve().parent / "probe_sets" / "suite_seed0.npz"
# what `--probes` accepts besides a file's path
NAMED_PROBES = {"suite": SUITE_PROBES}


def probe_file_path(name_or_path: str | Path) -> Path:
    """The file of a probe set: a shipped set's name (`NAMED_PROBES`) or a path."""
    return NAMED_PROBES.get(str(name_or_path), Path(name_or_path))


def load_probes(path: str | Path) -> list[ProbeTask]:
    """The probe set of an .npz file or a shipped set's name (see the module docstring);
    BadInputError, one line, for a missing or malformed file."""
    file = probe_file_path(path)
    if not file.is_file():
        raise BadInputError(f"probe file {file} does not exist")
    try:
        with np.load(file, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    # a damaged file: a zip that does not open, or one cut short inside a member
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise BadInputError(f"probe file {file} is not an .npz of arrays: {exc}") from None
    return probes_from_arrays(arrays, f"probe file {file}")


def probes_from_arrays(arrays: Mapping[str, np.ndarray], what: str) -> list[ProbeTask]:
    """The probe set of `rows_<i>`/`offsets_<i>` arrays (a file's, or a train message's);
    BadInputError, one line naming `what`, if they are malformed."""
    tasks: list[ProbeTask] = []
    for i in itertools.count():
        if f"rows_{i}" not in arrays:
            break
        rows, offsets = np.asarray(arrays[f"rows_{i}"]), arrays.get(f"offsets_{i}")
        if offsets is None or rows.ndim != 2 or rows.shape[1] != FEATURE_DIM:
            raise BadInputError(f"{what}: task {i} needs rows [n, {FEATURE_DIM}] and offsets")
        offsets = np.asarray(offsets)
        counts = np.diff(offsets.astype(np.int64))
        if offsets.ndim != 1 or len(counts) < 2 or (counts <= 0).any() or offsets[-1] != len(rows):
            raise BadInputError(f"{what}: task {i}'s offsets do not match its rows")
        if not np.isfinite(rows).all():
            raise BadInputError(f"{what}: task {i} has non-finite rows")
        segment = np.repeat(np.arange(len(counts)), counts)
        tasks.append(
            ProbeTask(
                torch.as_tensor(rows, dtype=torch.float32), torch.as_tensor(segment), len(counts)
            )
        )
    if not tasks:
        raise BadInputError(f"{what} holds no probe task (rows_0, offsets_0, ...)")
    return tasks


def probe_arrays(tasks: Sequence[ProbeTask]) -> dict[str, np.ndarray]:
    """`probes_from_arrays`' arrays of a probe set (what a train message carries)."""
    arrays: dict[str, np.ndarray] = {}
    for i, task in enumerate(tasks):
        counts = np.bincount(task.segment.numpy(), minlength=task.n)
        arrays[f"rows_{i}"] = task.rows.numpy().astype(np.float32)
        arrays[f"offsets_{i}"] = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return arrays


def probe_digest(tasks: Sequence[ProbeTask]) -> str:
    """The sha256 of a probe set, over `probe_arrays`' form (names, dtypes, shapes, bytes):
    the same set has the same digest whatever file or message it came in (compressed or
    not, float64 rows or float32), so the server and a node compute it alike."""
    digest = hashlib.sha256()
    for key, array in probe_arrays(tasks).items():
        digest.update(f"{key} {array.dtype.str} {array.shape}\n".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


@functools.cache
def suite_digest() -> str:
    """The digest of the probe set SiMoE ships (`SUITE_PROBES`): every node holds it."""
    return probe_digest(load_probes(SUITE_PROBES))


def save_probes(path: Path, tasks: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
    """Write (rows, offsets) per probe task in `load_probes`' format, at `path` exactly
    (numpy would add `.npz` to a name without it)."""
    arrays: dict[str, np.ndarray] = {}
    for i, (rows, offsets) in enumerate(tasks):
        arrays[f"rows_{i}"] = np.asarray(rows, dtype=np.float32)
        arrays[f"offsets_{i}"] = np.asarray(offsets, dtype=np.int64)
    with Path(path).open("wb") as file:
        np.savez_compressed(file, **arrays)
