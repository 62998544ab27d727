"""Losses: listwise ranking within a task, a secondary regression, similarity alignment.

Latency only matters relative to the other candidates of the same task, so the
main loss ranks candidates within a task (LambdaRank-style, as TenSet and
MetaSchedule's MLP model). The secondary regression fits log(best/latency)
after removing each side's task mean, which keeps expert outputs on one scale
so a gate can mix experts trained apart. The alignment losses teach the
hardware encoder that two devices are similar when they rank the same programs alike:
`alignment_loss` fits cos(z_i, z_j) to the agreement's value (MSE); the order-aware ones
(`pairwise_alignment_loss`, `listwise_alignment_loss`) fit, for each device, the ORDER of
its agreements with the others, which an MSE barely rewards when agreements bunch near 1.
All share one signature `(z, pairs, agreement) -> Tensor` and are named in
`ALIGNMENT_LOSSES`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy.stats import spearmanr


def relative_throughput(latencies: torch.Tensor) -> torch.Tensor:
    """best / latency within a task: 1 for the best candidate, in (0, 1] otherwise."""
    return (latencies.min() / latencies).float()


def lambda_rank_loss(
    scores: torch.Tensor, labels: torch.Tensor, sigma: float = 1.0
) -> torch.Tensor:
    """LambdaLoss (NDCG-weighted pairwise logistic) of one task's list.

    `labels` are relevance values, higher = better (relative throughput). Follows
    MetaSchedule's `lambda_rank_loss` (natural log instead of log2).
    """
    n = scores.shape[0]
    if n < 2:
        return scores.sum() * 0.0
    order = torch.argsort(scores, descending=True)
    s_sorted = scores[order]
    y_by_pred = labels[order]
    y_ideal = torch.sort(labels, descending=True).values
    discount = torch.log2(torch.arange(2, n + 2, dtype=scores.dtype))
    max_dcg = ((torch.pow(2.0, y_ideal) - 1) / discount).sum().clamp_min(1e-10)
    gain = (torch.pow(2.0, y_by_pred) - 1) / max_dcg
    pair_better = (y_by_pred[:, None] - y_by_pred[None, :]) > 0
    weight = (1.0 / discount[:, None] - 1.0 / discount[None, :]).abs() * (
        gain[:, None] - gain[None, :]
    ).abs()
    diff = (s_sorted[:, None] - s_sorted[None, :]).clamp(-1e4, 1e4)
    pair_loss = -weight * torch.nn.functional.logsigmoid(sigma * diff)
    return pair_loss[pair_better].sum()


def pairwise_logistic_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean logistic loss over all ordered pairs (RankNet); steadier on tiny lists."""
    better = (labels[:, None] - labels[None, :]) > 0
    if not bool(better.any()):
        return scores.sum() * 0.0
    diff = scores[:, None] - scores[None, :]
    return -torch.nn.functional.logsigmoid(diff)[better].mean()


def centered_regression_loss(scores: torch.Tensor, latencies: torch.Tensor) -> torch.Tensor:
    """MSE between task-centered scores and task-centered log(best / latency)."""
    target = -torch.log(latencies / latencies.min()).float()
    return torch.mean(((scores - scores.mean()) - (target - target.mean())) ** 2)


def ranking_loss(
    scores: torch.Tensor, latencies: torch.Tensor, reg_weight: float = 0.1
) -> torch.Tensor:
    """The task loss: LambdaRank + pairwise logistic + a little centered regression."""
    labels = relative_throughput(latencies)
    return (
        lambda_rank_loss(scores, labels)
        + pairwise_logistic_loss(scores, labels)
        + reg_weight * centered_regression_loss(scores, latencies)
    )


def rank_agreement(lat_a: np.ndarray, lat_b: np.ndarray) -> float:
    """Spearman correlation of two devices' latencies on the same candidates."""
    if len(lat_a) < 3:
        return float("nan")
    rho = spearmanr(lat_a, lat_b).statistic
    return float(rho) if np.isfinite(rho) else float("nan")


def alignment_loss(z: torch.Tensor, pairs: torch.Tensor, agreement: torch.Tensor) -> torch.Tensor:
    """MSE between cos(z_i, z_j) and the devices' rank agreement, over device pairs."""
    if len(pairs) == 0:
        return z.sum() * 0.0
    cos = torch.cosine_similarity(z[pairs[:, 0]], z[pairs[:, 1]], dim=-1)
    return torch.mean((cos - agreement) ** 2)


def _anchor_table(
    z: torch.Tensor, pairs: torch.Tensor, agreement: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """cos(z_i, z_j) [n, n], the agreement as a symmetric [n, n] table, and which entries
    are known (a measured pair, i != j): row i is device i's list of the others."""
    n = z.shape[0]
    unit = torch.nn.functional.normalize(z, dim=-1)
    cos = unit @ unit.T
    table = torch.zeros(n, n, dtype=cos.dtype)
    known = torch.zeros(n, n, dtype=torch.bool)
    i, j = pairs[:, 0], pairs[:, 1]
    table[i, j] = agreement.to(cos.dtype)
    table[j, i] = agreement.to(cos.dtype)
    known[i, j] = True
    known[j, i] = True
    return cos, table, known


def pairwise_alignment_loss(
    z: torch.Tensor, pairs: torch.Tensor, agreement: torch.Tensor, temperature: float = 0.1
) -> torch.Tensor:
    """Order-aware (RankNet per anchor): for every device i and two others j, k with
    agreement(i, j) > agreement(i, k), -log sigmoid((cos_ij - cos_ik) / temperature),
    averaged. Depends only on each device's ORDER of agreements, not on their values."""
    if len(pairs) == 0:
        return z.sum() * 0.0
    cos, table, known = _anchor_table(z, pairs, agreement)
    # [i, j, k]: j ranks above k in anchor i's agreement, both measured with i
    above = (table[:, :, None] > table[:, None, :]) & known[:, :, None] & known[:, None, :]
    if not bool(above.any()):
        return z.sum() * 0.0
    diff = (cos[:, :, None] - cos[:, None, :]) / temperature
    return -torch.nn.functional.logsigmoid(diff)[above].mean()


def listwise_alignment_loss(
    z: torch.Tensor, pairs: torch.Tensor, agreement: torch.Tensor, temperature: float = 0.1
) -> torch.Tensor:
    """Order-aware (ListNet per anchor): for every device i, the cross-entropy between
    softmax of its agreements standardized over its list (so bunched values still give a
    spread target) and softmax(cos_i. / temperature), over the devices measured with i."""
    if len(pairs) == 0:
        return z.sum() * 0.0
    cos, table, known = _anchor_table(z, pairs, agreement)
    losses = []
    for i in range(z.shape[0]):
        row = known[i]
        if int(row.sum()) < 2:
            continue
        a = table[i, row]
        target = torch.softmax((a - a.mean()) / a.std().clamp_min(1e-6), dim=0)
        losses.append(-(target * torch.log_softmax(cos[i, row] / temperature, dim=0)).sum())
    if not losses:
        return z.sum() * 0.0
    return torch.stack(losses).mean()


def mse_pairwise_alignment_loss(
    z: torch.Tensor, pairs: torch.Tensor, agreement: torch.Tensor
) -> torch.Tensor:
    """MSE (keeps cos on the agreement's scale) plus the pairwise order term."""
    return alignment_loss(z, pairs, agreement) + pairwise_alignment_loss(z, pairs, agreement)


AlignmentLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# By name: train_shared's `alignment` option, and what a server-side step can look up.
ALIGNMENT_LOSSES: dict[str, AlignmentLoss] = {
    "mse": alignment_loss,
    "pairwise": pairwise_alignment_loss,
    "mse+pairwise": mse_pairwise_alignment_loss,
    "listwise": listwise_alignment_loss,
}
# Chosen on the simulated validation split by bench/protocol.py's SIMILARITY_RULE
# (docs/results/protocol_similarity_validation.md): the order term lifted the per-unit rank
# correlation of cos(z) with measured agreement from 0.656 to 0.779; the MSE keeps cos on
# the agreement's scale, which the gate's similarity prior softmax(cos / tau) reads.
DEFAULT_ALIGNMENT = "mse+pairwise"
