"""SiMoE on parameter-space kernels: training data, training, and the measured search.

The model is the same `SiMoE` (hardware encoder, program encoder, gate, one expert per
GPU); only the program encoder's input is a `ParamFeaturizer` row instead of
MetaSchedule's per-store features. This module turns one GPU's measured configurations
into the `DeviceDataset` the training loops take, trains a model on a fleet of GPUs, and
runs the search a new GPU tunes with:

    zero-shot: rank every configuration by the gate's mixture over the fleet's experts;
    measured:  after each batch, each expert's weight follows how well it ranked the
               configurations measured so far on this GPU (an online mixture: the
               likelihood of the measured order under each expert's scores), so a GPU
               whose measurements contradict its nearest expert stops following it
               (simoe_model.online_gate, which TVM tensor programs use too).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from simoe_model.features import pack_rows
from simoe_model.losses import DEFAULT_ALIGNMENT
from simoe_model.model import SiMoE, SiMoEConfig, expert_outputs
from simoe_model.online_gate import order_log_likelihood, reweight, standardize
from simoe_model.task_data import DeviceDataset, TaskData
from simoe_model.train import fit_feature_normalizer_rows, train_shared

# Configurations of one GPU are split into this many tasks (by a hash of their key, so a
# configuration falls in the same task on every GPU): a listwise step samples a list
# from one task, and an epoch has enough steps.
CHUNKS = 8
# A failed configuration is trained as this many times slower than the GPU's slowest
# that ran: the model learns to rank what fails on a GPU last there.
FAILED_SLOWDOWN = 4.0


@dataclass
class KernelDevice:
    """One GPU's measured configurations of one kernel space, as arrays."""

    name: str
    hardware_vector: np.ndarray
    features: np.ndarray  # [n, d] raw rows (ParamFeaturizer)
    time_ms: np.ndarray  # [n], NaN where the configuration failed
    keys: list[str]


def _chunk_of(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % CHUNKS


def kernel_dataset(device: KernelDevice) -> DeviceDataset:
    """The GPU's configurations as `CHUNKS` ranking tasks; failures ranked last."""
    times = np.asarray(device.time_ms, dtype=np.float64)
    ran = np.isfinite(times)
    if not ran.any():
        raise ValueError(f"{device.name}: no configuration ran")
    times = np.where(ran, times, np.nanmax(times) * FAILED_SLOWDOWN)
    chunk = np.array([_chunk_of(k) for k in device.keys])
    tasks = []
    for c in range(CHUNKS):
        idx = np.flatnonzero(chunk == c)
        if len(idx) >= 2:
            tasks.append(
                TaskData(
                    f"chunk{c}",
                    [device.features[i : i + 1] for i in idx],
                    times[idx] / 1000.0,
                    [device.keys[i] for i in idx],
                )
            )
    return DeviceDataset(device.name, np.asarray(device.hardware_vector, np.float32), tasks)


@dataclass(frozen=True)
class KernelTraining:
    """How a kernel model is trained (chosen on the training GPUs only, see the bench)."""

    expert_steps: int = 300
    shared_epochs: int = 12
    list_size: int = 64
    hardware_input: str = "hybrid"
    use_similarity_prior: bool = True
    alignment: str = DEFAULT_ALIGNMENT  # train_shared's alignment loss, by name


def _expert_targets(devices: Sequence[KernelDevice]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Configurations of the fleet (union of keys), and each GPU's target y [n, G] on them.

    y = log(best / time), in [-MAX_GAP, 0]: 0 at the GPU's optimum; a failed
    configuration gets -MAX_GAP; NaN where the GPU did not measure it.
    """
    keys = list(dict.fromkeys(k for d in devices for k in d.keys))
    where = {k: i for i, k in enumerate(keys)}
    y = np.full((len(keys), len(devices)), np.nan)
    for g, d in enumerate(devices):
        t = np.asarray(d.time_ms, dtype=np.float64)
        gap = np.where(np.isfinite(t), np.log(np.nanmin(t) / t), -MAX_GAP)
        y[[where[k] for k in d.keys], g] = np.maximum(gap, -MAX_GAP)
    return keys, y, np.asarray([where[k] for k in keys])


# A configuration this many e-folds slower than a GPU's optimum (about 20x) is as bad as
# it gets for ranking: the target is clipped there, so the fit spends itself near the top.
MAX_GAP = 3.0


def train_kernel_experts(
    model: SiMoE,
    devices: Sequence[KernelDevice],
    *,
    steps: int,
    seed: int,
    batch: int = 512,
    lr: float = 3e-3,
) -> dict[str, float]:
    """Every GPU's expert and the shared program encoder, in one minibatch loop.

    Each expert fits its own GPU's log(best / time) (clipped at -MAX_GAP, failures
    there), weighted toward the GPU's fast configurations (weight e^y + 0.1), which is
    what a search reads; one batch of configurations is embedded once for all experts.
    Far faster here than the listwise loop of `train.train_experts` (which samples short
    lists of many small tasks): a kernel space is one big task measured on every GPU.
    """
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    started = time.perf_counter()
    feats: dict[str, np.ndarray] = {}
    for d in devices:
        feats.update(zip(d.keys, d.features, strict=True))
    keys, y, _ = _expert_targets(devices)
    rows, _ = pack_rows([feats[k][None, :] for k in keys])
    x = torch.from_numpy(rows)
    fit_feature_normalizer_rows(model, x)
    for d in devices:
        model.ensure_expert(d.name, d.hardware_vector)
    bank = [model.expert(d.name) for d in devices]
    target = torch.as_tensor(y, dtype=torch.float32)
    seen = torch.isfinite(target)
    target = torch.nan_to_num(target, nan=0.0)
    weight = torch.exp(target) + 0.1
    params = list(model.program_encoder.parameters()) + [p for e in bank for p in e.parameters()]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(1, steps))
    model.train()
    loss_value = float("nan")
    segment_of = torch.arange(batch)
    for _ in range(steps):
        idx = torch.from_numpy(rng.choice(len(keys), min(batch, len(keys)), replace=False))
        e = model.program_encoder(x[idx], segment_of[: len(idx)], len(idx))
        pred = expert_outputs(bank, e)  # [b, G]
        err = weight[idx] * (pred - target[idx]) ** 2
        loss = err[seen[idx]].mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        loss_value = float(loss.detach())
    model.eval()
    return {"loss": loss_value, "train-seconds": time.perf_counter() - started}


def train_kernel_model(
    devices: Sequence[KernelDevice], training: KernelTraining, seed: int
) -> SiMoE:
    """A SiMoE on the fleet's GPUs: one expert each (with the shared program encoder),
    then the hardware encoder and gate, each GPU's own expert left out (leave-one-out)."""
    config = SiMoEConfig(
        feature_dim=int(devices[0].features.shape[1]),
        hardware_input=training.hardware_input,  # type: ignore[arg-type]
        use_similarity_prior=training.use_similarity_prior,
    )
    torch.manual_seed(seed)  # the initial weights: a function of the seed, not of the process
    model = SiMoE(config)
    train_kernel_experts(model, devices, steps=training.expert_steps, seed=seed)
    _train_gate(model, devices, training, seed)
    return model


def _train_gate(
    model: SiMoE, devices: Sequence[KernelDevice], training: KernelTraining, seed: int
) -> None:
    """The hardware encoder and gate on the fleet, each GPU's own expert left out."""
    if len(devices) > 1 and training.shared_epochs > 0:
        train_shared(
            model,
            [kernel_dataset(d) for d in devices],
            epochs=training.shared_epochs,
            seed=seed,
            list_size=training.list_size,
            alignment=training.alignment,
        )


def retrain_gate(
    model: SiMoE, devices: Sequence[KernelDevice], training: KernelTraining, seed: int
) -> SiMoE:
    """A copy of `model` whose hardware encoder and gate are trained anew on `devices`.

    The experts and the program encoder are kept (each expert placed at its device's
    hardware vector in `devices`, e.g. with another probe count), so the ablations
    (`training.hardware_input`) and probe counts get equal effort: only what sees h changes.
    """
    config = model.config.model_copy(
        update={
            "hardware_input": training.hardware_input,
            "use_similarity_prior": training.use_similarity_prior,
        }
    )
    torch.manual_seed(seed)  # a fresh gate and encoder: a function of the seed alone
    other = SiMoE(config)
    hardware_of = {d.name: d.hardware_vector for d in devices}
    for name in model.expert_names:
        other.ensure_expert(name, hardware_of.get(name, model.expert(name).hardware))
        other.expert(name).head.load_state_dict(model.expert(name).head.state_dict())
    other.program_encoder.load_state_dict(model.program_encoder.state_dict())
    _train_gate(other, devices, training, seed)
    return other


@torch.no_grad()
def _embed(model: SiMoE, features: np.ndarray) -> torch.Tensor:
    """Program embeddings of one-row candidates (the representation of `param_features`)."""
    model.eval()
    rows, _ = pack_rows([features[i : i + 1] for i in range(len(features))])
    return model.embed(torch.from_numpy(rows), torch.arange(len(features)), len(features))


@torch.no_grad()
def expert_scores(model: SiMoE, features: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Every expert's scores of every configuration: names and [n, K] (higher = faster)."""
    e = _embed(model, features)
    names = model.expert_names
    return names, expert_outputs([model.expert(n) for n in names], e).numpy().astype(np.float64)


@torch.no_grad()
def gate_weights(
    model: SiMoE,
    features: np.ndarray,
    hardware: np.ndarray,
    experts: Sequence[str] | None = None,
) -> np.ndarray:
    """The gate's weights [n, K] over the experts (all, or `experts`) for the hardware."""
    e = _embed(model, features)
    h = torch.as_tensor(np.asarray(hardware), dtype=torch.float32)
    return model.mixture(e, h, experts)[1].numpy().astype(np.float64)


@dataclass
class RankedSearch:
    """SiMoE's search over a finite space: the next configurations to measure.

    `scores` [n, K] are the experts' (standardized here), `prior` [n, K] the gate's
    weights for the target. `sharpness` scales how fast measurements move the weights
    (0: never: the zero-shot mixture throughout). `temperature` > 1 flattens the gate's
    weights (an ensemble of near experts errs less than the single nearest one).
    `shared` [n, K] (opt-in schedule sharing): 1 for the configurations expert k's GPU
    shared as its best, decaying with their rank there; `share_weight` is how many
    standard deviations of its expert's score such a configuration gains, so the fleet's
    best-known configurations of similar GPUs are ranked first, by SiMoE.
    """

    scores: np.ndarray
    prior: np.ndarray
    sharpness: float = 4.0
    temperature: float = 1.0
    shared: np.ndarray | None = None
    share_weight: float = 0.0

    def __post_init__(self) -> None:
        self.expert_view = standardize(np.asarray(self.scores, dtype=np.float64))
        self.scores = self.expert_view
        if self.shared is not None and self.share_weight > 0:
            self.scores = self.expert_view + self.share_weight * np.asarray(self.shared, float)
        prior = np.asarray(self.prior, dtype=np.float64) ** (1.0 / self.temperature)
        self.prior = prior / prior.sum(1, keepdims=True)
        self.measured: list[int] = []
        self.times: list[float] = []
        self.expert_weights = self.prior.mean(0)

    def mixture(self) -> np.ndarray:
        """Mixture scores [n]: the gate's weights, reweighted by the measured order."""
        ll = (
            order_log_likelihood(
                self.expert_view, np.asarray(self.measured), np.asarray(self.times)
            )
            if self.sharpness > 0 and len(self.measured) >= 2
            else np.zeros(self.prior.shape[1])
        )
        weights = reweight(self.prior, ll, len(self.measured), self.sharpness)
        self.expert_weights = weights.mean(0)
        return (weights * self.scores).sum(1)

    def propose(self, count: int, allowed: np.ndarray | None = None) -> list[int]:
        """The best `count` unmeasured configurations by the current mixture."""
        mix = self.mixture()
        mask = np.ones(len(mix), dtype=bool) if allowed is None else allowed.copy()
        mask[self.measured] = False
        order = np.flatnonzero(mask)[np.argsort(-mix[mask], kind="stable")]
        return [int(i) for i in order[:count]]

    def observe(self, index: int, time_ms: float) -> None:
        self.measured.append(int(index))
        self.times.append(float(time_ms))


def shared_matrix(keys: Sequence[str], shared: Sequence[Sequence[str]]) -> np.ndarray:
    """[n, K]: for each expert's shared best configurations (best first), 1 / (1 + rank/4)
    at the configurations of `keys` they name, 0 elsewhere."""
    where = {k: i for i, k in enumerate(keys)}
    out = np.zeros((len(keys), len(shared)))
    for column, best in enumerate(shared):
        for rank, key in enumerate(best):
            if key in where:
                out[where[key], column] = 1.0 / (1.0 + rank / 4.0)
    return out


def run_search(
    search: RankedSearch,
    measure: Callable[[int], float],
    budget: int,
    batches: Sequence[int] = (1, 1, 2, 4, 8, 16, 32),
) -> list[int]:
    """Measure `budget` configurations in growing batches; the measured order."""
    sizes = list(batches)
    while sum(sizes) < budget:
        sizes.append(sizes[-1])
    for size in sizes:
        left = budget - len(search.measured)
        if left <= 0:
            break
        for index in search.propose(min(size, left)):
            search.observe(index, measure(index))
    return list(search.measured)
