"""Would a stronger teacher move the averaged program encoder? A one-seed check (SIMULATED).

    python -m bench.federation.teacher_diagnose --registry DIR/registry.sqlite \
        --probes FILE --seed 0 [--personal-epochs 24] [--steps 50,600] [--out FILE.json]

From a finished federation's registry (its latest global and every node's expert) on the
VALIDATION split: each node's teacher is the global plus its own expert fine-tuned on its
own train tasks (`--teacher personal`: `simoe_model.train.personalise`, what
`--personal-epochs` makes each node keep) or a model trained on its own train tasks alone
(`--teacher own-only`: what a node would keep across rounds, never averaged). Its scores on
the public probes are the targets; the server's distillation
(`server.distillation.distill_to_scores`) trains the global program encoder so that each
node's expert, reading it, scores the probes as the teacher did. The newcomers (validation
units) are scored zero-shot with their k nearest experts before and after, and
beside them: how far the teacher's probe order is from the same expert on the global encoder
(mean per-task Spearman), i.e. how much the teacher has to say.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr


def diagnose(
    registry_path: Path,
    probes_path: Path,
    seed: int,
    personal_epochs: int,
    steps: list[int],
    teacher: str = "personal",
) -> dict:
    from bench import protocol
    from bench.federation import federation_helps as fh
    from bench.federation.federation_baselines import own_only_model
    from bench.federation.federation_diagnose import _top1_with
    from bench.federation.fleet import protocol_gpus, split_tasks
    from bench.federation.saved_run import read_saved_run
    from bench.transfer.offline_transfer import split_device
    from server.distillation import distill_to_scores, expert_scores
    from simoe_model.model import SiMoE, add_expert, load_shared_arrays
    from simoe_model.probe_file import load_probes
    from simoe_model.task_data import DeviceDataset
    from simoe_model.train import personalise

    run = read_saved_run(registry_path)
    cpu = time.process_time()
    nodes, newcomers = protocol_gpus("validation")
    held = list(protocol.HELD_OUT_TASKS)
    probes = load_probes(probes_path)
    experts, global_arrays = run.experts, run.global_arrays
    by_unit = {}
    for g in nodes:
        matches = [n for n in experts if n.split(":")[-1] == g.name]
        if matches:
            by_unit[g.name] = matches[0]
    teachers, spearman_vs_global = [], []
    base_scores = expert_scores(global_arrays, experts, probes)
    for g in nodes:
        if g.name not in by_unit:
            continue
        name = by_unit[g.name]
        model = SiMoE()
        load_shared_arrays(model, global_arrays)
        add_expert(model, name, experts[name])
        train, _held = split_tasks(g, 1 / 3, seed, False, held)
        data = DeviceDataset(g.device, g.dataset.hardware_vector, train)
        if teacher == "personal":
            personal = personalise(model, name, data, epochs=personal_epochs, seed=seed)
        else:  # a model kept across rounds on the node's own data alone, never averaged
            personal = own_only_model(g, train, personal_epochs, 1, seed)
        personal.eval()
        scores = [
            personal.expert(name)(personal.embed(t.rows, t.segment, t.n)).detach().numpy()
            for t in probes
        ]
        rhos = [spearmanr(a, b).statistic for a, b in zip(scores, base_scores[name], strict=True)]
        spearman_vs_global.append(float(np.nanmean(rhos)))
        teachers.append((experts[name], scores))

    def newcomer_top1(arrays: dict) -> dict[str, float]:
        model = SiMoE()
        load_shared_arrays(model, arrays)
        for name, weights in experts.items():
            add_expert(model, name, weights)
        model.eval()
        out = {}
        for gpu in newcomers:
            hv = gpu.dataset.hardware_vector
            nearest = sorted(
                model.expert_names,
                key=lambda n: -model.similarity(hv, model.expert(n).hardware.numpy()),
            )[: fh.FederationHelpsSettings().k_experts]
            out[gpu.name] = _top1_with(model, split_device(gpu.dataset, seed).test, hv, nearest)
        return out

    rows = {"global": newcomer_top1(dict(global_arrays))}
    losses = {}
    for n in steps:
        distilled, before, after = distill_to_scores(
            global_arrays, teachers, probes, steps=n, seed=seed
        )
        rows[f"distilled_{n}"] = newcomer_top1(distilled)
        losses[n] = (before, after)
    return {
        "simulated": True,
        "split": "validation",
        "seed": seed,
        "registry": str(registry_path),
        "probes": str(probes_path),
        "teacher": teacher,
        "personal_epochs": personal_epochs,
        "teachers": len(teachers),
        "teacher_vs_global_spearman_mean": float(np.mean(spearman_vs_global)),
        "teacher_vs_global_spearman_min": float(np.min(spearman_vs_global)),
        "distill_loss_before_after": {str(k): v for k, v in losses.items()},
        "newcomer_top1": rows,
        "newcomer_top1_mean": {k: float(np.mean(list(v.values()))) for k, v in rows.items()},
        "cpu_seconds": time.process_time() - cpu,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", type=Path, required=True)
    parser.add_argument("--probes", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--personal-epochs", type=int, default=24)
    parser.add_argument("--steps", default="50,600")
    parser.add_argument(
        "--teacher",
        choices=["personal", "own-only"],
        default="personal",
        help="personal: the global + its own expert fine-tuned --personal-epochs on its data; "
        "own-only: a model trained on its data alone for that many epochs (one per round)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    steps = [int(s) for s in args.steps.split(",") if s.strip()]
    result = diagnose(
        args.registry, args.probes, args.seed, args.personal_epochs, steps, args.teacher
    )
    from bench.reporting import print_json

    print_json(result, args.out)


if __name__ == "__main__":
    from schemas.errors import run_cli

    run_cli(main, "teacher_diagnose")
