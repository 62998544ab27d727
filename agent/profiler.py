"""Profile a device: its analytical specs plus the empirical fingerprint of the probe suite.

The fingerprint is what a spec sheet does not tell: the median latency of every probe
of the fixed suite (agent/probes.py), the streaming bandwidth and the FMA throughput
the device actually reaches. Probes are measured in interleaved passes (every probe
once per pass) so that a burst of load on a shared machine hits one sample of each
probe rather than all samples of one probe, which keeps their order stable.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path

from pydantic import ValidationError

from agent.devices.base import Device
from agent.node_state import NodeState
from agent.probes import BANDWIDTH_PROBE, FMA_PROBE, PROBE_SUITE_VERSION, PROBES, Probe
from agent.progress import ProgressCallback
from schemas import EmpiricalFingerprint, HardwareProfile, RunFailure

__all__ = [
    "PROBE_SUITE_VERSION",
    "load_or_profile",
    "measure_probes",
    "profile_device",
    "profile_path",
]

log = logging.getLogger(__name__)

# Smallest latency we report: PositiveFloat must hold even for a timer that rounds to 0.
_MIN_LATENCY_US = 1e-3
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
    by_name = {probe.name: probe for probe in PROBES}
    stream, fma = by_name[BANDWIDTH_PROBE], by_name[FMA_PROBE]
    fingerprint = EmpiricalFingerprint(
        probe_suite_version=PROBE_SUITE_VERSION,
        probe_latency_us={
            name: max(secs * 1e6, _MIN_LATENCY_US) for name, secs in latencies.items()
        },
        bandwidth_gbs=stream.bytes(target) / latencies[BANDWIDTH_PROBE] / 1e9,
        fma_gflops=fma.flops(target) / latencies[FMA_PROBE] / 1e9,
    )
    return HardwareProfile(
        device_kind=device.kind,
        device=device.name,
        name=device.hardware_name,
        analytical=device.analytical_specs(),
        empirical=fingerprint,
        simulated=device.simulated,
    )


def profile_path(device: Device, state_dir: Path) -> Path:
    return NodeState(state_dir).profile_path(device.name)


def _read_cached(path: Path, device: Device) -> HardwareProfile | None:
    """The cached profile if it is valid, of this device and of this probe suite; else None."""
    if not path.exists():
        return None
    try:
        profile = HardwareProfile.model_validate_json(path.read_bytes())
    except (ValidationError, ValueError, OSError) as exc:
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        log.warning("%s: unreadable cached profile (%s); profiling again", path, reason)
        return None
    if profile.device != device.name or profile.device_kind != device.kind:
        log.warning("%s: cached profile is of %s; profiling again", path, profile.device)
        return None
    if profile.empirical.probe_suite_version != PROBE_SUITE_VERSION:
        log.info("%s: probe suite changed; profiling again", path)
        return None
    return profile


def load_or_profile(
    device: Device,
    state_dir: Path,
    *,
    refresh: bool = False,
    repeat: int = 5,
    progress: ProgressCallback | None = None,
) -> HardwareProfile:
    """The device's profile from `state_dir/profiles/<slug>.json`, profiling it if needed.

    A missing, corrupt, foreign or outdated cache file (or `refresh`) means profiling
    again; the new profile is written to the cache and saved into the node's store.
    """
    node = NodeState(state_dir)
    if not refresh:
        cached = _read_cached(node.profile_path(device.name), device)
        if cached is not None:
            return cached
    profile = profile_device(device, repeat=repeat, progress=progress)
    node.save_profile(profile)
    return profile
