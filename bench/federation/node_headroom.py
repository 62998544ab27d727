"""How much a node could gain from the fleet's data at all: pooled training as an upper bound.

    python -m bench.federation.node_headroom [--seeds 0,1,2] [--central-epochs 12,24]
        [--personal-epochs 24] [--split protocol|per-node] [--federation REPORT.json ...]
        [--out docs/results/federation_helps_diagnose]
    python -m bench.federation.node_headroom --join OUT/node_headroom_per-node.json
        --federation REPORT.json ... --out OUT       # computes nothing: joins the reports

Issue 23 asks that federated nodes keep gaining over their own-data-only models. Federation
can at best approach what pooling every node's train data in one process gives, so this
scores, on every protocol training node's held-out tasks, per seed:

- `own_only`: the node's own-data model at its validated budget (bench/federation_own_only.json);
- `own_only_E`: the same at every point E of the protocol's OWN_ONLY_GRID (one run, scored
  after each grid point's epoch), so the budget best in hindsight can be read;
- `central_E`: one SiMoE trained in one process on every node's train tasks for E epochs,
  as the federation bench's central reference, its mixture on the node's hardware;
- `central_E_own_expert`: the node's own expert inside that model, alone (no gate);
- `central_E_personal`: that model after the node's personal fine-tune of its program
  encoder and own expert (`simoe_model.train.personalise`, `--personal-epochs`), what the
  federation's personal model would be with a perfectly transferred encoder.

`--split protocol` holds out the protocol's tasks on every node, which no node trains on;
`--split per-node` a third of each node's own tasks, drawn per node and seed, which other
nodes train on (bench/protocol.py NODE_SPLIT_RULE; federation_helps `--node-split`).
`--federation` adds the nodes' federated scores of federation_helps reports run on the same
split and seeds (`fed_TAG`, and `fed_TAG_global` for the averaged model beside a personal
one); their own-only scores must equal this run's, which checks that the splits are the same.

It federates nothing and picks nothing: a diagnosis of the headroom. Everything is SIMULATED.
Writes OUT/node_headroom[_per-node].json and prints each measure minus own-only with a 95 %
paired bootstrap clustered by GPU model, and minus own-only at the grid point best in
hindsight (the budget most favourable to own-only on the scored tasks).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Literal

import numpy as np

from bench.federation import federation_helps as fh
from bench.federation.federation_baselines import central_model, own_only_model, top1
from bench.federation.fleet import split_tasks

Split = Literal["protocol", "per-node"]


def node_splits(nodes, seed: int, split: Split) -> dict:  # noqa: ANN001
    """Each node's (train, held-out) tasks as the federation bench draws them at `seed`: the
    protocol's held-out tasks on every node, or a third of its own drawn per node."""
    from bench import protocol

    held_names = tuple(protocol.HELD_OUT_TASKS) if split == "protocol" else None
    bench = fh.FederationHelpsSettings()  # the federation bench's split, not a copy of it
    return {
        g.name: split_tasks(g, bench.held_out_fraction, seed, bench.same_split, held_names)
        for g in nodes
    }


def headroom(
    seed: int, central_epochs: list[int], personal_epochs: int, fleet: str, split: Split
) -> dict:
    """Per node of the validation fleet (digest `fleet`), this seed's scores (see the module
    docstring)."""
    from bench import protocol
    from bench.federation.fleet import protocol_gpus
    from simoe_model.metrics import task_metrics
    from simoe_model.task_data import DeviceDataset
    from simoe_model.train import personalise, predict_expert

    nodes, _ = protocol_gpus("validation")  # the nodes only: no newcomer label is read
    splits = node_splits(nodes, seed, split)
    own_epochs = fh.own_only_budget(fleet)
    grid = sorted({*protocol.OWN_ONLY_GRID, own_epochs})
    rows: dict[str, dict[str, float]] = {}
    for gpu in nodes:
        train, held = splits[gpu.name]
        hv = gpu.dataset.hardware_vector
        scores: dict[str, float] = {}

        def score(epochs: int, model, held=held, hv=hv, scores=scores) -> None:  # noqa: ANN001
            if epochs in grid:  # one epoch a round, as own_only_model trains the budget
                scores[f"own_only_{epochs}"] = top1(model, held, hv)

        own_only_model(gpu, train, max(grid), 1, seed, after_round=score)
        rows[gpu.name] = {"own_only": scores[f"own_only_{own_epochs}"], **scores}
    for epochs in central_epochs:
        started = time.process_time()
        central = central_model(nodes, splits, epochs, seed)
        print(f"seed {seed}: central {epochs} epochs, {time.process_time() - started:.0f} CPU s")
        for gpu in nodes:
            train, held = splits[gpu.name]
            hv = gpu.dataset.hardware_vector
            rows[gpu.name][f"central_{epochs}"] = top1(central, held, hv)
            # the central model names each expert by its device, not by node name
            alone = [(predict_expert(central, gpu.device, t.features), t.latencies) for t in held]
            rows[gpu.name][f"central_{epochs}_own_expert"] = task_metrics(alone)["top1"]
            if personal_epochs:
                data = DeviceDataset(gpu.device, hv, train)
                mine = personalise(central, gpu.device, data, epochs=personal_epochs, seed=seed)
                rows[gpu.name][f"central_{epochs}_personal"] = top1(mine, held, hv)
    return {"seed": seed, "split": split, "own_only_epochs": own_epochs, "nodes": rows}


def add_federation(runs: list[dict], report: Path) -> None:
    """The nodes' federated scores of a federation_helps report (FederationHelpsSeeds JSON) as
    `fed_TAG` (and `fed_TAG_global`, the averaged model beside a personal one), per seed;
    BadInputError, one line, unless it has every seed and its own-only scores are this run's
    (then its splits and own-only budget are too)."""
    from bench import reporting
    from bench.federation.federation_report import FederationHelpsSeeds
    from schemas import BadInputError

    federation = reporting.read_report(report, FederationHelpsSeeds)
    tag = report.stem.removeprefix("federation_helps_validation").strip("_") or "federation"
    by_seed = {r.seed: r for r in federation.runs}
    for run in runs:
        if run["seed"] not in by_seed:
            raise BadInputError(f"{report}: no run of seed {run['seed']}")
        for row in by_seed[run["seed"]].nodes:
            mine = run["nodes"].get(row.gpu)
            if mine is None or abs(mine["own_only"] - row.own_only_top1) > 1e-9:
                raise BadInputError(
                    f"{report}: {row.gpu}'s own-only score differs from this run's, so its "
                    "split or budget does (is it the same --split?)"
                )
            mine[f"fed_{tag}"] = row.federated_top1
            if row.federated_global_top1 is not None:
                mine[f"fed_{tag}_global"] = row.federated_global_top1


def summary(runs: list[dict]) -> list[str]:
    """Each measure's mean, and minus own-only (at its validated budget, and at the grid point
    best in hindsight) with its clustered paired interval."""
    from bench.transfer.protocol_report import paired_interval

    nodes = list(runs[0]["nodes"])
    keys = list(runs[0]["nodes"][nodes[0]])
    unit = {k: {u: [r["nodes"][u][k] for r in runs] for u in nodes} for k in keys}
    means = {k: float(np.mean([np.mean(v) for v in unit[k].values()])) for k in keys}
    grid = [k for k in keys if k.startswith("own_only_")]
    # the grid's best mean (ties: the smaller budget); none in a report from before the grid
    best = max(grid, key=lambda k: (means[k], -int(k.removeprefix("own_only_"))), default=None)
    lines = [
        f"seeds {[r['seed'] for r in runs]}, split {runs[0].get('split', 'protocol')}, "
        f"{len(nodes)} nodes (SIMULATED); own-only best in hindsight: {best or 'not scored'}"
    ]

    def against(key: str, peer: str, name: str) -> str:
        diff, low, high = paired_interval(unit[key], unit[peer])
        better = sum(np.mean(unit[key][u]) > np.mean(unit[peer][u]) for u in nodes)
        return f", minus {name} {diff:+.3f} [{low:+.3f}, {high:+.3f}], better on {better}"

    for key in keys:
        line = f"{key}: {means[key]:.3f}"
        if key != "own_only":
            line += against(key, "own_only", "own-only")
        if best and key not in ("own_only", best) and not key.startswith("own_only_"):
            line += against(key, best, best)
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--central-epochs", default="12,24")
    parser.add_argument("--personal-epochs", type=int, default=24)
    parser.add_argument("--split", choices=["protocol", "per-node"], default="protocol")
    parser.add_argument(
        "--federation",
        type=Path,
        nargs="*",
        default=[],
        help="federation_helps reports (.json) of the same split and seeds, to add",
    )
    parser.add_argument(
        "--join",
        type=Path,
        help="a node_headroom JSON: its runs, scored again with --federation (computes nothing)",
    )
    parser.add_argument("--out", type=Path, default=Path("docs/results/federation_helps_diagnose"))
    args = parser.parse_args(argv)
    command = " ".join(["python -m bench.federation.node_headroom", *(argv or sys.argv[1:])])
    if args.join:
        earlier = json.loads(args.join.read_text())
        fleet, split = earlier["fleet"], earlier["runs"][0].get("split", "protocol")
        command = f"{earlier['command']}; then {command}"
        runs = [
            {
                **run,
                "nodes": {
                    unit: {k: v for k, v in row.items() if not k.startswith("fed_")}
                    for unit, row in run["nodes"].items()
                },
            }  # fmt: skip
            for run in earlier["runs"]
        ]
    else:
        import torch

        from bench import protocol

        torch.set_num_threads(1)
        seeds = [int(s) for s in args.seeds.split(",")]
        epochs = [int(e) for e in args.central_epochs.split(",")]
        fleet, split = protocol.fleet_hashes()["digest"], args.split  # hashed once
        runs = [headroom(seed, epochs, args.personal_epochs, fleet, split) for seed in seeds]
    for report in args.federation:
        add_federation(runs, report)
    lines = summary(runs)
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "simulated": True,
        "command": command,
        "fleet": fleet,
        "summary": lines,
        "runs": runs,
    }
    stem = "node_headroom" if split == "protocol" else f"node_headroom_{split}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "node_headroom")
