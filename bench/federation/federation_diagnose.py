"""Why the federated newcomer trails the central model: swap one part at a time.

    python -m bench.federation.federation_diagnose --seed 0 \
        [--rounds 3 --epochs 4 --central-epochs 12]

VALIDATION units only (bench/protocol.py's validation split as newcomers; there is no
option for the test split). One federation as bench/federation/federation_helps.py runs it,
then each
newcomer is scored zero-shot (offline_transfer's test split, the same as federation_helps)
by models that differ from the one it got in ONE respect:

- `fed_k`: what the newcomer got (global shared parts, its k nearest experts);
- `fed_all`: the same global shared parts, every node's expert (delivery of all experts);
- `fed_all_central_gate`: fed_all after the gate and hardware encoder are trained in one
  process on every node's train data (program encoder and experts frozen): the
  federation's encoder and experts under a centrally trained router;
- `fed_encoder_central_experts`: fed_all with every expert retrained in one process on
  the federation's program encoder, frozen (is the encoder or the expert training short?);
- `fed_encoder_central_all`: the federation's program encoder, frozen, under the central
  pipeline (every expert trained in one process, then hardware encoder and gate): what the
  federated encoder alone costs;
- `central_all`: the central model (every expert); `central_k`: the central model with the
  newcomer's federated k experts only; `central_nearest_k`: with its own k nearest;
- `central_fed_router`: the central model's program encoder and experts (the newcomer's
  federated k) under the FEDERATED hardware encoder and gate: what the federated routing costs
  on the central experts (the gate's program input is the central embedding);

Everything is SIMULATED. Writes OUT/federation_diagnose_s<seed>.json and prints a table.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from pathlib import Path

import numpy as np

from bench.federation import federation_helps as fh


def diagnose(settings: fh.FederationHelpsSettings, seed: int, work: Path) -> dict:
    """Federate the validation fleet with `settings` (its `central_epochs`: the central
    model the swaps take parts from), then swap parts of the newcomers' models."""
    from agent.node_state import NodeState
    from bench import protocol
    from bench.federation.fleet import protocol_gpus, split_tasks
    from bench.transfer.offline_transfer import split_device
    from server.registry import Registry
    from simoe_model.model import SiMoE, add_expert
    from simoe_model.task_data import DeviceDataset
    from simoe_model.train import train_experts, train_shared

    nodes, newcomers = protocol_gpus("validation")
    held = list(protocol.HELD_OUT_TASKS)
    central_epochs, k = settings.central_epochs, settings.k_experts
    federated = settings.model_copy(update={"held_out_tasks": tuple(held), "central_epochs": 0})
    report = fh.run_federation_helps(nodes, newcomers, work, federated, seed=seed)
    splits = {g.name: split_tasks(g, 1 / 3, seed, False, held) for g in nodes}
    central = fh.central_model(nodes, splits, central_epochs, seed)
    with Registry(work / "server" / "registry.sqlite") as registry:
        experts = {name: registry.expert(name) for name in registry.expert_names()}
    sample = NodeState(work / "newcomers" / newcomers[0].name).load_model()
    fed_all = copy.deepcopy(sample)
    for name, arrays in experts.items():
        add_expert(fed_all, name, arrays)
    routed = copy.deepcopy(fed_all)
    # the federation's program encoder under the whole central pipeline
    fed_encoder_central = SiMoE()
    fed_encoder_central.program_encoder.load_state_dict(fed_all.program_encoder.state_dict())
    retrained = copy.deepcopy(fed_all)  # the federation's encoder, experts trained centrally
    data = [DeviceDataset(g.device, g.dataset.hardware_vector, splits[g.name][0]) for g in nodes]
    train_shared(
        routed, data, epochs=central_epochs, seed=seed,
        expert_of={g.device: g.name for g in nodes}, refit_hardware=True,
    )  # fmt: skip
    train_experts(
        retrained, [(g.name, d) for g, d in zip(nodes, data, strict=True)],
        epochs=central_epochs, seed=seed, train_encoder=False,
    )  # fmt: skip
    train_experts(
        fed_encoder_central, [(g.device, d) for g, d in zip(nodes, data, strict=True)],
        epochs=central_epochs, seed=seed, train_encoder=False,
    )  # fmt: skip
    train_shared(fed_encoder_central, data, epochs=central_epochs, seed=seed)
    central_fed_router = copy.deepcopy(central)  # the federated hardware encoder and gate
    for part in ("hardware_encoder", "gate"):
        getattr(central_fed_router, part).load_state_dict(getattr(sample, part).state_dict())
    rows = []
    for gpu, fed_row in zip(newcomers, report.newcomers, strict=True):
        test = split_device(gpu.dataset, seed).test
        hv = gpu.dataset.hardware_vector
        mine = NodeState(work / "newcomers" / gpu.name).load_model()
        nearest = sorted(
            central.expert_names,
            key=lambda n: -central.similarity(hv, central.expert(n).hardware.numpy()),
        )[:k]
        rows.append(
            {
                "gpu": gpu.name,
                "fed_experts": fed_row.experts,
                "central_nearest": nearest,
                "fed_k": fh.top1(mine, test, hv),
                "fed_all": fh.top1(fed_all, test, hv),
                "fed_all_central_gate": fh.top1(routed, test, hv),
                "fed_encoder_central_experts": fh.top1(retrained, test, hv),
                "fed_encoder_central_all": fh.top1(fed_encoder_central, test, hv),
                "central_all": fh.top1(central, test, hv),
                "central_k": _top1_with(central, test, hv, [f"sim:{n}" for n in fed_row.experts]),
                "central_nearest_k": _top1_with(central, test, hv, nearest),
                "central_fed_router": _top1_with(
                    central_fed_router, test, hv, [f"sim:{n}" for n in fed_row.experts]
                ),
            }
        )
    keys = [k for k in rows[0] if k not in {"gpu", "fed_experts", "central_nearest"}]
    return {
        "simulated": True,
        "split": "validation",
        "seed": seed,
        "rounds": settings.rounds,
        "epochs": settings.epochs,
        "central_epochs": central_epochs,
        "k_experts": k,
        "local_batch": settings.local_batch,
        "prox_mu": settings.prox_mu,
        "server_lr": settings.server_lr,
        "server_optimizer": settings.server_optimizer,
        "similarity_steps": settings.similarity_steps,
        "transfer_weight": settings.transfer_weight,
        "distill_steps": settings.distill_steps,
        "similarity_source": settings.similarity_source,
        "rows": rows,
        "means": {key: float(np.mean([r[key] for r in rows])) for key in keys},
        "load_average": fh.load_average(),
    }


def agreement_check(registry_path: Path, probes: Path | None = None) -> dict:
    """What the server's similarity fit was fed, against what it should follow: each
    (checking node a, expert b) agreement a federation's registry holds (how well b's expert
    ranks a's own records) beside the measured agreement of a's and b's latencies (mean
    per-task Spearman on shared candidates, the figure newcomers are scored against), over the
    protocol's training units (labels read for training). Also after removing each expert's
    mean over its checkers (a generally good expert agrees with everyone) and each checker's
    mean: how much of the reported figure is the pair, not the expert. With `probes` (a
    probe file, server.distillation's), also the agreements the server computes from the
    experts on them (how alike each pair ranks the probes on the latest global) against the
    measured ones."""
    from scipy.stats import spearmanr

    from bench.federation.fleet import protocol_units
    from bench.transfer.protocol_similarity import measured_agreements
    from server.registry import Registry

    with Registry(registry_path) as registry:
        name_of = {row["node_key"]: row["name"] for row in registry.nodes()}
        reported = {
            (name_of[a], name_of[b]): value
            for a, b, value in registry.expert_agreements()
            if a in name_of and b in name_of
        }
        latest = registry.latest_global()
        expert_weights = {
            name_of[info.node_key]: arrays
            for info in registry.experts()
            if info.node_key in name_of and (arrays := registry.expert(info.name)) is not None
        }
    units = {g.name: g for g in protocol_units("train", "train")}
    device = {g.dataset.device: name for name, g in units.items()}
    measured_by_device = measured_agreements(
        [g.dataset for g in units.values()], [g.dataset for g in units.values()]
    )
    measured = {
        (device[a], device[b]): v for a, row in measured_by_device.items() for b, v in row.items()
    }
    pairs = sorted(p for p in reported if p in measured and p[0] != p[1])
    rep = np.array([reported[p] for p in pairs])
    mea = np.array([measured[p] for p in pairs])
    experts = sorted({b for _, b in pairs})
    checkers = sorted({a for a, _ in pairs})
    expert_mean = {e: rep[[b == e for _, b in pairs]].mean() for e in experts}
    residual = rep - np.array([expert_mean[b] for _, b in pairs])
    checker_mean = {c: residual[[a == c for a, _ in pairs]].mean() for c in checkers}
    centred = residual - np.array([checker_mean[a] for a, _ in pairs])
    between = np.var([expert_mean[b] for _, b in pairs])
    probe_figures: dict[str, float | int | str] = {}
    if probes is not None and latest is not None:  # the experts' probe agreements, the same way
        from server.distillation import probe_agreements
        from simoe_model.probe_file import load_probes

        computed = {
            (a, b): v
            for a, b, v in probe_agreements(latest[1], expert_weights, load_probes(probes))
        }
        both = sorted(p for p in computed if p in measured and p[0] != p[1])
        probe_figures = {
            "probes": str(probes),
            "probe_pairs": len(both),
            "spearman_probe_agreement_vs_measured": float(
                spearmanr([computed[p] for p in both], [measured[p] for p in both]).statistic
            ),
            "global_version": latest[0],
        }
    return {
        "simulated": True,
        "registry": str(registry_path),
        "pairs": len(pairs),
        "spearman_reported_vs_measured": float(spearmanr(rep, mea).statistic),
        "spearman_expert_centred_vs_measured": float(spearmanr(residual, mea).statistic),
        "spearman_double_centred_vs_measured": float(spearmanr(centred, mea).statistic),
        "share_of_reported_variance_from_the_expert": float(between / np.var(rep)),
        "reported_mean": float(rep.mean()),
        "measured_mean": float(mea.mean()),
        **probe_figures,
    }


def _top1_with(model, tasks, hv, names) -> float:  # noqa: ANN001
    from simoe_model.metrics import task_metrics
    from simoe_model.train import predict

    pairs = [(predict(model, t.features, hv, experts=names), t.latencies) for t in tasks]
    return task_metrics(pairs)["top1"]


# the bench's probe set (federation_helps.write_probe_file), as a diagnosis row says it
PROBES_TEXT = f"{fh.PROBES_PER_TASK} probes per task"
COLUMNS = {
    "fed_k": "federated newcomer (its k experts)",
    "fed_all": "same global, all experts",
    "fed_all_central_gate": "+ gate trained centrally",
    "fed_encoder_central_experts": "federated encoder, experts trained centrally",
    "fed_encoder_central_all": "federated encoder, experts, gate and hardware encoder central",
    "central_fed_router": "central encoder and experts, federated router and expert choice",
    "central_k": "central, the newcomer's k experts",
    "central_all": "central (all experts)",
}


def summary_markdown(results: list[dict]) -> str:
    """One row per diagnostic run: its settings and each swap's mean top-1 over newcomers."""
    lines = [
        "# Why the federated newcomer trails the central model (SIMULATED, validation units)",
        "",
        "Each row: `python -m bench.federation.federation_diagnose --seed S --rounds R --epochs E "
        "[--local-batch B --prox-mu M --server-optimizer O --server-lr L --similarity-steps N "
        "--distill-steps D]` "
        "(central: 12 "
        "epochs); the validation units' mean zero-shot top-1 when ONE part of the newcomer's "
        "model is swapped (bench/federation/federation_diagnose.py's docstring says what each is). "
        "Rows whose similarity fit is not recorded predate 2026-12-02's third round and may have "
        "run on an earlier fleet; n/a: a swap the run did not have yet.",
        "",
        "| seed | rounds x epochs | k | local batch | prox mu | transfer weight | server | "
        "similarity fit | distillation | " + " | ".join(COLUMNS.values()) + " | load at end |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(COLUMNS) + "---|",
    ]
    for r in results:
        server = f"{r.get('server_optimizer', 'sgd')} {r.get('server_lr', 1.0):g}"
        steps = r.get("similarity_steps")  # None: the run did not record it
        fit = "not recorded" if steps is None else f"{steps} steps" if steps else "off"
        if steps and r.get("similarity_source") == "probes":
            fit += ", probe agreements"
        distil = r.get("distill_steps", 0)  # absent: the run predates the option (none)
        probes = r.get("probes", PROBES_TEXT)
        distil_text = f"{distil} steps, {probes}" if distil else "off"
        cells = " | ".join(  # runs from before a swap existed: n/a
            f"{r['means'][k]:.3f}" if k in r["means"] else "n/a" for k in COLUMNS
        )
        lines.append(
            f"| {r['seed']} | {r['rounds']} x {r['epochs']} | {r.get('k_experts', 3)} | "
            f"{r.get('local_batch', 8)} | {r.get('prox_mu', 0.0):g} | "
            f"{r.get('transfer_weight', 0.0):g} | {server} | {fit} | {distil_text} | {cells} | "
            f"{r['load_average'][0]:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--central-epochs", type=int, default=12)
    parser.add_argument("--k-experts", type=int, default=3)
    parser.add_argument("--local-batch", type=int, default=8)
    parser.add_argument("--prox-mu", type=float, default=0.0)
    parser.add_argument("--server-lr", type=float, default=1.0)
    parser.add_argument("--server-optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--similarity-steps", type=int, default=0)
    parser.add_argument("--transfer-weight", type=float, default=0.0)
    parser.add_argument("--distill-steps", type=int, default=0)
    parser.add_argument(
        "--probes", type=Path, help="with --agreements: a probe file, for the probe agreements"
    )
    parser.add_argument("--similarity-source", choices=["reported", "probes"], default="reported")
    parser.add_argument("--tag", default="", help="suffix of the .json file")
    parser.add_argument("--out", type=Path, default=Path("runs/fed_diagnose"))
    parser.add_argument(
        "--summarize", type=Path, nargs="+", help="diagnostic .json files: one table, OUT/"
        "federation_diagnose.md; runs nothing",
    )  # fmt: skip
    parser.add_argument(
        "--agreements", type=Path, help="a federation's registry.sqlite: its reported expert "
        "agreements against measured agreement (OUT/federation_diagnose_agreements[_TAG].json); "
        "runs nothing else",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.agreements:
        result = agreement_check(args.agreements, args.probes)
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"federation_diagnose_agreements{'_' + args.tag if args.tag else ''}.json"
        (args.out / name).write_text(json.dumps(result, indent=1))
        print(json.dumps(result, indent=1))
        return
    if args.summarize:
        text = summary_markdown([json.loads(p.read_text()) for p in args.summarize])
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "federation_diagnose.md").write_text(text)
        print(text)
        return
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="federation_diagnose-") as tmp:
        settings = fh.FederationHelpsSettings(
            rounds=args.rounds,
            epochs=args.epochs,
            central_epochs=args.central_epochs,
            k_experts=args.k_experts,
            local_batch=args.local_batch,
            prox_mu=args.prox_mu,
            server_lr=args.server_lr,
            server_optimizer=args.server_optimizer,
            similarity_steps=args.similarity_steps,
            transfer_weight=args.transfer_weight,
            distill_steps=args.distill_steps,
            similarity_source=args.similarity_source,
        )
        result = diagnose(settings, args.seed, Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"federation_diagnose_s{args.seed}{'_' + args.tag if args.tag else ''}.json"
    path.write_text(json.dumps(result, indent=1))
    keys = list(result["means"])
    print("| newcomer | " + " | ".join(keys) + " |")
    for row in result["rows"]:
        print(f"| {row['gpu']} | " + " | ".join(f"{row[k]:.3f}" for k in keys) + " |")
    print("| mean | " + " | ".join(f"{result['means'][k]:.3f}" for k in keys) + " |")


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
