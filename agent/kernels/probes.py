"""The empirical half of a real GPU's hardware vector: a fixed, versioned probe set.

A GPU "runs the probes" by measuring a few fixed configurations of kernels other than the
one being predicted (the paper's hybrid representation, on real measurements). Which
configurations is decided by a hash of the probe-set version, the kernel and the
configuration's key, never by any GPU's times: the same probes for every GPU, and a new
version picks others. A probe that fails on a GPU is a fact about that GPU too: its slot
says "slower than every probe that ran".
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

PROBE_SET_VERSION = "kernel-probes-v1"
# Where a probe failed: this much slower (log scale) than the slowest probe that ran.
FAILED_PROBE_MARGIN = 1.0


class Measured(Protocol):
    """One GPU's configurations of a kernel: a cache file, or the store's records of it."""

    keys: list[str]
    time_ms: np.ndarray


def _rank(kernel: str, key: str) -> str:
    return hashlib.sha256(f"{PROBE_SET_VERSION}:{kernel}:{key}".encode()).hexdigest()


def probe_keys(kernel: str, caches: Sequence[Measured], count: int) -> list[str]:
    """`count` configurations of `kernel` that every given GPU's data holds, by the hash."""
    common = set(caches[0].keys).intersection(*(c.keys for c in caches[1:]))
    return sorted(common, key=lambda k: _rank(kernel, k))[:count]


def probe_values(cache: Measured, keys: Sequence[str]) -> np.ndarray:
    """Centered log times of the probes on one GPU: the shape of how it ranks them.

    Centered, so the GPU's absolute speed (which the spec sheet already gives, and which
    some cache files record on another scale) does not enter; failed probes get the
    slowest value plus a margin.
    """
    index = {k: i for i, k in enumerate(cache.keys)}
    times = np.array([cache.time_ms[index[k]] if k in index else np.nan for k in keys])
    logs = np.log(times)
    ran = np.isfinite(logs)
    if not ran.any():
        return np.full(len(keys), FAILED_PROBE_MARGIN, dtype=np.float32)
    logs = logs - logs[ran].mean()
    logs[~ran] = logs[ran].max() + FAILED_PROBE_MARGIN
    return logs.astype(np.float32)


def gpu_probe_vector(
    probes: Mapping[str, Sequence[str]], caches_of_gpu: Mapping[str, Measured]
) -> np.ndarray:
    """All probe values of one GPU, kernel by kernel in the order `probes` lists them."""
    parts = [probe_values(caches_of_gpu[kernel], keys) for kernel, keys in probes.items()]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
