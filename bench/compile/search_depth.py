"""Why SiMoE fast mode chains its model-only searches, and trains on tuning records.

On the top task (weight x FLOPs) of a network on an unseen simulated GPU, each variant
searches with a model only, and the 32 candidates its model ranks first are simulated on
the GPU (TLM's budget): the table gives the best of them. Variants:

- the simulator itself as the model (an oracle), one search, small and large;
- SiMoE trained on random samples of the training GPUs, one large search, and chained;
- SiMoE trained also on the training GPUs' tuning records, chained.

    python -m bench.compile.search_depth --out docs/results          # ~10 min on 2 cores

Everything is SIMULATED (sim:<gpu>). One seed: the search is random, so differences of
a few percent are noise.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.compile import compile_data as cd  # noqa: E402
from bench.compile import compile_time as ct  # noqa: E402
from bench.compile import presets  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet50")
    parser.add_argument("--gpu", default="a10", help="the unseen simulated GPU")
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--work", type=Path, default=Path(".simoe/search-depth"))
    args = parser.parse_args()

    from agent.devices import get_device
    from simoe_model.model_search import (
        ScoreCostModel,
        cost_model_scorer,
        model_only_search,
    )

    load_start = os.getloadavg()
    settings = presets.QUICK_BUDGET.model_copy(
        update={"networks": [args.network], "fleet_rounds": 0}
    )
    say = lambda text: print(time.strftime("%X"), text, flush=True)  # noqa: E731
    # the random-samples-only model: prepare with no tuning records
    data = cd.prepare(settings, args.work, say, 1)
    simoe_random, hv = data.simoe, data.hv
    [task] = data.tasks[args.network]
    gpus = settings.train_gpus + [args.gpu]
    say("the training GPUs' tuning records, and SiMoE trained on them as well")
    tuned = cd.merged(
        cd.sample_task(task, gpus, settings.samples_per_task, settings.seed),
        cd.fleet_tuning_records(
            task, gpus, settings.train_gpus, presets.QUICK_BUDGET, settings.seed
        ),
    )
    simoe_tuned = cd.train_simoe(
        [cd.device_dataset(g, hv[g], [tuned]) for g in settings.train_gpus], settings
    )
    target = get_device(f"sim:{args.gpu}").target()

    def on_gpu(_task_mod: Any, mods: Any) -> np.ndarray:
        return cd.simulate_on(list(mods), target, [args.gpu])[:, 0]

    variants = [
        ("simulator (oracle)", "oracle", 1, 256, 2),
        ("simulator (oracle)", "oracle", 1, 512, 6),
        ("SiMoE, random samples only", "random", 1, 512, 6),
        ("SiMoE, random samples only", "random", 5, 128, 2),
        ("SiMoE, random samples + tuning records", "tuned", 5, 128, 2),
    ]
    rows = []
    for label, kind, rounds, population, iters in variants:
        if kind == "oracle":
            score, model = on_gpu, ScoreCostModel(on_gpu)
        else:
            base = simoe_random if kind == "random" else simoe_tuned
            model = ct._simoe_model(base, hv[args.gpu], False)
            score = cost_model_scorer(model, target)
        started = time.perf_counter()
        found = model_only_search(
            task.mod, target, score, cost_model=model, rounds=rounds, per_round=32,
            population=population, genetic_iters=iters,
            init_min_unmeasured=settings.init_min(population), seed=settings.seed,
            num_threads=2,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        best = float(np.min(on_gpu(task.mod, [f.mod for f in found[:32]])))
        rows.append(
            {"model": label, "rounds": rounds, "population": population,
             "generations": iters, "search_s": seconds, "best_of_top32_s": best}
        )  # fmt: skip
        say(f"{label}, {rounds} x pop {population} x {iters}: {best * 1e3:.4f} ms")
    report = {
        "command": (
            f"python -m bench.compile.search_depth --network {args.network} --gpu {args.gpu}"
        ),
        "task": task.name,
        "task_weight": task.weight,
        "gpu": args.gpu,
        "simulated": True,
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "search_depth.json").write_text(json.dumps(report, indent=1))
    lines = [
        f"`{report['command']}` (SIMULATED; load average {load_start[0]:.1f} at the start)",
        "",
        f"{args.network}'s top task `{task.name}` on sim:{args.gpu}: best latency per call "
        "among the 32 candidates the model ranks first.",
        "",
        "| model | searches | population x generations | search s | best of top 32, ms |",
        "|---|---|---|---|---|",
        *[
            f"| {r['model']} | {r['rounds']} | {r['population']} x {r['generations']} "
            f"| {r['search_s']:.0f} | {r['best_of_top32_s'] * 1e3:.4f} |"
            for r in rows
        ],
    ]
    (args.out / "search_depth.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
