"""Errors that cross a boundary, and how a CLI reports them in one line.

`BadInputError` is the user's mistake (exit 2); `RunFailure` is a failure at run
time (exit 1). A pydantic `ValidationError` counts as bad input and is shortened
to one line that names the field.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

T = TypeVar("T")

EXIT_BAD_INPUT = 2
EXIT_RUN_FAILURE = 1


class SimoeError(Exception):
    """Base of the project's own errors; the message is shown to the user as is."""

    exit_code = EXIT_RUN_FAILURE


class BadInputError(SimoeError):
    """A malformed workload, spec, config, model file or device request."""

    exit_code = EXIT_BAD_INPUT


class RunFailure(SimoeError):
    """Something failed while running (a build, a measurement, a server)."""

    exit_code = EXIT_RUN_FAILURE


_PLAIN = {
    "greater_than": "must be more than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "literal_error": "must be {expected}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_too_short": "must not be empty",
    "missing": "is missing",
    "extra_forbidden": "is not a known setting",
    "json_invalid": "is not valid JSON ({error})",
}


def plain_problem(error: Mapping[str, Any]) -> str:
    """What is wrong with one pydantic error's value, in the user's words.

    `must be at least 1`, not pydantic's `Input should be greater than or equal to 1`.
    """
    template = _PLAIN.get(str(error.get("type")))
    if template is not None:
        try:
            return template.format(**(error.get("ctx") or {}))
        except (KeyError, IndexError):
            pass
    text = str(error.get("msg", "is not valid"))
    for prefix, plain in (("Input should be", "must be"), ("Value error, ", ""),
                          ("Assertion failed, ", "")):  # fmt: skip
        text = text.replace(prefix, plain)
    return text[:1].lower() + text[1:] if text.startswith("must") else text


def plain_errors(exc: ValidationError, whole: str | None = None) -> str:
    """Every field's problem in plain words, `; `-separated: `device must be a valid
    string (got 42); trials_per_task must be at least 1 (got -1)`. `whole` names what a
    problem without a field is about (default: the model's name)."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        # a problem without a field (invalid JSON): its input is the whole document
        got = (
            f" (got {err['input']!r})"
            if loc and "input" in err and not isinstance(err["input"], (dict, list))
            else ""
        )
        loc = loc or whole or exc.title
        parts.append(f"{loc} {plain_problem(err)}{got}")
    return "; ".join(parts)


def one_line(exc: BaseException) -> str:
    """The error as one line; validation errors name the offending field, in plain words."""
    if isinstance(exc, ValidationError):
        return f"bad {exc.title.lower()}: " + plain_errors(exc)
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def output_folder(directory: Path, what: str) -> Path:
    """Create `directory` for output, or raise one line that says what to do (exit 2).

    `what` names it for the user, e.g. "--plot's folder" or "the export folder"."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise BadInputError(
            f"cannot create {what} {directory} ({reason}); give another folder, one you can "
            "write to"
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise BadInputError(
            f"{what} {directory} is not writable; give another folder, one you can write to"
        )
    return directory


def exit_code_of(exc: BaseException) -> int:
    if isinstance(exc, SimoeError):
        return exc.exit_code
    if isinstance(exc, ValidationError):
        return EXIT_BAD_INPUT
    return EXIT_RUN_FAILURE


def run_cli(entry: Callable[[], T], prog: str) -> T:
    """Run a CLI entry point: a one-line error and an exit code instead of a traceback.

    `-v` / `--verbose` anywhere on the command line (or SIMOE_DEBUG=1) keeps the traceback.
    """
    verbose = "-v" in sys.argv or "--verbose" in sys.argv or os.environ.get("SIMOE_DEBUG") == "1"
    try:
        return entry()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as exc:  # noqa: BLE001 - the one place that turns errors into exit codes
        if verbose:
            traceback.print_exc()
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(exit_code_of(exc)) from None
