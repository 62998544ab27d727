"""Training: experts on their own device's data, the shared parts across devices.

- `train_expert`: one node's expert (and, by default, the shared program encoder)
  on that node's records; with a `ReplayBuffer` it is the continual update.
- `train_experts`: the same for several devices at once (one process holding a
  fleet, e.g. the offline benchmark), so the shared program encoder sees all.
- `train_shared`: hardware encoder and gate. Each device is scored by the
  mixture of the *other* experts (leave-one-out), which is exactly the zero-shot
  situation of a new GPU; plus the alignment loss on the devices' rank agreement.
- `adapt`: few-shot; a new expert starts as a copy of the most similar one and
  is fine-tuned on the target's first measurements.
- `local_round`: one node's part of a federated round (FedRep): what it sends to
  be averaged and the own expert it keeps and shares.
- `predict`: scores of raw PerStoreFeature arrays on a target hardware vector.
- `fit_similarity`: the server's step on the hardware encoder alone, so that
  cos(z_i, z_j) follows the rank agreements the nodes report.
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from simoe_model.features import pack_rows
from simoe_model.losses import (
    ALIGNMENT_LOSSES,
    DEFAULT_ALIGNMENT,
    AlignmentLoss,
    rank_agreement,
    ranking_loss,
)
from simoe_model.model import (
    NO_BOUND,
    SiMoE,
    expert_arrays,
    expert_outputs,
    load_shared_arrays,
    shared_arrays,
)
from simoe_model.task_data import DeviceDataset, PackedTask, TaskData

MIN_STD_FEATURES = 0.1
MIN_STD_HARDWARE = 0.1
MIN_DEVICES_FOR_HARDWARE_NORM = 3


def _generator(seed: int) -> np.random.Generator:
    torch.manual_seed(seed)
    random.seed(seed)
    return np.random.default_rng(seed)


def _pack(tasks: Iterable[TaskData]) -> list[PackedTask]:
    return [PackedTask.from_task(t) for t in tasks if len(t) >= 2]


@torch.no_grad()
def fit_feature_normalizer(
    model: SiMoE, tasks: Sequence[PackedTask], max_rows: int = 200_000
) -> None:
    """Fit the program encoder's feature statistics on (a sample of) training rows."""
    rows = torch.cat([t.rows for t in tasks]) if tasks else torch.zeros(0)
    fit_feature_normalizer_rows(model, rows, max_rows)


@torch.no_grad()
def fit_feature_normalizer_rows(model: SiMoE, rows: torch.Tensor, max_rows: int = 200_000) -> None:
    """`fit_feature_normalizer` on rows already packed (log-transformed) together."""
    if len(rows) < 2:
        return
    norm = model.program_encoder.norm
    norm.lo.copy_(rows.min(0).values)  # the range of every row, not of the sample below
    norm.hi.copy_(rows.max(0).values)
    if len(rows) > max_rows:
        rows = rows[torch.randperm(len(rows))[:max_rows]]
    norm.mean.copy_(rows.mean(0))
    norm.std.copy_(rows.std(0, unbiased=False).clamp_min(MIN_STD_FEATURES))


@torch.no_grad()
def widen_feature_range(model: SiMoE, tasks: Sequence[PackedTask]) -> None:
    """Widen the program encoder's feature range (the clamp of its normalizer) to cover
    `tasks`, the data it is about to be trained on; a range never fitted (a model saved
    before it had one) stays open."""
    if not tasks:
        return
    rows = torch.cat([t.rows for t in tasks])
    norm = model.program_encoder.norm
    if len(rows) == 0 or bool((norm.lo <= -NO_BOUND).all()):
        return
    torch.minimum(norm.lo, rows.min(0).values, out=norm.lo)
    torch.maximum(norm.hi, rows.max(0).values, out=norm.hi)


@torch.no_grad()
def fit_hardware_normalizer(model: SiMoE, hardware_vectors: Sequence[np.ndarray]) -> bool:
    """Fit h's statistics once enough distinct devices are known; False if too few."""
    unique = np.unique(np.stack(hardware_vectors), axis=0) if hardware_vectors else []
    if len(unique) < MIN_DEVICES_FOR_HARDWARE_NORM:
        return False
    h = torch.as_tensor(unique, dtype=torch.float32)
    norm = model.hardware_encoder.norm
    norm.mean.copy_(h.mean(0))
    norm.std.copy_(h.std(0, unbiased=False).clamp_min(MIN_STD_HARDWARE))
    return True


def _normalizer_fitted(model: SiMoE, part: str = "program_encoder") -> bool:
    """False while a normalizer still holds its initial statistics (mean 0, std 1)."""
    norm = getattr(model, part).norm
    return not (bool((norm.mean == 0).all()) and bool((norm.std == 1).all()))


@dataclass
class ReplayBuffer:
    """A bounded memory of past tasks for continual training (reservoir over tasks).

    Keeps at most `max_tasks` tasks and `per_task` random candidates of each, so old
    tasks keep being rehearsed while the node's data grows without bound.
    """

    max_tasks: int = 64
    per_task: int = 128
    seed: int = 0
    tasks: list[TaskData] = field(default_factory=list)
    seen: int = 0

    def add(self, tasks: Iterable[TaskData]) -> None:
        rng = np.random.default_rng(self.seed + self.seen)
        for task in tasks:
            if len(task) > self.per_task:
                task = task.subset(np.sort(rng.choice(len(task), self.per_task, replace=False)))
            self.seen += 1
            existing = [i for i, t in enumerate(self.tasks) if t.task_name == task.task_name]
            if existing:  # a task seen again: keep the newest sample of it
                self.tasks[existing[0]] = task
            elif len(self.tasks) < self.max_tasks:
                self.tasks.append(task)
            else:
                slot = int(rng.integers(self.seen))
                if slot < self.max_tasks:
                    self.tasks[slot] = task

    def __len__(self) -> int:
        return len(self.tasks)


def _list_index(task: PackedTask, list_size: int, rng: np.random.Generator) -> np.ndarray:
    n = len(task)
    if n <= list_size:
        return np.arange(n)
    return np.sort(rng.choice(n, list_size, replace=False))


def train_experts(
    model: SiMoE,
    datasets: Sequence[tuple[str, DeviceDataset]],
    *,
    epochs: int = 30,
    seed: int = 0,
    lr: float = 2e-3,
    train_encoder: bool = True,
    list_size: int = 64,
    tasks_per_step: int = 8,
    weight_decay: float = 1e-5,
    replay: Sequence[tuple[str, TaskData]] = (),
    through_mixture: bool = False,
    prox_mu: float = 0.0,
    transfer_weight: float = 0.0,
) -> dict[str, float]:
    """Train each named expert on its own device's tasks (one joint loop).

    With `through_mixture` the loss is on the gate's mixture for the expert's device
    (the expert learns to correct what the other experts get wrong there); only the
    named experts are trained. `prox_mu` > 0 adds FedProx's proximal term
    mu/2 * ||w - w_start||^2 on the program encoder (w_start: its weights at the call,
    the global ones in a node's round), so local steps cannot drift it far.
    `transfer_weight` > 0 adds, on each task, that weight times the ranking loss of the
    mixture of the model's OTHER experts (those not trained here: in a node's round, the ones
    the server delivered) on the task's device, so the program encoder also learns what
    makes the other hardware's experts rank this device's programs right: the zero-shot
    situation of a newcomer. Those experts, the gate and the hardware encoder stay fixed.
    """
    rng = _generator(seed)
    started = time.perf_counter()
    work: list[tuple[str, PackedTask]] = []
    for name, dataset in datasets:
        model.ensure_expert(name, dataset.hardware_vector)
        work += [(name, t) for t in _pack(dataset.tasks)]
    work += [
        (name, t)
        for name, t in zip([n for n, _ in replay], _pack(t for _, t in replay), strict=False)
    ]
    if not work:
        return {"loss": float("nan"), "num-examples": 0.0, "train-seconds": 0.0}
    if train_encoder and not _normalizer_fitted(model):
        fit_feature_normalizer(model, [t for _, t in work])
    elif train_encoder:  # the encoder learns these rows too: they are in its range now
        widen_feature_range(model, [t for _, t in work])
    # in first-seen order, not a set's: a set of strings iterates in PYTHONHASHSEED's order,
    # and the optimizer's parameter order changed the trained model from process to process
    names = list(dict.fromkeys(n for n, _ in work))
    params = [p for name in names for p in model.expert(name).parameters()]
    hardware_of = {n: model.expert(n).hardware for n in names}
    others = [n for n in model.expert_names if n not in set(names)]
    transfer = transfer_weight > 0 and train_encoder and bool(others)
    anchor: list[tuple[torch.Tensor, torch.Tensor]] = []
    if train_encoder:
        params += list(model.program_encoder.parameters())
        if prox_mu > 0:
            anchor = [(p, p.detach().clone()) for p in model.program_encoder.parameters()]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    steps_per_epoch = max(1, math.ceil(len(work) / tasks_per_step))
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs * steps_per_epoch)
    model.train()
    last = float("nan")
    for _ in range(epochs):
        order = rng.permutation(len(work))
        total = 0.0
        for step in range(steps_per_epoch):
            batch = [work[i] for i in order[step * tasks_per_step : (step + 1) * tasks_per_step]]
            if not batch:
                continue
            # one encoder pass for all tasks of the step: rows concatenated, segments offset
            picks = [_list_index(t, list_size, rng) for _, t in batch]
            rows, segs, sizes = [], [], []
            offset = 0
            for (_, task), idx in zip(batch, picks, strict=True):
                r, s = task.gather(idx)
                rows.append(r)
                segs.append(s + offset)
                sizes.append(len(idx))
                offset += len(idx)
            with torch.set_grad_enabled(train_encoder):
                e = model.embed(torch.cat(rows), torch.cat(segs), offset)
            loss = e.new_zeros(())
            start = 0
            for (name, task), idx, size in zip(batch, picks, sizes, strict=True):
                if through_mixture:
                    scores = model.mixture(e[start : start + size], hardware_of[name])[0]
                else:
                    scores = model.expert(name)(e[start : start + size])
                loss = loss + ranking_loss(scores, task.latencies[idx])
                start += size
            loss = loss / len(batch)
            total += loss.item()  # the ranking loss, without the proximal and transfer terms
            if transfer:
                start, cross = 0, e.new_zeros(())
                for (name, task), idx, size in zip(batch, picks, sizes, strict=True):
                    mixed = model.mixture(e[start : start + size], hardware_of[name], others)[0]
                    cross = cross + ranking_loss(mixed, task.latencies[idx])
                    start += size
                loss = loss + transfer_weight * cross / len(batch)
            if anchor:
                loss = loss + prox_mu / 2 * sum(((p - p0) ** 2).sum() for p, p0 in anchor)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
        last = total / steps_per_epoch
    model.zero_grad(set_to_none=True)  # a mixture loss also reached the frozen parts
    model.eval()
    return {
        "loss": last,
        "num-examples": float(sum(len(t) for _, t in work)),
        "train-seconds": time.perf_counter() - started,
    }


def train_expert(
    model: SiMoE,
    name: str,
    dataset: DeviceDataset,
    *,
    epochs: int = 30,
    seed: int = 0,
    replay: ReplayBuffer | None = None,
    **options: float | int | bool,
) -> dict[str, float]:
    """Train expert `name` on its own device's data (and the shared program encoder).

    With `replay`, the buffer's old tasks are rehearsed alongside and the new tasks
    are then added to it: the continual update as records arrive.
    """
    old = [(name, t) for t in replay.tasks] if replay is not None else []
    fresh = {t.task_name for t in dataset.tasks}
    old = [(n, t) for n, t in old if t.task_name not in fresh]
    metrics = train_experts(
        model,
        [(name, dataset)],
        epochs=epochs,
        seed=seed,
        replay=old,
        **options,  # type: ignore[arg-type]
    )
    if replay is not None:
        replay.add(dataset.tasks)
    return metrics


def _agreements(datasets: Sequence[DeviceDataset]) -> tuple[torch.Tensor, torch.Tensor]:
    """Device pairs and the Spearman agreement of their latencies on shared candidates."""
    pairs, values = [], []
    index = []
    for ds in datasets:
        table: dict[tuple[str, str], float] = {}
        for task in ds.tasks:
            if task.candidate_ids is None:
                continue
            for cid, lat in zip(task.candidate_ids, task.latencies, strict=True):
                table[(task.task_name, cid)] = float(lat)
        index.append(table)
    for i in range(len(datasets)):
        for j in range(i + 1, len(datasets)):
            common = index[i].keys() & index[j].keys()
            if len(common) < 10:
                continue
            by_task: dict[str, list[tuple[float, float]]] = {}
            for key in sorted(common):  # a set's order is PYTHONHASHSEED's: sum in one order
                by_task.setdefault(key[0], []).append((index[i][key], index[j][key]))
            rhos = [
                rank_agreement(np.array([a for a, _ in v]), np.array([b for _, b in v]))
                for v in by_task.values()
                if len(v) >= 3
            ]
            rhos = [r for r in rhos if math.isfinite(r)]
            if rhos:
                pairs.append((i, j))
                values.append(float(np.mean(rhos)))
    return (
        torch.as_tensor(pairs, dtype=torch.long).reshape(-1, 2),
        torch.as_tensor(values, dtype=torch.float32),
    )


def train_shared(
    model: SiMoE,
    datasets: Sequence[DeviceDataset],
    *,
    epochs: int = 30,
    seed: int = 0,
    frozen_experts: bool = True,
    lr: float = 3e-3,
    align_weight: float = 1.0,
    leave_one_out: bool = True,
    list_size: int = 64,
    tasks_per_step: int = 16,
    expert_of: dict[str, str] | None = None,
    refit_hardware: bool = False,
    alignment: str = DEFAULT_ALIGNMENT,
) -> dict[str, float]:
    """Train the hardware encoder and gate (experts and program encoder frozen by default).

    Each device's tasks are scored by the gate's mixture over the bank; with
    `leave_one_out` the device's own expert (named as the device, or via
    `expert_of[device]`) is left out, so the gate learns to predict for hardware
    it has no expert for. The alignment loss pulls cos(z_i, z_j) toward how alike
    devices i and j rank the same candidates; `alignment` names its form in
    `losses.ALIGNMENT_LOSSES` (MSE on the values, or an order-aware loss). The hardware
    normalizer is fitted once (when it still holds its initial values) unless
    `refit_hardware`.
    """
    if alignment not in ALIGNMENT_LOSSES:
        raise ValueError(f"unknown alignment {alignment!r}; known: {sorted(ALIGNMENT_LOSSES)}")
    align_fn = ALIGNMENT_LOSSES[alignment]
    rng = _generator(seed)
    started = time.perf_counter()
    expert_of = expert_of or {}
    if refit_hardware or not _normalizer_fitted(model, "hardware_encoder"):
        known = [model.expert(n).hardware.numpy() for n in model.expert_names]
        fit_hardware_normalizer(model, [ds.hardware_vector for ds in datasets] + known)
    bank = model.expert_names
    work: list[tuple[int, PackedTask]] = [
        (d, t) for d, ds in enumerate(datasets) for t in _pack(ds.tasks)
    ]
    hardware = torch.as_tensor(
        np.stack([ds.hardware_vector for ds in datasets]), dtype=torch.float32
    )
    pairs, agreement = _agreements(datasets)
    params = list(model.hardware_encoder.parameters()) + list(model.gate.parameters())
    if not frozen_experts:
        params += list(model.program_encoder.parameters())
        params += [p for n in bank for p in model.expert(n).parameters()]
        widen_feature_range(model, [t for _, t in work])
    if not work or not bank:
        return {"loss": float("nan"), "align-loss": float("nan"), "num-examples": 0.0}

    # Frozen experts and encoder: embeddings and expert outputs never change, compute once.
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    if frozen_experts:
        with torch.no_grad():
            for k, (_, task) in enumerate(work):
                rows, seg = task.gather(np.arange(len(task)))
                e = model.embed(rows, seg, len(task))
                cache[k] = (e, expert_outputs([model.expert(n) for n in bank], e))

    # allowed[d, k]: may expert k score device d's tasks (not its own, with leave_one_out)
    allowed = torch.ones(len(datasets), len(bank), dtype=torch.bool)
    if leave_one_out and len(bank) > 1:
        for d, ds in enumerate(datasets):
            own = expert_of.get(ds.device, ds.device)
            if own in bank:
                allowed[d, bank.index(own)] = False
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=1e-5)
    steps_per_epoch = max(1, math.ceil(len(work) / tasks_per_step))
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs * steps_per_epoch)
    model.train()
    last_rank, last_align = float("nan"), float("nan")
    for _ in range(epochs):
        order = rng.permutation(len(work))
        rank_total, align_total = 0.0, 0.0
        for step in range(steps_per_epoch):
            chosen = order[step * tasks_per_step : (step + 1) * tasks_per_step]
            z_bank = model.encode_hardware(torch.stack([model.expert(n).hardware for n in bank]))
            z_dev = model.encode_hardware(hardware)
            # one gate call for all tasks of the step; each device's own expert masked out
            es, outs, devs, picks = [], [], [], []
            for k in chosen:
                d, task = work[k]
                idx = _list_index(task, list_size, rng)
                if frozen_experts:
                    e, outputs = cache[k]
                    e, outputs = e[idx], outputs[idx]
                else:
                    rows, seg = task.gather(idx)
                    e = model.embed(rows, seg, len(idx))
                    outputs = expert_outputs([model.expert(n) for n in bank], e)
                es.append(e)
                outs.append(outputs)
                devs.append(torch.full((len(idx),), d, dtype=torch.long))
                picks.append((task, idx))
            device_index = torch.cat(devs)
            weights = model.gate(z_dev, z_bank, torch.cat(es), device_index, allowed[device_index])
            scores = (weights * torch.cat(outs)).sum(-1)
            loss = z_bank.new_zeros(())
            start = 0
            for task, idx in picks:
                loss = loss + ranking_loss(scores[start : start + len(idx)], task.latencies[idx])
                start += len(idx)
            loss = loss / max(1, len(chosen))
            rank_total += loss.item()
            if align_weight > 0 and len(pairs):
                align = align_fn(z_dev, pairs, agreement)
                align_total += align.item()
                loss = loss + align_weight * align
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
        last_rank, last_align = rank_total / steps_per_epoch, align_total / steps_per_epoch
    model.eval()
    return {
        "loss": last_rank,
        "align-loss": last_align if len(pairs) else float("nan"),
        "num-examples": float(sum(len(t) for _, t in work)),
        "train-seconds": time.perf_counter() - started,
    }


@dataclass
class LocalRound:
    """What one node's round produced: arrays to send and the losses behind them."""

    shared_update: dict[str, np.ndarray]  # the node's contribution to the average
    expert: dict[str, np.ndarray]  # the node's own expert, as it keeps and shares it
    metrics: dict[str, float] = field(default_factory=dict)  # shared-loss, expert-loss


def local_round(
    model: SiMoE,
    name: str,
    dataset: DeviceDataset,
    global_shared: dict[str, np.ndarray],
    *,
    with_bank: bool,
    epochs: int,
    seed: int,
    local_batch: int = 8,
    prox_mu: float = 0.0,
    transfer_weight: float = 0.0,
) -> LocalRound:
    """One node's round on its own data, on a model holding the global shared parts.

    `with_bank`: the server delivered other nodes' experts this round. Then the gate and
    hardware encoder first learn, with those experts frozen, to route this device
    (`epochs` > 0), and the round has two parts, as in FedRep. The contribution to the
    average: the program encoder trained with the own expert on local data (on a copy).
    What the node keeps and sends as its expert: the own expert trained on the global
    encoder it was sent, frozen, so that expert and encoder match (and match the other
    nodes' experts); `model` ends with the global shared parts again. Trained on its own
    tasks only, a local encoder forgets what the fleet taught it, so the node tunes with
    the global one. Without a bank (the first round, a node alone) encoder and expert
    are trained together and both are sent.

    `local_batch`: tasks per optimizer step. A node holds a handful of tasks, so at the
    central default (8) an epoch is ONE step and a round a few: FedAvg then averages
    updates of a few steps each, far fewer than a central model takes over the same
    epochs. `prox_mu`: FedProx's proximal term on the program encoder (see train_experts).
    `transfer_weight`: the contribution's encoder also learns to make the delivered experts'
    mixture rank this node's records (see train_experts); only with a bank.
    """
    metrics: dict[str, float] = {}
    if with_bank and epochs > 0:
        shared = train_shared(
            model,
            [dataset],
            epochs=epochs,
            seed=seed,
            frozen_experts=True,
            expert_of={dataset.device: name},
            tasks_per_step=local_batch,
        )
        metrics["shared-loss"] = float(shared.get("loss", float("nan")))
    model.ensure_expert(name, dataset.hardware_vector)
    epochs = max(epochs, 1)
    step = {"epochs": epochs, "seed": seed, "tasks_per_step": local_batch}
    if with_bank:
        contribution = copy.deepcopy(model)
        train_expert(
            contribution, name, dataset, prox_mu=prox_mu, transfer_weight=transfer_weight, **step
        )
        shared_update = shared_arrays(contribution)
        own = train_expert(model, name, dataset, train_encoder=False, **step)
        load_shared_arrays(model, global_shared)
    else:
        own = train_expert(model, name, dataset, prox_mu=prox_mu, **step)
        shared_update = shared_arrays(model)
    metrics["expert-loss"] = float(own.get("loss", float("nan")))
    return LocalRound(shared_update, expert_arrays(model, name), metrics)


def personalise(
    model: SiMoE, name: str, dataset: DeviceDataset, *, epochs: int, seed: int, local_batch: int = 8
) -> SiMoE:
    """A personal copy of `model` for the node `name` (FedAvg + local fine-tuning, as FedPer
    and Ditto personalise): its program encoder and own expert trained together on its own
    records for `epochs`, as its own-only model would be, but from the federation's weights.
    `model` is left as it is: the node keeps sending the averaged parts."""
    personal = copy.deepcopy(model)
    train_expert(personal, name, dataset, epochs=epochs, seed=seed, tasks_per_step=local_batch)
    return personal


def nearest_expert(model: SiMoE, hardware_vector: np.ndarray, exclude: Iterable[str] = ()) -> str:
    """The expert whose hardware is most similar to `hardware_vector` in z-space."""
    skip = set(exclude)
    names = [n for n in model.expert_names if n not in skip]
    if not names:
        raise ValueError("no expert to choose from")
    sims = [model.similarity(hardware_vector, model.expert(n).hardware.numpy()) for n in names]
    return names[int(np.argmax(sims))]


def adapt(
    model: SiMoE,
    name: str,
    dataset: DeviceDataset,
    *,
    epochs: int = 30,
    seed: int = 0,
    lr: float = 3e-3,
) -> dict[str, float]:
    """Few-shot: give the new device its own expert and fit it on its first measurements.

    The expert starts as a copy of the most similar expert and is trained through the
    gate's mixture (in which it weighs most, its prior similarity being 1), so it learns
    what the zero-shot mixture gets wrong on this device. The shared parts and the other
    experts stay fixed: a handful of measurements must not move what the fleet shares.
    """
    if name not in model.expert_names:
        source = nearest_expert(model, dataset.hardware_vector, exclude=[name])
        expert = model.ensure_expert(name, dataset.hardware_vector)
        expert.head.load_state_dict(model.expert(source).head.state_dict())
    return train_experts(
        model,
        [(name, dataset)],
        epochs=epochs,
        seed=seed,
        lr=lr,
        train_encoder=False,
        tasks_per_step=2,
        through_mixture=True,
    )


@torch.no_grad()
def predict(
    model: SiMoE,
    features: Sequence[np.ndarray],
    hardware_vector: np.ndarray,
    *,
    experts: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    batch_size: int = 8192,
) -> np.ndarray:
    """Scores (higher = predicted faster) of candidates on the target hardware."""
    model.eval()
    hardware = torch.as_tensor(np.asarray(hardware_vector), dtype=torch.float32)
    expert_list = list(experts) if experts is not None else None
    exclude = list(exclude)
    out = []
    for start in range(0, len(features), batch_size):
        chunk = features[start : start + batch_size]
        rows, offsets = pack_rows(chunk)
        seg = torch.from_numpy(np.repeat(np.arange(len(chunk)), np.diff(offsets)))
        scores = model(torch.from_numpy(rows), seg, len(chunk), hardware, expert_list, exclude)
        out.append(scores.numpy().astype(np.float64))
    return np.concatenate(out) if out else np.zeros(0)


@torch.no_grad()
def embed(model: SiMoE, features: Sequence[np.ndarray]) -> torch.Tensor:
    """Program embeddings [n, program_dim] of raw PerStoreFeature arrays."""
    rows, offsets = pack_rows(features)
    seg = torch.from_numpy(np.repeat(np.arange(len(features)), np.diff(offsets)))
    return model.embed(torch.from_numpy(rows), seg, len(features))


@torch.no_grad()
def predict_expert(model: SiMoE, name: str, features: Sequence[np.ndarray]) -> np.ndarray:
    """Scores of one expert alone (no gate): the nearest-GPU baseline."""
    return model.expert(name)(embed(model, features)).numpy().astype(np.float64)


def fit_similarity(
    model: SiMoE,
    hardware: np.ndarray | torch.Tensor,
    pairs: np.ndarray | torch.Tensor,
    agreement: np.ndarray | torch.Tensor,
    *,
    groups: Sequence[int] | None = None,
    steps: int = 20,
    lr: float = 1e-2,
    seed: int = 0,
    loss: AlignmentLoss = ALIGNMENT_LOSSES[DEFAULT_ALIGNMENT],
) -> tuple[float, float]:
    """Fit the hardware encoder so that cos(z_i, z_j) follows measured rank agreement.

    `hardware`: the units' hardware vectors [units, dim]; `pairs`: unit indices [P, 2];
    `agreement`: how alike each pair ranks the same candidates (clipped to [-1, 1]);
    `groups`: who reported each pair (e.g. the checking node): each group weighs the
    same in the loss, so one that reports many pairs cannot dominate. Only the hardware
    encoder's parameters move (its normalizer's statistics and everything else stay).
    `loss` defaults to the alignment `train_shared` uses (losses.DEFAULT_ALIGNMENT, chosen
    on validation), so a federation and a central training pull cos(z) the same way.
    Returns (loss before, loss after); (nan, nan) and nothing changed without pairs.
    """
    pairs_t = torch.as_tensor(np.asarray(pairs), dtype=torch.long).reshape(-1, 2)
    if len(pairs_t) == 0 or steps <= 0:
        return float("nan"), float("nan")
    target = torch.as_tensor(np.asarray(agreement), dtype=torch.float32).clamp(-1.0, 1.0)
    h = torch.as_tensor(np.asarray(hardware), dtype=torch.float32)
    owner = np.zeros(len(pairs_t), dtype=np.int64) if groups is None else np.asarray(groups)
    members = [torch.as_tensor(np.flatnonzero(owner == g)) for g in np.unique(owner)]

    def total() -> torch.Tensor:
        z = model.encode_hardware(h)
        return torch.stack([loss(z, pairs_t[m], target[m]) for m in members]).mean()

    torch.manual_seed(seed)
    params = list(model.hardware_encoder.parameters())
    optimizer = torch.optim.Adam(params, lr=lr)
    was_training = model.training
    model.eval()  # no dropout or statistics to move: the same z as when serving
    with torch.no_grad():
        before = float(total())
    for _ in range(steps):
        optimizer.zero_grad()
        value = total()
        value.backward()
        optimizer.step()
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        after = float(total())
    model.train(was_training)
    return before, after
