"""Two federations' newcomers, their models and their expert choices swapped (SIMULATED).

    python -m bench.federation.routing_swap --registry A.sqlite B.sqlite \
        --report A.json B.json --seed 0 [--out FILE.json]

For two finished validation federations of the same seed (their registries: the latest
global and every node's expert; their over-seeds reports: the experts each newcomer was
sent), each newcomer is scored zero-shot (offline_transfer's test split) by each
federation's model (its global and experts) with each federation's expert choice: a 2 x 2
that says whether a difference between the two runs comes from the model (encoder and
experts) or from which experts a newcomer was sent (the similarity). The model is the
registry's LATEST global (after the newcomers' round), one version past the one the
newcomers were served, for both runs alike.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def swap(registries: list[Path], reports: list[Path], seed: int) -> dict:
    from bench.federation.federation_diagnose import _top1_with
    from bench.federation.fleet import protocol_gpus
    from bench.federation.saved_run import read_saved_run
    from bench.transfer.offline_transfer import split_device
    from schemas import BadInputError
    from simoe_model.model import SiMoE, add_expert, load_shared_arrays

    models = []
    for path in registries:
        run = read_saved_run(path)
        model = SiMoE()
        load_shared_arrays(model, run.global_arrays)
        for name, arrays in run.experts.items():
            add_expert(model, name, arrays)
        model.eval()
        models.append(model)
    choices = []
    for path in reports:
        runs = [r for r in json.loads(path.read_text())["runs"] if r["seed"] == seed]
        if not runs:
            raise BadInputError(f"--report {path} has no run of seed {seed}")
        choices.append({row["gpu"]: row["experts"] for row in runs[0]["newcomers"]})
    _, newcomers = protocol_gpus("validation")
    rows = []
    for gpu in newcomers:
        test = split_device(gpu.dataset, seed).test
        hv = gpu.dataset.hardware_vector
        row: dict = {"gpu": gpu.name, "experts": [c[gpu.name] for c in choices]}
        for m, model in enumerate(models):
            for c, choice in enumerate(choices):
                row[f"model{m}_choice{c}"] = _top1_with(model, test, hv, choice[gpu.name])
        rows.append(row)
    keys = [k for k in rows[0] if k.startswith("model")]
    return {
        "simulated": True,
        "split": "validation",
        "seed": seed,
        "registries": [str(p) for p in registries],
        "reports": [str(p) for p in reports],
        "rows": rows,
        "means": {k: float(np.mean([r[k] for r in rows])) for k in keys},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", type=Path, nargs=2, required=True)
    parser.add_argument("--report", type=Path, nargs=2, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    text = json.dumps(swap(args.registry, args.report, args.seed), indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    from schemas.errors import run_cli

    run_cli(main, "routing_swap")
