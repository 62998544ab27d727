"""Shared fixtures: every test gets its own state directory; Flower stays offline."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")


@pytest.fixture(autouse=True)
def simoe_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh $SIMOE_HOME per test, so no test sees another's state or the user's."""
    home = tmp_path / "simoe-home"
    monkeypatch.setenv("SIMOE_HOME", str(home))
    return home
