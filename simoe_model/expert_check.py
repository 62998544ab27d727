"""Check each delivered expert against the node's own measurements before using it.

Why: an expert arrives from another node through the server, and that node may be
broken or lying (an expert that ranks every program backwards is still a finite,
well-shaped array, so the server's checks pass it). A node that has measured some
programs can see how an expert ranks them: the Spearman correlation, per task, between
the expert's scores (higher = predicted faster) and the measured speed (-latency),
averaged over tasks. An honest expert of other hardware still ranks programs mostly
the same way (positive); one whose correlation is negative on this node's own records
predicts worse than a random ranking here, and the node leaves it out of its mixture.
The threshold is 0 (a random ranking), fixed in advance, not tuned on any result.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from scipy.stats import spearmanr

from simoe_model.model import SiMoE, remove_expert
from simoe_model.task_data import DeviceDataset, TaskData
from simoe_model.train import embed

MIN_CANDIDATES = 4  # a task with fewer says nothing about a ranking
DROP_BELOW = 0.0  # the correlation of a random ranking

log = logging.getLogger("simoe.model.expert_check")


def rank_agreement(model: SiMoE, name: str, tasks: Sequence[TaskData]) -> float | None:
    """Mean over tasks of Spearman(expert score, -latency); None if no task can tell."""
    return rank_agreements(model, [name], tasks).get(name)


def rank_agreements(
    model: SiMoE, names: Sequence[str], tasks: Sequence[TaskData]
) -> dict[str, float]:
    """`rank_agreement` of each named expert (those no task can tell about left out); each
    task's candidates are embedded once for all experts, so checking every expert of a
    fleet costs one encoder pass, not one per expert."""
    values: dict[str, list[float]] = {name: [] for name in names}
    for task in tasks:
        if len(task) < MIN_CANDIDATES or np.ptp(task.latencies) == 0:
            continue
        e = embed(model, task.features)
        for name in names:
            with torch.no_grad():
                scores = model.expert(name)(e).numpy().astype(np.float64)
            if np.ptp(scores) == 0:
                values[name].append(0.0)  # a constant expert ranks nothing
                continue
            rho = spearmanr(scores, -task.latencies).statistic
            values[name].append(float(rho) if np.isfinite(rho) else 0.0)
    return {name: float(np.mean(v)) for name, v in values.items() if v}


def screen_experts(
    model: SiMoE, names: Iterable[str], tasks: Sequence[TaskData], threshold: float = DROP_BELOW
) -> tuple[list[str], dict[str, float]]:
    """(experts to drop, each checked expert's agreement): drop those below `threshold`."""
    agreement = rank_agreements(model, list(names), tasks)
    drop = sorted(name for name, value in agreement.items() if value < threshold)
    return drop, agreement


def remove_refuted_experts(
    model: SiMoE, delivered: Iterable[str], tasks: Sequence[TaskData]
) -> tuple[list[str], dict[str, float]]:
    """Remove from `model` the delivered experts that rank `tasks` backwards, with a warning;
    (their names, each checked expert's agreement), as `screen_experts`."""
    drop, agreement = screen_experts(model, delivered, tasks)
    for name in drop:
        remove_expert(model, name)
        log.warning(
            "expert %s left out: it ranks this node's measurements backwards "
            "(rank correlation %.2f)",
            name,
            agreement[name],
        )
    return drop, agreement


def drop_refuted_experts(model: SiMoE, delivered: list[str], dataset: DeviceDataset) -> list[str]:
    """Remove from `model` the delivered experts that rank `dataset` backwards; their names."""
    return remove_refuted_experts(model, delivered, dataset.tasks)[0]
