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
from scipy.stats import spearmanr

from simoe_model.model import SiMoE, remove_expert
from simoe_model.task_data import DeviceDataset, TaskData
from simoe_model.train import predict_expert

MIN_CANDIDATES = 4  # a task with fewer says nothing about a ranking
DROP_BELOW = 0.0  # the correlation of a random ranking

log = logging.getLogger("simoe.model.expert_check")


def rank_agreement(model: SiMoE, name: str, tasks: Sequence[TaskData]) -> float | None:
    """Mean over tasks of Spearman(expert score, -latency); None if no task can tell."""
    values = []
    for task in tasks:
        if len(task) < MIN_CANDIDATES or np.ptp(task.latencies) == 0:
            continue
        scores = predict_expert(model, name, task.features)
        if np.ptp(scores) == 0:
            values.append(0.0)  # a constant expert ranks nothing
            continue
        rho = spearmanr(scores, -task.latencies).statistic
        values.append(float(rho) if np.isfinite(rho) else 0.0)
    return float(np.mean(values)) if values else None


def screen_experts(
    model: SiMoE, names: Iterable[str], tasks: Sequence[TaskData], threshold: float = DROP_BELOW
) -> tuple[list[str], dict[str, float]]:
    """(experts to drop, each checked expert's agreement): drop those below `threshold`."""
    agreement: dict[str, float] = {}
    for name in names:
        value = rank_agreement(model, name, tasks)
        if value is not None:
            agreement[name] = value
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
