"""Why the shipped starter model misranks the LLaMA projections on user-spec GPUs (issue 23).
SIMULATED GPUs: every latency is modelled by the simulator, none is a measurement.

    python -m bench.compile.starter_diagnosis --out docs/results/starter_diagnosis

For each (GPU, operator): sample `--samples` distinct candidates from MetaSchedule's design
space (ReplayTrace, as `simoe-agent dataset` samples), score them with the starter model
(the hardware vector of the GPU's profile) and simulate them on that GPU. Reported:

- spearman: Spearman(model score, -latency) over the candidates that run (higher = better);
- per-expert spearman (median, best): each expert of the bank alone, without the gate: if
  some expert ranks well, the gate picks badly; if none does, the program side is at fault;
- top-8 / median: the simulated latency of the model's 8 best-scored candidates over the
  median candidate's (below 1 = the model's picks are faster than a random one);
- out-of-range features: the share of feature values (log-transformed, normalised with the
  model's own training statistics) beyond the largest |z| the training data held per column
  (the trained suite workloads' own candidates, sampled the same way), i.e. where the
  program encoder extrapolates.

Operators: the two LLaMA projections of bench/inputs/outside_ops.py (held out: in no training
set), and, for contrast, suite workloads the starter model was trained on (its metadata).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
GPUS = ["bench/inputs/user_gpus/rtx4060.json", "3090-fe"]
OPS = ["llama_q_proj", "llama_mlp_up", "dense:128,768,768", "matmul:512,512,512"]
OPS_FILE = "bench/inputs/outside_ops.py"


def operator_task(op: str, target: Any) -> tuple[str, Any]:
    """(task name, TIR module) of an outside operator's largest task or a suite workload."""
    import tvm
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from agent.networks import extract_network_tasks, load_network
    from agent.tune_harness import task_flops
    from agent.workloads import parse_workload, prim_func

    if ":" in op:
        return op, _normalize_mod(prim_func(parse_workload(op)))
    tasks = extract_network_tasks(load_network(f"{OPS_FILE}:{op}"), target)
    best = max(tasks, key=lambda t: t.weight * task_flops(t.dispatched[0]))
    return best.task_name, tvm.IRModule(best.dispatched[0].functions)


def analyse(gpu: str, op: str, samples: int, seed: int, model_path: Path, cache: Path) -> dict:
    import torch
    from scipy.stats import spearmanr
    from tvm.s_tir import meta_schedule as ms

    from agent.devices import get_device
    from agent.fleet_dataset import sample_candidates
    from agent.profiler import profile_device
    from schemas import HardwareProfile
    from simoe_model.features import pack_rows
    from simoe_model.hardware import hardware_vector
    from simoe_model.model import load_model
    from simoe_model.train import predict, predict_expert

    device = get_device(f"sim:{gpu}")
    target = device.target()
    cache.mkdir(parents=True, exist_ok=True)
    prof_file = cache / (Path(gpu).stem + ".json")
    if prof_file.exists():
        profile = HardwareProfile.model_validate_json(prof_file.read_text())
    else:
        profile = profile_device(device)
        prof_file.write_text(profile.model_dump_json(indent=1))
    task_name, mod = operator_task(op, target)
    t0 = time.perf_counter()
    cands, ctx = sample_candidates(mod, target, samples, seed=seed, task_name=task_name)
    feats = [
        np.asarray(f.numpy(), np.float32)
        for f in ms.feature_extractor.PerStoreFeature().extract_from(ctx, cands)
    ]
    outcome = device.simulate_batch([c.sch.mod for c in cands], repeat=3)
    lat = np.array([np.mean(o) if not isinstance(o, str) else np.inf for o in outcome])
    ok = np.isfinite(lat)
    model = load_model(model_path)
    hv = hardware_vector(profile)
    scores = predict(model, feats, hv)
    with torch.no_grad():
        rows, offsets = pack_rows(feats)
        z = model.program_encoder.norm(torch.from_numpy(rows)).abs().numpy()
        seg = torch.from_numpy(np.repeat(np.arange(len(feats)), np.diff(offsets)))
        e = model.embed(torch.from_numpy(rows), seg, len(feats))
        _, weights = model.mixture(e, torch.as_tensor(hv))
    gate = weights.mean(0).numpy()
    names = model.expert_names
    per_expert = {
        n: float(spearmanr(predict_expert(model, n, feats)[ok], -lat[ok]).statistic) for n in names
    }
    top_gate = [names[i] for i in np.argsort(-gate)[:3]]
    good = np.flatnonzero(ok)
    top8 = good[np.argsort(-scores[good])[:8]]
    rho = float(spearmanr(scores[ok], -lat[ok]).statistic)
    return {
        "gpu": device.name,
        "operator": op,
        "task": task_name,
        "candidates": len(cands),
        "runnable": int(ok.sum()),
        "spearman": rho,
        "expert_spearman_median": float(np.median(list(per_expert.values()))),
        "expert_spearman_best": max(per_expert.values()),
        "expert_spearman_worst": min(per_expert.values()),
        "gate_top3": {n: float(gate[names.index(n)]) for n in top_gate},
        "gate_top3_spearman": {n: per_expert[n] for n in top_gate},
        "top8_over_median": float(np.median(lat[top8]) / np.median(lat[ok])),
        "best_over_median": float(lat[ok].min() / np.median(lat[ok])),
        "feature_z_max": float(z.max()),
        "feature_z_p99": float(np.quantile(z, 0.99)),
        "rows_per_candidate": float(np.mean(np.diff(offsets))),
        "seconds": round(time.perf_counter() - t0, 1),
        "_z": z,
    }


def fast_mode_picks(
    gpu: str, op: str, trials: int, seed: int, model_path: Path, cache: Path
) -> dict:
    """What fast mode measures: the CLI's chained model-only search (`--model-rounds 5`,
    its population for `trials`), then its best-scored candidates simulated."""
    import torch
    from scipy.stats import spearmanr
    from tvm.s_tir import meta_schedule as ms

    from agent.devices import get_device
    from agent.tune_harness import initial_samples
    from agent.tuner import search_population
    from schemas import HardwareProfile
    from simoe_model.cost_model import SiMoECostModel
    from simoe_model.features import pack_rows
    from simoe_model.model_search import model_only_search

    device = get_device(f"sim:{gpu}")
    target = device.target()
    profile = HardwareProfile.model_validate_json((cache / (Path(gpu).stem + ".json")).read_text())
    model = SiMoECostModel.for_device(profile, model_path)
    task_name, mod = operator_task(op, target)
    population = search_population()
    t0 = time.perf_counter()
    found = model_only_search(
        mod, target, None, cost_model=model, rounds=5, per_round=min(64, trials),
        population=population, genetic_iters=2, init_min_unmeasured=initial_samples(population),
        seed=seed, task_name=task_name, num_threads=1,
    )  # fmt: skip
    outcome = device.simulate_batch([f.mod for f in found], repeat=3)
    lat = np.array([np.mean(o) if not isinstance(o, str) else np.inf for o in outcome])
    ok = np.isfinite(lat)
    ctx = ms.TuneContext(mod=mod, target=target)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    cands = [ms.MeasureCandidate(s_tir_schedule(f.mod), args) for f in found]
    feats = [np.asarray(f.numpy(), np.float32) for f in
             ms.feature_extractor.PerStoreFeature().extract_from(ctx, cands)]  # fmt: skip
    rows, offsets = pack_rows(feats)
    with torch.no_grad():
        z = model.model.program_encoder.norm(torch.from_numpy(rows)).abs().numpy()
        raw = ((torch.from_numpy(rows) - model.model.program_encoder.norm.mean)
               / model.model.program_encoder.norm.std).abs().numpy()  # fmt: skip
    seg = np.repeat(np.arange(len(feats)), np.diff(offsets))
    per_cand = np.array([raw[seg == i].max() for i in range(len(feats))])
    picks = np.arange(min(trials, len(found)))
    return {
        "gpu": device.name,
        "operator": op,
        "model": str(model_path),
        "trials": trials,
        "found": len(found),
        "runnable": int(ok.sum()),
        "spearman": float(spearmanr(-np.array([f.score for f in found])[ok], -lat[ok]).statistic),
        "picks_best_us": float(lat[picks][ok[picks]].min() * 1e6) if ok[picks].any() else None,
        "picks_median_us": float(np.median(lat[picks][ok[picks]]) * 1e6),
        "found_best_us": float(lat[ok].min() * 1e6),
        "found_median_us": float(np.median(lat[ok]) * 1e6),
        "picks_max_z_median": float(np.median(per_cand[picks])),
        "rest_max_z_median": float(np.median(per_cand[len(picks) :]))
        if len(found) > len(picks)
        else None,
        "clamped_z_max": float(z.max()),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def s_tir_schedule(mod: Any) -> Any:
    from tvm import s_tir

    return s_tir.Schedule(mod)


def markdown(report: dict) -> str:
    lines = [
        "# Why the starter model misranks the LLaMA projections (SIMULATED GPUs)",
        "",
        "Commands: "
        + "; ".join(f"`{c}`" for c in report.get("commands", [report["command"]]))
        + f". Model of the sampled rows: `{report['model']}` "
        f"({report['model_label']}). Candidates: ReplayTrace samples of MetaSchedule's design "
        f"space, seed {report['seed']}; latencies modelled by the simulator, none measured.",
        "",
        "| GPU | operator | task | runnable / sampled | Spearman (score, -latency) | "
        "experts alone: median / best / worst | gate's top 3 (weight, Spearman alone) | "
        "model's top 8 / median latency | best / median | features beyond training range |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        gate = "; ".join(
            f"{n} {w:.2f} ({r['gate_top3_spearman'][n]:+.2f})" for n, w in r["gate_top3"].items()
        )
        beyond = "-" if r.get("beyond_train") is None else f"{r['beyond_train']:.1%}"
        lines.append(
            f"| {r['gpu']} | {r['operator']} | {r['task']} | {r['runnable']} / {r['candidates']} "
            f"| {r['spearman']:+.3f} | {r['expert_spearman_median']:+.2f} / "
            f"{r['expert_spearman_best']:+.2f} / {r['expert_spearman_worst']:+.2f} | {gate} | "
            f"{r['top8_over_median']:.2f} | {r['best_over_median']:.2f} | {beyond} |"
        )
    if report.get("fast"):
        lines += [
            "",
            "## What fast mode measures",
            "",
            "The CLI's fast mode (`--model-rounds 5`, its population for the trials) searched "
            "with each model; its `trials` best-scored candidates are what the device measures. "
            "Spearman over every distinct candidate the search scored; |z| = the candidate's "
            "largest feature distance from the training mean in training standard deviations, "
            "before any clamp (median over the picks, and over the other candidates found).",
            "",
            "| model | GPU | operator | trials | found | Spearman (score, -latency) | "
            "picks: best / median us | all found: best / median us | picks' max abs z | "
            "others' max abs z |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report["fast"]:
            rest = "-" if r["rest_max_z_median"] is None else f"{r['rest_max_z_median']:.1f}"
            lines.append(
                f"| {r['model']} | {r['gpu']} | {r['operator']} | {r['trials']} | {r['found']} | "
                f"{r['spearman']:+.3f} | {r['picks_best_us']:.0f} / {r['picks_median_us']:.0f} | "
                f"{r['found_best_us']:.0f} / {r['found_median_us']:.0f} | "
                f"{r['picks_max_z_median']:.1f} | {rest} |"
            )
    lines += ["", *report.get("findings", [])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/starter_diagnosis"))
    parser.add_argument("--gpus", default=",".join(GPUS))
    parser.add_argument(
        "--ops", nargs="*", default=OPS, help="operators or workloads (none: fast mode only)"
    )
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", type=Path, default=ROOT / "simoe_model/starter/starter.pt")
    parser.add_argument("--work", type=Path, default=Path("runs/diagnosis"))
    parser.add_argument(
        "--fast-models", nargs="*", type=Path, default=[],
        help="model files whose fast-mode search to reproduce (on the first GPU, --fast-op)",
    )  # fmt: skip
    parser.add_argument("--fast-op", default="llama_mlp_up")
    parser.add_argument("--findings", type=Path, help="a text file: the findings, appended")
    parser.add_argument(
        "--add",
        action="store_true",
        help="keep the rows of the report at --out and add this run's (its command is kept)",
    )
    parser.add_argument("--fast-trials", type=int, default=16)
    args = parser.parse_args(argv)
    if not args.model.is_file():
        parser.error(f"--model: no model file {args.model}")
    import torch

    from simoe_model import tvm_compat
    from simoe_model.model import load_model, model_metadata

    tvm_compat.install()
    torch.set_num_threads(1)
    command = "python -m bench.compile.starter_diagnosis " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    meta = model_metadata(args.model)
    model = load_model(args.model)
    rows = []
    train_z: dict[str, np.ndarray] = {}
    for gpu in [g for g in args.gpus.split(",") if g]:
        for op in args.ops:
            row = analyse(gpu, op, args.samples, args.seed, args.model, args.work / "profiles")
            train_z[f"{gpu}|{op}"] = row.pop("_z")
            rows.append(row)
            print(json.dumps(row), flush=True)
    # the training range: the suite workloads' own candidates (they are the starter's workloads)
    trained = set(meta.get("workloads", []))
    ref = [z for k, z in train_z.items() if k.split("|")[1] in trained]
    if ref:
        col_max = np.max(np.concatenate(ref), axis=0)
        for r, z in zip(rows, train_z.values(), strict=True):
            r["beyond_train"] = float((z > col_max + 1e-6).mean())
    del model
    first_gpu = [g for g in args.gpus.split(",") if g][0]
    fast = []
    for path in args.fast_models:
        row = fast_mode_picks(
            first_gpu, args.fast_op, args.fast_trials, args.seed, path, args.work / "profiles"
        )
        fast.append(row)
        print(json.dumps(row), flush=True)
    findings = args.findings.read_text().splitlines() if args.findings else []
    earlier: dict[str, Any] = {}
    if args.add and args.out.with_suffix(".json").exists():
        earlier = json.loads(args.out.with_suffix(".json").read_text())
        rows, fast = earlier["rows"] + rows, earlier["fast"] + fast
        findings = findings or earlier.get("findings", [])
    report = {
        "command": command,
        "commands": [*earlier.get("commands", [earlier["command"]] if earlier else []), command],
        "model": str(
            args.model.relative_to(ROOT) if args.model.is_relative_to(ROOT) else args.model
        ),
        "model_label": meta.get("label", ""),
        "seed": args.seed,
        "samples": args.samples,
        "simulated": True,
        "rows": rows,
        "fast": fast,
        "findings": findings,
    }
    if earlier and earlier["rows"]:  # the sampled rows' model stays the one named
        report.update({k: earlier[k] for k in ("model", "model_label", "samples")})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
