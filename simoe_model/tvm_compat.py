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

The MLP trainer's fixes below (`step_lr_accepts_verbose`, `single_candidate_safe`) are
scoped: a context manager and a wrapper of one trainer object, never an import-time patch.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

_original_getmodule = inspect.getmodule


def _getmodule(obj: Any, _filename: str | None = None) -> ModuleType | None:
    if _filename is not None and _filename.startswith("<"):
        return None
    return _original_getmodule(obj, _filename)


def install() -> None:
    """Patch `inspect.getmodule` in this process (idempotent); also a worker initializer."""
    inspect.getmodule = _getmodule


@contextlib.contextmanager
def step_lr_accepts_verbose() -> Iterator[None]:
    """TVM 0.27's MLP trainer passes StepLR(verbose=...), which torch 2.13 no longer takes,
    and step_size=num_epoch_full // 10, which is 0 (a modulo by zero) below 10 epochs.

    Patches torch's StepLR only while the block runs (training TVM's MLP cost model)."""
    import torch

    original = torch.optim.lr_scheduler.StepLR

    class StepLR(original):  # type: ignore[misc,valid-type]
        def __init__(
            self,
            optimizer: Any,
            step_size: int,
            *args: object,
            verbose: object = None,
            **kwargs: object,
        ) -> None:
            super().__init__(optimizer, max(1, int(step_size)), *args, **kwargs)

    torch.optim.lr_scheduler.StepLR = StepLR
    try:
        yield
    finally:
        torch.optim.lr_scheduler.StepLR = original


def single_candidate_safe(trainer: Any) -> Any:
    """TVM 0.27's MLP trainer fails on a batch of one measured candidate (a 0-d tensor in its
    top-k score); such a batch is stored for later training but not trained on at once."""
    original = trainer.update

    def update(features: list[np.ndarray], costs: np.ndarray, group_hash: str) -> None:
        if len(features) < 2:
            trainer.state.add_to_group(features, costs, group_hash)
            return
        original(features, costs, group_hash)

    trainer.update = update
    return trainer
