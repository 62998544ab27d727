"""The human tables of both CLIs, readable at the console's width (80 columns when piped).

A table never cuts a cell with an ellipsis and never wraps a name: cells do not wrap, and
when the table is wider than the console, the columns marked `optional` are left out, right
to left, and the caption says which (`--json` always has every field). Only when it still does
not fit does the widest column fold. It lives here, next to `run_cli`, because `agent` and
`server` may not import each other and both print tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


@dataclass(frozen=True)
class Column:
    """One column: its header, alignment, and whether it may be left out to fit the width."""

    header: str
    justify: Literal["left", "right"] = "left"
    optional: bool = False


def short_time(value: datetime | str | None) -> str:
    """A timestamp as local `MM-DD HH:MM:SS`: short enough for a table column."""
    if value is None:
        return ""
    try:
        when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    return when.astimezone().strftime("%m-%d %H:%M:%S")


def _table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> Table:
    # Header rule only and two spaces between columns: every character goes to content.
    table = Table(
        title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0)
    )
    table.show_header = any(c.header for c in columns)  # a key/value table needs none
    for column in columns:
        table.add_column(column.header, justify=column.justify, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def _width(console: Console, table: Table) -> int:
    """The table's natural width (what it needs without wrapping anything)."""
    return Measurement.get(console, console.options.update_width(100_000), table).maximum


def fit_table(
    console: Console,
    title: str,
    columns: Sequence[str | Column],
    rows: Sequence[Sequence[Any]],
) -> Table:
    """The table with as many columns as fit `console.width`, never cutting a cell."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    cells = [["" if v is None else str(v) for v in row] for row in rows]
    keep = list(range(len(cols)))
    left_out: list[str] = []

    def build() -> Table:
        return _table(title, [cols[i] for i in keep], [[r[i] for i in keep] for r in cells])

    table = build()
    optional = [i for i in keep if cols[i].optional]
    while _width(console, table) > console.width and optional:
        dropped = optional.pop()
        keep.remove(dropped)
        left_out.insert(0, cols[dropped].header)
        table = build()
    if left_out:
        table.caption = f"left out to fit {console.width} columns: {', '.join(left_out)} (--json)"
    if _width(console, table) > console.width:  # last resort: fold the widest, cut nothing
        lengths = [max((len(r[i]) for r in cells), default=0) for i in keep]
        widest = lengths.index(max(lengths))
        table.columns[widest].no_wrap = False
        table.columns[widest].overflow = "fold"
    return table


def print_table(
    console: Console,
    title: str,
    columns: Sequence[str | Column],
    rows: Sequence[Sequence[Any]],
) -> None:
    console.print(fit_table(console, title, columns, rows))


def human_bytes(n: int | None) -> str:
    """A byte count for a table: 0, 512 B, 1.5 KiB ... GiB."""
    if not n:
        return "0"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def ago(stamp: datetime | str | None, now: datetime | None = None) -> str:
    """`12 s ago`, `3 min ago`, `2 h ago`; '-' when never."""
    if not stamp:
        return "-"
    try:
        then = datetime.fromisoformat(stamp) if isinstance(stamp, str) else stamp
    except ValueError:
        return str(stamp)
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    seconds = max(0.0, ((now or datetime.now(timezone.utc)) - then).total_seconds())
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"
