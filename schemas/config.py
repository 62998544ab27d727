"""The node agent's configuration (saved by agent.node_state.NodeState as `agent.json`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from schemas.sharing import MAX_TOP_K


class AgentConfig(BaseModel):
    """What a node is and how it tunes. Where it is saved is NodeState's business."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, description="the node's name in the federation")
    device: str = "cpu"
    server: str | None = Field(default=None, description="the SuperLink's HOST:PORT")
    ca_cert: Path | None = Field(default=None, description="the federation's CA certificate")
    trials_per_task: int = Field(default=64, ge=1, le=100_000)
    cost_model: str = Field(
        default="xgb", min_length=1, description="a name of agent.tuner.COST_MODELS"
    )
    num_cores: PositiveInt | None = Field(default=None, description="None: all physical cores")
    gate_sharpness: float | None = Field(
        default=None,
        ge=0.0,
        le=100.0,
        description="how fast measurements move SiMoE's gate (simoe_model.online_gate; "
        "0: off; None: the default chosen on the protocol's validation split)",
    )
    share_schedules: bool = Field(
        default=False,
        description="opt-in: share this node's top-k schedule traces per workload with the "
        "federation and receive the most similar units' (schemas.sharing; off by default)",
    )
    share_top_k: int = Field(
        default=3, ge=1, le=MAX_TOP_K, description="schedules shared per workload"
    )
    supernode_port: int | None = Field(
        default=None, ge=1, le=65535, description="the SuperNode's local port (enroll --port)"
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_state_dir(cls, data: Any) -> Any:
        # Configs written before NodeState recorded their own directory; the directory
        # they are read from is the one that counts.
        if isinstance(data, dict) and "state_dir" in data:
            data = {k: v for k, v in data.items() if k != "state_dir"}
        return data
