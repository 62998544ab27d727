"""Profile a device: its analytical specs plus the empirical fingerprint of the probe suite.

The fingerprint is what a spec sheet does not tell: the median latency of every probe
of the fixed suite (agent/probes.py), the streaming bandwidth and the FMA throughput
the device actually reaches. Probes are measured in interleaved passes (every probe
once per pass) so that a burst of load on a shared machine hits one sample of each
probe rather than all samples of one probe, which keeps their order stable.

The profiler measures and knows nothing of a state directory: the cached profile (read
with the probe-suite check, written with the store's copy) is `agent.node_state`'s
(`load_or_profile`, `NodeState.cached_profile`); the fingerprint's derivation from the
latencies is `agent.probes.fingerprint_from`, which the bundle importer uses too.
"""

from __future__ import annotations

import statistics

from agent.devices.base import Device
from agent.probes import (
    BANDWIDTH_PROBE,
    FMA_PROBE,
    PROBE_SUITE_VERSION,
    PROBES,
    PROBES_BY_NAME,
    Probe,
    fingerprint_from,
)
from agent.progress import ProgressCallback
from schemas import HardwareProfile, RunFailure

__all__ = [
    "PROBE_SUITE_VERSION",
    "measure_probes",
    "profile_device",
]

_MAX_PASSES = 3


def _passes_for(device: Device, repeat: int) -> tuple[int, int]:
    """(interleaved passes, repeats per measure call).

    A simulated device is deterministic up to modelled noise and free to query in one
    call; a real one is measured in up to 3 interleaved passes (each `measure` call also
    builds the probe and makes its inputs, so more passes cost more than they gain).
    """
    if device.simulated:
        return 1, repeat
    passes = min(repeat, _MAX_PASSES)
    return passes, -(-repeat // passes)


def measure_probes(
    device: Device,
    *,
    repeat: int = 5,
    probes: tuple[Probe, ...] = PROBES,
    progress: ProgressCallback | None = None,
) -> dict[str, float]:
    """Median seconds per run of each probe on `device` (probes built for its target)."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    target = device.target()
    modules = {probe.name: probe.build(target) for probe in probes}
    passes, per_call = _passes_for(device, repeat)
    samples: dict[str, list[float]] = {probe.name: [] for probe in probes}
    total, done = passes * len(probes), 0
    for _ in range(passes):
        for probe in probes:
            if progress is not None:
                progress(probe.name, done, total)
            try:
                secs = device.measure(modules[probe.name], repeat=per_call)
            except RunFailure as exc:
                raise RunFailure(f"probe {probe.name} on {device.name}: {exc}") from exc
            samples[probe.name].extend(float(s) for s in secs)
            done += 1
    if progress is not None:
        progress("", done, total)
    return {name: statistics.median(values) for name, values in samples.items()}


def profile_device(
    device: Device, *, repeat: int = 5, progress: ProgressCallback | None = None
) -> HardwareProfile:
    """The device's hybrid hardware representation: spec sheet plus probe fingerprint."""
    target = device.target()
    latencies = measure_probes(device, repeat=repeat, progress=progress)
    fingerprint = fingerprint_from(
        latencies,
        stream_bytes=PROBES_BY_NAME[BANDWIDTH_PROBE].bytes(target),
        fma_flops=PROBES_BY_NAME[FMA_PROBE].flops(target),
    )
    return HardwareProfile(
        device_kind=device.kind,
        device=device.name,
        name=device.hardware_name,
        analytical=device.analytical_specs(),
        empirical=fingerprint,
        simulated=device.simulated,
    )
