"""The diagnosis tools' reader of a finished federation refuses what it cannot read, in one
line naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.federation.saved_run import read_saved_run
from schemas import BadInputError
from server.registry import Registry


def test_a_missing_or_empty_registry_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="--registry .* does not exist"):
        read_saved_run(tmp_path / "none.sqlite")
    Registry(tmp_path / "empty.sqlite").close()
    with pytest.raises(BadInputError, match="holds no global model"):
        read_saved_run(tmp_path / "empty.sqlite")
