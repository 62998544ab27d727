"""Export a measurement bundle: choose candidates, compile them here, write a manifest.

Writes two folders under OUT:

- `OUT/bundle/`: what travels to the GPU node: `manifest.json`, the cubins
  (xz-compressed), and `run.py` (the runner, standard library only at import);
- `OUT/home/`: what stays here: each entry's workload, trace and program features,
  and the simulated twin's latencies (the dry run's stand-in, and the yardstick
  the evidence run compares the GPU with). No trace or feature leaves the node.

Candidates come from MetaSchedule's own sampler (the design space replayed), from a
tuned database (a node store's best records), from the probe suite and from the
untuned defaults (DLight's rules, as `tune` reports them).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from agent.bundle.lowering import LoweredProgram, Unsupported, lower
from agent.bundle.nvcc import compile_programs
from agent.devices.cuda_env import nvcc_version
from schemas import BadInputError, RunFailure
from schemas.bundle import (
    BundleEntry,
    BundleManifest,
    BundleModule,
    Evaluator,
    Reference,
)

# Called with one line of news per stage (sampling, compiling, writing): not a progress bar.
Say = Callable[[str], None]


class ExportSummary(BaseModel):
    """What `bundle export` wrote; the `--json` output of the command."""

    model_config = ConfigDict(extra="forbid")

    bundle_dir: str
    home_dir: str
    bundle_id: str
    arch: str
    entries: dict[str, int]
    skipped: int
    compile_failures: int
    modules: int
    bundle_bytes: int
    seconds_sampling: float
    seconds_compiling: float


@dataclass
class _Item:
    """One program on its way into the bundle."""

    id: str
    kind: str
    group: str
    mod: Any
    trace: Any = None
    workload_key: str | None = None
    features: np.ndarray | None = None
    program: LoweredProgram | None = None
    mod_json: str | None = None  # the workload's module, when not rebuilt from its spec
    extra: dict[str, Any] = field(default_factory=dict)


def reference_for(workload: str) -> Reference | None:
    """The torch (cuBLAS / cuDNN) version of a workload, when torch has one."""
    from agent.workloads import parse_workload
    from schemas import WorkloadSpec

    spec = parse_workload(workload)
    if not isinstance(spec, WorkloadSpec):
        return None
    d = spec.named_dims
    rid = "ref_" + "".join(c if c.isalnum() else "_" for c in str(spec))
    common = {"id": rid, "group": workload, "dtype": spec.dtype}
    image = [d.get("N"), d.get("C"), d.get("H"), d.get("W")]
    if spec.op == "matmul":
        shapes = [[d["M"], d["K"]], [d["K"], d["N"]]]
        return Reference(op="matmul", library="cuBLAS", shapes=shapes, **common)
    if spec.op == "batch_matmul":
        shapes = [[d["B"], d["M"], d["K"]], [d["B"], d["K"], d["N"]]]
        return Reference(op="bmm", library="cuBLAS", shapes=shapes, **common)
    if spec.op == "conv2d":
        shapes = [image, [d["K"], d["C"], d["R"], d["S"]]]
        kwargs = {"stride": d["stride"], "padding": d["pad"]}
        return Reference(op="conv2d", library="cuDNN", shapes=shapes, kwargs=kwargs, **common)
    if spec.op == "depthwise_conv2d":
        shapes = [image, [d["C"], 1, d["R"], d["S"]]]
        kwargs = {"stride": d["stride"], "padding": d["pad"], "groups": d["C"]}
        return Reference(op="conv2d", library="cuDNN", shapes=shapes, kwargs=kwargs, **common)
    return None


def _sampled(workload: str, target: Any, count: int, seed: int, prefix: str) -> list[_Item]:
    """MetaSchedule's samples of the design space, with their program features."""
    from tvm.s_tir import meta_schedule as ms

    from agent.fleet_dataset import sample_workload
    from agent.ms_database import plain_json, workload_key_of

    sampled = sample_workload(workload, target, count, seed=seed)
    feats = ms.feature_extractor.PerStoreFeature().extract_from(sampled.context, sampled.candidates)
    key = workload_key_of(sampled.mod)
    return [
        _Item(
            f"{prefix}_{i}",
            "candidate",
            workload,
            cand.sch.mod,
            trace=plain_json(cand.sch.trace.as_json()),
            workload_key=key,
            features=np.asarray(f.numpy(), dtype=np.float32),
        )  # fmt: skip
        for i, (cand, f) in enumerate(zip(sampled.candidates, feats, strict=True))
    ]


def _from_store(store_path: Path, target: Any, top_k: int, prefix: str) -> list[_Item]:
    """The best `top_k` records of every workload in a node's store (a tuned database)."""
    import tvm
    from tvm.s_tir import Schedule, Trace

    from agent.store import Store

    items: list[_Item] = []
    with Store(store_path) as store:
        for w, row in enumerate(store.workloads()):
            mod = tvm.ir.load_json(row["mod_json"])
            records = [r for r in store.records(workload_key=row["workload_key"]) if not r.failed]
            records.sort(key=lambda r: r.latency_s)
            seen: set[str] = set()
            for r, record in enumerate(records):
                trace_key = json.dumps(record.trace, sort_keys=True)
                if len(seen) >= top_k or trace_key in seen:
                    continue
                seen.add(trace_key)
                sch = Schedule(mod)
                try:
                    Trace.apply_json_to_schedule(record.trace, sch)
                except Exception:  # noqa: BLE001 - a trace of another TVM: leave it out
                    continue
                items.append(_Item(f"{prefix}{w}_{r}", "candidate", row["task_name"], sch.mod,
                                   trace=record.trace, workload_key=row["workload_key"],
                                   mod_json=row["mod_json"]))  # fmt: skip
    return items


def _model_picks(
    items: list[_Item], pick: int, model_path: Path, profile_path: Path | None, gpu: str
) -> list[_Item]:
    """The `pick` candidates a SiMoE model ranks fastest on the GPU (zero-shot).

    The GPU is described by its profile (from an earlier bundle run, `--profile`), or by
    the simulated twin's profile when there is none yet.
    """
    from agent.devices.sim import SimulatedGPU
    from agent.profiler import profile_device
    from schemas import HardwareProfile
    from simoe_model.hardware import hardware_vector
    from simoe_model.model import load_model
    from simoe_model.train import predict

    if profile_path is not None:
        try:
            hw = HardwareProfile.model_validate_json(Path(profile_path).read_text())
        except (OSError, ValueError) as exc:
            raise BadInputError(f"--profile {profile_path}: not a profile ({exc})") from None
    else:
        hw = profile_device(SimulatedGPU.from_spec(gpu))
    scores = predict(load_model(model_path), [i.features for i in items], hardware_vector(hw))
    order = np.argsort(-scores)[:pick]
    return [items[i] for i in sorted(order)]


def _defaults(workloads: Sequence[str], target: Any) -> list[_Item]:
    import tvm

    from agent.tuner import _default_schedule  # the untuned baseline `tune` reports
    from agent.workloads import parse_workload, prim_func

    items = []
    for i, workload in enumerate(workloads):
        mod = tvm.IRModule({"main": prim_func(parse_workload(workload))})
        try:
            items.append(_Item(f"d{i}", "default", workload, _default_schedule(mod, target)))
        except Exception:  # noqa: BLE001 - no default for it: nothing to compare with
            continue
    return items


def _probes(target: Any) -> list[_Item]:
    from agent.probes import PROBES

    return [
        _Item(
            f"p_{probe.name}",
            "probe",
            probe.name,
            probe.build(target),
            extra={"flops": probe.flops(target), "bytes": probe.bytes(target)},
        )  # fmt: skip
        for probe in PROBES
    ]


def _write_home(home: Path, items: list[_Item], twin: Any | None, gpu: str) -> None:
    """What stays on the build host: traces, workloads, features, the twin's latencies."""
    import tvm

    from agent.ms_database import workload_key_of
    from agent.workloads import parse_workload, prim_func

    home.mkdir(parents=True, exist_ok=True)
    workloads: dict[str, dict[str, Any]] = {}
    with open(home / "entries.jsonl", "w") as f:
        for item in items:
            f.write(json.dumps({"id": item.id, "kind": item.kind, "group": item.group,
                                "workload_key": item.workload_key, "trace": item.trace,
                                **item.extra}) + "\n")  # fmt: skip
            if item.kind == "candidate" and item.group not in workloads:
                mod_json = item.mod_json or tvm.ir.save_json(
                    tvm.IRModule({"main": prim_func(parse_workload(item.group))})
                )
                workloads[item.group] = {
                    "workload_key": item.workload_key
                    or workload_key_of(tvm.ir.load_json(mod_json)),
                    "mod_json": mod_json,
                }
    (home / "workloads.json").write_text(json.dumps(workloads))
    feats = {item.id: item.features for item in items if item.features is not None}
    np.savez_compressed(home / "features.npz", **feats)
    if twin is not None:
        outcomes = twin.simulate_batch([item.mod for item in items], repeat=3)
        standin = {
            "device": twin.name,
            "simulated": True,
            "latencies": {item.id: out for item, out in zip(items, outcomes, strict=True)},
            "attributes": {"name": twin.hardware_name, "gpu": gpu},
        }
        (home / "standin.json").write_text(json.dumps(standin))


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def export_bundle(
    out_dir: Path,
    *,
    gpu: str,
    workloads: Sequence[str] = (),
    per_workload: int = 0,
    store: Path | None = None,
    top_k: int = 8,
    probes: bool = True,
    defaults: bool = True,
    twin: str | None = None,
    evaluator: Evaluator | None = None,
    seed: int = 0,
    batch_size: int = 32,
    jobs: int | None = None,
    progress: Say | None = None,
    pick: int = 0,
    model: Path | None = None,
    profile: Path | None = None,
) -> ExportSummary:
    """Build the bundle for the catalog GPU (or spec file) `gpu`; see the module docstring."""
    from agent.devices.sim import SimulatedGPU, cuda_target
    from agent.devices.sim.catalog import resolve
    from agent.ms_database import plain_json

    say = progress or (lambda _msg: None)
    spec = resolve(gpu)
    target = cuda_target(spec)
    arch = spec.cuda_arch
    bundle_dir, home_dir = out_dir / "bundle", out_dir / "home"
    if bundle_dir.exists() and any(bundle_dir.iterdir()):
        raise BadInputError(f"{bundle_dir} exists and is not empty: choose another --out")
    toolkit = nvcc_version()
    if toolkit is None:
        raise RunFailure("nvcc not found: a bundle is compiled here (set CUDA_PATH to the toolkit)")
    started = time.perf_counter()
    items: list[_Item] = _probes(target) if probes else []
    if defaults:
        items += _defaults(workloads, target)
    for w, workload in enumerate(workloads):
        if per_workload > 0:
            say(f"sampling {per_workload} candidates of {workload}")
            sampled = _sampled(workload, target, per_workload, seed + w, f"c{w}")
            if pick > 0 and model is not None:
                sampled = _model_picks(sampled, pick, model, profile, gpu)
            items += sampled
    if store is not None:
        items += _from_store(store, target, top_k, "s")
    if not items:
        raise BadInputError("nothing to export: give --workloads with --per-workload, or --store")
    sampling_s = time.perf_counter() - started

    skipped: dict[str, str] = {}
    ready: list[_Item] = []
    for item in items:
        try:
            item.program = lower(item.mod, target).renamed(item.id)
            ready.append(item)
        except Unsupported as exc:
            skipped[item.id] = f"thin runner cannot launch it: {exc}"
        except Exception as exc:  # noqa: BLE001 - TVM refuses to lower it: a failed build
            skipped[item.id] = f"lowering failed: {type(exc).__name__}: {str(exc)[:200]}"
    say(f"compiling {len(ready)} programs for {arch} with nvcc {toolkit}")
    step = time.perf_counter()
    modules, failures = compile_programs(
        [(item.id, item.program) for item in ready if item.program is not None], arch,
        batch_size=batch_size, jobs=jobs or max(1, os.cpu_count() or 1),
    )  # fmt: skip
    compiling_s = time.perf_counter() - step
    skipped.update({i: f"nvcc failed: {e}" for i, e in failures.items()})

    bundle_dir.mkdir(parents=True, exist_ok=True)
    module_of: dict[str, int] = {}
    module_rows = []
    for index, module in enumerate(modules):
        name = f"m{index}.cubin.xz"
        data = lzma.compress(module.cubin, preset=6)
        (bundle_dir / name).write_bytes(data)
        module_rows.append(BundleModule(file=name, sha256=hashlib.sha256(data).hexdigest(),
                                        bytes=len(data), kernels=len(module.ids)))  # fmt: skip
        module_of.update(dict.fromkeys(module.ids, index))
    kept = [item for item in ready if item.id in module_of]
    entries = [
        BundleEntry(
            id=item.id,
            kind=item.kind,
            group=item.group,
            module=module_of[item.id],  # type: ignore[arg-type]
            buffers=item.program.buffers,  # type: ignore[union-attr]
            launches=[launch.as_json() for launch in item.program.launches],
        )  # type: ignore[union-attr]  # fmt: skip
        for item in kept
    ]
    references = [r for r in (reference_for(w) for w in workloads) if r is not None]
    manifest = BundleManifest(
        bundle_id=uuid.uuid4().hex[:12], arch=arch, target=plain_json(target.export()), gpu=gpu,
        toolkit=f"nvcc {toolkit}", evaluator=evaluator or Evaluator(), modules=module_rows,
        entries=entries, references=references, skipped=skipped,
    )  # fmt: skip
    (bundle_dir / "manifest.json").write_text(manifest.model_dump_json())
    # The runner: two files, standard library only at import (see agent.bundle.runtime)
    shutil.copyfile(Path(__file__).with_name("runtime.py"), bundle_dir / "run.py")
    shutil.copyfile(Path(__file__).with_name("cuda_backend.py"), bundle_dir / "cuda_backend.py")
    (home_dir).mkdir(parents=True, exist_ok=True)
    (home_dir / "manifest.json").write_text(manifest.model_dump_json(indent=1))
    twin_device = SimulatedGPU.from_spec(twin.removeprefix("sim:")) if twin else None
    say("writing the home half (traces, features, the simulated twin)")
    _write_home(home_dir, kept, twin_device, gpu)
    kinds: dict[str, int] = {}
    for entry in entries:
        kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
    return ExportSummary(
        bundle_dir=str(bundle_dir), home_dir=str(home_dir), bundle_id=manifest.bundle_id,
        arch=arch, entries=kinds, skipped=len(skipped), compile_failures=len(failures),
        modules=len(modules), bundle_bytes=folder_bytes(bundle_dir),
        seconds_sampling=sampling_s, seconds_compiling=compiling_s,
    )  # fmt: skip
