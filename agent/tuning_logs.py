"""MetaSchedule's loggers during a tuning run: console on stderr, full logs in files.

MetaSchedule's own setup logs to stdout (that would break `--json`) and calls
`logging.config.dictConfig`, which closes every other handler of the process; the tuner
sets up the same loggers with plain handlers here instead, and removes only its own.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

MS_LOGGER = "tvm.s_tir.meta_schedule"
_LOG_FORMAT = logging.Formatter("%(asctime)s [%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S")


def _own_handler(handler: logging.Handler, level: int) -> logging.Handler:
    handler.setLevel(level)
    handler.setFormatter(_LOG_FORMAT)
    handler.simoe_owned = True  # type: ignore[attr-defined]
    return handler


def _drop_own_handlers(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        if getattr(handler, "simoe_owned", False):
            logger.removeHandler(handler)
            handler.close()


def task_loggers(work_dir: str, task_names: list[str], console_level: int) -> list[logging.Logger]:
    """MetaSchedule's loggers: console output on stderr at `console_level`, full logs in files.

    MetaSchedule's own setup logs to stdout (that would break `--json`) and calls
    `logging.config.dictConfig`, which closes every other handler of the process; this sets
    up the same loggers with plain handlers instead.
    """
    log_dir = Path(work_dir) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger(MS_LOGGER)
    _drop_own_handlers(root)
    root.setLevel(logging.DEBUG)
    root.propagate = False
    root.addHandler(_own_handler(logging.StreamHandler(sys.stderr), console_level))
    scheduler_log = logging.FileHandler(log_dir / "task_scheduler.log")
    root.addHandler(_own_handler(scheduler_log, logging.DEBUG))
    loggers = []
    for i, name in enumerate(task_names):
        logger = logging.getLogger(f"{MS_LOGGER}.simoe_task_{i}")
        _drop_own_handlers(logger)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # every failed candidate is logged with its whole TIR
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:80]
        task_log = logging.FileHandler(log_dir / f"task_{i}_{safe}.log")
        logger.addHandler(_own_handler(task_log, logging.DEBUG))
        loggers.append(logger)
    return loggers


def close_loggers(loggers: list[logging.Logger]) -> None:
    for logger in [*loggers, logging.getLogger(MS_LOGGER)]:
        _drop_own_handlers(logger)
