"""Stop a CUDA search early when nothing builds or runs, and keep the first error.

Without this, a machine where every CUDA compile fails (no headers, no NVRTC) still
tunes every task to its full budget, minutes each, and the report says only
`tuned_latency_s: null`: MetaSchedule's logs went to a temporary folder that is
deleted. Here the first builder and runner error is kept (and logged at once),
and after `limit` failures in a row with no success the search is stopped with
that error in its message.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

from schemas import RunFailure

log = logging.getLogger(__name__)


@dataclass
class FailureLog:
    """The first build and run errors, and how many failed since the last success."""

    limit: int = 8
    first_build_error: str | None = None
    first_run_error: str | None = None
    failed_in_a_row: int = 0
    successes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, what: str, error: str | None) -> None:
        with self._lock:
            if error is None:
                self.successes += 1
                self.failed_in_a_row = 0
                return
            self.failed_in_a_row += 1
            attr = "first_build_error" if what == "build" else "first_run_error"
            if getattr(self, attr) is None:
                setattr(self, attr, error.strip())
                log.warning("first CUDA %s error: %s", what, error.strip().splitlines()[0])

    @property
    def first_error(self) -> str | None:
        return self.first_build_error or self.first_run_error

    def check(self) -> None:
        """RunFailure when `limit` candidates failed in a row and none has ever succeeded."""
        if self.successes == 0 and self.failed_in_a_row >= self.limit:
            first = (self.first_error or "unknown").splitlines()
            detail = next((line for line in first if "rror" in line), first[0] if first else "")
            raise RunFailure(
                f"stopped early: the first {self.failed_in_a_row} CUDA candidates all failed; "
                f"first error: {detail.strip()[:400]}"
            )


@derived_object
class FailFastBuilder(PyBuilder):
    """A builder that records its inner builder's errors and stops a hopeless search."""

    def __init__(self, inner: Any, failures: FailureLog) -> None:
        super().__init__()
        self.inner = inner
        self.failures = failures

    def build(self, build_inputs: list[Any]) -> list[BuilderResult]:
        results = self.inner.build(build_inputs)
        for result in results:
            self.failures.note("build", result.error_msg)
        self.failures.check()
        return results


@derived_object
class FailFastRunner(PyRunner):
    """A runner that records its inner runner's errors and stops a hopeless search."""

    def __init__(self, inner: Any, failures: FailureLog) -> None:
        super().__init__()
        self.inner = inner
        self.failures = failures

    def run(self, runner_inputs: list[Any]) -> list[RunnerFuture]:
        futures = self.inner.run(runner_inputs)
        return [self._watched(future) for future in futures]

    def _watched(self, future: Any) -> RunnerFuture:
        def result() -> RunnerResult:
            outcome = future.result()
            self.failures.note("run", outcome.error_msg)
            self.failures.check()
            return outcome

        return RunnerFuture(future.done, result)
