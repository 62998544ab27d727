"""The privacy audit of what a node sent: only the allowed payloads, no raw data.

Used over the in-process federation (tests/test_privacy.py) and over the replies a
real loopback deployment's ClientApps recorded (tests/test_federation_processes.py).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from schemas.messages import (
    ALLOWED_METRICS,
    ALLOWED_REPLY_RECORDS,
    REC_NODE,
    REC_PROBE_SCORES,
    NodeHello,
)
from schemas.sharing import REC_SCHEDULES, SHARE_FIELD, ScheduleShare
from simoe_model.model import Expert, SiMoE, shared_arrays
from simoe_model.probe_file import suite_digest

SHARED_SHAPES = {k: v.shape for k, v in shared_arrays(SiMoE()).items()}
EXPERT_SHAPES = {k: tuple(v.shape) for k, v in Expert(SiMoE().config).state_dict().items()}
RECORD_TYPES = {"array": ArrayRecord, "metric": MetricRecord, "config": ConfigRecord}


class PrivacyViolation(AssertionError):
    pass


def audit_reply(
    message: Message,
    secrets: set[str],
    secret_rows: list[bytes],
    *,
    sharing: bool = False,
    probe_counts: Sequence[int] | None = None,
    probe_digests: Collection[str] = (),
) -> None:
    """Raise PrivacyViolation if the message carries anything but the allowed payloads."""
    if not message.has_error():
        audit_content(
            message.content, secrets, secret_rows, sharing=sharing, probe_counts=probe_counts,
            probe_digests=probe_digests,
        )  # fmt: skip


# What a NodeHello may say, field by field: who the node is, its hardware, what it holds,
# its verdicts on the experts it was sent (names, one 2-decimal agreement each) and the
# digests of the public probe sets it holds (the shipped one, the one the server sent).
HELLO_FIELDS = {
    "probes_held",
    "name",
    "key_fingerprint",
    "profile",
    "has_model",
    "expert_version",
    "checked_experts",
    "refuted_experts",
    "expert_agreement",
    "leaving",
}


def audit_hello(text: str, probe_digests: Collection[str] = ()) -> None:
    """PrivacyViolation unless a hello holds only `HELLO_FIELDS`, its agreements are one
    number (2 decimals) per checked expert and what it says of probe sets is digests of
    public ones: SiMoE's shipped set's, or those of `probe_digests` (the server sent)."""
    hello = json.loads(text)
    extra = set(hello) - HELLO_FIELDS
    if extra:
        raise PrivacyViolation(f"hello has {sorted(extra)}")
    unknown = set(hello.get("probes_held", [])) - {suite_digest(), *probe_digests}
    if unknown:
        raise PrivacyViolation(f"hello lists probe sets no server sent: {sorted(unknown)[:2]}")
    agreement = hello.get("expert_agreement", {})
    checked = set(hello.get("checked_experts", []))
    for name, value in agreement.items():
        if name not in checked or not isinstance(value, float | int) or round(value, 2) != value:
            raise PrivacyViolation(f"agreement with {name!r} is not one 2-decimal number")
    NodeHello.model_validate_json(text)  # extra fields are refused


# What one shared schedule may say (schemas.sharing.SharedTrace), and nothing else.
SHARED_ITEM_FIELDS = {"workload_key", "rank", "trace"}


def audit_share(record: ConfigRecord) -> list[dict]:
    """The items of a schedule share, each exactly the promised fields; PrivacyViolation
    for anything else."""
    if set(record) != {SHARE_FIELD}:
        raise PrivacyViolation(f"schedule record has {sorted(record)}")
    share = json.loads(str(record[SHARE_FIELD]))
    if set(share) != {"top_k", "schedules", "wanted"}:
        raise PrivacyViolation(f"schedule share has {sorted(share)}")
    ScheduleShare.model_validate(share)  # extra fields are refused
    for item in share["schedules"]:
        if set(item) != SHARED_ITEM_FIELDS:
            raise PrivacyViolation(f"a shared schedule has {sorted(item)}")
    return share["schedules"]


def audit_content(
    content: RecordDict,
    secrets: set[str],
    secret_rows: list[bytes],
    *,
    sharing: bool = False,
    probe_counts: Sequence[int] | None = None,
    probe_digests: Collection[str] = (),
) -> None:
    """Raise PrivacyViolation if a reply's content holds anything but the allowed payloads.

    `sharing`: the node opted in to schedule sharing, so its schedule share is allowed
    (exactly `SHARED_ITEM_FIELDS` per schedule); without it, a share is a violation.
    `probe_counts`: the server asked for teacher scores on a public probe set of these
    candidates per task, so `REC_PROBE_SCORES` is allowed as exactly one float per probe
    candidate (`scores_<i>` of shape (n_i,)); without it, probe scores are a violation.
    `probe_digests`: the probe sets the server sent, which a hello may say it holds."""
    for key, record in content.items():
        if key == REC_SCHEDULES and not sharing:
            raise PrivacyViolation("a schedule share from a node that did not opt in")
        kind = ALLOWED_REPLY_RECORDS.get(key)
        if kind is None or not isinstance(record, RECORD_TYPES[kind]):
            raise PrivacyViolation(f"record {key!r} ({type(record).__name__}) is not allowed")
    for key, record in content.array_records.items():
        expected = SHARED_SHAPES if key == "shared" else EXPERT_SHAPES
        if key == REC_PROBE_SCORES:
            if probe_counts is None:
                raise PrivacyViolation("probe scores the server did not ask for")
            expected = {f"scores_{i}": (n,) for i, n in enumerate(probe_counts)}
        shapes = {k: tuple(v.shape) for k, v in record.items()}
        if shapes != {k: tuple(s) for k, s in expected.items()}:
            raise PrivacyViolation(
                f"{key}: arrays are not exactly the model's parameters or one score per probe"
            )
        for name, array in record.items():
            haystack = array.numpy().astype(np.float32).tobytes()
            if any(needle in haystack for needle in secret_rows):
                raise PrivacyViolation(f"{key}/{name} contains raw feature values")
    for record in content.metric_records.values():
        extra = set(record) - ALLOWED_METRICS
        if extra:
            raise PrivacyViolation(f"metrics {sorted(extra)} are not allowed aggregates")
    for key, record in content.config_records.items():
        if key == REC_SCHEDULES:
            audit_share(record)
            continue
        if key != REC_NODE or set(record) != {"hello"}:
            raise PrivacyViolation(f"config record {key!r} has {sorted(record)}")
        audit_hello(str(record["hello"]), probe_digests)
    text = json.dumps(
        {k: str(dict(r)) for k, r in content.config_records.items()}
        | {k: sorted(r) for k, r in content.array_records.items()}
        | {k: sorted(r) for k, r in content.metric_records.items()}
    )
    leaked = [s for s in secrets if s in text]
    if leaked:
        raise PrivacyViolation(f"raw data in the message: {leaked[:3]}")


def node_secrets(tasks: list) -> tuple[set[str], list[bytes]]:
    """What must never leave a node seeded with these SyntheticTasks (federation_helpers).

    Task names and workload keys, and the first 4 values of every feature row as bytes:
    a copied row would contain them.
    """
    secrets = {t.name for t in tasks} | {f"wk-{t.name}" for t in tasks}
    rows = [row[:4].astype(np.float32).tobytes() for t in tasks for f in t.features for row in f]
    return secrets, rows
