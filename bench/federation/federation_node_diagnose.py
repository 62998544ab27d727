"""Why federated nodes trail their own-only models: each node's held-out top-1 four ways.

    python -m bench.federation.federation_node_diagnose [--seed 0] [--similarity-steps 0]
        [--own-only-epochs 24] [--personal 12,24] [--out runs/federation_node_diagnose]
    python -m bench.federation.federation_node_diagnose --summary --out DIR   # over its seeds

VALIDATION fleet's nodes (the protocol's training units; no newcomers), one federation as
bench/federation/federation_helps.py runs the old winner (12 rounds x 1 epoch, FedAdam 0.01),
then per node on the protocol's held-out tasks:
- `mixture`: the node's federated model (what federation_helps scores);
- `own_expert`: its own expert alone inside that model (global encoder, no gate);
- `own_only_chosen`: own-only at the budget chosen on validation (`--own-only-epochs`);
- `own_only_equal`: own-only at the federation's rounds x epochs (the same effort);
- with `--personal E,...`, for each E: `personal_E`, the mixture after the node fine-tunes
  its program encoder and own expert together on its train tasks for E epochs
  (`simoe_model.train.personalise`, FedAvg + local fine-tuning), and `personal_head_E`, the
  same with the encoder frozen (only its own expert trained: FedPer's head).

Everything is SIMULATED. Writes OUT/federation_node_diagnose_s<seed>.json and prints means.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.federation import federation_helps as fh


def node_diagnosis(
    nodes: Sequence[fh.FleetGPU],
    settings: fh.FederationHelpsSettings,
    seed: int,
    work: Path,
    personal: Sequence[int] = (),
) -> dict[str, dict[str, float]]:
    """Per node: mixture, own expert alone, own-only at the chosen and at the equal budget,
    and the personal fine-tunes of `personal` epochs."""
    import copy

    from agent.node_state import NodeState
    from simoe_model.metrics import task_metrics
    from simoe_model.task_data import DeviceDataset
    from simoe_model.train import personalise, predict_expert, train_expert

    report = fh.run_federation_helps(nodes, [], work, settings, seed=seed)
    out = {}
    for gpu, row in zip(nodes, report.nodes, strict=True):
        train, held = fh.split_tasks(
            gpu, settings.held_out_fraction, seed, settings.same_split, settings.held_out_tasks
        )
        model = NodeState(work / "nodes" / gpu.name).load_model()
        alone = [(predict_expert(model, gpu.name, t.features), t.latencies) for t in held]
        equal = fh.own_only_model(
            gpu, train, settings.rounds * settings.epochs, 1, seed, settings.local_batch
        )
        out[gpu.name] = {
            "mixture": row.federated_top1,
            "own_expert": task_metrics(alone)["top1"],
            "own_only_chosen": row.own_only_top1,
            "own_only_equal": fh.top1(equal, held, gpu.dataset.hardware_vector),
        }
        hv = gpu.dataset.hardware_vector
        data = DeviceDataset(gpu.device, hv, train)
        for epochs in personal:  # the seed of the federation's last round, as the node's
            both = personalise(model, gpu.name, data, epochs=epochs, seed=seed + settings.rounds)
            out[gpu.name][f"personal_{epochs}"] = fh.top1(both, held, hv)
            head = copy.deepcopy(model)
            train_expert(
                head, gpu.name, data, epochs=epochs, seed=seed + settings.rounds,
                train_encoder=False,
            )  # fmt: skip
            out[gpu.name][f"personal_head_{epochs}"] = fh.top1(head, held, hv)
    return out


def summary(out: Path) -> list[str]:
    """Over the seeds' files in `out`: each measure's mean over nodes of their seed means, and
    the mixture minus each own-only with a 95 % paired bootstrap clustered by GPU model."""
    from bench.transfer.protocol_report import paired_interval

    runs = [json.loads(p.read_text()) for p in sorted(out.glob("federation_node_diagnose_s*.json"))]
    if not runs:
        raise fh.BadInputError(f"no federation_node_diagnose_s*.json in {out}")
    keys = ["mixture", "own_expert", "own_only_chosen", "own_only_equal"]
    nodes = list(runs[0]["nodes"])
    unit = {k: {u: float(np.mean([r["nodes"][u][k] for r in runs])) for u in nodes} for k in keys}
    lines = [f"seeds {[r['seed'] for r in runs]}, {len(nodes)} nodes (SIMULATED): "
             + ", ".join(f"{k} {np.mean(list(unit[k].values())):.3f}" for k in keys)]  # fmt: skip
    for other in ("own_only_equal", "own_only_chosen"):
        mean, low, high = paired_interval(
            {u: [v] for u, v in unit["mixture"].items()}, {u: [v] for u, v in unit[other].items()}
        )
        better = sum(unit["mixture"][u] > unit[other][u] for u in nodes)
        lines.append(
            f"mixture - {other}: {mean:+.3f} [{low:+.3f}, {high:+.3f}], better on "
            f"{better} of {len(nodes)}"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--similarity-steps", type=int, default=0)
    parser.add_argument("--own-only-epochs", type=int, default=24)
    parser.add_argument(
        "--personal", default="", help="comma-separated personal fine-tune epochs to score"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/federation_node_diagnose"))
    parser.add_argument(
        "--summary", action="store_true", help="summarise OUT's seeds; runs nothing"
    )
    args = parser.parse_args(argv)
    if args.summary:
        print("\n".join(summary(args.out)))
        return
    import torch

    from bench import protocol
    from bench.federation.fleet import protocol_gpus

    torch.set_num_threads(1)
    nodes, _ = protocol_gpus("validation")
    settings = fh.FederationHelpsSettings(
        rounds=12, epochs=1, server_optimizer="adam", server_lr=0.01,
        held_out_tasks=tuple(protocol.HELD_OUT_TASKS), own_only_epochs=args.own_only_epochs,
        similarity_steps=args.similarity_steps,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as work:
        personal = [int(v) for v in args.personal.split(",") if v.strip()]
        rows = node_diagnosis(nodes, settings, args.seed, Path(work), personal)
    means = {k: float(np.mean([r[k] for r in rows.values()])) for k in next(iter(rows.values()))}
    args.out.mkdir(parents=True, exist_ok=True)
    fleet = protocol.fleet_hashes()["digest"]
    result = {"simulated": True, "seed": args.seed, "settings": settings.model_dump(),
              "fleet": fleet, "nodes": rows, "means": means}  # fmt: skip
    (args.out / f"federation_node_diagnose_s{args.seed}.json").write_text(
        json.dumps(result, indent=1) + "\n"
    )
    print(json.dumps(means))


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "federation_node_diagnose")
