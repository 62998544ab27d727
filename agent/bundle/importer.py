"""Bring a bundle's results home: records and the GPU's profile into the node's store.

Results measured on a GPU become `cuda` records (never simulated) with the
profile the same run measured (NVML and CUDA attributes, the probe suite,
bandwidth and FMA). Results of the simulated stand-in become records of the
simulated twin, labelled simulated: a dry run never passes for a measurement.
A partial run (killed, or stopped at its deadline) imports what it measured.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from agent.devices.cuda import analytical_specs_from, attributes_from_report
from schemas import (
    FAILED_RUN_SECS,
    BadInputError,
    HardwareProfile,
    RunFailure,
    TuningRecord,
)
from schemas.bundle import BundleManifest, ResultRow


class ImportSummary(BaseModel):
    """What `bundle import` did; the `--json` output of the command."""

    model_config = ConfigDict(extra="forbid")

    device: str
    simulated: bool
    records: int
    failed_records: int
    expected_entries: int
    measured_entries: int
    stopped: str | None
    first_error: str | None
    profile_id: str | None
    profile_error: str | None


def read_results(results_dir: Path) -> tuple[dict[str, Any], list[ResultRow]]:
    """summary.json and every complete line of results.jsonl (a killed run may cut the last)."""
    summary_path = results_dir / "summary.json"
    if not summary_path.is_file():
        raise BadInputError(f"{results_dir}: no summary.json (is this a bundle run's output?)")
    try:
        summary = json.loads(summary_path.read_text())
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{summary_path}: not JSON ({exc})") from None
    rows: list[ResultRow] = []
    path = results_dir / "results.jsonl"
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(ResultRow.model_validate_json(line))
            except ValidationError:
                continue  # the line a kill cut short
    return summary, rows


def load_home(home_dir: Path) -> tuple[BundleManifest, dict[str, dict[str, Any]], dict[str, Any]]:
    """The bundle's manifest, its entries (traces) and workloads, as the exporter kept them."""
    try:
        manifest = BundleManifest.model_validate_json((home_dir / "manifest.json").read_text())
        entries = {
            row["id"]: row
            for row in map(json.loads, (home_dir / "entries.jsonl").read_text().splitlines())
        }
        workloads = json.loads((home_dir / "workloads.json").read_text())
    except (OSError, ValueError) as exc:
        raise BadInputError(f"{home_dir}: not a bundle's home folder ({exc})") from None
    return manifest, entries, workloads


def _median(row: ResultRow) -> float | None:
    return statistics.median(row.run_secs) if row.ok and row.run_secs else None


def build_profile(
    device: str, simulated: bool, described: dict[str, Any], rows: list[ResultRow],
    entries: dict[str, dict[str, Any]], gpu: str,
) -> HardwareProfile:  # fmt: skip
    """The GPU's hybrid profile from one bundle run; RunFailure names what is missing."""
    from agent.probes import BANDWIDTH_PROBE, FMA_PROBE, PROBES, fingerprint_from

    probe_secs = {row.group: _median(row) for row in rows if row.kind == "probe"}
    missing = [p.name for p in PROBES if probe_secs.get(p.name) is None]
    if missing:
        raise RunFailure(f"no profile: probes not measured: {', '.join(missing)}")
    by_name = {entries[i]["group"]: entries[i] for i in entries if entries[i]["kind"] == "probe"}
    fingerprint = fingerprint_from(
        {name: s for name, s in probe_secs.items() if s},
        stream_bytes=by_name[BANDWIDTH_PROBE]["bytes"],
        fma_flops=by_name[FMA_PROBE]["flops"],
    )
    if simulated:
        from agent.devices.sim import SimulatedGPU

        twin = SimulatedGPU.from_spec(device.removeprefix("sim:"))
        analytical, name = twin.analytical_specs(), twin.hardware_name
    else:
        attrs = attributes_from_report(described.get("attributes", {}))
        analytical, name = analytical_specs_from(attrs), attrs.name
    return HardwareProfile(
        device_kind="sim" if simulated else "cuda", device=device, name=name,
        analytical=analytical, empirical=fingerprint, simulated=simulated,
    )  # fmt: skip


def import_results(
    results_dir: Path, home_dir: Path, store_path: Path, *, device: str | None = None
) -> ImportSummary:
    """Records (and the profile, when every probe was measured) into the store at store_path."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from agent.ms_database import plain_json
    from agent.store import Store

    manifest, entries, workloads = load_home(home_dir)
    summary, rows = read_results(results_dir)
    if summary.get("bundle_id") not in (None, manifest.bundle_id):
        raise BadInputError(
            f"{results_dir} holds results of bundle {summary.get('bundle_id')}, "
            f"not of {manifest.bundle_id} ({home_dir})"
        )
    described = summary.get("device")
    if not described:
        raise RunFailure(
            f"{results_dir}: the run stopped before it described its device "
            f"(first error: {summary.get('first_error')}); nothing to import"
        )
    simulated = bool(described.get("simulated", True))
    if simulated:
        name = str(described.get("device", "sim"))
        if not name.startswith("sim:"):
            raise BadInputError(f"{results_dir}: simulated results of a non-sim device {name!r}")
        if device is not None and device != name:
            raise BadInputError(f"simulated results import only as their twin {name}, not {device}")
    else:
        name = device or str(described.get("device", "cuda:0"))
        if not name.startswith("cuda"):
            raise BadInputError(f"--device {name}: GPU measurements import as cuda:N")
    profile_id = profile_error = None
    try:
        profile = build_profile(name, simulated, described, rows, entries, manifest.gpu)
    except (RunFailure, ValidationError, KeyError, ZeroDivisionError) as exc:
        profile, profile_error = None, str(exc).splitlines()[0]
    args_info: dict[str, list[Any]] = {}
    records, ids = [], []
    for row in rows:
        entry = entries.get(row.id)
        if row.kind != "candidate" or entry is None:
            continue
        work = workloads[entry["group"]]
        if entry["group"] not in args_info:
            mod = tvm.ir.load_json(work["mod_json"])
            args_info[entry["group"]] = [
                plain_json(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])
            ]
        records.append(
            TuningRecord(
                workload_key=work["workload_key"],
                task_name=entry["group"],
                trace=entry["trace"],
                run_secs=row.run_secs if row.ok and row.run_secs else [FAILED_RUN_SECS],
                target=manifest.target,
                args_info=args_info[entry["group"]],
                device=name,
                simulated=simulated,
            )  # fmt: skip
        )
        ids.append(row.id)
    features_path = home_dir / "features.npz"
    features = dict(np.load(features_path)) if features_path.is_file() else {}
    with Store(store_path) as store:
        if profile is not None:
            store.save_profile(profile)
            profile_id = profile.profile_id
            for record in records:
                record.profile_id = profile_id
        for group, work in workloads.items():
            store.add_workload(work["workload_key"], group, work["mod_json"], group)
        candidate_ids = store.add_records(records) if records else []
        store.put_features(
            {cid: features[i] for cid, i in zip(candidate_ids, ids, strict=True) if i in features}
        )
    return ImportSummary(
        device=name, simulated=simulated, records=len(records),
        failed_records=sum(1 for r in records if r.failed),
        expected_entries=len(manifest.entries), measured_entries=sum(1 for r in rows if r.ok),
        stopped=summary.get("stopped"), first_error=summary.get("first_error"),
        profile_id=profile_id, profile_error=profile_error,
    )  # fmt: skip
