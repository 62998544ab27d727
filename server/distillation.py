"""Server-side ensemble distillation of the averaged program encoder on public probes.

FedDF (Lin et al., "Ensemble Distillation for Robust Model Fusion in Federated Learning",
2020), adapted to SiMoE: after each round's average the server holds every accepted node's
contribution (its locally trained program encoder) and its expert. On a fixed set of
PUBLIC probe programs (candidate schedules of public workloads: program features only, no
latency, nothing from any node) each node's teacher is its expert on its own contribution
encoder; the averaged encoder is then trained so that every node's expert, reading the
AVERAGED encoder, scores the probes as its teacher did. Why: parameter averaging of
encoders trained on different hardware loses what each learned (docs/results/
federation_helps_diagnose: the averaged encoder costs the newcomer most of its gap), and
the server can take many steps on public inputs without any node's records.

It also measures how alike the nodes' experts rank the probes (`probe_agreements`): an
agreement between two nodes computed by the server from model outputs on public inputs,
which the hardware similarity can be fitted to (the reported agreements carry little
signal: Spearman 0.458 against the measured ones).

The probe file's format (`load_probes`, `save_probes`) is in `simoe_model.probe_file`,
shared with the agent's `simoe-agent probes build`, which writes one.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import rankdata

from simoe_model.model import SiMoE, add_expert, load_shared_arrays, shared_arrays
from simoe_model.probe_file import ProbeTask

# The server's Adam step on the program encoder during distillation: small against the
# nodes' local 2e-3, since it is taken many times per round.
DISTILL_LR = 1e-3


def _model(arrays: Mapping[str, np.ndarray]) -> SiMoE:
    model = SiMoE()
    load_shared_arrays(model, arrays)
    model.eval()
    return model


@dataclass(frozen=True)
class _Batch:
    """All probe tasks as one encoder call: rows, segment ids, each candidate's task."""

    rows: torch.Tensor
    segment: torch.Tensor
    n: int
    task: torch.Tensor  # [n] the probe task of each candidate
    weight: torch.Tensor  # [n] 1 / (candidates of its task x tasks): each task weighs the same

    @classmethod
    def of(cls, probes: Sequence[ProbeTask]) -> _Batch:
        rows, segs, tasks, weights, offset = [], [], [], [], 0
        for i, t in enumerate(probes):
            rows.append(t.rows)
            segs.append(t.segment + offset)
            tasks.append(torch.full((t.n,), i, dtype=torch.long))
            weights.append(torch.full((t.n,), 1.0 / (t.n * len(probes))))
            offset += t.n
        return cls(torch.cat(rows), torch.cat(segs), offset, torch.cat(tasks), torch.cat(weights))

    def centred(self, scores: torch.Tensor, tasks: int) -> torch.Tensor:
        """Scores minus their task's mean (only the order within a task matters)."""
        sums = scores.new_zeros(tasks).index_add_(0, self.task, scores)
        counts = scores.new_zeros(tasks).index_add_(0, self.task, torch.ones_like(scores))
        return scores - (sums / counts)[self.task]


@torch.no_grad()
def expert_scores(
    arrays: Mapping[str, np.ndarray],
    experts: Mapping[str, Mapping[str, np.ndarray]],
    probes: Sequence[ProbeTask],
) -> dict[str, list[np.ndarray]]:
    """Each expert's scores on each probe task, on the program encoder of `arrays`."""
    model = _model(arrays)
    embedded = [model.embed(t.rows, t.segment, t.n) for t in probes]
    out: dict[str, list[np.ndarray]] = {}
    for name, expert in experts.items():
        add_expert(model, name, expert)
        out[name] = [model.expert(name)(e).numpy() for e in embedded]
    return out


def distill_shared(
    aggregated: Mapping[str, np.ndarray],
    teachers: Sequence[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]],
    probes: Sequence[ProbeTask],
    *,
    steps: int,
    seed: int,
    lr: float = DISTILL_LR,
) -> tuple[dict[str, np.ndarray], float, float]:
    """The averaged shared arrays with the program encoder distilled toward the teachers.

    `teachers`: per node, (its contribution's shared arrays, its expert's arrays). The
    loss: over nodes and probe tasks, the mean squared difference of the expert's
    task-centred scores on the averaged encoder and on the node's own (only the order within
    a task matters to ranking). Only the program encoder's learned weights move; its feature
    normalizer, the hardware encoder and the gate stay as averaged. Returns (arrays, loss
    before, loss after); BadInputError if an array set is not a SiMoE's."""
    if not teachers or not probes or steps <= 0:
        return shared_arrays(_model(aggregated)), float("nan"), float("nan")
    scored = []
    with torch.no_grad():
        for i, (encoder_arrays, expert) in enumerate(teachers):
            teacher = _model(encoder_arrays)
            add_expert(teacher, f"teacher{i}", expert)
            head = teacher.expert(f"teacher{i}")
            scores = [head(teacher.embed(t.rows, t.segment, t.n)).numpy() for t in probes]
            scored.append((expert, scores))
    return distill_to_scores(aggregated, scored, probes, steps=steps, seed=seed, lr=lr)


def distill_to_scores(
    aggregated: Mapping[str, np.ndarray],
    teachers: Sequence[tuple[Mapping[str, np.ndarray], Sequence[np.ndarray]]],
    probes: Sequence[ProbeTask],
    *,
    steps: int,
    seed: int,
    lr: float = DISTILL_LR,
    balance: bool = False,
) -> tuple[dict[str, np.ndarray], float, float]:
    """`distill_shared` with each teacher given as scores: per node, (the expert read on the
    averaged encoder, its target scores on each probe task). The targets can come from a
    model the server never sees (a node's persistent model's scores on the public probes);
    they are task-centred here, so only their order within a task matters. With `balance`
    each teacher's loss is weighted by `cluster_weights` (each hardware cluster counts about
    equally) instead of all alike."""
    student = _model(aggregated)
    if not teachers or not probes or steps <= 0:
        return shared_arrays(student), float("nan"), float("nan")
    batch = _Batch.of(probes)
    targets: list[torch.Tensor] = []
    heads = []
    for i, (expert, scores) in enumerate(teachers):
        flat = torch.as_tensor(np.concatenate([np.asarray(s) for s in scores]), dtype=torch.float32)
        targets.append(batch.centred(flat, len(probes)))
        add_expert(student, f"teacher{i}", expert)
        head = student.expert(f"teacher{i}")
        head.requires_grad_(False)
        heads.append(head)
    weights = (
        cluster_weights(student, [h.hardware for h in heads]) if balance else torch.ones(len(heads))
    )
    torch.manual_seed(seed)
    params = list(student.program_encoder.parameters())
    optimizer = torch.optim.Adam(params, lr=lr)

    def loss_now() -> torch.Tensor:
        e = student.embed(batch.rows, batch.segment, batch.n)
        total = e.new_zeros(())
        for head, target, w in zip(heads, targets, weights, strict=True):
            diff = batch.centred(head(e), len(probes)) - target
            total = total + w * (batch.weight * diff**2).sum()
        return total / len(heads)

    student.train()
    with torch.no_grad():
        before = float(loss_now())
    for _ in range(steps):
        loss = loss_now()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    student.eval()
    with torch.no_grad():
        after = float(loss_now())
    return shared_arrays(student), before, after


@torch.no_grad()
def cluster_weights(model: SiMoE, hardware: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per teacher, 1 / the sum of its positive cosine similarities (in the model's z, the
    hardware encoder the server already holds) to all teachers, itself included; scaled to
    mean 1. Why: a plain mean follows the largest hardware family (26 of the 30 validation
    nodes are not embedded), and the sixth round's teachers pulled the encoder away from the
    embedded newcomers; a teacher alone in its cluster weighs about as much as a whole
    cluster of near-equals."""
    z = model.encode_hardware(torch.stack([h.float().reshape(-1) for h in hardware]))
    z = torch.nn.functional.normalize(z, dim=1)
    mass = (z @ z.T).clamp(min=0.0).sum(dim=1)  # >= 1: its own cosine
    w = 1.0 / mass
    return w * (len(w) / w.sum())


def probe_agreements(
    arrays: Mapping[str, np.ndarray],
    experts: Mapping[str, Mapping[str, np.ndarray]],
    probes: Sequence[ProbeTask],
) -> list[tuple[str, str, float]]:
    """(a, b, agreement) for every ordered pair of experts' owners: the mean over probe tasks
    of the Spearman correlation of the two experts' scores on the shared encoder (how alike
    they rank the same public programs). Pairs with no finite value are left out."""
    scores = expert_scores(arrays, experts, probes)
    names = sorted(scores)
    # every pair at once, task by task (a server of 64 nodes has 2016 pairs x the tasks)
    rhos = np.stack(
        [spearman_matrix(np.stack([scores[n][t] for n in names])) for t in range(len(probes))]
    )
    finite = np.isfinite(rhos)
    count = finite.sum(axis=0)
    mean = np.where(finite, rhos, 0.0).sum(axis=0) / np.maximum(count, 1)
    out: list[tuple[str, str, float]] = []
    for i, j in itertools.combinations(range(len(names)), 2):
        if count[i, j]:
            value = float(mean[i, j])
            out += [(names[i], names[j], value), (names[j], names[i], value)]
    return out


def spearman_matrix(scores: np.ndarray) -> np.ndarray:
    """The Spearman correlation of every pair of rows of `scores` [rows, candidates]: the
    Pearson correlation of their average ranks, as scipy's `spearmanr` of each pair; NaN
    where a row is constant."""
    ranks = rankdata(scores, axis=1)
    centred = ranks - ranks.mean(axis=1, keepdims=True)
    norm = np.sqrt((centred**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (centred @ centred.T) / np.outer(norm, norm)
