"""The GPU evidence run: one bundle of at most 8 minutes on one GPU, analysed back here.

    python -m bench.simulator.gpu_evidence prepare --out .gpu/evidence        # here (build host)
    python3 .gpu/evidence/bundle/run.py .gpu/evidence/bundle --out $OUT --deadline 300   # GPU
    python -m bench.simulator.gpu_evidence analyze --prepared .gpu/evidence --results DIR   # here
    python -m bench.simulator.gpu_evidence dry-run --out DIR [--quick]   # all three, GPU simulated

prepare: samples candidates of three workloads (MetaSchedule's sampler), adds the probe
suite and the untuned defaults, compiles everything HERE for the GPU's arch
(agent.bundle.export), and trains the zero-shot SiMoE model on the same candidates
labelled on simulated training GPUs (never the target's twin, nor its architecture).

On the GPU the bundle's runner profiles the GPU (NVML, CUDA attributes, the probes,
bandwidth and FMA), times every candidate, the defaults and cuBLAS/cuDNN through torch.

analyze: imports the results as `cuda` records with the GPU's profile, then reports,
per workload: Spearman and median relative error of the simulated twin against the
real latencies; best tuned candidate against the default and the vendor library; the
zero-shot SiMoE ranking scored on the real latencies (top-1, top-5, pairwise); and a
replay of searches over the measured pool (MetaSchedule's XGB model, SiMoE's order,
random), best found at each budget. A dry run's report says SIMULATED on every line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

WORKLOADS = ["matmul:1024,1024,1024", "conv2d:1,64,56,56,64,3,3,1,1", "batch_matmul:12,128,128,64"]
QUICK_WORKLOADS = ["matmul:64,64,64", "conv2d:1,8,14,14,8,3,3,1,1", "batch_matmul:2,32,32,16"]
# Training GPUs of the zero-shot model: other architectures than the H200's (Hopper).
TRAINING_GPUS = ["t4", "v100", "a100", "a10", "4090", "3090", "titanxp", "l4"]
BUDGETS = (4, 8, 16, 32, 64)
DEVICE_DEADLINE_S = 300  # of the 8 minutes: 1-2 to start the machine, the rest spare


def _say(msg: str) -> None:
    print(f"gpu_evidence: {msg}", flush=True)


# ---------------------------------------------------------------------------- prepare


def _candidate_mods(home: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Each exported candidate's scheduled module (its trace replayed), and its workload."""
    import tvm
    from tvm.s_tir import Schedule, Trace

    workloads = json.loads((home / "workloads.json").read_text())
    mods, groups = {}, {}
    for line in (home / "entries.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["kind"] != "candidate":
            continue
        sch = Schedule(tvm.ir.load_json(workloads[entry["group"]]["mod_json"]))
        Trace.apply_json_to_schedule(entry["trace"], sch)
        mods[entry["id"]], groups[entry["id"]] = sch.mod, entry["group"]
    return mods, groups


def train_zero_shot(home: Path, gpus: list[str], epochs: int, seed: int) -> dict[str, Any]:
    """SiMoE trained on the candidates' simulated latencies on `gpus`; saved in home/."""
    from agent.devices.sim import SimulatedGPU
    from agent.profiler import profile_device
    from simoe_model.hardware import hardware_vector
    from simoe_model.model import SiMoE, SiMoEConfig, save_model
    from simoe_model.task_data import DeviceDataset, TaskData
    from simoe_model.train import train_experts, train_shared

    mods, groups = _candidate_mods(home)
    features = dict(np.load(home / "features.npz"))
    ids = [i for i in mods if i in features]
    datasets = []
    for gpu in gpus:
        device = SimulatedGPU.from_spec(gpu)
        outcomes = device.simulate_batch([mods[i] for i in ids], repeat=3)
        tasks = []
        for workload in sorted(set(groups.values())):
            rows = [(features[i], float(np.median(o))) for i, o in zip(ids, outcomes, strict=True)
                    if groups[i] == workload and not isinstance(o, str)]  # fmt: skip
            if len(rows) >= 2:
                latencies = np.array([r[1] for r in rows])
                tasks.append(TaskData(workload, [r[0] for r in rows], latencies))
        hv = hardware_vector(profile_device(device))
        datasets.append(DeviceDataset(device.name, hv, tasks))
    model = SiMoE(SiMoEConfig())
    train_experts(model, [(d.device, d) for d in datasets], epochs=epochs, seed=seed)
    train_shared(model, datasets, epochs=epochs, seed=seed)
    save_model(model, home / "simoe_zero_shot.pt")
    return {"training_gpus": [d.device for d in datasets], "epochs": epochs, "seed": seed}


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    from agent.bundle.export import export_bundle

    out = Path(args.out)
    workloads = QUICK_WORKLOADS if args.quick else WORKLOADS
    started = time.perf_counter()
    summary = export_bundle(
        out, gpu=args.gpu, workloads=workloads, per_workload=args.per_workload,
        twin=args.twin, seed=args.seed, progress=_say,
    )  # fmt: skip
    _say(f"bundle {summary.bundle_id}: {summary.bundle_bytes / 2**20:.2f} MiB, {summary.entries}")
    _say(f"training the zero-shot SiMoE model on {', '.join(args.training_gpus)}")
    model = train_zero_shot(out / "home", args.training_gpus, args.epochs, args.seed)
    prepared = {
        "workloads": workloads, "gpu": args.gpu, "twin": args.twin, "export": summary.model_dump(),
        "model": model, "prepare_s": time.perf_counter() - started,
        "device_command": f"python3 {out}/bundle/run.py {out}/bundle --out $OUT "
                          f"--deadline {DEVICE_DEADLINE_S}",
    }  # fmt: skip
    (out / "prepared.json").write_text(json.dumps(prepared, indent=2, default=str))
    return prepared


# ---------------------------------------------------------------------------- analyze


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic) if len(a) >= 3 else float("nan")


def replay(latency: np.ndarray, order_fn: Any, budgets: tuple[int, ...]) -> dict[int, float]:
    """Best found / best of pool after each budget, measuring in the order order_fn picks."""
    budgets = tuple(b for b in budgets if b <= len(latency))
    measured: list[int] = []
    best: dict[int, float] = {}
    while budgets and len(measured) < max(budgets):
        # rounds of 16, as MetaSchedule measures; the model sees each round's results
        measured += [i for i in order_fn(measured) if i not in measured][: 16 - len(measured) % 16]
        for b in budgets:
            if b not in best and len(measured) >= b:
                best[b] = float(latency.min() / latency[measured[:b]].min())
    return best


def _xgb_order(features: list[np.ndarray], latency: np.ndarray, seed: int) -> Any:
    """MetaSchedule's XGBModel retrained on what was measured; random before its warm-up."""
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig, XGBModel

    rng = np.random.default_rng(seed)
    shuffled = list(rng.permutation(len(latency)))

    def order(measured: list[int]) -> list[int]:
        model = XGBModel(config=XGBConfig(nthread=1, seed=seed), verbose_eval=0)
        if len(measured) < model.num_warmup_samples:
            return shuffled
        ys = (latency[measured].min() / latency[measured]).astype("float32")
        model._train(xs=[features[i] for i in measured], ys=ys)  # noqa: SLF001
        return list(np.argsort(-model._predict(xs=features)))  # noqa: SLF001

    return order


def _median_twin(twin: dict[str, Any], i: str) -> float | None:
    """The twin's modelled seconds of entry i, None where the model says it fails."""
    outcome = twin.get(i)
    return None if outcome is None or isinstance(outcome, str) else statistics.median(outcome)


def _probe_report(entries: dict, real: dict, twin: dict) -> dict[str, Any] | None:
    """What the simulator gets wrong per probe: real over twin, and their rank agreement."""
    ids = [i for i, e in entries.items() if e["kind"] == "probe" and i in real]
    ids = [i for i in ids if _median_twin(twin, i) is not None]
    if not ids:
        return None
    r = np.array([real[i] for i in ids])
    t = np.array([_median_twin(twin, i) for i in ids])
    ratios = {entries[i]["group"]: float(a / b) for i, a, b in zip(ids, r, t, strict=True)}
    return {"spearman": spearman(r, t), "real_over_twin": ratios}


def _workload_report(
    ids: list[str], ctx: dict[str, Any], default_s: float | None, library_s: float | None
) -> dict[str, Any]:
    """One workload: the twin's accuracy, tuned against default and library, the rankers."""
    from simoe_model.metrics import task_metrics
    from simoe_model.train import predict

    real, twin, features = ctx["real"], ctx["twin"], ctx["features"]
    w: dict[str, Any] = {"measured": len(ids)}
    if len(ids) < 3:
        return w
    lat = np.array([real[i] for i in ids])
    pairs = [(real[i], _median_twin(twin, i)) for i in ids if _median_twin(twin, i) is not None]
    if pairs:
        r, t = np.array(pairs).T
        w.update(twin_spearman=spearman(r, t), twin_pairs=len(pairs),
                 twin_median_rel_error=float(np.median(np.abs(t - r) / r)))  # fmt: skip
    w["best_s"] = float(lat.min())
    if default_s:
        w["default_s"], w["best_over_default"] = default_s, float(lat.min() / default_s)
    if library_s:
        w["library_s"], w["best_over_library"] = library_s, float(lat.min() / library_s)
    feats = [features[i] for i in ids]
    twin_scores = np.array([-(_median_twin(twin, i) or np.inf) for i in ids])
    w["twin_as_ranker"] = task_metrics([(twin_scores, lat)])
    if ctx["model"] is not None and ctx["hardware_vector"] is not None:
        scores = predict(ctx["model"], feats, ctx["hardware_vector"])
        w["simoe_zero_shot"] = task_metrics([(scores, lat)])
        order = list(np.argsort(-scores))
        w["replay_simoe"] = replay(lat, lambda _m: order, BUDGETS)
    budgets = [b for b in BUDGETS if b <= len(lat)]
    xgb = [replay(lat, _xgb_order(feats, lat, seed), BUDGETS) for seed in range(3)]
    w["replay_xgb"] = {b: float(np.mean([run[b] for run in xgb])) for b in budgets}
    w["replay_xgb_note"] = "MetaSchedule's XGB orders at random until it has 100 samples"
    rng = np.random.default_rng(0)
    randoms = [replay(lat, lambda _m, p=list(rng.permutation(len(lat))): p, BUDGETS)
               for _ in range(20)]  # fmt: skip
    w["replay_random"] = {b: float(np.mean([run[b] for run in randoms])) for b in budgets}
    return w


def analyze(prepared_dir: Path, results: Path, report_dir: Path) -> dict[str, Any]:
    """Import the run's results, compare them with the twin, score the rankers; write a report."""
    from agent.bundle.importer import import_results, read_results
    from agent.store import Store
    from simoe_model.hardware import hardware_vector
    from simoe_model.model import load_model

    home = prepared_dir / "home"
    prepared = json.loads((prepared_dir / "prepared.json").read_text())
    summary, rows = read_results(results)
    report_dir.mkdir(parents=True, exist_ok=True)
    # The measurements stay beside the bundle (never in the report folder); a second
    # analysis of the same run starts from a fresh store.
    store_path = prepared_dir / "evidence_store.sqlite"
    for stale in prepared_dir.glob("evidence_store.sqlite*"):
        stale.unlink()
    imported = import_results(results, home, store_path)
    profile = None
    if imported.profile_id:
        with Store(store_path) as store:
            profile = store.latest_profile(imported.device)
    lines = (home / "entries.jsonl").read_text().splitlines()
    entries = {e["id"]: e for e in map(json.loads, lines)}
    real = {r.id: statistics.median(r.run_secs) for r in rows if r.ok and r.run_secs}
    model_path = home / "simoe_zero_shot.pt"
    ctx = {
        "real": real,
        "twin": json.loads((home / "standin.json").read_text())["latencies"],
        "features": dict(np.load(home / "features.npz")),
        "model": load_model(model_path) if model_path.exists() else None,
        "hardware_vector": hardware_vector(profile) if profile is not None else None,
    }
    simulated = imported.simulated
    report: dict[str, Any] = {
        "label": "SIMULATED (dry run: no GPU measured anything)" if simulated
        else "measured on the GPU",
        "simulated": simulated,
        "device": summary.get("device"),
        "run": {k: summary.get(k) for k in ("stopped", "first_error", "counts", "wall_s", "extra")},
        "import": imported.model_dump(),
        "zero_shot_model": prepared.get("model"),
        "probes": _probe_report(entries, real, ctx["twin"]),
        "workloads": {},
    }  # fmt: skip
    refs = {r.group: statistics.median(r.run_secs) for r in rows
            if r.kind == "reference" and r.ok and r.run_secs}  # fmt: skip
    for workload in prepared["workloads"]:
        of_workload = [i for i, e in entries.items() if e["group"] == workload and i in real]
        ids = [i for i in of_workload if entries[i]["kind"] == "candidate"]
        default = [real[i] for i in of_workload if entries[i]["kind"] == "default"]
        report["workloads"][workload] = _workload_report(
            ids, ctx, default[0] if default else None, refs.get(workload)
        )
    if profile is not None:
        specs, emp = profile.analytical, profile.empirical
        report["profile"] = {
            "name": profile.name,
            "bandwidth_gbs": emp.bandwidth_gbs,
            "spec_bandwidth_gbs": specs.mem_bandwidth_gbs,
            "fma_gflops": emp.fma_gflops,
            "spec_fp32_gflops": specs.fp32_gflops,
        }
    (report_dir / "gpu_evidence.json").write_text(json.dumps(report, indent=2, default=str))
    (report_dir / "gpu_evidence.md").write_text(markdown(report))
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# GPU evidence run: {report['label']}", "",
             f"Run: {report['run']}", "",
             "| workload | measured | twin Spearman | twin median rel. error | best/default | "
             "best/library | SiMoE zero-shot top-1 | twin-as-ranker top-1 |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip

    def f(value: Any) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    for name, w in report["workloads"].items():
        lines.append(
            f"| {name} | {w['measured']} | {f(w.get('twin_spearman'))} | "
            f"{f(w.get('twin_median_rel_error'))} | {f(w.get('best_over_default'))} | "
            f"{f(w.get('best_over_library'))} | {f(w.get('simoe_zero_shot', {}).get('top1'))} | "
            f"{f(w.get('twin_as_ranker', {}).get('top1'))} |"
        )
    lines += ["", "Replays (best found / best of pool after N measurements):", ""]
    for name, w in report["workloads"].items():
        for method in ("replay_simoe", "replay_xgb", "replay_random"):
            if method in w:
                lines.append(f"- {name} {method.removeprefix('replay_')}: {w[method]}")
    if "profile" in report:
        lines += ["", f"Profile: {report['profile']}"]
    if "probes" in report:
        lines += ["", f"Probes, real/twin: {report['probes']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("prepare", "dry-run"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--gpu", default="h200", help="the GPU model the bundle is built for")
        p.add_argument("--twin", default="sim:h200", help="its simulated twin")
        p.add_argument("--per-workload", type=int, default=None, help="candidates per workload")
        p.add_argument("--training-gpus", default=",".join(TRAINING_GPUS))
        p.add_argument("--epochs", type=int, default=None)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--quick", action="store_true", help="tiny workloads, few candidates")
    a = sub.add_parser("analyze")
    a.add_argument("--prepared", type=Path, required=True)
    a.add_argument("--results", type=Path, required=True)
    default_report = Path(__file__).resolve().parents[1] / "reports" / "gpu_evidence"
    a.add_argument("--report", type=Path, default=default_report)
    args = parser.parse_args(argv)
    try:
        if args.command == "analyze":
            report = analyze(args.prepared, args.results, args.report)
            _say(f"report in {args.report} ({report['label']})")
            return 0
        args.training_gpus = [g for g in args.training_gpus.split(",") if g]
        args.per_workload = args.per_workload or (5 if args.quick else 80)
        args.epochs = args.epochs or (3 if args.quick else 30)
        if args.out.exists() and args.command == "dry-run":
            shutil.rmtree(args.out)
        prepare(args)
        if args.command == "prepare":
            _say(f"carry {args.out}/bundle; on the GPU run the bundle's run.py (docs/gpu.md)")
            return 0
        from agent.bundle.runtime import SimBackend, run_bundle

        home, results = args.out / "home", args.out / "results"
        run_bundle(args.out / "bundle", results, SimBackend(home / "standin.json"), deadline_s=300)
        report = analyze(args.out, results, args.out / "report")
        _say(f"dry run done: {args.out / 'report'} ({report['label']})")
        return 0
    except Exception as exc:  # noqa: BLE001 - one line, the partial files stay on disk
        from schemas import SimoeError

        _say(f"error: {exc}")
        return exc.exit_code if isinstance(exc, SimoeError) else 1


if __name__ == "__main__":
    from bench import prepare

    prepare()
    sys.exit(main())
