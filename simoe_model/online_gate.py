"""Measurements move the gate: an online mixture over the experts (issue 23, item 1).

The gate weights the experts by hardware similarity before anything is measured on the
target. Once N candidates of a task are measured there, each expert's weight is
multiplied by the evidence of those measurements for it:

    evidence_k = exp(sharpness * sqrt(N) * (LL_k - max_j LL_j))

where LL_k is the mean Bradley-Terry log-likelihood of the measured order under expert
k's standardized scores (`order_log_likelihood`), and the weights are normalized again.
So a target whose measurements contradict its nearest expert stops following it after a
few measurements, before (and apart from) any fine-tuning. `sharpness` 0 is off: the
gate's weights, unchanged. One mechanism for both kinds of program: the Kernel Tuner
search (`kernel_model.RankedSearch`) and TVM tensor programs (`cost_model.SiMoECostModel`,
fast mode's search, the offline protocol's `simoe-online`).

An expert in `exempt` (the target's own expert, trained on these very measurements, so
its likelihood of them says nothing) keeps its prior weight: its evidence is 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from simoe_model.features import pack_rows
from simoe_model.model import SiMoE, expert_outputs

# The default sharpness for TVM tensor programs (the cost model, fast mode, the node's
# tuner): chosen on the protocol's validation split by the rule in bench/protocol.py
# (ONLINE_GATE_RULE), `python -m bench.transfer.protocol_transfer --select-sharpness` (2026-12-01,
# bench/protocol_online_gate.json): 0, off. No sharpness beat it by more than 0.001 in
# mean top-1 at budgets 4 and 16 (best: 0.25, +0.0001; 8: -0.027). The Kernel Tuner
# search keeps its own default (agent/kernels, chosen on the real GPUs).
DEFAULT_SHARPNESS = 0.0


def standardize(scores: np.ndarray) -> np.ndarray:
    """Per expert (column): zero mean, unit spread, so no expert outvotes the others by its
    scale."""
    return (scores - scores.mean(0)) / np.maximum(scores.std(0), 1e-9)


def order_log_likelihood(scores: np.ndarray, measured: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Per expert: mean log-likelihood of the measured order (Bradley-Terry on its scores).

    `scores` [n, K] standardized; `measured` indices; `times` their measured times (NaN:
    failed, slower than all that ran). 0 where fewer than two measurements differ.
    """
    t = np.where(np.isfinite(times), times, np.inf)
    s = scores[measured]  # [m, K]
    faster = t[:, None] < t[None, :]  # [m, m]: i ran faster than j
    if not faster.any():
        return np.zeros(scores.shape[1])
    diff = s[:, None, :] - s[None, :, :]  # [m, m, K]
    logsig = -np.logaddexp(0.0, -diff)
    return logsig[faster].mean(0)


def evidence(ll: np.ndarray, count: int, sharpness: float) -> np.ndarray:
    """[K] multipliers of the experts' weights from their log-likelihoods of `count`
    measurements: 1 for the best, smaller for the others (all 1 when off or N < 2)."""
    ll = np.asarray(ll, dtype=np.float64)
    if sharpness <= 0 or count < 2:
        return np.ones_like(ll)
    return np.exp(sharpness * count**0.5 * (ll - ll.max()))


def reweight(prior: np.ndarray, ll: np.ndarray, count: int, sharpness: float) -> np.ndarray:
    """The gate's weights [n, K] times the measurements' evidence, normalized per row.
    `prior` itself (the same array) when the gate is off or fewer than 2 are measured."""
    if sharpness <= 0 or count < 2:
        return prior
    weights = prior * evidence(ll, count, sharpness)[None, :]
    return weights / weights.sum(1, keepdims=True)


def measured_evidence(
    measured_scores: np.ndarray,
    times: np.ndarray,
    sharpness: float,
    exempt: np.ndarray | None = None,
) -> np.ndarray:
    """[K] evidence from the experts' scores [m, K] of the m measured candidates of one task
    (standardized over those m) and their times. `exempt` [K] bool: evidence 1."""
    scores = np.asarray(measured_scores, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    if sharpness <= 0 or len(times) < 2:
        return np.ones(scores.shape[1])
    ll = order_log_likelihood(standardize(scores), np.arange(len(times)), times)
    if exempt is not None and exempt.any():
        if exempt.all():
            return np.ones(scores.shape[1])
        ll = np.where(exempt, ll[~exempt].max(), ll)  # as good as the best of the others
    return evidence(ll, len(times), sharpness)


# -- TVM tensor programs: the experts' scores and the gate's weights of feature lists -----
@torch.no_grad()
def expert_table(
    model: SiMoE,
    features: Sequence[np.ndarray],
    hardware: np.ndarray,
    experts: Iterable[str] | None = None,
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Expert names, every expert's scores [n, K] and the gate's weights [n, K] of the
    candidates (`features`: one array of rows each) on the target `hardware`.
    (scores * weights).sum(1) is `train.predict`'s mixture."""
    model.eval()
    names = list(experts) if experts is not None else model.expert_names
    rows, offsets = pack_rows(features)
    seg = torch.from_numpy(np.repeat(np.arange(len(features)), np.diff(offsets)))
    e = model.embed(torch.from_numpy(rows), seg, len(features))
    h = torch.as_tensor(np.asarray(hardware), dtype=torch.float32)
    weights = model.mixture(e, h, names)[1]
    scores = expert_outputs([model.expert(n) for n in names], e)
    return names, scores.numpy().astype(np.float64), weights.numpy().astype(np.float64)


def task_evidence(
    model: SiMoE,
    measured_features: Sequence[np.ndarray],
    latencies: np.ndarray,
    hardware: np.ndarray,
    sharpness: float,
    exempt: Iterable[str] = (),
) -> tuple[list[str], np.ndarray]:
    """Expert names and their evidence [K] from one task's measured candidates."""
    names, scores, _ = expert_table(model, measured_features, hardware)
    free = set(exempt)
    mask = np.array([n in free for n in names], dtype=bool)
    return names, measured_evidence(scores, latencies, sharpness, mask)


def online_predict(
    model: SiMoE,
    features: Sequence[np.ndarray],
    hardware: np.ndarray,
    weights_evidence: tuple[list[str], np.ndarray] | None,
) -> np.ndarray:
    """Mixture scores [n] of the candidates, each expert's gate weight multiplied by its
    evidence (`task_evidence`; None: the gate alone)."""
    names, scores, prior = expert_table(model, features, hardware)
    if weights_evidence is None:
        return (prior * scores).sum(1)
    ev_names, ev = weights_evidence
    if ev_names != names:
        raise ValueError(f"evidence for experts {ev_names}, the model has {names}")
    weights = prior * ev[None, :]
    weights = weights / weights.sum(1, keepdims=True)
    return (weights * scores).sum(1)
