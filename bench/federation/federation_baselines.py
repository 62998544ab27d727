"""The federation's two peers in `federation_helps`: a node alone (its own data only, for the
budget the protocol's OWN_ONLY_RULE chooses on validation) and one SiMoE trained centrally on
every node's data; the score both are compared by (TenSet top-1 of the model's mixture); and
how the federated similarity of a newcomer to the nodes follows their measured agreement."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.federation.fleet import FleetGPU, split_tasks
from schemas import BadInputError
from simoe_model.task_data import DeviceDataset, TaskData

Say = Callable[[str], None]


# -- scoring ----------------------------------------------------------------------------------
def top1(model, tasks: Sequence[TaskData], hardware_vector: np.ndarray) -> float:  # noqa: ANN001
    """Mean over tasks of the TenSet top-1 score of the model's mixture on this hardware."""
    from simoe_model.metrics import task_metrics
    from simoe_model.train import predict

    pairs = [(predict(model, t.features, hardware_vector), t.latencies) for t in tasks]
    return task_metrics(pairs)["top1"]


def similarity_against_agreement(
    model, newcomer: FleetGPU, nodes: Sequence[FleetGPU]
) -> dict[str, object]:  # noqa: ANN001
    """Issue 23's similarity Must-show for one newcomer: the model's cos(z_newcomer, z_node)
    over the nodes against the measured agreement of their latencies (mean per-task Spearman
    on the candidates both have: `bench.transfer.protocol_similarity.measured_agreements`,
    the quantity the alignment is trained on; labels as the FleetGPUs read them, through
    `protocol.UnitLabels` under the protocol), and the Spearman between the two over the
    nodes. Fields of `NewcomerRow`."""
    from scipy.stats import spearmanr

    from bench.transfer.protocol_similarity import measured_agreements

    by_device = {n.dataset.device: n.name for n in nodes}
    measured = measured_agreements([newcomer.dataset], [n.dataset for n in nodes])
    agreement = {by_device[d]: a for d, a in measured[newcomer.dataset.device].items()}
    hv = newcomer.dataset.hardware_vector
    cosine = {n.name: model.similarity(hv, n.dataset.hardware_vector) for n in nodes}
    names = sorted(agreement)
    rho: float | None = None  # under 3 nodes with shared candidates: nothing to rank
    if len(names) >= 3:
        value = spearmanr([cosine[g] for g in names], [agreement[g] for g in names]).statistic
        # a constant similarity orders nothing: 0, as protocol_similarity counts it
        rho = float(value) if np.isfinite(value) else 0.0
    return {
        "similarity_to_nodes": cosine,
        "agreement_with_nodes": agreement,
        "similarity_rank_correlation": rho,
    }


def own_only_model(  # noqa: ANN201
    gpu: FleetGPU,
    tasks: list[TaskData],
    rounds: int,
    epochs: int,
    seed: int,
    local_batch: int = 8,
    after_round: Callable[[int, Any], None] | None = None,
):
    """The node's model without federation: what its ClientApp trains, round after round
    (the same tasks per step). `after_round(round, model)`: called after each round (the
    budget selection scores every grid point of one run)."""
    from server.similarity import initial_shared_arrays
    from simoe_model.model import SiMoE, load_shared_arrays
    from simoe_model.train import train_expert

    model = SiMoE()
    load_shared_arrays(model, initial_shared_arrays(seed))  # the federation's start, too
    dataset = DeviceDataset(gpu.device, gpu.dataset.hardware_vector, tasks)
    for server_round in range(1, rounds + 1):  # the strategy's seed is seed + round
        train_expert(
            model, gpu.name, dataset, epochs=max(epochs, 1), seed=seed + server_round,
            tasks_per_step=local_batch,
        )  # fmt: skip
        if after_round is not None:
            after_round(server_round, model)
    return model


# -- the own-only baseline's budget, chosen on validation (bench/protocol.py OWN_ONLY_RULE) -----
OWN_ONLY_CHOICE = Path(__file__).resolve().parents[1] / "federation_own_only.json"


def select_own_only(
    units: Sequence[FleetGPU],
    held_out_tasks: Sequence[str],
    seeds: Sequence[int],
    grid: Sequence[int],
    local_batch: int = 8,
    say: Say = lambda _text: None,
) -> dict[str, Any]:
    """The protocol's OWN_ONLY_RULE: each validation unit, its own node, trains its own expert
    on its tasks but `held_out_tasks` (one epoch per round, as the ClientApp does) and is
    scored on those after every grid point's rounds (one run to the largest budget per unit
    and seed); the budget with the best mean top-1 over units and seeds, ties to the smaller."""
    scores: dict[int, list[list[float]]] = {b: [] for b in grid}  # budget -> per seed, per unit
    for seed in seeds:
        per_unit: dict[int, list[float]] = {b: [] for b in grid}
        for gpu in units:
            train, held = split_tasks(gpu, 0.0, seed, True, held_out_tasks)
            hv = gpu.dataset.hardware_vector

            def score(
                server_round: int, model: Any, held: Any = held, hv: Any = hv, out: Any = per_unit
            ) -> None:
                if server_round in out:
                    out[server_round].append(top1(model, held, hv))

            own_only_model(gpu, train, max(grid), 1, seed, local_batch, after_round=score)
        for b in grid:
            scores[b].append(per_unit[b])
        say(f"seed {seed}: " + ", ".join(f"{b}: {np.mean(per_unit[b]):.4f}" for b in grid))
    means = {b: float(np.mean(scores[b])) for b in grid}
    best = max(means.values())
    chosen = min(b for b in grid if means[b] == best)
    return {
        "chosen_on": "validation",
        "rule": "bench/protocol.py OWN_ONLY_RULE",
        "units": [g.name for g in units],
        "seeds": list(seeds),
        "held_out_tasks": list(held_out_tasks),
        "grid": list(grid),
        "mean_top1": {str(b): means[b] for b in grid},
        "per_seed_unit_top1": {str(b): scores[b] for b in grid},
        "chosen": {"own_only_epochs": chosen},
    }


def own_only_budget(fleet_digest: str, path: Path | None = None) -> int:
    """The own-only budget chosen on validation (OWN_ONLY_CHOICE) for this fleet; BadInputError
    when it was not chosen, or chosen on another fleet."""
    path = path or OWN_ONLY_CHOICE
    if not path.exists():
        raise BadInputError(
            f"no {path.name}: choose the own-only budget on validation first "
            "(python -m bench.federation.federation_helps --select-own-only)"
        )
    choice = json.loads(path.read_text())
    if choice.get("fleet") != fleet_digest or choice.get("chosen_on") != "validation":
        raise BadInputError(f"{path.name} was chosen on another fleet: run --select-own-only")
    return int(choice["chosen"]["own_only_epochs"])


def central_model(
    nodes: Sequence[FleetGPU],
    splits: dict[str, tuple[list[TaskData], list[TaskData]]],
    epochs: int,
    seed: int,
):  # noqa: ANN201
    """The reference without federation: one SiMoE trained in one process on the same data
    (every node's train tasks), as bench/transfer/offline_transfer.py trains it."""
    import torch

    from simoe_model.model import SiMoE
    from simoe_model.train import train_experts, train_shared

    data = [DeviceDataset(g.device, g.dataset.hardware_vector, splits[g.name][0]) for g in nodes]
    torch.manual_seed(seed)  # its initial weights: the seed's, not the process's history
    model = SiMoE()
    train_experts(model, [(d.device, d) for d in data], epochs=epochs, seed=seed)
    train_shared(model, data, epochs=epochs, seed=seed)
    return model
