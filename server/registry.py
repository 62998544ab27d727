"""The server's expert registry: nodes, profiles, experts, rounds, metrics, model versions.

One SQLite file (sqlite-utils, WAL) that survives restarts: round numbers and the
global model continue where they stopped. A node's identity is its key fingerprint
(the ECDSA key registered with the SuperLink), never Flower's node_id; the last
node_id seen is kept as TEXT because it is an unsigned 64-bit number.
"""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import sqlite_utils

from schemas import BadInputError, HardwareProfile, RunFailure
from schemas.messages import ExpertInfo, NodeHello, RoundInfo, SimilarityFitInfo
from schemas.private_files import create_private
from schemas.sharing import ScheduleShare
from server.registry_tables import TABLES

# 2: expert_checks.agreement and similarity_fits (a version-1 file gains them on open)
SCHEMA_VERSION = 2


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def arrays_to_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """Arrays as an .npz blob: no pickle, so a blob can never run code when read."""
    buffer = io.BytesIO()
    np.savez(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    return buffer.getvalue()


def arrays_from_bytes(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


class NameTakenError(BadInputError):
    """A node tried to use a name another key already holds."""


class Registry:
    """The federation's persistent state. Open it per process; WAL lets readers share it."""

    def __init__(self, path: Path | str, *, read_only: bool = False) -> None:
        """Open (or, unless `read_only`, create) the registry at `path`, checked first.

        A file that is not a SiMoE registry (another program's SQLite file) or whose pages
        fail SQLite's `quick_check` is refused in one line naming it; `read_only` (the
        monitoring commands) never writes anything, not even the schema.
        """
        self.path = Path(path)
        try:
            if read_only:
                if not self.path.is_file():
                    raise BadInputError(f"{self.path}: no registry")
                uri = f"file:{self.path}?mode=ro"
                self.db = sqlite_utils.Database(sqlite3.connect(uri, uri=True, timeout=30))
            else:
                create_private(self.path)  # node names, key fingerprints, experts: owner only
                # a second process may hold the lock a moment (a monitoring command, a
                # restart's first open): wait like the readers do instead of dying
                self.db = sqlite_utils.Database(sqlite3.connect(self.path, timeout=30))
            self._check(read_only)
            if not read_only:
                self.db.enable_wal()
                self._create()
        except (OSError, sqlite3.OperationalError) as exc:  # read-only, full disk, locked
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise RunFailure(f"{self.path}: cannot open the registry ({why})") from None
        except sqlite3.DatabaseError as exc:
            raise BadInputError(f"{self.path}: not a SQLite database ({exc})") from None

    def _check(self, read_only: bool) -> None:
        """A SiMoE registry (or, to be created, an empty file) whose pages pass quick_check."""
        tables = set(self.db.table_names())
        if (tables and "meta" not in tables) or (read_only and not tables):
            some = ", ".join(sorted(tables)[:4]) or "none"
            raise BadInputError(
                f"{self.path}: not a SiMoE registry (its tables: {some}); give the state "
                "dir of a simoe-server"
            )
        try:
            result = self.integrity("quick_check")
        except sqlite3.DatabaseError as exc:  # pages too damaged to even check
            result = str(exc)
        if result != "ok":
            raise RunFailure(
                f"{self.path}: the registry is damaged (SQLite quick_check: {result}); "
                "restore a backup with `simoe-server restore FILE`"
            )

    def integrity(self, check: str = "integrity_check") -> str:
        """SQLite's `integrity_check` (thorough) or `quick_check` (cheap): 'ok' or the faults."""
        assert check in {"integrity_check", "quick_check"}
        rows = [str(r[0]) for r in self.db.execute(f"pragma {check}").fetchall()]
        if rows == ["ok"]:
            return "ok"
        faults = [line for row in rows for line in row.splitlines() if not line.startswith("*")]
        more = f" (and {len(faults) - 1} more faults)" if len(faults) > 1 else ""
        return (faults[0] if faults else "failed") + more

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One transaction; a full or read-only disk is one line naming the registry.

        The transaction is rolled back, so the registry holds what it held before.
        """
        try:
            with self.db.conn:
                yield
        except sqlite3.OperationalError as exc:
            raise RunFailure(f"{self.path}: cannot write the registry ({exc})") from None

    def _create(self) -> None:
        db = self.db
        db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
        rows = list(db["meta"].rows_where("key = ?", ["schema_version"]))
        found = int(rows[0]["value"]) if rows else SCHEMA_VERSION
        if found > SCHEMA_VERSION:  # a newer simoe-server wrote it: do not touch its data
            raise BadInputError(
                f"{self.path}: registry schema version {found} is newer than this "
                f"simoe-server's ({SCHEMA_VERSION}); upgrade simoe-server"
            )
        db["meta"].upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")
        for name, table in TABLES.items():
            db[name].create(table.columns, pk=table.pk, if_not_exists=True)
            have = set(db[name].columns_dict)
            for column, kind in table.columns.items():  # an older file: add what it lacks
                if column not in have:
                    db[name].add_column(column, kind)
            for unique_index in table.unique:
                db[name].create_index(unique_index, unique=True, if_not_exists=True)

    # -- nodes and profiles -------------------------------------------------------------

    def upsert_node(
        self, hello: NodeHello, flower_node_id: int, *, key_verified: bool = False
    ) -> str:
        """Record who a node is; a name held by another key raises NameTakenError.

        `key_verified`: the SuperLink vouched that this node_id holds the key whose
        fingerprint the node claims (SuperNode authentication).
        """
        key = hello.key_fingerprint
        owner = list(self.db["nodes"].rows_where("name = ?", [hello.name], limit=1))
        if owner and owner[0]["node_key"] != key:
            raise NameTakenError(f"node name {hello.name!r} is already taken by another key")
        stamp = now_iso()
        profile = hello.profile
        with self._writing():
            existing = list(self.db["nodes"].rows_where("node_key = ?", [key], limit=1))
            row = {
                "node_key": key,
                "name": hello.name,
                "flower_node_id": str(flower_node_id),
                "device": profile.device,
                "device_kind": profile.device_kind,
                "simulated": int(profile.simulated),
                "profile_id": profile.profile_id,
                "last_seen": stamp,
                "key_verified": int(key_verified),
            }
            if existing:
                self.db["nodes"].update(key, row)
            else:
                self.db["nodes"].insert({**row, "first_seen": stamp, "rounds": 0})
            self.db["profiles"].upsert(
                {
                    "profile_id": profile.profile_id,
                    "node_key": key,
                    "profile_json": profile.model_dump_json(),
                    "created_at": stamp,
                },
                pk="profile_id",
            )
        return key

    def node_key_for(self, flower_node_id: int) -> str | None:
        rows = list(
            self.db["nodes"].rows_where(
                "flower_node_id = ?", [str(flower_node_id)], order_by="last_seen desc", limit=1
            )
        )
        return rows[0]["node_key"] if rows else None

    def node(self, node_key: str) -> dict[str, Any] | None:
        rows = list(self.db["nodes"].rows_where("node_key = ?", [node_key], limit=1))
        return rows[0] if rows else None

    def node_by_name(self, name: str) -> dict[str, Any] | None:
        rows = list(self.db["nodes"].rows_where("name = ?", [name], limit=1))
        return rows[0] if rows else None

    def nodes(self) -> list[dict[str, Any]]:
        return list(self.db["nodes"].rows_where(order_by="first_seen, name"))

    def touch_node(self, node_key: str) -> None:
        """The node replied in a round (trained, or served without data to train on)."""
        with self._writing():
            self.db.execute(
                "update nodes set last_seen = ?, rounds = rounds + 1 where node_key = ?",
                [now_iso(), node_key],
            )

    def profile(self, node_key: str) -> HardwareProfile | None:
        node = self.node(node_key)
        if node is None:
            return None
        rows = list(self.db["profiles"].rows_where("profile_id = ?", [node["profile_id"]]))
        return HardwareProfile.model_validate_json(rows[0]["profile_json"]) if rows else None

    def profiles(self) -> dict[str, HardwareProfile]:
        """The current profile of each node, by node name."""
        out: dict[str, HardwareProfile] = {}
        for node in self.nodes():
            profile = self.profile(node["node_key"])
            if profile is not None:
                out[node["name"]] = profile
        return out

    # -- experts ------------------------------------------------------------------------

    def put_expert(
        self,
        name: str,
        node_key: str,
        arrays: Mapping[str, np.ndarray],
        *,
        round_: int,
        num_examples: int,
    ) -> int:
        """Store a node's expert; returns its new version (one per accepted update)."""
        old = list(self.db["experts"].rows_where("name = ?", [name], limit=1))
        if old and old[0]["node_key"] != node_key:
            raise NameTakenError(f"expert {name!r} belongs to another node")
        version = (old[0]["version"] + 1) if old else 1
        with self._writing():
            self.db["experts"].upsert(
                {
                    "name": name,
                    "node_key": node_key,
                    "version": version,
                    "round": round_,
                    "num_examples": num_examples,
                    "weights": arrays_to_bytes(arrays),
                    "updated_at": now_iso(),
                },
                pk="name",
            )
        return version

    def put_teacher(
        self,
        node_key: str,
        name: str,
        probes_sha256: str,
        expert: Mapping[str, np.ndarray],
        scores: Sequence[np.ndarray],
        *,
        round_: int,
    ) -> None:
        """Keep a node's latest teacher: the expert its scores are read through, and its
        scores on the probe set `probes_sha256` (one array per probe task)."""
        with self._writing():
            self.db["teachers"].upsert(
                {
                    "node_key": node_key,
                    "name": name,
                    "probes_sha256": probes_sha256,
                    "round": round_,
                    "expert": arrays_to_bytes(expert),
                    "scores": arrays_to_bytes({str(i): s for i, s in enumerate(scores)}),
                    "updated_at": now_iso(),
                },
                pk="node_key",
            )

    def teachers(
        self, probes_sha256: str
    ) -> dict[str, tuple[dict[str, np.ndarray], list[np.ndarray]]]:
        """Each node's latest teacher on that probe set, by node name: (expert, scores)."""
        out = {}
        for row in self.db["teachers"].rows_where("probes_sha256 = ?", [probes_sha256]):
            scores = arrays_from_bytes(row["scores"])
            out[row["name"]] = (
                arrays_from_bytes(row["expert"]),
                [scores[str(i)] for i in range(len(scores))],
            )
        return out

    def record_checks(
        self,
        round_: int,
        node_key: str,
        checked: Iterable[str],
        refuted: Iterable[str],
        agreement: Mapping[str, float] | None = None,
    ) -> None:
        """A node's verdicts on experts it was sent, with its rank agreement with each where
        it gave one: the latest per (expert, node) counts."""
        refuted, agreement = set(refuted), agreement or {}
        rows = [
            {
                "expert": e,
                "node_key": node_key,
                "round": round_,
                "refuted": int(e in refuted),
                "agreement": agreement.get(e),
            }
            for e in sorted(set(checked))
        ]
        if rows:
            with self._writing():
                self.db["expert_checks"].upsert_all(rows, pk=("expert", "node_key"))

    def distrusted_experts(self, min_refuted: int = 2) -> set[str]:
        """Experts that at least `min_refuted` nodes, and most nodes that tested them, refuted."""
        rows = self.db.execute(
            "select expert, sum(refuted), count(*) from expert_checks group by expert"
        ).fetchall()
        return {e for e, bad, n in rows if bad >= min_refuted and 2 * bad > n}

    def expert_agreements(self) -> list[tuple[str, str, float]]:
        """(node_key, the checked expert's owner's node_key, agreement): each node's latest
        agreement with each expert it checked, where it gave one and the owner is known."""
        rows = self.db.execute(
            "select c.node_key, e.node_key, c.agreement from expert_checks c "
            "join experts e on e.name = c.expert "
            "where c.agreement is not null and c.node_key != e.node_key "
            "order by c.node_key, e.node_key"
        ).fetchall()
        return [(str(a), str(b), float(v)) for a, b, v in rows]

    def add_similarity_fit(self, fit: SimilarityFitInfo) -> None:
        """What the round's fit of the hardware similarity did."""
        with self._writing():
            self.db["similarity_fits"].upsert(fit.model_dump(), pk="round")

    def similarity_fits(self) -> dict[int, SimilarityFitInfo]:
        """Each round's fit of the hardware similarity, by round (rounds without one absent)."""
        rows = self.db["similarity_fits"].rows_where(order_by="round")
        return {int(r["round"]): SimilarityFitInfo(**r) for r in rows}

    def expert(self, name: str) -> dict[str, np.ndarray] | None:
        rows = list(self.db["experts"].rows_where("name = ?", [name], limit=1))
        return arrays_from_bytes(rows[0]["weights"]) if rows else None

    def expert_names(self) -> list[str]:
        return [r["name"] for r in self.db["experts"].rows_where(order_by="name")]

    def experts(self) -> list[ExpertInfo]:
        out = []
        for row in self.db.query(
            "select e.name, e.node_key, e.version, e.round, e.num_examples, "
            "length(e.weights) as bytes, n.device, n.simulated "
            "from experts e left join nodes n on n.node_key = e.node_key order by e.name"
        ):
            out.append(
                ExpertInfo(
                    name=row["name"],
                    node_key=row["node_key"],
                    version=row["version"],
                    round=row["round"],
                    num_examples=row["num_examples"],
                    device=row["device"] or "?",
                    simulated=bool(row["simulated"]),
                    bytes=row["bytes"],
                )
            )
        return out

    # -- shared schedules (opt-in) ------------------------------------------------------

    def put_share(self, node_key: str, share: ScheduleShare, *, round_: int) -> None:
        """A node's schedule share: replaces everything it shared before."""
        rows = [
            {
                "node_key": node_key,
                "workload_key": s.workload_key,
                "rank": s.rank,
                "trace": s.trace,
                "round": round_,
            }
            for s in share.schedules
        ]
        with self._writing():
            self.db.execute("delete from shared_schedules where node_key = ?", [node_key])
            if rows:
                self.db["shared_schedules"].insert_all(rows)
            self.db["schedule_sharing"].upsert(
                {
                    "node_key": node_key,
                    "round": round_,
                    "top_k": share.top_k,
                    "wanted": json.dumps(share.wanted),
                    "updated_at": now_iso(),
                },
                pk="node_key",
            )

    def drop_share(self, node_key: str) -> None:
        """A node no longer shares (it turned sharing off): its schedules go."""
        with self._writing():
            self.db.execute("delete from shared_schedules where node_key = ?", [node_key])
            self.db.execute("delete from schedule_sharing where node_key = ?", [node_key])

    def sharing(self, node_key: str) -> list[str] | None:
        """The workload keys an opted-in node asked about; None if it does not share."""
        rows = list(self.db["schedule_sharing"].rows_where("node_key = ?", [node_key], limit=1))
        return [str(k) for k in json.loads(rows[0]["wanted"])] if rows else None

    def schedule_sharers(self) -> list[str]:
        """Node keys with shared schedules in the registry."""
        rows = self.db.execute("select distinct node_key from shared_schedules order by 1")
        return [str(r[0]) for r in rows.fetchall()]

    def shared_schedules(self, node_key: str) -> dict[str, list[str]]:
        """One node's shared traces: workload key -> trace JSON texts, rank order."""
        out: dict[str, list[str]] = {}
        for row in self.db["shared_schedules"].rows_where(
            "node_key = ?", [node_key], order_by="workload_key, rank"
        ):
            out.setdefault(str(row["workload_key"]), []).append(str(row["trace"]))
        return out

    def drop_node(self, node_key: str) -> None:
        """Forget a node: its row, profiles, expert, teacher, verdicts and shared schedules."""
        with self._writing():
            tables = ("shared_schedules", "schedule_sharing", "profiles", "experts", "teachers")
            for table in tables:
                self.db.execute(f"delete from {table} where node_key = ?", [node_key])  # noqa: S608
            self.db.execute("delete from expert_checks where node_key = ?", [node_key])
            self.db.execute("delete from nodes where node_key = ?", [node_key])

    # -- rounds, metrics, traffic -------------------------------------------------------

    def last_round(self) -> int:
        row = self.db.execute("select max(round) from rounds").fetchone()
        return int(row[0] or 0)

    def start_round(self, run_id: int, sampled: int) -> int:
        """Open the next round (numbers continue across runs and restarts)."""
        number = self.last_round() + 1
        with self._writing():
            self.db["rounds"].insert(
                {
                    "round": number,
                    "run_id": str(run_id),
                    "started_at": now_iso(),
                    "finished_at": None,
                    "sampled": sampled,
                    "replied": 0,
                    "rejected": 0,
                    "failed": 0,
                    "global_version": self.global_version(),
                    "status": "running",
                }
            )
        return number

    def close_interrupted_rounds(self) -> list[int]:
        """Rounds a killed server left open: marked `interrupted` when a run starts."""
        numbers = [
            r[0] for r in self.db.execute("select round from rounds where status = ?", ["running"])
        ]
        if numbers:
            with self._writing():
                self.db.execute(
                    "update rounds set status = 'interrupted', finished_at = ? "
                    "where status = 'running'",
                    [now_iso()],
                )
        return numbers

    def finish_round(
        self,
        number: int,
        *,
        replied: int,
        rejected: int,
        failed: int,
        global_version: int,
        updated: bool,
    ) -> None:
        status = "done" if updated else "no-update"
        with self._writing():
            self.db["rounds"].update(
                number,
                {
                    "finished_at": now_iso(),
                    "replied": replied,
                    "rejected": rejected,
                    "failed": failed,
                    "global_version": global_version,
                    "status": status,
                },
            )

    def rounds(self) -> list[RoundInfo]:
        return [RoundInfo(**row) for row in self.db["rounds"].rows_where(order_by="round")]

    def add_metrics(self, number: int, node_key: str, metrics: Mapping[str, float]) -> None:
        with self._writing():
            self.db["metrics"].upsert_all(
                [
                    {"round": number, "node_key": node_key, "key": k, "value": float(v)}
                    for k, v in metrics.items()
                ],
                pk=("round", "node_key", "key"),
            )

    def metrics(self, number: int | None = None) -> list[dict[str, Any]]:
        if number is None:
            return list(self.db["metrics"].rows_where(order_by="round, node_key, key"))
        return list(self.db["metrics"].rows_where("round = ?", [number], order_by="node_key"))

    def add_traffic(self, number: int, node_key: str, *, bytes_down: int, bytes_up: int) -> None:
        with self._writing():
            self.db["traffic"].upsert(
                {
                    "round": number,
                    "node_key": node_key,
                    "bytes_down": bytes_down,
                    "bytes_up": bytes_up,
                },
                pk=("round", "node_key"),
            )

    def traffic(self, number: int | None = None) -> list[dict[str, Any]]:
        where, args = ("round = ?", [number]) if number is not None else (None, [])
        return list(self.db["traffic"].rows_where(where, args, order_by="round, node_key"))

    def add_rejection(self, number: int, node_key: str, reason: str) -> None:
        with self._writing():
            self.db["rejections"].insert(
                {"round": number, "node_key": node_key, "reason": reason, "at": now_iso()}
            )

    def rejections(self) -> list[dict[str, Any]]:
        """Updates rejected in a round (each round's `rejected` counts these)."""
        return list(self.db["rejections"].rows_where(order_by="id"))

    def add_refusal(self, flower_node_id: int, reason: str) -> None:
        """A node refused at its hello (a name already taken, a bad identity): no update."""
        with self._writing():
            self.db["refusals"].insert(
                {"flower_node_id": str(flower_node_id), "reason": reason, "at": now_iso()}
            )

    def refusals(self) -> list[dict[str, Any]]:
        return list(self.db["refusals"].rows_where(order_by="id"))

    # -- global model versions ----------------------------------------------------------

    def global_version(self) -> int:
        row = self.db.execute("select max(version) from model_versions").fetchone()
        return int(row[0] or 0)

    def save_global(self, arrays: Mapping[str, np.ndarray], *, round_: int) -> int:
        version = self.global_version() + 1
        with self._writing():
            self.db["model_versions"].insert(
                {
                    "version": version,
                    "round": round_,
                    "weights": arrays_to_bytes(arrays),
                    "created_at": now_iso(),
                }
            )
        return version

    def global_sent_in(self, round_: int) -> tuple[int, dict[str, np.ndarray]] | None:
        """The global model round `round_` was sent: the newest saved before that round."""
        rows = list(
            self.db["model_versions"].rows_where(
                "round < ?", [round_], order_by="version desc", limit=1
            )
        )
        if not rows:
            return None
        return rows[0]["version"], arrays_from_bytes(rows[0]["weights"])

    def global_model(self, version: int) -> dict[str, np.ndarray] | None:
        """The global model saved as `version`, None if there is none."""
        rows = list(self.db["model_versions"].rows_where("version = ?", [version], limit=1))
        return arrays_from_bytes(rows[0]["weights"]) if rows else None

    def latest_global(self) -> tuple[int, dict[str, np.ndarray]] | None:
        rows = list(self.db["model_versions"].rows_where(order_by="version desc", limit=1))
        if not rows:
            return None
        return rows[0]["version"], arrays_from_bytes(rows[0]["weights"])

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
