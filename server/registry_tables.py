"""The registry's tables (`server.registry.Registry` creates them): one place to read what
the server keeps. Bump `server.registry.SCHEMA_VERSION` with a migration when they change
(a column added here is added to an older registry's table when it is opened).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Table:
    columns: dict[str, type]
    pk: str | tuple[str, ...]
    unique: list[list[str]] = field(default_factory=list)  # unique indexes


TABLES: dict[str, Table] = {
    # a node is its key fingerprint; flower_node_id is TEXT (an unsigned 64-bit number)
    "nodes": Table(
        {
            "node_key": str,
            "name": str,
            "flower_node_id": str,
            "device": str,
            "device_kind": str,
            "simulated": int,
            "profile_id": str,
            "first_seen": str,
            "last_seen": str,
            "rounds": int,
            "key_verified": int,
        },
        pk="node_key",
        unique=[["name"]],
    ),
    "profiles": Table(
        {"profile_id": str, "node_key": str, "profile_json": str, "created_at": str},
        pk="profile_id",
    ),
    "experts": Table(
        {
            "name": str,
            "node_key": str,
            "version": int,
            "round": int,
            "num_examples": int,
            "weights": bytes,
            "updated_at": str,
        },
        pk="name",
    ),
    "rounds": Table(
        {
            "round": int,
            "run_id": str,
            "started_at": str,
            "finished_at": str,
            "sampled": int,
            "replied": int,
            "rejected": int,
            "failed": int,
            "global_version": int,
            "status": str,
        },
        pk="round",
    ),
    "metrics": Table(
        {"round": int, "node_key": str, "key": str, "value": float},
        pk=("round", "node_key", "key"),
    ),
    "traffic": Table(
        {"round": int, "node_key": str, "bytes_down": int, "bytes_up": int},
        pk=("round", "node_key"),
    ),
    "rejections": Table(
        {"id": int, "round": int, "node_key": str, "reason": str, "at": str}, pk="id"
    ),
    "refusals": Table({"id": int, "flower_node_id": str, "reason": str, "at": str}, pk="id"),
    # each node's latest verdict on each expert it was sent (from its own records), with
    # its rank agreement (2 decimals; NULL where the node could not tell, or an older node)
    "expert_checks": Table(
        {"expert": str, "node_key": str, "round": int, "refuted": int, "agreement": float},
        pk=("expert", "node_key"),
    ),
    # what the server's fit of the hardware similarity on those agreements did, per round
    "similarity_fits": Table(
        {
            "round": int,
            "pairs": int,
            "nodes": int,
            "steps": int,
            "loss_before": float,
            "loss_after": float,
        },
        pk="round",
    ),
    # each node's latest own-records teacher (opt-in teachers): its expert and its scores on
    # the public probe set named by sha256, so the newcomers' copy outlives a server restart
    "teachers": Table(
        {
            "node_key": str,
            "name": str,
            "probes_sha256": str,
            "round": int,
            "expert": bytes,
            "scores": bytes,
            "updated_at": str,
        },
        pk="node_key",
    ),
    "model_versions": Table(
        {"version": int, "round": int, "weights": bytes, "created_at": str}, pk="version"
    ),
    # opt-in schedule sharing (schemas.sharing): who shares and what it asked about,
    # and each sharing node's top-k traces per workload (replaced at each share)
    "schedule_sharing": Table(
        {"node_key": str, "round": int, "top_k": int, "wanted": str, "updated_at": str},
        pk="node_key",
    ),
    "shared_schedules": Table(
        {"node_key": str, "workload_key": str, "rank": int, "trace": str, "round": int},
        pk=("node_key", "workload_key", "rank"),
    ),
}
