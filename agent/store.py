"""The node's SQLite store: workloads, tuning records, hardware profiles, feature cache.

One SQLite file per node, through sqlite-utils, in WAL mode with `synchronous=FULL`:
every write is one explicit transaction, so a SIGKILL (or a power cut) at any
moment loses no committed record and never corrupts the file.

MetaSchedule sees the store through `agent.ms_database` (a PyDatabase whose writes go
through to SQLite) and `agent.ms_json` (JSONDatabase import and export); both use only
the public methods here. This module never imports TVM, so the CLI reads the store fast.

Nothing in here ever leaves the node: records, features and workload
descriptions stay local; only the federation's aggregate payloads are sent.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from agent.store_rows import DeviceCounts, LabelledCandidate, RecordSummary, StoreSummary
from schemas import BadInputError, HardwareProfile, RunFailure, TuningRecord
from schemas.records import FEATURE_DIM

# Bump with a migration in `_migrate` whenever the tables change.
SCHEMA_VERSION = 1
# Per-store program features of MetaSchedule's PerStoreFeature: [n_stores, 164].
SQLITE_MAGIC = b"SQLite format 3\x00"
_OUR_TABLES = {"workloads", "records", "profiles", "features"}
# SQLite's bound-parameter limit is 32766 on recent builds; stay far below it.
_IN_CHUNK = 500


def canonical_json(obj: Any) -> str:
    """One spelling of a JSON value, so equal traces hash equally."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)


def check_labelled(device: str, simulated: bool) -> None:
    """A simulated GPU's numbers are never stored as measurements."""
    if device.startswith("sim:") and not simulated:
        raise BadInputError(f"device {device}: its records must be labelled simulated")


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _check_is_sqlite(path: Path) -> None:
    """Refuse anything that is not a SQLite file before SQLite ever opens it."""
    if path.is_dir():
        raise BadInputError(f"{path}: is a directory, not a SQLite database")
    if path.exists() and path.stat().st_size > 0:
        with path.open("rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                raise BadInputError(f"{path}: not a SQLite database")


class Store:
    """The node's SQLite database. Usable as a context manager; thread-safe (one lock)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        _check_is_sqlite(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode (isolation_level=None): transactions are explicit, see `_transaction`.
        conn = sqlite3.connect(
            str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._lock = threading.RLock()
        self.db = sqlite_utils.Database(conn)
        try:
            self._conn.execute("PRAGMA busy_timeout=30000")
            # WAL: readers (the CLI) never block the tuner; FULL: a commit is on disk when
            # it returns, so neither a SIGKILL nor a power cut loses a committed record.
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RunFailure(f"{self.path}: cannot switch SQLite to WAL mode (got {mode})")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._check_pages()
            self._migrate()
        except sqlite3.OperationalError as exc:
            # Locked, read-only or a full disk: a failure at run time, not a bad file.
            conn.close()
            raise RunFailure(f"{self.path}: cannot open the store ({exc})") from None
        except sqlite3.DatabaseError as exc:  # corrupt or not a database after all
            conn.close()
            raise BadInputError(
                f"{self.path}: the store is damaged or not a SQLite database ({exc})"
            ) from None
        except BaseException:
            conn.close()
            raise

    def _check_pages(self) -> None:
        """SQLite's cheap quick_check on open: damaged pages are one line naming the file."""
        rows = [str(r[0]) for r in self._conn.execute("PRAGMA quick_check").fetchall()]
        if rows != ["ok"]:
            faults = [ln for row in rows for ln in row.splitlines() if not ln.startswith("*")]
            raise BadInputError(
                f"{self.path}: the store is damaged (SQLite quick_check: "
                f"{faults[0] if faults else 'failed'}); move it aside, or restore a copy"
            )

    def integrity(self) -> str:
        """SQLite's full integrity_check: 'ok' or the first fault (on demand: it is slow)."""
        rows = [str(r[0]) for r in self._conn.execute("PRAGMA integrity_check").fetchall()]
        return "ok" if rows == ["ok"] else rows[0].splitlines()[-1]

    def check_writable(self, records: int) -> None:
        """RunFailure (one line naming the file) unless about `records` new records fit.

        Before a search, not after it: a full disk otherwise fails the first write once the
        whole search has run. Needs room for the records (about 16 KiB each, trace and
        features, at least 256 KiB) and a committed write that goes through.
        """
        need = max(256 * 1024, 16 * 1024 * max(records, 0))
        free = shutil.disk_usage(self.path.parent).free
        if free < need:
            raise RunFailure(
                f"{self.path}: its disk has {free / 1e6:.2f} MB free, about "
                f"{need / 1e6:.2f} MB are needed for {records} records; free some space first"
            )
        with self._transaction() as conn:  # a read-only file or disk fails here, at once
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            conn.execute(f"PRAGMA user_version={int(version)}")

    # -- plumbing ---------------------------------------------------------------

    @property
    def _conn(self) -> sqlite3.Connection:
        return self.db.conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; taken IMMEDIATE so concurrent writers queue, never deadlock."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:  # a failed COMMIT can leave it open
                        self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.OperationalError as exc:
                # A full or read-only disk, or a lock held past busy_timeout: one line that
                # names the file. Nothing of this transaction was written; earlier ones stand.
                raise RunFailure(f"{self.path}: cannot write the store ({exc})") from None
            except sqlite3.DatabaseError as exc:  # pages damaged since it was opened
                raise RunFailure(f"{self.path}: the store is damaged ({exc})") from None

    def _query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict]:
        with self._lock:
            return list(self.db.query(sql, params))

    def _migrate(self) -> None:
        """Create the tables of a new store; refuse a foreign or a newer database."""
        if self._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return  # the common case: no write lock taken just to open the store
        with self._transaction():
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise BadInputError(
                    f"{self.path}: store schema v{version} is newer than this agent's "
                    f"v{SCHEMA_VERSION}; upgrade simoe"
                )
            tables = set(self.db.table_names())
            if version == 0 and tables - _OUR_TABLES:
                raise BadInputError(f"{self.path}: a SQLite database, but not a SiMoE store")
            if version == SCHEMA_VERSION:
                return
            self._create_v1()
            self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _create_v1(self) -> None:
        db = self.db
        db["workloads"].create(
            {
                "workload_key": str,
                "task_name": str,
                "spec": str,
                "mod_json": str,
                "created_at": str,
            },
            pk="workload_key",
            not_null={"task_name", "mod_json", "created_at"},
            if_not_exists=True,
        )
        db["records"].create(
            {
                "candidate_id": str,
                "device": str,
                "workload_key": str,
                "task_name": str,
                "trace": str,
                "run_secs": str,
                "latency_s": float,
                "failed": int,
                "target": str,
                "args_info": str,
                "profile_id": str,
                "simulated": int,
                "created_at": str,
            },
            pk=("candidate_id", "device"),
            not_null={"workload_key", "task_name", "trace", "run_secs", "failed", "target"},
            if_not_exists=True,
        )
        db["profiles"].create(
            {
                "profile_id": str,
                "device": str,
                "simulated": int,
                "json": str,
                "created_at": str,
            },
            pk="profile_id",
            not_null={"device", "json", "created_at"},
            if_not_exists=True,
        )
        db["features"].create(
            {"candidate_id": str, "n_rows": int, "n_cols": int, "blob": bytes},
            pk="candidate_id",
            not_null={"n_rows", "n_cols", "blob"},
            if_not_exists=True,
        )
        db["records"].create_index(
            ["workload_key", "device", "failed", "latency_s"], if_not_exists=True
        )
        db["records"].create_index(["device"], if_not_exists=True)
        db["records"].create_index(["task_name"], if_not_exists=True)
        db["profiles"].create_index(["device", "created_at"], if_not_exists=True)

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- workloads ----------------------------------------------------------------

    def add_workload(
        self, workload_key: str, task_name: str, mod_json: str, spec: str | None = None
    ) -> None:
        """Insert a workload, or rename it (task name, spec) if its key is already there."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO workloads (workload_key, task_name, spec, mod_json, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(workload_key) DO UPDATE SET "
                "task_name = excluded.task_name, spec = COALESCE(excluded.spec, spec)",
                (workload_key, task_name, spec, mod_json, _utc_now().isoformat()),
            )

    def replace_workload_module(self, workload_key: str, mod_json: str) -> None:
        """Keep another module under a known key (same hash, e.g. normalized differently)."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE workloads SET mod_json = ? WHERE workload_key = ?", (mod_json, workload_key)
            )

    def workload(self, workload_key: str) -> dict[str, Any] | None:
        """The row of one workload (workload_key, task_name, spec, mod_json, created_at)."""
        rows = self._query("SELECT * FROM workloads WHERE workload_key = ?", [workload_key])
        return rows[0] if rows else None

    def workloads(self) -> list[dict[str, Any]]:
        return self._query("SELECT * FROM workloads ORDER BY rowid")

    # -- records ------------------------------------------------------------------

    @staticmethod
    def candidate_id(workload_key: str, trace_json: str | Any) -> str:
        """A candidate's id: sha256 prefix of its workload and trace (whitespace-insensitive).

        `trace_json` may be the trace's JSON text or the JSON value itself.
        """
        trace = json.loads(trace_json) if isinstance(trace_json, str) else trace_json
        body = f"{workload_key}\n{canonical_json(trace)}"
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def add_records(self, records: Sequence[TuningRecord]) -> list[str]:
        """Add measured candidates in one transaction; returns their candidate ids.

        A candidate already recorded for the same device is kept as it is (idempotent
        imports), and its id is still returned.
        """
        rows = []
        ids = []
        for record in records:
            check_labelled(record.device, record.simulated)
            cid = self.candidate_id(record.workload_key, record.trace)
            ids.append(cid)
            rows.append(
                (
                    cid,
                    record.device,
                    record.workload_key,
                    record.task_name,
                    canonical_json(record.trace),
                    json.dumps(record.run_secs),
                    record.latency_s,
                    int(record.failed),
                    canonical_json(record.target),
                    canonical_json(record.args_info),
                    record.profile_id,
                    int(record.simulated),
                    record.created_at.isoformat(),
                )
            )
        with self._transaction() as conn:
            conn.executemany(
                "INSERT INTO records (candidate_id, device, workload_key, task_name, trace, "
                "run_secs, latency_s, failed, target, args_info, profile_id, simulated, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(candidate_id, device) DO NOTHING",
                rows,
            )
        return ids

    @staticmethod
    def _where(**filters: Any) -> tuple[str, list[Any]]:
        clauses, params = [], []
        for column, value in filters.items():
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    @staticmethod
    def _to_record(row: Mapping[str, Any]) -> TuningRecord:
        return TuningRecord(
            workload_key=row["workload_key"],
            task_name=row["task_name"],
            trace=json.loads(row["trace"]),
            run_secs=json.loads(row["run_secs"]),
            target=json.loads(row["target"]),
            args_info=json.loads(row["args_info"] or "[]"),
            device=row["device"],
            profile_id=row["profile_id"],
            simulated=bool(row["simulated"]),
            created_at=datetime.fromisoformat(row["created_at"]),
        )

    def records(
        self,
        *,
        workload_key: str | None = None,
        task_name: str | None = None,
        device: str | None = None,
    ) -> list[TuningRecord]:
        """All records matching the filters, in the order they were added."""
        where, params = self._where(workload_key=workload_key, task_name=task_name, device=device)
        rows = self._query(f"SELECT * FROM records{where} ORDER BY rowid", params)
        return [self._to_record(row) for row in rows]

    _BEST_SQL = (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY workload_key, device "
        "ORDER BY latency_s, rowid) AS rank_, COUNT(*) OVER (PARTITION BY workload_key, device) "
        "AS n_ FROM records WHERE failed = 0{device}) WHERE rank_ = 1 ORDER BY task_name, device"
    )

    def best_records(self, *, device: str | None = None) -> list[TuningRecord]:
        """The fastest successful record of each workload on each device."""
        rows = self._query(
            self._BEST_SQL.format(device=" AND device = ?" if device else ""),
            [device] if device else [],
        )
        return [self._to_record(row) for row in rows]

    def fastest_records(self, workload_key: str, device: str, limit: int) -> list[TuningRecord]:
        """The `limit` fastest successful records of one workload on one device."""
        rows = self._query(
            "SELECT * FROM records WHERE workload_key = ? AND device = ? AND failed = 0 "
            "ORDER BY latency_s, rowid LIMIT ?",
            [workload_key, device, limit],
        )
        return [self._to_record(row) for row in rows]

    def count_records(self, *, device: str | None = None) -> int:
        where, params = self._where(device=device)
        return self._query(f"SELECT COUNT(*) AS n FROM records{where}", params)[0]["n"]

    def devices(self) -> list[str]:
        """The devices this store holds records of (cheap: reads an index only)."""
        return [r["device"] for r in self._query("SELECT DISTINCT device FROM records ORDER BY 1")]

    def candidate_ids(self, *, device: str | None = None) -> set[str]:
        where, params = self._where(device=device)
        return {
            r["candidate_id"]
            for r in self._query(f"SELECT candidate_id FROM records{where}", params)
        }

    @staticmethod
    def _to_summary(row: Mapping[str, Any]) -> RecordSummary:
        return RecordSummary(
            candidate_id=row["candidate_id"],
            workload_key=row["workload_key"],
            task_name=row["task_name"],
            device=row["device"],
            latency_s=row["latency_s"],
            failed=bool(row["failed"]),
            simulated=bool(row["simulated"]),
            profile_id=row["profile_id"],
            created_at=datetime.fromisoformat(row["created_at"]),
            n_records=row.get("n_", 1),
        )

    def summaries(
        self,
        *,
        workload: str | None = None,
        device: str | None = None,
        limit: int | None = None,
    ) -> list[RecordSummary]:
        """The newest records first, without traces; `workload` is a key or a task name."""
        clauses, params = [], []
        if workload is not None:
            clauses.append("(workload_key = ? OR task_name = ?)")
            params += [workload, workload]
        if device is not None:
            clauses.append("device = ?")
            params.append(device)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        sql = (
            "SELECT candidate_id, workload_key, task_name, device, latency_s, failed, simulated, "
            f"profile_id, created_at FROM records{where} ORDER BY rowid DESC"
        )
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [self._to_summary(row) for row in self._query(sql, params)]

    def best_summaries(self, *, device: str | None = None) -> list[RecordSummary]:
        """`best_records` without traces, with the number of records behind each."""
        rows = self._query(
            self._BEST_SQL.format(device=" AND device = ?" if device else ""),
            [device] if device else [],
        )
        return [self._to_summary(row) for row in rows]

    # -- profiles -----------------------------------------------------------------

    def save_profile(self, profile: HardwareProfile) -> None:
        """Keep a profile; the same content taken again only moves its time forward."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO profiles (profile_id, device, simulated, json, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(profile_id) DO UPDATE SET "
                "json = excluded.json, created_at = excluded.created_at",
                (
                    profile.profile_id,
                    profile.device,
                    int(profile.simulated),
                    profile.model_dump_json(),
                    profile.created_at.isoformat(),
                ),
            )

    def latest_profile(self, device: str) -> HardwareProfile | None:
        rows = self._query(
            "SELECT json FROM profiles WHERE device = ? ORDER BY created_at DESC, rowid DESC "
            "LIMIT 1",
            [device],
        )
        return HardwareProfile.model_validate_json(rows[0]["json"]) if rows else None

    # -- features -----------------------------------------------------------------

    def put_features(self, items: Mapping[str, np.ndarray]) -> None:
        """Cache program features by candidate id (one transaction); replaces older ones."""
        rows = []
        for cid, features in items.items():
            array = np.asarray(features)
            if array.ndim != 2 or array.shape[1] != FEATURE_DIM:
                raise BadInputError(
                    f"features of {cid}: expected shape [n_stores, {FEATURE_DIM}], "
                    f"got {list(array.shape)}"
                )
            array = np.ascontiguousarray(array, dtype=np.float32)
            if not np.isfinite(array).all():
                raise BadInputError(f"features of {cid}: contain NaN or Inf")
            rows.append((cid, array.shape[0], array.shape[1], array.tobytes()))
        with self._transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO features (candidate_id, n_rows, n_cols, blob) "
                "VALUES (?, ?, ?, ?)",
                rows,
            )

    @staticmethod
    def _features_of(row: Mapping[str, Any]) -> np.ndarray:
        return np.frombuffer(row["blob"], dtype=np.float32).reshape(row["n_rows"], row["n_cols"])

    def get_features(self, candidate_ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The cached features of those candidates that have them."""
        ids = list(dict.fromkeys(candidate_ids))
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            for row in self._query(
                f"SELECT * FROM features WHERE candidate_id IN ({marks})", chunk
            ):
                found[row["candidate_id"]] = self._features_of(row)
        return found

    def labelled_candidates(self, *, device: str | None = None) -> list[LabelledCandidate]:
        """Every record with its label and cached features: what training reads."""
        where, params = self._where(**{"r.device": device})
        rows = self._query(
            "SELECT r.workload_key, r.task_name, r.candidate_id, r.device, r.latency_s, "
            "f.n_rows, f.n_cols, f.blob FROM records r "
            f"LEFT JOIN features f ON f.candidate_id = r.candidate_id{where} "
            "ORDER BY r.workload_key, r.device, r.rowid",
            params,
        )
        return [
            LabelledCandidate(
                workload_key=row["workload_key"],
                task_name=row["task_name"],
                candidate_id=row["candidate_id"],
                device=row["device"],
                latency_s=row["latency_s"],
                features=None if row["blob"] is None else self._features_of(row),
            )
            for row in rows
        ]

    # -- status -------------------------------------------------------------------

    def summary(self) -> StoreSummary:
        """Counts per device and the cached profiles, for `simoe-agent status`."""
        devices = [
            DeviceCounts(
                device=row["device"],
                workloads=row["workloads"],
                records=row["records"],
                failed=row["failed"] or 0,
                simulated=bool(row["simulated"]),
            )
            for row in self._query(
                "SELECT device, COUNT(DISTINCT workload_key) AS workloads, COUNT(*) AS records, "
                "SUM(failed) AS failed, MAX(simulated) AS simulated FROM records "
                "GROUP BY device ORDER BY device"
            )
        ]
        profiles = self._query(
            "SELECT profile_id, device, simulated, created_at FROM profiles ORDER BY created_at"
        )
        for profile in profiles:
            profile["simulated"] = bool(profile["simulated"])
        return StoreSummary(
            schema_version=SCHEMA_VERSION,
            workloads=self._query("SELECT COUNT(*) AS n FROM workloads")[0]["n"],
            records=self.count_records(),
            features=self._query("SELECT COUNT(*) AS n FROM features")[0]["n"],
            devices=devices,
            profiles=profiles,
        )

    def integrity_check(self) -> str:
        """SQLite's own verdict on the file: "ok" when sound."""
        return str(self._query("PRAGMA integrity_check")[0]["integrity_check"])

    def journal_mode(self) -> str:
        """SQLite's journal mode of the file: "wal" for every store this class opened."""
        return str(self._query("PRAGMA journal_mode")[0]["journal_mode"]).lower()
