"""Kernel Tuner measurements in the node's store: one row per configuration and GPU.

They live in the node's SQLite store beside the TVM records, in two tables of their own
(created on first use, so stores made before them open unchanged): `kernel_spaces` (a
search space's description, by its id) and `kernel_records` (a configuration's time on a
GPU, or why it failed, and what measuring it cost). Like every record they never leave
the node. Imported cache files are labelled measured (simulated = 0): Kernel Tuner timed
them on the GPU the file names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from agent.kernels.cache_file import KernelCache
from agent.store import Store
from schemas.kernels import KernelSpace

TABLES = (
    "CREATE TABLE IF NOT EXISTS kernel_spaces (space_id TEXT PRIMARY KEY, kernel_name TEXT "
    "NOT NULL, space_json TEXT NOT NULL, created_at TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS kernel_records (space_id TEXT NOT NULL, config_key TEXT NOT "
    "NULL, gpu TEXT NOT NULL, time_ms REAL, failure TEXT NOT NULL, cost_s REAL NOT NULL, "
    "simulated INTEGER NOT NULL, source TEXT NOT NULL, created_at TEXT NOT NULL, "
    "PRIMARY KEY (space_id, config_key, gpu))",
)


@dataclass(frozen=True)
class KernelImport:
    space_id: str
    kernel_name: str
    gpu: str
    added: int
    configurations: int
    failed: int


def _ensure_tables(store: Store) -> None:
    with store._transaction() as conn:
        for sql in TABLES:
            conn.execute(sql)


def import_cache(store: Store, cache: KernelCache, gpu: str) -> KernelImport:
    """Store every configuration of `cache` as measured on `gpu`; one transaction."""
    _ensure_tables(store)
    space = cache.space
    now = datetime.now(timezone.utc).isoformat()
    with store._transaction() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO kernel_spaces VALUES (?, ?, ?, ?)",
            (space.space_id, space.kernel_name, space.model_dump_json(), now),
        )
        before = conn.execute("SELECT COUNT(*) FROM kernel_records").fetchone()[0]
        conn.executemany(
            "INSERT OR REPLACE INTO kernel_records VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)",
            [
                (
                    space.space_id,
                    key,
                    gpu,
                    None if not np.isfinite(t) else float(t),
                    failure,
                    float(cost),
                    str(cache.path.name),
                    now,
                )
                for key, t, failure, cost in zip(
                    cache.keys, cache.time_ms, cache.failure, cache.cost_s, strict=True
                )
            ],
        )
        after = conn.execute("SELECT COUNT(*) FROM kernel_records").fetchone()[0]
    return KernelImport(
        space_id=space.space_id,
        kernel_name=space.kernel_name,
        gpu=gpu,
        added=after - before,
        configurations=len(cache),
        failed=int((~cache.valid).sum()),
    )


def kernel_spaces(store: Store) -> list[KernelSpace]:
    _ensure_tables(store)
    return [
        KernelSpace.model_validate_json(row["space_json"])
        for row in store._query("SELECT space_json FROM kernel_spaces ORDER BY created_at")
    ]


def kernel_measurements(
    store: Store, space_id: str, gpu: str
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Keys, times (NaN: failed) and costs of one GPU's configurations of one space."""
    _ensure_tables(store)
    rows = store._query(
        "SELECT config_key, time_ms, cost_s FROM kernel_records WHERE space_id = ? AND gpu = ? "
        "ORDER BY rowid",
        [space_id, gpu],
    )
    keys = [r["config_key"] for r in rows]
    times = np.array([np.nan if r["time_ms"] is None else r["time_ms"] for r in rows], float)
    return keys, times, np.array([r["cost_s"] for r in rows], float)


def kernel_summary(store: Store) -> list[dict[str, object]]:
    """Per space and GPU: configurations, failed ones, the best time."""
    _ensure_tables(store)
    return store._query(
        "SELECT s.kernel_name AS kernel, r.space_id AS space_id, r.gpu AS gpu, "
        "COUNT(*) AS configurations, SUM(r.time_ms IS NULL) AS failed, "
        "MIN(r.time_ms) AS best_ms, MAX(r.simulated) AS simulated "
        "FROM kernel_records r JOIN kernel_spaces s USING (space_id) "
        "GROUP BY r.space_id, r.gpu ORDER BY s.kernel_name, r.gpu"
    )
