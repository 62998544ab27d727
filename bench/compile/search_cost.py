"""What SiMoE fast mode's model-only search costs, against the measurements it replaces.

Issue 12, item 1: the search must cost less than its measurements. On the top task (weight x
FLOPs) of each network, on an unseen simulated GPU, each variant runs the same chained
model-only search (simoe_model.model_search) at the same seed with the same model, and
the device then "measures" the model's top `--picks` (SIMULATED: sim:<gpu>):

- `before`: the search as it was (every candidate predicted each time it is seen, the
  builder re-predicting the candidates the search picked);
- `cache`: one prediction per distinct scheduled module (simoe_model.score_cache);
- `cache+stop`: also ends the chain once a round improves the mean score of the best
  `--picks` by less than 2% (model_search.StopRule).

The model is the starter SiMoE shipped with the project (simoe_model/starter) on the GPU's
profile: the search's cost hardly depends on how good the model is, and every variant uses
the same one. Measurement time is modelled on MetaSchedule's LocalRunner defaults
(number 3, repeat 1, min_repeat_ms 100, as the simulated device accounts it) and at 0.5,
1.35 and 2.5 s per trial (issue 12's range). CPU seconds are given next to wall seconds:
on a shared machine the wall time grows with the load, the CPU time much less. One search
thread by default: MetaSchedule's search with 2 threads hands candidates to threads (each
with its own random state) in whatever order they come, so two runs at one seed differ,
by up to 40% in the best latency here; with one thread `before` and `cache` search exactly
the same candidates (tests/test_model_search.py), and the cache's saving is all there is.

    python -m bench.compile.search_cost                        # 3 tasks x 3 variants, ~10 min
    python -m bench.compile.search_cost --networks bert_layer --variants before,cache

Writes `--out`/search_cost.json and search_cost.md (default bench/reports/).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from simoe_model import tvm_compat

PER_TRIAL_S = (0.5, 1.35, 2.5)
VARIANTS = ("before", "cache", "cache+stop")


def _search(variant: str, task: Any, target: Any, model: Any, args: argparse.Namespace) -> dict:
    """One variant's search on one task: its cost and the picks' simulated latencies."""
    from simoe_model.model_search import StopRule, cost_model_scorer, model_only_search
    from simoe_model.score_cache import CachedModel

    cached = variant != "before"
    search_model = CachedModel(model) if cached else model
    stop = StopRule(top=args.picks, min_gain=0.02, min_rounds=2) if "stop" in variant else None
    wall, cpu = time.perf_counter(), time.process_time()
    found = model_only_search(
        task.mod, target, None if cached else cost_model_scorer(model, target),
        cost_model=search_model, rounds=args.rounds, per_round=args.per_round,
        population=args.population, genetic_iters=2,
        init_min_unmeasured=min(50, max(8, round(50 * args.population / 512))),
        seed=args.seed, task_name=task.name, num_threads=args.threads, cache=cached, stop=stop,
    )  # fmt: skip
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = search_model.stats if cached else None
    return {"variant": variant, "search_wall_s": wall, "search_cpu_s": cpu,
            "scored": len(found), "found": found,
            "cache": {"asked": stats.asked, "predicted": stats.predicted,
                      "predict_s": stats.predict_seconds} if stats else None}  # fmt: skip


def _measure(row: dict, task: Any, gpu: str, picks: int) -> dict:
    """Simulate the picks on the GPU: best latency, and what measuring them would cost."""
    from agent.devices import get_device

    device = get_device(f"sim:{gpu}")
    chosen = row.pop("found")[:picks]
    latencies = []
    for outcome in device.simulate_batch([c.mod for c in chosen]):
        if isinstance(outcome, str):
            latencies.append(float("inf"))
            continue
        device.account_measurement(outcome)
        latencies.append(float(np.mean(outcome)))
    modelled = float(device.modelled_measure_seconds)
    row.update(
        task=task.name,
        measured=len(chosen),
        best_latency_ms=min(latencies) * 1e3 if latencies else None,
        top_latencies_ms=sorted(x * 1e3 for x in latencies if np.isfinite(x))[:5],
        modelled_measure_s=modelled,
        search_over_measure=row["search_wall_s"] / modelled if modelled else None,
        at_per_trial={
            str(s): {
                "measure_s": s * len(chosen),
                "search_over_measure": row["search_wall_s"] / (s * len(chosen)),
            }
            for s in PER_TRIAL_S
        },  # fmt: skip
    )
    return row


def _markdown(report: dict) -> str:
    lines = [
        "# Model-only search cost against measurement cost (SIMULATED GPU)",
        "",
        f"`{report['command']}`; load average at start {report['load_start']}, at end "
        f"{report['load_end']}. Search: {report['settings']}. Best latency = the best of "
        "the model's top picks simulated on the GPU (lower is better).",
        "",
        "Ratios are search seconds over modelled measurement seconds of the picks (below 1: the "
        "search costs less than its measurements): wall, then CPU (what the search would take "
        "on one idle core), then wall at 0.5 / 1.35 / 2.5 s per trial.",
        "",
        "| task | variant | search wall s | search CPU s | predictions made / asked | "
        "measure s (sim) | wall / measure | CPU / measure | wall at 0.5 / 1.35 / 2.5 s per trial "
        "| best ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        at = " / ".join(
            f"{r['at_per_trial'][str(s)]['search_over_measure']:.2f}" for s in PER_TRIAL_S
        )
        cache = r.get("cache") or {}
        made = f"{cache['predicted']} / {cache['asked']}" if cache else "n/a"
        lines.append(
            f"| {r['task']} | {r['variant']} | {r['search_wall_s']:.1f} | {r['search_cpu_s']:.1f} "
            f"| {made} | {r['modelled_measure_s']:.1f} | {r['search_over_measure']:.2f} "
            f"| {r['search_cpu_s'] / r['modelled_measure_s']:.2f} | {at} "
            f"| {r['best_latency_ms']:.4f} |"
        )
    lines += ["", "Sums over the tasks:", ""]
    for v, s in report["summary"].items():
        lines.append(
            f"- {v}: search {s['search_wall_s']:.0f} s wall, {s['search_cpu_s']:.0f} s CPU; "
            f"best latency relative to `before` (geometric mean over the tasks): "
            f"{s['latency_vs_before']:.3f}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default="resnet50,mobilenet_v2,bert_layer")
    parser.add_argument("--gpu", default="a10", help="the unseen simulated GPU")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=32)
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--picks", type=int, default=32, help="measured per task (TLM: 32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=1,
        help="search threads; with more than 1 MetaSchedule's search is not deterministic, "
        "so variants at the same seed no longer search the same candidates",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("bench/reports"))
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    if bad := [v for v in variants if v not in VARIANTS]:
        parser.exit(2, f"error: unknown variant(s) {bad}; known: {', '.join(VARIANTS)}\n")

    import tvm.s_tir.tensor_intrin  # noqa: F401 - a one-off import, not the search's cost

    from agent.devices import get_device
    from agent.profiler import profile_device
    from bench.compile.compile_data import network_tasks
    from simoe_model.cost_model import SiMoECostModel
    from simoe_model.hardware import hardware_vector
    from simoe_model.model import load_model

    load_start = os.getloadavg()
    device = get_device(f"sim:{args.gpu}")
    target = device.target()
    hv = hardware_vector(profile_device(device))
    starter = Path(__file__).resolve().parents[2] / "simoe_model" / "starter" / "starter.pt"
    rows = []
    for network in args.networks.split(","):
        [task], _n, _share = network_tasks(network, target, 1)
        for variant in variants:
            model = SiMoECostModel(load_model(starter), hv, online=False)
            row = _search(variant, task, target, model, args)
            row["network"], row["weight"] = network, task.weight
            rows.append(_measure(row, task, args.gpu, args.picks))
            print(json.dumps({k: v for k, v in row.items() if k != "at_per_trial"}), flush=True)
    summary = {}
    base = {r["network"]: r for r in rows if r["variant"] == "before"}
    for v in variants:
        mine = [r for r in rows if r["variant"] == v]
        rel = [r["best_latency_ms"] / base[r["network"]]["best_latency_ms"]
               for r in mine if r["network"] in base]  # fmt: skip
        summary[v] = {
            "search_wall_s": sum(r["search_wall_s"] for r in mine),
            "search_cpu_s": sum(r["search_cpu_s"] for r in mine),
            "latency_vs_before": float(np.exp(np.mean(np.log(rel)))) if rel else float("nan"),
        }
    report = {
        "command": "python -m bench.compile.search_cost " + " ".join(os.sys.argv[1:]),
        "simulated": True,
        "gpu": f"sim:{args.gpu}",
        "settings": {
            k: getattr(args, k)
            for k in ("rounds", "per_round", "population", "picks", "seed", "threads")
        },
        "load_start": [round(x, 2) for x in load_start],
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
        "summary": summary,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "search_cost.json").write_text(json.dumps(report, indent=1))
    (args.out / "search_cost.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    tvm_compat.install()
    main()
