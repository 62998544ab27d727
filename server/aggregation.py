"""Which strategy aggregates the shared arrays: `--aggregation fedavg|trimmed|median|krum`.

Each robust rule is its own strategy class (as Flower's FedTrimmedAvg, FedMedian and
MultiKrum are); this module only maps the names the CLI and the run config use to
those classes and their one parameter each. `--clip NORM` applies to every rule: each
update's change against the current global model is scaled down to that L2 norm.
The server's step on the combined change (`--server-optimizer sgd|adam`, `--server-lr`)
and what a newcomer is sent (`--matched-global`) apply to every rule, too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from server.defaults import DEPLOYED_SERVER_LR, DEPLOYED_SERVER_OPTIMIZER
from server.registry import Registry
from server.strategy import SimilarityFn, SiMoEStrategy
from server.strategy_krum import SiMoEKrum
from server.strategy_median import SiMoEMedian
from server.strategy_trimmed import SiMoETrimmedAvg

Aggregation = Literal["fedavg", "trimmed", "median", "krum"]

STRATEGIES: dict[str, type[SiMoEStrategy]] = {
    cls.aggregation: cls for cls in (SiMoEStrategy, SiMoETrimmedAvg, SiMoEMedian, SiMoEKrum)
}


class AggregationConfig(BaseModel):
    """The aggregation rule and its parameters (validated: bad values are one-line errors)."""

    model_config = ConfigDict(extra="forbid")

    aggregation: Aggregation = "fedavg"
    clip: float | None = Field(default=None, gt=0, description="max L2 norm of an update's change")
    trim: float = Field(default=0.2, ge=0, lt=0.5, description="trimmed: cut at each end")
    krum_f: int = Field(default=2, ge=0, description="krum: nodes assumed malicious")
    server_optimizer: Literal["sgd", "adam"] = "sgd"
    server_lr: float = Field(default=1.0, gt=0, description="the server's step size")
    matched_global: bool = Field(
        default=False, description="newcomers get the global their experts were trained on"
    )

    @classmethod
    def from_run_config(cls, cfg: dict[str, object]) -> AggregationConfig:
        """From a Flower run config (`clip` 0 means off)."""
        clip = float(cfg.get("clip", 0.0))  # type: ignore[arg-type]
        return cls(
            aggregation=str(cfg.get("aggregation", "fedavg")),  # type: ignore[arg-type]
            clip=clip or None,
            trim=float(cfg.get("trim", 0.2)),  # type: ignore[arg-type]
            krum_f=int(cfg.get("krum-f", 2)),  # type: ignore[arg-type]
            server_optimizer=str(cfg.get("server-optimizer", DEPLOYED_SERVER_OPTIMIZER)),  # type: ignore[arg-type]
            server_lr=float(cfg.get("server-lr", DEPLOYED_SERVER_LR)),  # type: ignore[arg-type]
            matched_global=str(cfg.get("matched-global", "false")).lower() in {"1", "true"},
        )

    def run_config(self) -> dict[str, str | int | float]:
        return {
            "aggregation": self.aggregation,
            "clip": self.clip or 0.0,
            "trim": self.trim,
            "krum-f": self.krum_f,
            "server-optimizer": self.server_optimizer,
            "server-lr": self.server_lr,
            "matched-global": str(self.matched_global).lower(),
        }

    def describe(self) -> str:
        text = {
            "fedavg": "FedAvg",
            "trimmed": f"trimmed mean ({self.trim:g} cut at each end)",
            "median": "coordinate-wise median",
            "krum": f"multi-Krum (f = {self.krum_f})",
        }[self.aggregation]
        text += f", changes clipped to L2 norm {self.clip:g}" if self.clip else ""
        if self.server_optimizer == "adam":
            text += f", server Adam (FedAdam, lr {self.server_lr:g})"
        elif self.server_lr != 1.0:
            text += f", server learning rate {self.server_lr:g}"
        return text + (", newcomers get their experts' global" if self.matched_global else "")


def make_strategy(
    config: AggregationConfig, registry: Registry, similarity: SimilarityFn, **kwargs: object
) -> SiMoEStrategy:
    """The strategy class `config.aggregation` names, with its parameter and the clip."""
    extra: dict[str, object] = {}
    if config.aggregation == "trimmed":
        extra["trim_fraction"] = config.trim
    elif config.aggregation == "krum":
        extra["num_malicious"] = config.krum_f
    cls = STRATEGIES[config.aggregation]
    return cls(
        registry,
        similarity,
        clip_norm=config.clip,
        server_optimizer=config.server_optimizer,
        server_lr=config.server_lr,
        matched_global=config.matched_global,
        **extra,  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )
