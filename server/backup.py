"""Backup and restore of the registry through SQLite's online backup API.

`backup` copies the registry while the server runs: the copy is one read
transaction (a WAL snapshot), so the ServerApp keeps writing meanwhile and the
copy holds exactly what was committed when it began. It is written to a private
temporary file (0600), checked with `PRAGMA integrity_check`, switched to a plain
rollback journal (one self-contained file) and only then renamed into place.

`restore` checks the backup the same way (sound, and a SiMoE registry), keeps the
registry it replaces next to it (`registry.sqlite.before-restore-<stamp>`, nothing
is ever lost) and copies the backup in through the same API, which takes SQLite's
locks, so a running server never sees a half-written file. The ServerApp's round
loop holds the global model in memory too: stop the server before a restore that
must roll the federation back, or its next round saves a newer version on top.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from schemas import BadInputError, RunFailure
from schemas.private_files import create_private

# The tables a SiMoE registry has (server.registry.Registry._create).
REGISTRY_TABLES = (
    "meta",
    "nodes",
    "profiles",
    "experts",
    "rounds",
    "metrics",
    "traffic",
    "rejections",
    "model_versions",
)


class BackupResult(BaseModel):
    """What `simoe-server backup` / `restore` report (`--json`)."""

    model_config = ConfigDict(extra="forbid")

    source: str
    target: str
    bytes: int
    integrity: str
    rows: dict[str, int]
    kept: str | None = None  # restore: where the replaced registry was kept


def table_counts(conn: sqlite3.Connection) -> dict[str, int]:
    names = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
    return {t: conn.execute(f'select count(*) from "{t}"').fetchone()[0] for t in sorted(names)}


def _check_registry(path: Path) -> tuple[str, dict[str, int]]:
    """(integrity, row counts); BadInputError unless `path` is a sound SiMoE registry."""
    if not path.is_file():
        raise BadInputError(f"{path}: no such file")
    with path.open("rb") as handle:
        if handle.read(16) != b"SQLite format 3\x00":
            raise BadInputError(f"{path}: not a SQLite database")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        integrity = conn.execute("pragma integrity_check").fetchone()[0]
        if integrity != "ok":
            raise BadInputError(f"{path}: fails SQLite's integrity check ({integrity})")
        counts = table_counts(conn)
        version = (
            conn.execute("select value from meta where key = 'schema_version'").fetchone()
            if "meta" in counts
            else None
        )
    except sqlite3.DatabaseError as exc:
        raise BadInputError(f"{path}: not a usable SQLite database ({exc})") from None
    finally:
        conn.close()
    missing = [t for t in REGISTRY_TABLES if t not in counts]
    if missing:
        raise BadInputError(f"{path}: not a SiMoE registry (no table {missing[0]!r})")
    if version is None:
        raise BadInputError(f"{path}: not a SiMoE registry (no schema version)")
    return integrity, counts


def _copy(source: Path, target: Path) -> None:
    """SQLite's online backup of `source` into `target`, in one step (one snapshot).

    One step, not many: a backup in small steps restarts from the beginning whenever
    another process writes to the source, and a busy server writes every round.
    """
    src = sqlite3.connect(source, timeout=30)
    dst = sqlite3.connect(target, timeout=30)
    try:
        src.execute("pragma busy_timeout = 30000")
        dst.execute("pragma busy_timeout = 30000")
        src.backup(dst)
        dst.commit()
    finally:
        dst.close()
        src.close()


def _fail(path: Path, exc: BaseException) -> RunFailure:
    why = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
    return RunFailure(f"{path}: cannot write ({why}); nothing was changed")


def backup(registry: Path, target: Path) -> BackupResult:
    """Copy the (possibly live) registry to `target`; an existing target is refused."""
    _check_registry(registry)
    if target.exists():
        raise BadInputError(f"{target}: exists already; give a new file name")
    if not target.parent.is_dir():
        raise BadInputError(f"{target.parent}: no such directory")
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.unlink(missing_ok=True)  # left by a killed backup
        create_private(tmp)
        _copy(registry, tmp)
        conn = sqlite3.connect(tmp)
        try:  # one self-contained file: no -wal beside it
            conn.execute("pragma journal_mode = delete")
        finally:
            conn.close()
        _check_registry(tmp)  # only a sound copy takes the name
        with tmp.open("rb") as handle:
            os.fsync(handle.fileno())
        tmp.replace(target)
    except (OSError, sqlite3.OperationalError) as exc:
        with contextlib.suppress(OSError):  # a read-only place has nothing to remove
            tmp.unlink(missing_ok=True)
        raise _fail(target, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return _report(registry, target)


def restore(source: Path, registry: Path) -> BackupResult:
    """Replace the registry's content with the backup `source`; the old one is kept."""
    _check_registry(source)
    kept = None
    if registry.exists():
        _check_registry(registry)  # a broken registry is for the operator to look at first
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        kept_path = registry.with_name(f"{registry.name}.before-restore-{stamp}")
        backup(registry, kept_path)
        kept = str(kept_path)
    try:
        create_private(registry)
        _copy(source, registry)
        conn = sqlite3.connect(registry, timeout=30)
        try:
            conn.execute("pragma journal_mode = wal")  # as the Registry runs it
        finally:
            conn.close()
    except (OSError, sqlite3.OperationalError) as exc:
        raise RunFailure(
            f"{registry}: restore failed ({exc}); the registry before it is in {kept}"
        ) from None
    return _report(source, registry, kept)


def _report(source: Path, target: Path, kept: str | None = None) -> BackupResult:
    """What was written, checked again where it now lies."""
    integrity, counts = _check_registry(target)
    return BackupResult(
        source=str(source),
        target=str(target),
        bytes=target.stat().st_size,
        integrity=integrity,
        rows=counts,
        kept=kept,
    )
