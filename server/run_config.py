"""The server's settings: one pydantic model, from the CLI to the run config to the strategy.

`ServerRunConfig` is what `simoe-server start` validates its options into, what it
hands Flower as the run config (`to_run_config`: Flower's own value types, a bool
stays a bool), what the generated app's pyproject lists as the defaults
(`server.superlink.write_app`), what the ServerApp reads back (`from_run_config`)
and what `server.aggregation.make_strategy` builds the strategy from. Its defaults
are the deployment's defaults, here and nowhere else. So are the rules across settings
(`settings_problem`: e.g. `--teacher-balance needs --teacher-distill-steps`), checked however
the settings arrive and refused in one line naming the options.

The server's step: FedAdam (a step of about `server_lr` per learned value per round)
with many rounds of one local epoch, each node's personal fine-tune and the similarity fit
on the shipped probe set's agreements: the pre-registered rounds' pick on the protocol's
validation units over 3 seeds against the other variants of
`docs/results/federation_helps_variants_validation.md` (docs/model.md, "Federation helps"),
with the shipped probe set in place of the bench's (see `DEFAULTS`).
`--server-optimizer sgd --server-lr 1` is plain FedAvg, what `SiMoEStrategy` itself does
when built directly (the tests and the poisoning bench).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from schemas import BadInputError
from schemas.errors import plain_problem

Aggregation = Literal["fedavg", "trimmed", "median", "krum"]
RunConfigValue = str | int | float | bool

# A field's `simoe-server start` option where it is not `--` + its run-config key.
CLI_OPTIONS = {"num_rounds": "--rounds"}


def _key(field: str) -> str:
    return field.replace("_", "-")


def start_option(field: str) -> str:
    """The `simoe-server start` option that sets `field`."""
    return CLI_OPTIONS.get(field, "--" + _key(field))


# A setting that only means something with another one on: (the setting, the one it needs).
NEEDS = [
    ("teacher_distill_steps", "teacher_epochs"),
    ("teacher_balance", "teacher_distill_steps"),
    ("newcomer_distill_steps", "teacher_epochs"),
]
# The settings that read the public probe set (`similarity_source` when it is "probes").
USE_PROBES = ["similarity_source", "distill_steps", "teacher_epochs"]


def settings_problem(settings: Mapping[str, object]) -> str | None:
    """What is wrong with a combination of settings, in one line naming the options; None if
    nothing. The one place these rules live: `ServerRunConfig` checks them (the CLI, Flower's
    run config, `make_strategy`) and so does a directly built `SiMoEStrategy`. `settings` maps
    field names to values (a missing one counts as off); `probes` is truthy when there is a
    probe set. Whether a probe file loads is `simoe-server start`'s to check."""

    def on(name: str) -> bool:
        value = settings.get(name)
        return value == "probes" if name == "similarity_source" else bool(value)

    for name, needed in NEEDS:
        if on(name) and not on(needed):
            return f"{start_option(name)} needs {start_option(needed)}"
    if not settings.get("probes") and any(on(name) for name in USE_PROBES):
        return (
            "--similarity-source probes (the default), --distill-steps and --teacher-epochs "
            "need probes: --probes suite or FILE, or --similarity-source reported"
        )
    return None


def _one_line(exc: ValidationError, name_of: Callable[[str], str]) -> BadInputError:
    """A pydantic refusal as one line: the setting (as `name_of` spells it) and what is wrong;
    a rule across settings (no field of its own) in its own words."""
    error = exc.errors()[0]
    if not error["loc"]:  # settings_problem: its message names the options already
        return BadInputError(plain_problem(error))
    name = name_of(str(error["loc"][0]).replace("-", "_"))
    return BadInputError(f"{name} {plain_problem(error)} (got {error.get('input')!r})")


class ServerRunConfig(BaseModel):
    """Every setting of a SiMoE server run, with the deployment's defaults."""

    model_config = ConfigDict(extra="forbid", alias_generator=_key, populate_by_name=True)

    registry: str = Field(default="", description="the registry's path (set by start)")
    num_rounds: int = Field(default=0, ge=0, description="rounds to run; 0 = keep running")
    k_experts: int = Field(default=3, ge=1, le=64, description="experts sent to each node")
    epochs: int = Field(default=1, ge=1, le=1000, description="local epochs per round")
    seed: int = Field(default=0, ge=0)
    min_nodes: int = Field(default=1, ge=1, description="nodes needed to start a round")
    round_timeout: float = Field(default=300.0, gt=0, description="seconds per round")
    wait_nodes: float = Field(default=3600.0, ge=0, description="seconds to wait for nodes")
    round_interval: float = Field(
        default=10.0, ge=0, description="seconds from one round's start to the next's, at least"
    )
    idle_probe: float = Field(
        default=1800.0,
        ge=0,
        description="after a round with nothing new, the longest wait before the next "
        "(0: a round every --round-interval, whatever is new)",
    )
    local_batch: int = Field(default=8, ge=1, description="tasks per local training step")
    prox_mu: float = Field(default=0.0, ge=0, description="FedProx's mu (0: off)")
    # off by default: on the validation split of fleet da10b0fa (3 seeds), with k = 29 and the
    # similarity fit at 50 steps, it did not close the newcomers' gap (+0.056, +0.050 without):
    # docs/results/model_evaluation.md, third round
    transfer_weight: float = Field(
        default=0.0,
        ge=0,
        description="weight of each node's cross-node loss on the program encoder: the "
        "delivered experts' mixture ranking its own records (0: off)",
    )
    # the validated pick's (see DEFAULTS): on the test split nodes +0.004 against their
    # own-data-only models with it, -0.152 without (docs/results/federation_helps_test*.md)
    personal_epochs: int = Field(
        default=24,
        ge=0,
        le=1000,
        description="epochs each node fine-tunes a personal, never-sent copy of the encoder "
        "and its own expert, in the run's last round (every round when it keeps running; 0: off)",
    )
    aggregation: Aggregation = "fedavg"
    clip: float = Field(default=0.0, ge=0, description="max L2 norm of an update's change; 0 off")
    trim: float = Field(default=0.2, ge=0, lt=0.5, description="trimmed: cut at each end")
    krum_f: int = Field(default=2, ge=0, description="krum: nodes assumed malicious")
    server_optimizer: Literal["sgd", "adam"] = "adam"
    server_lr: float = Field(default=0.01, gt=0, description="the server's step size")
    matched_global: bool = Field(
        default=False, description="newcomers get the global their experts were trained on"
    )
    # the validated pick's (see DEFAULTS), on the probes' agreements: on validation the
    # newcomers' cos(z) vs measured agreement +0.570 with the shipped probe set, +0.223 with the
    # fit off; 10 steps on the nodes' reported agreements did not help (+0.193):
    # docs/results/model_evaluation.md
    similarity_steps: int = Field(
        default=50,
        ge=0,
        le=1000,
        description="steps fitting the hardware similarity on the nodes' rank agreements "
        "after each average (0: off)",
    )
    # the shipped public probe set (simoe_model.probe_file.SUITE_PROBES) by default, for the
    # similarity fit's probe agreements (issue 23, fifth and sixth rounds). FedDF on it after
    # each average stays off: on validation it cost the newcomers (gap +0.101 against +0.045
    # without; docs/results/model_evaluation.md)
    probes: str = Field(
        default="suite",
        description="the public probe programs (features only) for the probe agreements and "
        "distillation: `suite` (the shipped set), an .npz file, or `none`",
    )
    distill_steps: int = Field(
        default=0,
        ge=0,
        le=10000,
        description="server steps distilling the averaged program encoder toward the nodes' "
        "encoders and experts on the probes after each average (0: off)",
    )
    similarity_source: Literal["reported", "probes"] = Field(
        default="probes",
        description="what the similarity fit follows: the nodes' reported agreements, or how "
        "alike their experts rank the probes",
    )
    # off by default (issue 23, sixth round; docs/usage.md): each node keeps a teacher
    # trained on its own records alone and sends its scores on the public probes (a reply
    # field, one float per probe program); the server distils the averaged program encoder
    # toward them (server.distillation.distill_to_scores). On validation (2 epochs, 50 steps)
    # the newcomer gap +0.057 against +0.045 without, nodes -0.017 against own-only
    # (docs/results/model_evaluation.md)
    teacher_epochs: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="epochs per round each node trains its own-records teacher, whose scores "
        "on the probes it sends (0: off; needs probes)",
    )
    teacher_distill_steps: int = Field(
        default=0,
        ge=0,
        le=10000,
        description="server steps distilling the averaged program encoder toward the nodes' "
        "teacher scores on the probes after each average (0: off; needs teacher_epochs)",
    )
    # off by default (issue 23, seventh round): the teacher distillation's targets weighted
    # so that each hardware cluster counts about alike (server.distillation.cluster_weights,
    # from the z of the hardware encoder the server holds; nothing more leaves a node)
    teacher_balance: bool = Field(
        default=False,
        description="weight each node's teacher by 1 / its summed positive similarity to the "
        "teachers, so each hardware cluster counts about alike (needs teacher_distill_steps)",
    )

    # off by default (issue 23, eighth round): a newcomer (no records of its own) is served a
    # copy of the global distilled toward every node's latest teacher scores; the average the
    # nodes train on is untouched (SiMoEStrategy.newcomer_arrays). The eighth round's pick
    # (with teacher_epochs 2, 600 steps; test newcomer gap +0.026, these defaults +0.041 on the
    # code before the key-order fix; docs/results/model_evaluation.md) stays opt-in: teachers
    # add a reply field
    newcomer_distill_steps: int = Field(
        default=0,
        ge=0,
        le=10000,
        description="server steps distilling the copy of the global served to newcomers toward "
        "the nodes' teacher scores on the probes (0: off; needs teacher_epochs)",
    )
    newcomer_teachers: Literal["all", "sent"] = Field(
        default="all",
        description="whose teacher scores the newcomers' copy follows: every node's, or only "
        "those of the experts the newcomer is sent",
    )

    @field_validator("probes")
    @classmethod
    def _no_probes(cls, value: str) -> str:
        """`none` turns the probe set off (empty, as the checks below read it)."""
        return "" if value.strip().lower() == "none" else value

    @model_validator(mode="after")
    def _settings_agree(self) -> ServerRunConfig:
        problem = settings_problem(dict(iter(self)))  # not dict(self): `keys` is a classmethod
        if problem:
            raise ValueError(problem)
        return self

    # -- Flower's run config ------------------------------------------------------------

    @classmethod
    def from_run_config(cls, cfg: Mapping[str, object]) -> ServerRunConfig:
        """From a Flower run config (keys with dashes; missing keys take the defaults).

        A bad value or combination is one line (BadInputError) naming its run-config key."""
        try:
            return cls.model_validate(dict(cfg))
        except ValidationError as exc:
            raise _one_line(exc, _key) from None

    def to_run_config(self) -> dict[str, RunConfigValue]:
        """Flower's run config: every key, with Flower's own value types (bool, int, ...)."""
        return self.model_dump(by_alias=True)

    @classmethod
    def keys(cls) -> list[str]:
        return [_key(name) for name in cls.model_fields]

    # -- the command line ---------------------------------------------------------------

    @classmethod
    def from_options(cls, **values: object) -> ServerRunConfig:
        """From `simoe-server start`'s options; a bad value is one line naming the option."""
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValidationError as exc:
            raise _one_line(exc, start_option) from None

    def start_options(self) -> list[str]:
        """`simoe-server start` options that give these settings (those off the defaults)."""
        options: list[str] = []
        for name, value in self:
            if name == "registry" or value == getattr(DEFAULTS, name):
                continue
            option = start_option(name)
            if isinstance(value, bool):
                options.append(option if value else "--latest-global")
            else:
                options += [option, str(value)]
        return options

    def describe(self) -> str:
        """The aggregation and the server's step in words."""
        adam = self.server_optimizer == "adam"
        text = {
            # the weighted mean of the nodes' changes, stepped by server Adam: FedAdam
            "fedavg": "FedAdam (the nodes' weighted mean change)" if adam else "FedAvg",
            "trimmed": f"trimmed mean ({self.trim:g} cut at each end)",
            "median": "coordinate-wise median",
            "krum": f"multi-Krum (f = {self.krum_f})",
        }[self.aggregation]
        text += f", changes clipped to L2 norm {self.clip:g}" if self.clip else ""
        if adam:
            kind = "" if self.aggregation == "fedavg" else " (as FedAdam)"
            text += f", server Adam step{kind}, lr {self.server_lr:g}"
        elif self.server_lr != 1.0:
            text += f", server learning rate {self.server_lr:g}"
        return text + (", newcomers get their experts' global" if self.matched_global else "")


# The deployment's defaults are the federation rounds' validated pick in its product form
# (bench/protocol.py PRODUCT_DEFAULTS_RULE; tests/test_run_config.py holds them to it): FedAdam
# 0.01, 1 local epoch a round, each node's personal fine-tune (24 epochs) and the similarity
# fit (50 steps a round) on the agreements of the experts' rankings of the shipped probe set.
DEFAULTS = ServerRunConfig()
