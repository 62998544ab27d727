"""Which model a federated node should tune with: its personal fine-tune, the averaged model,
or the two ranking together.

    python -m bench.federation.model_choice_diagnose --report REPORT.json --work WORK
        [--out OUT.json]

On each node's held-out tasks of a federation_helps run kept with `--work` (its report,
`--report`, says which split and seeds; the splits are drawn again with
`node_headroom.node_splits`), per seed:

- `personal`: the node's personal fine-tune, what `agent.model_choice` tunes with today;
- `averaged`: the federation model it was sent (the global and its experts), before it;
- `ensemble`: per task, the mean of the two models' scores, each standardised over the
  task's candidates, so neither model's scale decides;
- `own_only`: the report's own-only model, the peer.

Why: on the protocol split (no node trains on the held-out operators) the personal model is
far ahead of the averaged one, and on the per-node split (other nodes train on them) it is
behind (docs/results/model_evaluation.md). A node cannot tell which case a workload is, so a
choice that holds on both is wanted. It picks nothing: a diagnosis, on validation, for a
round pre-registered in bench/protocol.py. SIMULATED. Prints each measure minus `personal`
and minus `own_only` with a 95 % paired bootstrap clustered by GPU model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from bench.federation.node_headroom import node_splits
from schemas import BadInputError


def standardised(scores: np.ndarray) -> np.ndarray:
    """Scores over one task's candidates with mean 0 and spread 1 (all equal: zeros)."""
    spread = scores.std()
    return (scores - scores.mean()) / spread if spread > 0 else np.zeros_like(scores)


def node_scores(personal, averaged, tasks, hardware_vector) -> dict[str, float]:  # noqa: ANN001
    """Top-1 of the personal, the averaged and the ensemble model on `tasks`."""
    from simoe_model.metrics import task_metrics
    from simoe_model.train import predict

    pairs: dict[str, list] = {"personal": [], "averaged": [], "ensemble": []}
    for task in tasks:
        mine = predict(personal, task.features, hardware_vector)
        sent = predict(averaged, task.features, hardware_vector)
        pairs["personal"].append((mine, task.latencies))
        pairs["averaged"].append((sent, task.latencies))
        both = standardised(mine) + standardised(sent)
        pairs["ensemble"].append((both, task.latencies))
    return {name: task_metrics(p)["top1"] for name, p in pairs.items()}


def diagnose(report_path: Path, work: Path) -> list[dict]:
    """Per seed, per node: the four scores (see the module docstring)."""
    from agent.node_state import NodeState
    from bench import reporting
    from bench.federation.federation_report import FederationHelpsSeeds
    from bench.federation.fleet import protocol_gpus

    report = reporting.read_report(report_path, FederationHelpsSeeds)
    if "validation split" not in report.runs[0].data:
        raise BadInputError(f"{report_path}: not a validation run of the protocol")
    per_node = report.runs[0].split == "per node"
    nodes, _ = protocol_gpus("validation")  # the nodes only: no newcomer label is read
    runs = []
    for run in report.runs:
        seed_dir = work / f"seed{run.seed}" / "nodes"
        if not seed_dir.is_dir():
            raise BadInputError(f"--work {work}: no seed{run.seed}/nodes (run it with --work)")
        rows = {}
        own = {r.gpu: r for r in run.nodes}
        splits = node_splits(nodes, run.seed, "per-node" if per_node else "protocol")
        for gpu in nodes:
            _, held = splits[gpu.name]
            node = NodeState(seed_dir / gpu.name)
            personal = node.load_personal_model()
            if personal is None:
                raise BadInputError(f"{gpu.name}: no personal model (a --personal-epochs run?)")
            scores = node_scores(personal, node.load_model(), held, gpu.dataset.hardware_vector)
            if abs(scores["personal"] - own[gpu.name].federated_top1) > 1e-9:
                raise BadInputError(f"{gpu.name}: not the report's personal score: another split?")
            rows[gpu.name] = {"own_only": own[gpu.name].own_only_top1, **scores}
        runs.append({"seed": run.seed, "split": "per-node" if per_node else "protocol",
                     "nodes": rows})  # fmt: skip
    return runs


def summary(runs: list[dict]) -> list[str]:
    from bench.transfer.protocol_report import paired_interval

    units = list(runs[0]["nodes"])
    keys = ["own_only", "personal", "averaged", "ensemble"]
    unit = {k: {u: [r["nodes"][u][k] for r in runs] for u in units} for k in keys}
    lines = [f"seeds {[r['seed'] for r in runs]}, split {runs[0]['split']}, {len(units)} nodes "
             "(SIMULATED, validation)"]  # fmt: skip
    for key in keys:
        line = f"{key}: {np.mean([np.mean(v) for v in unit[key].values()]):.3f}"
        for peer in ("personal", "own_only"):
            if key != peer and not (key == "own_only" and peer == "personal"):
                diff, low, high = paired_interval(unit[key], unit[peer])
                line += f", minus {peer} {diff:+.3f} [{low:+.3f}, {high:+.3f}]"
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, required=True, help="a federation_helps report")
    parser.add_argument("--work", type=Path, required=True, help="its --work directory")
    parser.add_argument("--out", type=Path, help="write the JSON here")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    runs = diagnose(args.report, args.work)
    lines = summary(runs)
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = ["python -m bench.federation.model_choice_diagnose", *(argv or sys.argv[1:])]
        result = {"simulated": True, "command": " ".join(command), "summary": lines, "runs": runs}
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "model_choice_diagnose")
