"""Federation payloads: what a node and the server may say to each other in Flower messages.

A node's reply may carry only: the shared parameter arrays, its own expert's arrays,
its hardware profile and its verdicts on the experts it was sent (inside `NodeHello`:
names, and one rank agreement per checked expert) and the aggregate metrics named in
`ALLOWED_METRICS`. Never records, features or workload descriptions. The one exception is
opt-in (`AgentConfig.share_schedules`, off by default): a node that opted in adds
`REC_SCHEDULES`, its top-k schedule traces per workload key and the workload keys it asks
about (`schemas.sharing.ScheduleShare`), never latencies or features. When the server asks
for it (`TrainInstruction.teacher_epochs`, off by default) a node also sends
`REC_PROBE_SCORES`: its teacher model's scores on the server's PUBLIC probe programs (one
float per probe candidate, `scores_<i>` per probe task): model outputs on public inputs, no
record, feature, latency or workload of the node. The probe set itself crosses once per node:
the train message names it by its sha256 (`TrainInstruction.probes_sha256`) and carries its
arrays (`REC_PROBES`) only to a node whose hello does not list that digest
(`NodeHello.probes_held`: digests of public probe sets, nothing of the node). The record keys
below are the whole vocabulary; the privacy audit checks every reply against it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, field_validator, model_validator

from schemas.hardware import HardwareProfile
from schemas.sharing import REC_SCHEDULES

# Message types (Flower: "<category>.<action>").
MSG_HELLO = "query.hello"
MSG_TRAIN = "train"
MSG_REFUSED = "query.refused"  # the server tells a node why it will not be served
# The server holds a leaving node's reply (NodeHello.leaving): the node may stop now.
# Flower answers for a node that went offline with an error, even when the node's reply
# already waits in the SuperLink, so a node that stops before the server pulled its
# reply is counted failed. Nobody waits for the answer to this message.
MSG_RECEIVED = "query.received"

# Record keys of a RecordDict. Both ways: the shared arrays (encoder and gate), the
# global ones server -> node and the node's update node -> server.
REC_SHARED = "shared"  # ArrayRecord
# Server -> node.
REC_EXPERT_PREFIX = "expert/"  # ArrayRecord per delivered expert: "expert/<name>"
REC_CONFIG = "config"  # ConfigRecord: {"instruction": TrainInstruction JSON}
# A public probe set's sha256 (simoe_model.probe_file.probe_digest): the train message names
# the set by it, and a node's hello lists those it holds, so the set is sent once per node.
ProbeDigest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
MAX_PROBES_HELD = 4  # digests a hello may list (the shipped set and the last one sent)
# Node -> server.
REC_OWN_EXPERT = "own_expert"  # ArrayRecord: the node's own expert
REC_METRICS = "metrics"  # MetricRecord: ALLOWED_METRICS only
REC_NODE = "node"  # ConfigRecord: {"hello": NodeHello JSON}
# ArrayRecord, server -> node with teacher_epochs: the public probe set (rows_<i>, offsets_<i>)
REC_PROBES = "probes"
# ArrayRecord, node -> server with teacher_epochs: scores_<i>, one float per probe candidate
REC_PROBE_SCORES = "probe_scores"
# Both ways, opt-in only (schemas.sharing): node -> server {"share": ScheduleShare JSON},
# server -> node (train) {"offer": ScheduleOffer JSON}.

WEIGHT_METRIC = "num-examples"
# Tuning jobs queued or running on the node (a count): its records are still coming, so
# the server keeps its rounds going (server/idle.py); 0: nothing new until told.
BUSY_METRIC = "queued-jobs"
# The layout of what the server sends (record keys, array names): a node refuses a
# payload of another version rather than load arrays it would misread.
PROTOCOL_VERSION = 1
# Aggregates a node may report: counts and losses, nothing that describes a workload.
ALLOWED_METRICS: frozenset[str] = frozenset(
    {
        WEIGHT_METRIC,
        "num-tasks",
        "shared-loss",
        "expert-loss",
        "train-seconds",
        "pairwise-accuracy",
        "top1-score",
        "experts-dropped",  # delivered experts the node's own measurements refuted (a count)
        BUSY_METRIC,
    }
)
ALLOWED_REPLY_RECORDS: dict[str, str] = {
    REC_SHARED: "array",
    REC_OWN_EXPERT: "array",
    REC_METRICS: "metric",
    REC_NODE: "config",
    REC_SCHEDULES: "config",  # only from a node that opted in to schedule sharing
    REC_PROBE_SCORES: "array",  # only when the server asked (TrainInstruction.teacher_epochs)
}

# A node's rank agreement with an expert it checked (Spearman of the expert's scores with
# its measured speed, mean over its tasks): one number per expert, 2 decimals, in [-1, 1].
Agreement = Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False)]
MAX_CHECKED = 64  # experts a node may report on in one reply

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def check_node_name(name: str) -> str:
    """Node names become expert names and registry keys: short, plain characters."""
    if not _NAME_RE.match(name):
        raise ValueError(
            f"node name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting alnum"
        )
    return name


class NodeHello(BaseModel):
    """Who a node is: its stable identity (key fingerprint + name) and its hardware.

    Flower's node_id is not an identity (it changes without node auth); the key
    fingerprint of the node's registered ECDSA key is.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    key_fingerprint: str = Field(min_length=8, max_length=128)
    profile: HardwareProfile
    has_model: bool = Field(default=False, description="the node already holds a global model")
    expert_version: NonNegativeInt = Field(default=0, description="rounds its own expert trained")
    # The node's verdict on the experts it was sent last round, from its own records
    # (simoe_model/expert_check.py): the names, and one aggregate per checked expert (its
    # rank agreement over all the node's tasks, 2 decimals); never records or scores.
    checked_experts: list[str] = Field(default_factory=list, max_length=MAX_CHECKED)
    refuted_experts: list[str] = Field(default_factory=list, max_length=MAX_CHECKED)
    expert_agreement: dict[str, Agreement] = Field(
        default_factory=dict,
        max_length=MAX_CHECKED,
        description="checked expert -> rank agreement on the node's records (the server "
        "fits the hardware similarity on it)",
    )
    leaving: bool = Field(
        default=False,
        description="it replies once and goes (an enrolment's download): the server "
        "confirms it has the reply (MSG_RECEIVED) and does not sample it again",
    )
    # not data about the node: digests of PUBLIC probe sets (the one SiMoE ships, the one
    # the server sent it), so the server sends the probes' arrays only to a node without them
    probes_held: list[ProbeDigest] = Field(
        default_factory=list,
        max_length=MAX_PROBES_HELD,
        description="sha256 of each public probe set the node holds (the train message then "
        "names it instead of carrying it)",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return check_node_name(name)

    @field_validator("checked_experts", "refuted_experts")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        return [check_node_name(n) for n in names]

    @field_validator("expert_agreement")
    @classmethod
    def _two_decimals(cls, agreement: dict[str, float]) -> dict[str, float]:
        for name, value in agreement.items():
            if round(value, 2) != value:  # more digits would say more about the records
                raise ValueError(f"agreement with {name!r} has more than 2 decimals")
        return agreement

    @model_validator(mode="after")
    def _agreement_only_for_checked(self) -> NodeHello:
        unchecked = sorted(set(self.expert_agreement) - set(self.checked_experts))
        if unchecked:
            raise ValueError(f"agreement with experts it did not check: {unchecked[:3]}")
        return self


class TrainInstruction(BaseModel):
    """What the server asks of a node in one round."""

    model_config = ConfigDict(extra="forbid")

    server_round: int = Field(ge=0)
    global_version: int = Field(ge=0)
    experts: list[str] = Field(default_factory=list, description="expert names delivered")
    epochs: int = Field(default=2, ge=0)
    seed: int = 0
    local_batch: int = Field(default=8, ge=1, description="tasks per optimizer step, locally")
    prox_mu: float = Field(default=0.0, ge=0, description="FedProx term on the shared encoder")
    transfer_weight: float = Field(
        default=0.0,
        ge=0,
        description="weight of the cross-node loss on the encoder: the delivered experts' "
        "mixture ranking the node's own records (0: off)",
    )
    personal_epochs: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="after the round, fine-tune a personal copy of the program encoder and "
        "the own expert on the node's records for this many epochs (0: none); the node tunes "
        "with it and never sends it",
    )
    teacher_epochs: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="train the node's teacher (a model kept on its own records alone, never "
        "replaced by the average) this many epochs and send its scores on the public probes "
        "the message carries (0: none)",
    )
    probes_sha256: ProbeDigest | None = Field(
        default=None,
        description="with teacher_epochs: the public probe set's digest; the message carries "
        "its arrays only to a node that does not hold it (NodeHello.probes_held)",
    )
    train: bool = Field(default=True, description="False: only deliver the model")
    protocol: int = Field(default=PROTOCOL_VERSION, description="the payload's layout version")


class ExpertInfo(BaseModel):
    """An expert as the registry lists it (CLI --json)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    node_key: str
    version: int
    round: int
    num_examples: int
    device: str
    simulated: bool
    bytes: int


class RoundInfo(BaseModel):
    """One federated round as the registry lists it (CLI --json)."""

    model_config = ConfigDict(extra="forbid")

    round: int
    run_id: str
    started_at: str
    finished_at: str | None
    sampled: int
    replied: int
    rejected: int
    failed: int
    global_version: int
    status: Literal["running", "done", "no-update", "interrupted"]  # interrupted: server died


class SimilarityFitInfo(BaseModel):
    """What the server's fit of the hardware similarity did in a round (CLI --json):
    cos(z_i, z_j) pulled toward node i's reported rank agreement with node j's expert."""

    model_config = ConfigDict(extra="forbid")

    round: int
    pairs: int = Field(ge=0, description="(checking node, expert's node) pairs fitted on")
    nodes: int = Field(ge=0, description="nodes that reported them (each weighs the same)")
    steps: int = Field(ge=0)
    loss_before: float = Field(description="the alignment loss before the fit")
    loss_after: float = Field(description="... and after")


def key_fingerprint(public_key: bytes) -> str:
    """A node's identity: sha256 of its public key's DER form, first 32 hex digits.

    Both sides compute it the same way: the node from its key file (OpenSSH format,
    as Flower's SuperNode auth wants), the server from the key the SuperLink holds
    for the node (PEM).
    """
    import hashlib

    from cryptography.hazmat.primitives import serialization

    try:
        if public_key.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(public_key)
        else:
            key = serialization.load_ssh_public_key(public_key)
    except ValueError as exc:
        raise ValueError(f"not a public key ({exc})") from None
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()[:32]


class NodeFederationState(BaseModel):
    """What a node remembers of the federation (`federation/state.json` in its state dir)."""

    model_config = ConfigDict(extra="forbid")

    global_version: int = 0
    last_round: int = 0
    rounds_trained: int = 0
    experts: list[str] = Field(default_factory=list, description="bank experts it holds")
    checked_experts: list[str] = Field(default_factory=list, description="tested on own records")
    refuted_experts: list[str] = Field(default_factory=list, description="...and left out")
    expert_agreement: dict[str, float] = Field(
        default_factory=dict, description="each checked expert's rank agreement, 2 decimals"
    )
    refused: str | None = Field(default=None, description="why the server refused it, if so")
    refused_payload: str | None = Field(
        default=None, description="the last server payload this node refused, and why"
    )
    last_metrics: dict[str, float] = Field(default_factory=dict)
    personal_epochs: int = Field(
        default=0, ge=0, description="epochs of the personal model it holds (0: none), local"
    )
    personal_seconds: float = Field(
        default=0.0, ge=0, description="CPU seconds its personal fine-tune took, local"
    )
    receipt_round: int = Field(
        default=0, description="the last round whose reply the server confirmed it holds"
    )


def probe_score_arrays(arrays: Mapping[str, np.ndarray], counts: Sequence[int]) -> list[np.ndarray]:
    """A reply's probe scores as one float vector per probe task, checked against the probe
    set the server sent (`counts`: candidates per probe task): exactly `scores_0` ..
    `scores_<k-1>`, each 1-D of its task's size and finite; ValueError, one line, otherwise."""
    expected = {f"scores_{i}": n for i, n in enumerate(counts)}
    if set(arrays) != set(expected):
        raise ValueError(f"probe scores hold {sorted(arrays)[:4]}, not scores_0..{len(counts) - 1}")
    out = []
    for key, n in expected.items():
        values = np.asarray(arrays[key])
        if values.shape != (n,):
            raise ValueError(f"probe scores {key} have shape {values.shape}, expected ({n},)")
        if not np.isfinite(values).all():
            raise ValueError(f"probe scores {key} are not finite")
        out.append(values.astype(np.float32))
    return out
