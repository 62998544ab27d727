"""How much of a run's newcomer figure is the distilled copy? A paired check (SIMULATED).

    python -m bench.federation.newcomer_copy_diagnose --work DIR --protocol validation|test
        [--seeds 0,1,2] [--out FILE.json]

DIR is a finished `federation_helps --newcomer-distill-steps N --work DIR` run (its
`seed<S>/` folders). Each newcomer's saved model (what it was served: the distilled copy and
its k experts) is scored as the bench scores it, and again with the copy's shared arrays
replaced by the plain global the server sent in that round (the registry's), the experts
unchanged: the same runs, the same newcomers, the same candidates; only the copy differs.
Prints and writes: per seed and newcomer both top-1 scores, and the mean difference (copy -
plain) over units of their seed means with the report's 95 % paired bootstrap interval
(clustered by GPU model). Scoring the test split here picks nothing: it attributes a figure
already scored once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def diagnose(work: Path, split: str, seeds: list[int]) -> dict[str, object]:
    from agent.node_state import NodeState
    from bench.federation.federation_baselines import top1
    from bench.federation.federation_report import _interval
    from bench.federation.fleet import protocol_gpus
    from bench.transfer.offline_transfer import split_device
    from schemas import BadInputError
    from server.registry import Registry
    from simoe_model.model import load_shared_arrays, shared_arrays

    for seed in seeds:  # a wrong folder: one line, before the fleet is read
        if not (work / f"seed{seed}" / "server" / "registry.sqlite").is_file():
            raise BadInputError(f"--work {work}: no seed{seed}/server/registry.sqlite")
    _nodes, newcomers = protocol_gpus(split)
    rows: dict[int, dict[str, dict[str, float]]] = {}
    for seed in seeds:
        registry_path = work / f"seed{seed}" / "server" / "registry.sqlite"
        with Registry(registry_path, read_only=True) as registry:
            last = registry.last_round()
            sent = registry.global_sent_in(last)
        if sent is None:
            raise BadInputError(f"--work {work}: seed {seed} holds no global model")
        rows[seed] = {}
        for gpu in newcomers:
            model = NodeState(work / f"seed{seed}" / "newcomers" / gpu.name).load_model()
            test = split_device(gpu.dataset, seed).test
            hv = gpu.dataset.hardware_vector
            copy = top1(model, test, hv)
            served = shared_arrays(model)
            load_shared_arrays(model, sent[1])
            plain = top1(model, test, hv)
            moved = any(not np.array_equal(served[k], sent[1][k]) for k in served)
            rows[seed][gpu.name] = {"copy": copy, "plain": plain, "served_a_copy": moved}
    names = [g.name for g in newcomers]
    copy_means = {n: float(np.mean([rows[s][n]["copy"] for s in seeds])) for n in names}
    plain_means = {n: float(np.mean([rows[s][n]["plain"] for s in seeds])) for n in names}
    mean, low, high = _interval(copy_means, plain_means)
    return {
        "simulated": True,
        "split": split,
        "seeds": seeds,
        "per_seed": {str(s): rows[s] for s in seeds},
        "per_seed_mean_difference": {
            str(s): float(np.mean([rows[s][n]["copy"] - rows[s][n]["plain"] for n in names]))
            for s in seeds
        },
        "copy_minus_plain": {"mean": mean, "low": low, "high": high},
        "copy_mean": float(np.mean(list(copy_means.values()))),
        "plain_mean": float(np.mean(list(plain_means.values()))),
    }


def main(argv: list[str] | None = None) -> None:
    from bench import reporting
    from schemas.errors import run_cli

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--protocol", choices=["validation", "test"], required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    run_cli(
        lambda: reporting.print_json(diagnose(args.work, args.protocol, seeds), args.out),
        "newcomer_copy_diagnose",
    )


if __name__ == "__main__":
    main()
