"""Work around slow `inspect.stack()` calls in TVM's script parser.

TVM's `T.prim_func` decorator calls `inspect.stack()`, and on Python 3.11 every
frame whose file does not exist (`<frozen importlib._bootstrap>`) makes
`inspect.getmodule` scan all of `sys.modules`. Importing
`tvm.s_tir.tensor_intrin` then takes over a minute, and MetaSchedule's builder
workers time out. Frames without a real file never map to a module anyway, so
answering None for them at once changes no result.

Importing this module patches nothing: every entry point (the CLIs, the ClientApp and
ServerApp, the bench mains, the daemon's and enroll's `python -m` children) calls
`install()` first, and MetaSchedule's worker processes get it as their initializer.
Then the order of imports cannot matter.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

_original_getmodule = inspect.getmodule


def _getmodule(obj: Any, _filename: str | None = None) -> ModuleType | None:
    if _filename is not None and _filename.startswith("<"):
        return None
    return _original_getmodule(obj, _filename)


def install() -> None:
    """Patch `inspect.getmodule` in this process (idempotent); also a worker initializer."""
    inspect.getmodule = _getmodule

