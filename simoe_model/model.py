"""SiMoE: a similarity-aware mixture of per-hardware experts. Read top to bottom.

    rows of a candidate ──log──▶ ProgramEncoder (per-store MLP, segment sum) ──▶ e
    hardware vector h ──▶ HardwareEncoder ──▶ z                (similarity space)
    expert k (one per enrolled hardware, trained on its own data only): E_k(e)
    gate: logit_k = cos(z_target, z_k) / tau  +  g(z_target, z_k, e)
    score(candidate, target) = Σ_k softmax(logit)_k · E_k(e)     (higher = faster)

The shared parts (hardware encoder, program encoder, gate) are what the federation
averages; experts travel whole and are never averaged. Each expert keeps the
hardware vector of its device as a buffer, so the gate can place it in z-space.

Files: `save_model` writes one torch file of plain tensors plus a JSON header
(format version, config, expert names); `load_model` reads it with
`weights_only=True` and refuses anything that does not match, in one line.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from torch import nn

from schemas import BadInputError, RunFailure
from schemas.errors import one_line
from simoe_model.features import FEATURE_DIM
from simoe_model.hardware import ANALYTICAL_SLICE, EMPIRICAL_SLICE, HARDWARE_DIM

FORMAT_NAME = "simoe-model"
FORMAT_VERSION = 3
# Older versions this code still reads, with the config values their files were made with
# (version 1 had no hardware_clip: the normalized hardware vector was never clipped;
# versions 1-2 had no program feature range: their features are never clamped).
OLDER_VERSIONS: dict[int, dict[str, object]] = {1: {"hardware_clip": 0.0}, 2: {}}
# The feature range of a model that has none (unfitted, or saved before version 3): finite,
# so the file's arrays pass the NaN/Inf check, and wide enough never to clamp.
NO_BOUND = float(torch.finfo(torch.float32).max)
LOCAL_BUFFERS = ("mask", "lo", "hi")  # a node's own, never averaged (see _shared_state)
SHARED_PARTS = ("hardware_encoder", "program_encoder", "gate")

HardwareInput = Literal["hybrid", "analytical", "empirical", "none"]


class SiMoEConfig(BaseModel):
    """Sizes and switches of the model; saved with it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    feature_dim: int = FEATURE_DIM
    hardware_dim: int = HARDWARE_DIM
    store_hidden: int = Field(default=64, gt=0, description="per-store MLP width")
    program_dim: int = Field(default=64, gt=0, description="program embedding e")
    z_dim: int = Field(default=16, gt=0, description="hardware similarity space z")
    expert_hidden: int = Field(default=32, gt=0)
    gate_hidden: int = Field(default=16, gt=0)
    tau: float = Field(default=0.1, gt=0, description="temperature of the similarity prior")
    use_similarity_prior: bool = True
    hardware_input: HardwareInput = Field(
        default="hybrid", description="which half of h the encoder sees (ablations)"
    )
    hardware_clip: float = Field(
        default=2.0,
        ge=0,
        description="clip the normalized h to +-this many training stds (0: off), so a "
        "device unlike every training device (k80: the only Kepler) is not extrapolated far",
    )


class Normalizer(nn.Module):
    """(x - mean) / std with statistics fitted on training data and saved as buffers.

    `bounded`: x is first clamped to [lo, hi], the range of the data the encoder was trained
    on (simoe_model.train fits it). Why: program features grow with the operator's shape
    (bytes, cache lines, reuse counts), and a ReLU network extrapolates them linearly, so
    on an operator far larger than any training one (LLaMA-7B's projections against the
    starter's 512-wide matmuls) the search drove straight to the candidates whose features
    were furthest outside that range and the model rated them best: they were 2-3x slower
    than a random candidate (docs/results/starter_diagnosis.md). Unfitted: no clamp."""

    def __init__(self, dim: int, *, bounded: bool = False) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.bounded = bounded
        if bounded:
            self.register_buffer("lo", torch.full((dim,), -NO_BOUND))
            self.register_buffer("hi", torch.full((dim,), NO_BOUND))

    @torch.no_grad()
    def fit(self, x: torch.Tensor) -> None:
        self.mean.copy_(x.mean(0))
        # constant columns stay unscaled instead of blowing up
        self.std.copy_(x.std(0, unbiased=False).clamp_min(1e-3) if len(x) > 1 else 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bounded:
            x = torch.maximum(torch.minimum(x, self.hi), self.lo)
        return (x - self.mean) / self.std


def segment_sum(values: torch.Tensor, segment: torch.Tensor, n: int) -> torch.Tensor:
    """Sum the rows of `values` per segment id: [rows, d] -> [n, d]."""
    out = values.new_zeros((n, values.shape[1]))
    return out.index_add_(0, segment, values)


class ProgramEncoder(nn.Module):
    """Per-store MLP on normalized log features, summed per candidate (as TenSet/MetaSchedule)."""

    def __init__(self, cfg: SiMoEConfig) -> None:
        super().__init__()
        self.norm = Normalizer(cfg.feature_dim, bounded=True)
        self.store_mlp = nn.Sequential(
            nn.Linear(cfg.feature_dim, cfg.store_hidden),
            nn.ReLU(),
            nn.Linear(cfg.store_hidden, cfg.program_dim),
            nn.ReLU(),
        )
        self.mix = nn.Sequential(nn.Linear(cfg.program_dim, cfg.program_dim), nn.ReLU())

    def forward(self, rows: torch.Tensor, segment: torch.Tensor, n: int) -> torch.Tensor:
        summed = segment_sum(self.store_mlp(self.norm(rows)), segment, n)
        return summed + self.mix(summed)


class HardwareEncoder(nn.Module):
    """h -> z. The mask buffer zeroes the half of h an ablation leaves out."""

    def __init__(self, cfg: SiMoEConfig) -> None:
        super().__init__()
        self.norm = Normalizer(cfg.hardware_dim)
        mask = torch.ones(cfg.hardware_dim)
        if cfg.hardware_input == "analytical":
            mask[EMPIRICAL_SLICE] = 0
        elif cfg.hardware_input == "empirical":
            mask[ANALYTICAL_SLICE] = 0
        elif cfg.hardware_input == "none":
            mask[:] = 0
        self.register_buffer("mask", mask)
        self.clip = cfg.hardware_clip
        self.mlp = nn.Sequential(
            nn.Linear(cfg.hardware_dim, 64), nn.ReLU(), nn.Linear(64, cfg.z_dim)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = self.norm(h)
        if self.clip > 0:
            x = x.clamp(-self.clip, self.clip)
        return self.mlp(x * self.mask)


class Expert(nn.Module):
    """A small head on the program embedding for one hardware; keeps that hardware's h."""

    def __init__(self, cfg: SiMoEConfig, hardware: torch.Tensor | None = None) -> None:
        super().__init__()
        self.head = nn.Sequential(
            nn.Linear(cfg.program_dim, cfg.expert_hidden),
            nn.ReLU(),
            nn.Linear(cfg.expert_hidden, 1),
        )
        h = torch.zeros(cfg.hardware_dim) if hardware is None else hardware.float()
        self.register_buffer("hardware", h.clone())

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        return self.head(e).squeeze(-1)


class Gate(nn.Module):
    """Weights over the available experts: similarity prior plus a learned correction."""

    def __init__(self, cfg: SiMoEConfig) -> None:
        super().__init__()
        self.tau = cfg.tau
        self.use_prior = cfg.use_similarity_prior
        self.pair = nn.Linear(2 * cfg.z_dim, cfg.gate_hidden)
        self.program = nn.Linear(cfg.program_dim, cfg.gate_hidden)
        self.out = nn.Linear(cfg.gate_hidden, 1)

    def forward(
        self,
        z_target: torch.Tensor,
        z_experts: torch.Tensor,
        e: torch.Tensor,
        target_index: torch.Tensor | None = None,
        allowed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Gate weights [n, K] for n candidates (embeddings e) and K experts.

        `z_target` is one device [z], or several [m, z] with `target_index` [n] naming
        each candidate's device (one batched call for many devices while training);
        `allowed` [n, K] masks experts out (e.g. a device's own, for leave-one-out).
        """
        zt = nn.functional.normalize(z_target.reshape(-1, z_target.shape[-1]), dim=-1)
        zk = nn.functional.normalize(z_experts, dim=-1)
        pair_in = torch.cat([zt[:, None, :] * zk[None], (zt[:, None, :] - zk[None]).abs()], -1)
        pair = self.pair(pair_in)  # [m, K, G]
        prior = zt @ zk.T / self.tau  # [m, K]: cos(z_target, z_k) / tau
        if target_index is None:
            target_index = torch.zeros(len(e), dtype=torch.long)
        hidden = (self.program(e)[:, None, :] + pair[target_index]).relu_()  # [n, K, G]
        logits = self.out(hidden).squeeze(-1)  # [n, K]
        if self.use_prior:
            logits = logits + prior[target_index]
        if allowed is not None:
            logits = logits.masked_fill(~allowed, float("-inf"))
        return torch.softmax(logits, dim=-1)


def expert_outputs(bank: list[Expert], e: torch.Tensor) -> torch.Tensor:
    """All experts on all candidates, [n, K], as one matrix product instead of K small ones."""
    w1 = torch.cat([x.head[0].weight for x in bank])  # [K*H, P]
    b1 = torch.cat([x.head[0].bias for x in bank])  # [K*H]
    w2 = torch.stack([x.head[2].weight[0] for x in bank])  # [K, H]
    b2 = torch.cat([x.head[2].bias for x in bank])  # [K]
    hidden = nn.functional.linear(e, w1, b1).relu_().view(len(e), len(bank), -1)
    return (hidden * w2).sum(-1) + b2


_CLASH = "%21"  # marks a name that is also an attribute of nn.ModuleDict ("cpu", "train")


def expert_key(name: str) -> str:
    """Module keys cannot contain '.', node names can: escape it (names have no '%').

    A name that is also an attribute of the module dict (a node called "cpu") would
    be refused by torch: it gets a prefix no escaped name can start with.
    """
    key = name.replace("%", "%25").replace(".", "%2E")
    return _CLASH + key if hasattr(nn.ModuleDict, key) else key


def expert_name(key: str) -> str:
    return key.removeprefix(_CLASH).replace("%2E", ".").replace("%25", "%")


class SiMoE(nn.Module):
    """The mixture: shared encoders and gate, plus a bank of per-hardware experts."""

    def __init__(self, config: SiMoEConfig | None = None) -> None:
        super().__init__()
        self.config = config or SiMoEConfig()
        self.hardware_encoder = HardwareEncoder(self.config)
        self.program_encoder = ProgramEncoder(self.config)
        self.gate = Gate(self.config)
        self.experts = nn.ModuleDict()

    # -- the expert bank ------------------------------------------------------------
    @property
    def expert_names(self) -> list[str]:
        return [expert_name(k) for k in self.experts]

    def expert(self, name: str) -> Expert:
        key = expert_key(name)
        if key not in self.experts:
            raise BadInputError(f"no expert {name!r} in the model (have: {self.expert_names})")
        return self.experts[key]  # type: ignore[return-value]

    def ensure_expert(self, name: str, hardware: np.ndarray | torch.Tensor) -> Expert:
        """The expert of `name`, created (untrained) if the bank has none yet."""
        key = expert_key(name)
        if key not in self.experts:
            self.experts[key] = Expert(self.config, torch.as_tensor(hardware))
        else:
            self.experts[key].hardware.copy_(torch.as_tensor(hardware))
        return self.experts[key]  # type: ignore[return-value]

    # -- forward ----------------------------------------------------------------------
    def embed(self, rows: torch.Tensor, segment: torch.Tensor, n: int) -> torch.Tensor:
        return self.program_encoder(rows, segment, n)

    def encode_hardware(self, h: torch.Tensor) -> torch.Tensor:
        return self.hardware_encoder(h.float().reshape(-1, self.config.hardware_dim))

    def mixture(
        self,
        e: torch.Tensor,
        hardware: torch.Tensor,
        experts: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores [n] and gate weights [n, K] of program embeddings on target hardware."""
        skip = set(exclude)
        names = [n for n in (experts if experts is not None else self.expert_names)]
        names = [n for n in names if n not in skip]
        if not names:
            raise BadInputError("the model has no expert to predict with")
        if hardware.numel() != self.config.hardware_dim:
            raise BadInputError(
                f"hardware vector of length {hardware.numel()}, "
                f"the model takes {self.config.hardware_dim}"
            )
        bank = [self.expert(n) for n in names]
        h_all = torch.stack([hardware.float().reshape(-1)] + [x.hardware for x in bank])
        z = self.encode_hardware(h_all)
        weights = self.gate(z[0], z[1:], e)
        return (weights * expert_outputs(bank, e)).sum(-1), weights

    def forward(
        self,
        rows: torch.Tensor,
        segment: torch.Tensor,
        n: int,
        hardware: torch.Tensor,
        experts: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
    ) -> torch.Tensor:
        """Scores (higher = faster) of n packed candidates on the target hardware."""
        return self.mixture(self.embed(rows, segment, n), hardware, experts, exclude)[0]

    def similarity(self, h_a: np.ndarray, h_b: np.ndarray) -> float:
        """cos(z_a, z_b): how alike the model thinks two devices rank programs."""
        with torch.no_grad():
            z = self.encode_hardware(torch.as_tensor(np.stack([h_a, h_b])))
            return float(torch.cosine_similarity(z[0], z[1], dim=0))


# -- federation helpers: plain name -> array dicts ----------------------------------------
def _to_numpy(state: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in state.items()}


def _check_arrays(
    what: str, arrays: Mapping[str, np.ndarray], expected: Mapping[str, torch.Tensor]
) -> None:
    """BadInputError on a missing or extra key, a wrong shape, NaN or Inf."""
    missing = sorted(set(expected) - set(arrays))
    extra = sorted(set(arrays) - set(expected))
    if missing or extra:
        raise BadInputError(f"{what}: missing keys {missing[:3]}, unexpected keys {extra[:3]}")
    for key, ref in expected.items():
        value = np.asarray(arrays[key])
        if tuple(value.shape) != tuple(ref.shape):
            raise BadInputError(
                f"{what}: {key} has shape {tuple(value.shape)}, expected {tuple(ref.shape)}"
            )
        if not np.issubdtype(value.dtype, np.number) or not np.all(np.isfinite(value)):
            raise BadInputError(f"{what}: {key} contains NaN, Inf or non-numbers")


def _shared_state(model: SiMoE) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for part in SHARED_PARTS:
        for key, value in getattr(model, part).state_dict().items():
            # the ablation switch is config; the feature range is what this node's encoder
            # was trained on: neither is a learned parameter to average
            if key.rsplit(".", 1)[-1] in LOCAL_BUFFERS:
                continue
            state[f"{part}.{key}"] = value
    return state


def shared_arrays(model: SiMoE) -> dict[str, np.ndarray]:
    """The shared parts (encoders, gate, their normalizers) as arrays, for FedAvg."""
    return _to_numpy(_shared_state(model))


@torch.no_grad()
def load_shared_arrays(model: SiMoE, arrays: Mapping[str, np.ndarray]) -> None:
    """Replace the shared parts; all-or-nothing, BadInputError if anything is off."""
    expected = _shared_state(model)
    _check_arrays("shared arrays", arrays, expected)
    for key, ref in expected.items():
        ref.copy_(torch.as_tensor(np.asarray(arrays[key]), dtype=ref.dtype))


def expert_arrays(model: SiMoE, name: str) -> dict[str, np.ndarray]:
    """One expert's weights and its hardware vector (key 'hardware')."""
    return _to_numpy(model.expert(name).state_dict())


@torch.no_grad()
def add_expert(model: SiMoE, name: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Add (or replace) the expert `name` from its arrays, e.g. one received from the registry."""
    fresh = Expert(model.config)
    _check_arrays(f"expert {name!r}", arrays, fresh.state_dict())
    fresh.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in arrays.items()})
    model.experts[expert_key(name)] = fresh


def remove_expert(model: SiMoE, name: str) -> None:
    """Drop an expert from the bank (BadInputError if there is none of that name)."""
    model.expert(name)
    del model.experts[expert_key(name)]


# -- files ----------------------------------------------------------------------------------
def save_model(model: SiMoE, path: str | Path, metadata: dict[str, Any] | None = None) -> None:
    """One file: JSON header (format, version, config, experts, metadata) and plain tensors.

    `metadata` (JSON-able) says where the model came from, e.g. what it was trained on;
    `model_metadata` reads it back. Loading ignores it."""
    path = Path(path)
    header = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "config": model.config.model_dump(),
        "experts": model.expert_names,
        "metadata": metadata or {},
    }
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"header": json.dumps(header), "state": state}, tmp)
        tmp.replace(path)  # atomic: a crash never leaves half a model
    except (OSError, RuntimeError) as exc:  # torch reports a full disk as RuntimeError
        with contextlib.suppress(OSError):  # on a read-only disk there is nothing to remove
            tmp.unlink(missing_ok=True)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else one_line(exc)
        kept = "the previous file is kept" if path.exists() else "nothing was written"
        raise RunFailure(f"{path}: cannot write the model ({why}); {kept}") from None


def load_model(path: str | Path) -> SiMoE:
    """The model saved at `path`; BadInputError (one line) for anything unexpected."""
    path = Path(path)
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such model file") from None
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a bad file
        raise BadInputError(f"{path}: not a SiMoE model file ({type(exc).__name__})") from None
    if not isinstance(blob, dict) or not isinstance(blob.get("header"), str):
        raise BadInputError(f"{path}: not a SiMoE model file (no header)")
    try:
        header = json.loads(blob["header"])
        if header.get("format") != FORMAT_NAME:
            raise BadInputError(f"{path}: not a SiMoE model file")
        version = header.get("version")
        if version != FORMAT_VERSION and version not in OLDER_VERSIONS:
            readable = sorted([FORMAT_VERSION, *OLDER_VERSIONS])
            raise BadInputError(
                f"{path}: model format version {version}, this code reads versions {readable}"
            )
        config = SiMoEConfig.model_validate({**OLDER_VERSIONS.get(version, {}), **header["config"]})
        names = [str(n) for n in header["experts"]]
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        if isinstance(exc, BadInputError):
            raise
        raise BadInputError(f"{path}: corrupted model header ({type(exc).__name__})") from None
    model = SiMoE(config)
    for name in names:
        model.experts[expert_key(name)] = Expert(config)
    state = blob.get("state")
    if not isinstance(state, dict):
        raise BadInputError(f"{path}: corrupted model file (no tensors)")
    if version != FORMAT_VERSION:  # no feature range yet: the unclamped default
        default = model.state_dict()
        state = {
            **{k: default[k] for k in ("program_encoder.norm.lo", "program_encoder.norm.hi")},
            **state,
        }
    _check_arrays(
        f"{path}",
        {k: v.numpy() for k, v in state.items() if isinstance(v, torch.Tensor)},
        model.state_dict(),
    )
    model.load_state_dict(state)
    model.eval()
    return model


def model_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata saved with a model (empty for one saved without); the file is validated."""
    load_model(path)  # one line of BadInputError for anything that is not a good model
    blob = torch.load(Path(path), map_location="cpu", weights_only=True)
    metadata = json.loads(blob["header"]).get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
