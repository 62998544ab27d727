"""The cost models the tuner can search with, by name (`--cost-model NAME`).

MetaSchedule's own ("xgb", "mlp", "random") are passed to it by name. "simoe" is a SiMoE
built here from what the node's state holds: the device's profile (taken once if the node
has none), the model `agent.model_choice.choose_model` picks (federation, imported,
starter) and the node's name for its own expert; simoe_model gets only those plain
inputs and never reads the agent's state directory. `register_cost_model` adds a name
(AgentConfig.cost_model is a plain string, checked against this registry where it is used).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from schemas import BadInputError
from schemas.tuning import ModelUsed

if TYPE_CHECKING:
    from tvm.s_tir import meta_schedule as ms

    from agent.devices.base import Device
    from agent.node_state import NodeState

# A factory gets the device and the node's state (None when tuning outside a node, e.g.
# in a benchmark) and returns a MetaSchedule CostModel or one of MetaSchedule's names.
CostModelFactory = Callable[["Device", "NodeState | None"], "ms.cost_model.CostModel | str"]


def _builtin(name: str) -> CostModelFactory:
    return lambda _device, _node: name


def simoe_cost_model(device: Device, node: NodeState | None) -> ms.cost_model.CostModel:
    """SiMoE for this node: its profile of `device` (taken if missing) and the model
    `choose_model` picks; the node's own expert learns while it tunes, and its
    measurements move the gate (`AgentConfig.gate_sharpness`, simoe_model.online_gate)."""
    from agent.model_choice import choose_model
    from simoe_model.cost_model import TARGET_EXPERT, SiMoECostModel
    from simoe_model.online_gate import DEFAULT_SHARPNESS

    if node is None:
        raise BadInputError("cost model 'simoe' needs a node's state (its profile and model)")
    profile = node.profile(device)
    used = choose_model(node)
    config = node.config()
    expert = config.name or TARGET_EXPERT
    sharpness = DEFAULT_SHARPNESS if config.gate_sharpness is None else config.gate_sharpness
    model = SiMoECostModel.for_device(profile, used.path, expert_name=expert, sharpness=sharpness)
    model.model_used = used  # reported by tune (`TuneResult.model_used`)
    return model


def model_used_by(model: ms.cost_model.CostModel | str) -> ModelUsed:
    """What `tune` reports as the model it searched with."""
    if isinstance(model, str):
        return ModelUsed(
            source="metaschedule",
            path=None,
            label=f"MetaSchedule's {model} cost model, learning from this run's measurements"
            if model != "random"
            else "MetaSchedule's random scores (no model)",
        )
    used = getattr(model, "model_used", None)
    if isinstance(used, ModelUsed):
        return used
    return ModelUsed(source="untrained", path=None, label=type(model).__name__)


COST_MODELS: dict[str, CostModelFactory] = {
    "xgb": _builtin("xgb"),
    "mlp": _builtin("mlp"),
    "random": _builtin("random"),
    "simoe": simoe_cost_model,
}


def register_cost_model(name: str, factory: CostModelFactory) -> None:
    """Make `--cost-model NAME` available (e.g. a SiMoE variant from another module)."""
    COST_MODELS[name] = factory


def check_cost_model(name: str) -> None:
    """Fail early, with one line, for a cost model that is unknown."""
    if name not in COST_MODELS:
        raise BadInputError(f"unknown cost model {name!r} (known: {', '.join(COST_MODELS)})")


def make_cost_model(
    name: str, device: Device, node: NodeState | None = None, *, seed: int = 0
) -> ms.cost_model.CostModel | str:
    """The cost model `name` for this device and node; a SiMoE's online fine-tune and replay
    buffer draw from `seed` (the tuning run's `--seed`: before, they drew from 0 whatever it
    was)."""
    check_cost_model(name)
    model = COST_MODELS[name](device, node)
    from simoe_model.cost_model import SiMoECostModel

    if isinstance(model, SiMoECostModel):
        model.reseed(seed)
    return model
