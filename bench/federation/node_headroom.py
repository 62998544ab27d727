"""How much a node could gain from the fleet's data at all: pooled training as an upper bound.

    python -m bench.federation.node_headroom [--seeds 0,1,2] [--central-epochs 12,24]
        [--personal-epochs 24] [--out docs/results/federation_helps_diagnose]

Issue 23 asks that federated nodes keep gaining over their own-data-only models. Federation
can at best approach what pooling every node's train data in one process gives, so this
scores, on every protocol training node's held-out tasks (the protocol's, the same on every
node, seen by no node), per seed:

- `own_only`: the node's own-data model at its validated budget (bench/federation_own_only.json);
- `central_E`: one SiMoE trained in one process on every node's train tasks for E epochs,
  as the federation bench's central reference, its mixture on the node's hardware;
- `central_E_own_expert`: the node's own expert inside that model, alone (no gate);
- `central_E_personal`: that model after the node's personal fine-tune of its program
  encoder and own expert (`simoe_model.train.personalise`, `--personal-epochs`), what the
  federation's personal model would be with a perfectly transferred encoder.

It federates nothing and picks nothing: a diagnosis of the headroom. Everything is SIMULATED.
Writes OUT/node_headroom.json and prints each measure minus own-only with a 95 % paired
bootstrap clustered by GPU model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.federation import federation_helps as fh
from bench.federation.federation_baselines import central_model, own_only_model, top1
from bench.federation.fleet import split_tasks


def headroom(seed: int, central_epochs: list[int], personal_epochs: int, fleet: str) -> dict:
    """Per node of the validation fleet (digest `fleet`), this seed's scores (see the module
    docstring)."""
    from bench import protocol
    from bench.federation.fleet import protocol_gpus
    from simoe_model.metrics import task_metrics
    from simoe_model.task_data import DeviceDataset
    from simoe_model.train import personalise, predict_expert

    nodes, _ = protocol_gpus("validation")  # the nodes only: no newcomer label is read
    held_names = tuple(protocol.HELD_OUT_TASKS)
    bench = fh.FederationHelpsSettings()  # the federation bench's split, not a copy of it
    splits = {
        g.name: split_tasks(g, bench.held_out_fraction, seed, bench.same_split, held_names)
        for g in nodes
    }
    own_epochs = fh.own_only_budget(fleet)
    rows: dict[str, dict[str, float]] = {}
    for gpu in nodes:
        train, held = splits[gpu.name]
        alone = own_only_model(gpu, train, own_epochs, 1, seed)
        rows[gpu.name] = {"own_only": top1(alone, held, gpu.dataset.hardware_vector)}
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
    return {"seed": seed, "own_only_epochs": own_epochs, "nodes": rows}


def summary(runs: list[dict]) -> list[str]:
    """Each measure's mean, and minus own-only with its clustered paired interval."""
    from bench.transfer.protocol_report import paired_interval

    nodes = list(runs[0]["nodes"])
    keys = list(runs[0]["nodes"][nodes[0]])
    unit = {k: {u: [r["nodes"][u][k] for r in runs] for u in nodes} for k in keys}
    lines = [f"seeds {[r['seed'] for r in runs]}, {len(nodes)} nodes (SIMULATED)"]
    for key in keys:
        mean = float(np.mean([np.mean(v) for v in unit[key].values()]))
        line = f"{key}: {mean:.3f}"
        if key != "own_only":
            diff, low, high = paired_interval(unit[key], unit["own_only"])
            better = sum(np.mean(unit[key][u]) > np.mean(unit["own_only"][u]) for u in nodes)
            line += f", minus own-only {diff:+.3f} [{low:+.3f}, {high:+.3f}], better on {better}"
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--central-epochs", default="12,24")
    parser.add_argument("--personal-epochs", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path("docs/results/federation_helps_diagnose"))
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    epochs = [int(e) for e in args.central_epochs.split(",")]
    from bench import protocol

    fleet = protocol.fleet_hashes()["digest"]  # hashed once: it reads every unit's file
    runs = [headroom(seed, epochs, args.personal_epochs, fleet) for seed in seeds]
    lines = summary(runs)
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "simulated": True,
        "command": " ".join(["python -m bench.federation.node_headroom", *(argv or sys.argv[1:])]),
        "fleet": fleet,
        "summary": lines,
        "runs": runs,
    }
    (args.out / "node_headroom.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "node_headroom")
