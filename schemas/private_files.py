"""Files only their owner may read (mode 0600): private keys and the server's registry.

Both sides keep secrets on disk: a node its SuperNode key, the server its TLS key and a
registry of node names, key fingerprints and experts. One place decides how such a
file is made, so that no copy forgets the mode or leaves half a key after a crash.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def create_private(path: Path) -> None:
    """Create `path` empty with mode 0600 unless it exists (SQLite then keeps that mode).

    Why: SQLite creates a new database with the umask's mode (often 0644), and its
    -wal and -shm files copy the database file's mode.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` with mode 0600, atomically: a crash leaves the old file or the new.

    The temporary file is created 0600 before any byte is written, so the secret is never
    readable by others, not even for a moment; the umask cannot widen it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
