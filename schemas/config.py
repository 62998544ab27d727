"""The node agent's configuration, kept as `agent.json` in its state directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from schemas.errors import BadInputError

CostModelName = Literal["xgb", "mlp", "random", "simoe"]


def default_state_dir() -> Path:
    """`$SIMOE_HOME/agent` if set, else `~/.simoe/agent`."""
    home = os.environ.get("SIMOE_HOME")
    return (Path(home) if home else Path.home() / ".simoe") / "agent"


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state_dir: Path = Field(default_factory=default_state_dir)
    name: str | None = Field(default=None, description="the node's name in the federation")
    device: str = "cpu"
    server: str | None = Field(default=None, description="the SuperLink's HOST:PORT")
    ca_cert: Path | None = None
    trials_per_task: PositiveInt = 64
    cost_model: CostModelName = "xgb"
    num_cores: PositiveInt | None = Field(default=None, description="None: all physical cores")

    @property
    def store_path(self) -> Path:
        return self.state_dir / "store.sqlite"

    @property
    def config_path(self) -> Path:
        return self.state_dir / "agent.json"

    @classmethod
    def load(cls, state_dir: Path | None = None) -> AgentConfig:
        """The saved config of a state directory, or the defaults when there is none."""
        state_dir = state_dir or default_state_dir()
        path = state_dir / "agent.json"
        if not path.exists():
            return cls(state_dir=state_dir)
        try:
            return cls.model_validate_json(path.read_text())
        except ValueError as exc:
            raise BadInputError(f"{path}: not a valid agent config ({exc})") from None

    def save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(self.config_path)  # atomic: a crash never leaves half a config
