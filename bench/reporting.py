"""The steps every standalone benchmark takes around its run (chaos, poisoning,
federation_helps): the command line as the report shows it, the load average, the report
written as JSON with its Markdown beside it, and `--render` (re-render a report's Markdown
from its JSON without running anything)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

Report = TypeVar("Report", bound=BaseModel)

# directory arguments shown as placeholders: no local path in a committed report
PLACEHOLDERS = {"--data": "DIR", "--work": "WORK", "--out": "OUT"}


def public_command(module: str, argv: Sequence[str]) -> str:
    """`python -m bench.MODULE ...` (MODULE: `federation.poisoning`, say) with data, work and
    output directories as placeholders (DIR, DIR2, ...)."""
    out, current, count = [], None, 0
    for arg in argv:
        if arg.startswith("--"):
            current, count = PLACEHOLDERS.get(arg), 0
            out.append(arg)
        elif current is not None:
            count += 1
            out.append(current if count == 1 else f"{current}{count}")
        else:
            out.append(arg)
    return " ".join(["python", "-m", f"bench.{module}", *out])


def print_json(value: object, out: Path | None) -> None:
    """A diagnosis tool's result as indented JSON: printed, and written to `out` if given."""
    text = json.dumps(value, indent=1)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    print(text)


def load_average() -> list[float]:
    return list(os.getloadavg())


def load_text(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def write_report(
    report: BaseModel, markdown: Callable[[Report], str], out: Path, stem: str
) -> None:
    """OUT/STEM.json and OUT/STEM.md, the Markdown rendered from the same report."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(report.model_dump_json(indent=1))
    (out / f"{stem}.md").write_text(markdown(report))  # type: ignore[arg-type]


def add_render_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--render", type=Path, help="rewrite the .md of this .json report, exit")


def read_report(path: Path, model: type[Report]) -> Report:
    return model.model_validate_json(path.read_text())


def render(path: Path, model: type[Report], markdown: Callable[[Report], str]) -> Report:
    """`--render PATH`: PATH's Markdown (PATH.md) re-rendered from its JSON.

    A missing, unreadable or malformed report is one line and exit 2, never a traceback.
    """
    try:
        report = read_report(path, model)
    except OSError as exc:
        print(f"error: cannot read the report {path} ({exc.strerror or exc})", file=sys.stderr)
        sys.exit(2)
    except ValidationError as exc:
        print(
            f"error: {path} is not a {model.__name__} report ({exc.errors()[0]['msg']})",
            file=sys.stderr,
        )
        sys.exit(2)
    path.with_suffix(".md").write_text(markdown(report))
    return report
