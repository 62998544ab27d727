"""How each method of the protocol (bench/transfer/protocol_transfer.py) is scored on a
split: every method at every budget on every target unit for one seed (`run_method`),
SiMoE with the online gate at each sharpness (`online_gate_scores`), and the ablations at
budget 0 with their similarity fidelity (`run_ablations`)."""

from __future__ import annotations

import argparse

import numpy as np

from bench import protocol
from bench.transfer.baselines import ScheduleTransfer, random_scorer
from bench.transfer.offline_transfer import (
    MetaScheduleMLP,
    Pooled,
    SiMoEFamily,
    Split,
    held_out_agreements,
    xgb_evaluate,
)
from bench.transfer.protocol_result import OnlineGateScores
from simoe_model.metrics import top_k_score
from simoe_model.model import SiMoE, SiMoEConfig
from simoe_model.online_gate import expert_table, measured_evidence
from simoe_model.task_data import DeviceDataset
from simoe_model.train import adapt, predict

METHODS = (
    "simoe",
    "nearest-expert",
    "pooled",
    "xgb",
    "mlp-finetune",
    "schedule-transfer",
    "random",
)
ABLATIONS: dict[str, dict[str, object]] = {
    "simoe-hybrid": {},
    "simoe-analytical-only": {"hardware_input": "analytical"},
    "simoe-empirical-only": {"hardware_input": "empirical"},
    "simoe-no-prior": {"use_similarity_prior": False},
}

TopOne = dict[str, dict[int, dict[str, list[float]]]]  # method -> budget -> unit -> per task


def top1_tasks(score, split: Split) -> list[float]:  # noqa: ANN001 - TaskData -> scores
    return [top_k_score(score(t), t.latencies, 1) for t in split.test]


def features_only(fn):  # noqa: ANN001, ANN201
    return lambda task: fn(task.features)


def namespace(seed: int, **hp: int) -> argparse.Namespace:
    defaults = {"expert_epochs": 15, "shared_epochs": 12, "adapt_epochs": 10, "mlp_epochs": 10}
    return argparse.Namespace(seed=seed, **{**defaults, **hp})


def run_method(
    method: str,
    hp: dict[str, int],
    train: list[DeviceDataset],
    splits: list[Split],
    seed: int,
    out: TopOne,
    family: SiMoEFamily | None = None,
) -> SiMoEFamily | None:
    """Score one method (all budgets, all target units) for one seed into `out`."""
    import torch

    torch.manual_seed(seed)
    record = out.setdefault(method, {})
    if method in ("simoe", "nearest-expert"):
        # one family scores both (the same experts); "nearest-expert" alone (its own budget,
        # chosen on validation apart from SiMoE's) records only itself and keeps no family
        own = family if method == "simoe" else None
        if own is None:
            own = SiMoEFamily(SiMoEConfig(), train, namespace(seed, **hp))
        names = ("simoe", "nearest-expert") if method == "simoe" else ("nearest-expert",)
        for split in splits:
            for b in protocol.BUDGETS:
                mix, near = own.evaluate(own.base, split, b)
                got = {"simoe": mix["top1_tasks"], "nearest-expert": near["top1_tasks"]}
                for name in names:
                    out.setdefault(name, {}).setdefault(b, {})[split.device] = got[name]
        return own if method == "simoe" else family
    if method == "simoe-online":
        own = family or SiMoEFamily(SiMoEConfig(), train, namespace(seed, **hp))
        sharpness = float(hp.get("sharpness", 0.0))
        for split in splits:
            for b in protocol.ONLINE_GATE_BUDGETS:
                got = online_gate_scores(own.base, split, b, [sharpness], own.args.adapt_epochs)
                record.setdefault(b, {})[split.device] = got.top1[sharpness]
        return own
    if method == "pooled":
        pooled = Pooled(SiMoEConfig(), train, namespace(seed, **hp))
        for split in splits:
            for b in protocol.BUDGETS:
                record.setdefault(b, {})[split.device] = pooled.evaluate(split, b)["top1_tasks"]
    elif method == "xgb":
        for split in splits:
            for b in protocol.BUDGETS:
                record.setdefault(b, {})[split.device] = xgb_evaluate(split, b, seed)["top1_tasks"]
    elif method == "mlp-finetune":
        mlp = MetaScheduleMLP(train, namespace(seed, **hp))
        for split in splits:
            for b in protocol.BUDGETS:
                record.setdefault(b, {})[split.device] = mlp.evaluate(split, b)["top1_tasks"]
    elif method == "schedule-transfer":
        transfer = ScheduleTransfer(train, k=hp["k"])
        for split in splits:
            for b in protocol.BUDGETS:
                score = transfer.at_budget(
                    split.hardware_vector, split.budget(b).tasks if b else []
                )
                record.setdefault(b, {})[split.device] = top1_tasks(score, split)
    elif method == "random":
        for split in splits:
            for b in protocol.BUDGETS:
                record.setdefault(b, {})[split.device] = top1_tasks(random_scorer(seed + b), split)
    else:
        raise ValueError(f"unknown method {method}")
    return family


def online_gate_scores(
    base: SiMoE, split: Split, budget: int, grid: list[float], adapt_epochs: int
) -> OnlineGateScores:
    """SiMoE at `budget` (adapted as `simoe`: SiMoEFamily.evaluate) with the online gate at
    each sharpness of `grid`, per task: top-1 and the top pick (index in the task's test
    set); also the budget-0 pick and the gate alone without fine-tuning ("nofinetune").

    Sharpness 0 is the adapted model's `predict`, exactly `simoe`'s scores at `budget`."""
    import copy

    hv = split.hardware_vector
    adapted = copy.deepcopy(base)
    few = split.budget(budget)
    adapt(adapted, split.device, few, epochs=adapt_epochs)
    measured = {t.task_name: t for t in few.tasks}
    out: dict = {"top1": {s: [] for s in grid}, "pick": {s: [] for s in grid}}
    out.update(top1_nofinetune={s: [] for s in grid}, pick_nofinetune={s: [] for s in grid})
    out.update(pick0=[], top1_0=[])
    for test in split.test:
        zero = predict(base, test.features, hv)
        out["pick0"].append(int(np.argmax(zero)))
        out["top1_0"].append(top_k_score(zero, test.latencies, 1))
        few_task = measured.get(test.task_name)
        for label, model in (("", adapted), ("_nofinetune", base)):
            names, scores, prior = expert_table(model, test.features, hv)
            m_scores = (
                expert_table(model, few_task.features, hv)[1] if few_task is not None else None
            )
            exempt = np.array([n == split.device for n in names])
            for s in grid:
                if s == 0 or few_task is None:
                    mix = predict(model, test.features, hv)  # the gate alone, as today
                else:
                    ev = measured_evidence(m_scores, few_task.latencies, s, exempt)
                    w = prior * ev[None, :]
                    mix = ((w / w.sum(1, keepdims=True)) * scores).sum(1)
                out["top1" + label][s].append(top_k_score(mix, test.latencies, 1))
                out["pick" + label][s].append(int(np.argmax(mix)))
    return OnlineGateScores(**out)


def run_ablations(
    family: SiMoEFamily,
    train: list[DeviceDataset],
    targets: list[DeviceDataset],
    splits: list[Split],
    seed: int,
    out: TopOne,
) -> dict[str, dict[str, float]]:
    """Each ablation at budget 0: top-1 per unit (into out) and similarity fidelity per unit."""
    from scipy.stats import spearmanr

    fleet = {d.device: d for d in [*train, *targets]}
    agreements = held_out_agreements(fleet, [d.device for d in targets], train)
    fidelity: dict[str, dict[str, float]] = {}
    for label, changes in ABLATIONS.items():
        model = family.variant(train, seed=seed, **changes)
        for split in splits:
            score = features_only(lambda f, m=model, hv=split.hardware_vector: predict(m, f, hv))
            out.setdefault(label, {}).setdefault(0, {})[split.device] = top1_tasks(score, split)
        per_unit = {}
        for unit, agree in agreements.items():
            names = sorted(agree)
            sims = [
                model.similarity(fleet[unit].hardware_vector, model.expert(n).hardware.numpy())
                for n in names
            ]
            rho = spearmanr([agree[n] for n in names], sims).statistic
            per_unit[unit] = float(rho) if np.isfinite(rho) else 0.0
        fidelity[label] = per_unit
    return fidelity
