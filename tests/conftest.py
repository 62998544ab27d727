"""Shared fixtures: every test gets its own state directory; Flower stays offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.protocol import prepare_flower_env
from simoe_model import tvm_compat

# The test run is an entry point like any other: Flower offline, TVM's inspect patch.
prepare_flower_env()
tvm_compat.install()


@pytest.fixture(autouse=True)
def simoe_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh $SIMOE_HOME per test, so no test sees another's state or the user's."""
    home = tmp_path / "simoe-home"
    monkeypatch.setenv("SIMOE_HOME", str(home))
    return home
