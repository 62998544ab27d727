"""The SiMoE strategy: FedAvg over the shared parameters only, experts to the registry.

Flower's FedAvg would average every ArrayRecord of a reply and sends one RecordDict
to all nodes; SiMoE needs per-node messages (each node gets the experts of the
hardware most similar to its own) and must never average experts. So this class
keeps FedAvg's interface (configure_train / aggregate_train) and its sampling
options, and does the rest itself:

- every reply is checked (keys, shapes, NaN/Inf, weight) and a bad one is
  rejected and logged in the registry, never averaged;
- the accepted shared arrays are averaged, weighted by `num-examples`; each update's
  change against the current global model can be clipped to a maximum L2 norm first;
- each node's own expert goes to the registry as a new version.

Robust aggregation is a choice of strategy, one class per file as Flower's are:
`server/strategy_trimmed.py`, `strategy_median.py`, `strategy_krum.py` override
`combine` (how the clipped changes become one); `server/aggregation.py` picks one by name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from pydantic import ValidationError

from schemas import HardwareProfile
from schemas.messages import (
    ALLOWED_METRICS,
    MSG_HELLO,
    MSG_TRAIN,
    PROTOCOL_VERSION,
    REC_CONFIG,
    REC_EXPERT_PREFIX,
    REC_GLOBAL,
    REC_METRICS,
    REC_NODE,
    REC_OWN_EXPERT,
    REC_SHARED,
    WEIGHT_METRIC,
    NodeHello,
    TrainInstruction,
    key_fingerprint,
)
from server.registry import NameTakenError, Registry

log = logging.getLogger("simoe.server")

# similarity(global shared arrays, target profile, candidate profiles by expert name)
#   -> similarity score of each candidate (higher = more alike)
SimilarityFn = Callable[
    [Mapping[str, np.ndarray], HardwareProfile, Mapping[str, HardwareProfile]], dict[str, float]
]
Arrays = dict[str, np.ndarray]


class UpdateRejected(ValueError):
    """A reply that must not be averaged (wrong keys or shapes, NaN/Inf, bad weight)."""


def record_to_arrays(record: ArrayRecord) -> Arrays:
    return {k: v.numpy() for k, v in record.items()}


def arrays_to_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def payload_bytes(content: RecordDict) -> int:
    """Bytes of payload a message carries (array data, config values, metrics)."""
    total = 0
    for record in content.array_records.values():
        total += sum(len(arr.data) for arr in record.values())
    for record in content.config_records.values():
        for value in record.values():
            total += len(value) if isinstance(value, str | bytes) else 8
    for record in content.metric_records.values():
        total += 8 * len(record)
    return total


def check_update(update: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]) -> None:
    """Raise UpdateRejected unless `update` has exactly the reference's keys and shapes."""
    missing = sorted(set(reference) - set(update))
    extra = sorted(set(update) - set(reference))
    if missing or extra:
        raise UpdateRejected(f"keys differ (missing {missing[:3]}, extra {extra[:3]})")
    for key, ref in reference.items():
        value = update[key]
        if value.shape != ref.shape:
            raise UpdateRejected(f"{key}: shape {value.shape} != {ref.shape}")
        if not np.issubdtype(value.dtype, np.floating):
            raise UpdateRejected(f"{key}: dtype {value.dtype} is not floating point")
        if not np.all(np.isfinite(value)):
            raise UpdateRejected(f"{key}: contains NaN or Inf")


def check_finite(arrays: Mapping[str, np.ndarray], what: str) -> None:
    if not arrays:
        raise UpdateRejected(f"{what}: empty")
    for key, value in arrays.items():
        if not np.issubdtype(value.dtype, np.floating) or not np.all(np.isfinite(value)):
            raise UpdateRejected(f"{what} {key}: not finite floating point")


def weighted_average(updates: list[Arrays], weights: list[float]) -> Arrays:
    """Exactly FedAvg: sum_i w_i x_i / sum_i w_i, computed in float64."""
    total = float(sum(weights))
    out: Arrays = {}
    for key in updates[0]:
        acc = np.zeros(updates[0][key].shape, dtype=np.float64)
        for update, weight in zip(updates, weights, strict=True):
            acc += update[key].astype(np.float64) * (weight / total)
        out[key] = acc.astype(updates[0][key].dtype)
    return out


def delta(update: Mapping[str, np.ndarray], current: Mapping[str, np.ndarray]) -> Arrays:
    """What an update changes: update - current, per key, in float64."""
    return {k: update[k].astype(np.float64) - current[k].astype(np.float64) for k in current}


def clip_delta(change: Arrays, max_norm: float) -> Arrays:
    """Scale a change down to L2 norm `max_norm` (over all keys) if it is longer."""
    norm = math.sqrt(sum(float(np.sum(d * d)) for d in change.values()))
    if norm <= max_norm:
        return change
    return {k: d * (max_norm / norm) for k, d in change.items()}


@dataclass
class RoundOutcome:
    """What one round did, for the loop, the logs and the tests."""

    round: int
    sampled: list[int] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    served: list[str] = field(default_factory=list)  # answered without data to train on
    rejected: dict[str, str] = field(default_factory=dict)
    set_aside: list[str] = field(default_factory=list)  # accepted, left out by the aggregation
    failed: int = 0
    delivered: dict[str, list[str]] = field(default_factory=dict)
    global_version: int = 0


class SiMoEStrategy(FedAvg):
    """Weighted FedAvg over shared keys, per-node expert delivery, a persistent registry."""

    aggregation = "fedavg"  # the name `--aggregation` knows it by

    def __init__(
        self,
        registry: Registry,
        similarity: SimilarityFn,
        *,
        k_experts: int = 3,
        clip_norm: float | None = None,
        fraction_train: float = 1.0,
        min_available_nodes: int = 1,
        epochs: int = 2,
        seed: int = 0,
    ) -> None:
        super().__init__(
            fraction_train=fraction_train,
            fraction_evaluate=1.0,  # evaluation is off: configure_evaluate sends nothing
            min_train_nodes=1,
            min_available_nodes=min_available_nodes,
            weighted_by_key=WEIGHT_METRIC,
            arrayrecord_key=REC_GLOBAL,
            configrecord_key=REC_CONFIG,
        )
        self.registry = registry
        self.similarity = similarity
        self.k_experts = k_experts
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"clip_norm must be positive, got {clip_norm}")
        self.clip_norm = clip_norm
        self.epochs = epochs
        self.seed = seed
        self.identity: dict[int, str] = {}  # Flower node_id -> node key, this run only
        self.refused: dict[int, str] = {}  # node_id -> why it was refused
        # node_id -> the public key (PEM) the SuperLink authenticated it with, if any
        self.public_keys: dict[int, bytes] = {}
        self.current: Arrays = {}
        self.outcome = RoundOutcome(round=0)
        self._bytes_down: dict[int, int] = {}

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Nodes report their metrics with each train reply; no separate evaluation."""
        return []

    # -- identity -----------------------------------------------------------------------

    def hello_messages(self, node_ids: Iterable[int], global_arrays: Arrays) -> list[Message]:
        """Ask nodes we do not know yet who they are; they get the global model with it."""
        messages = []
        for node_id in node_ids:
            content = RecordDict({REC_GLOBAL: arrays_to_record(global_arrays)})
            content[REC_CONFIG] = ConfigRecord(
                {"global-version": self.registry.global_version(), "protocol": PROTOCOL_VERSION}
            )
            messages.append(Message(content, dst_node_id=node_id, message_type=MSG_HELLO))
        return messages

    def read_hello(self, reply: Message) -> str:
        """Validate a reply's NodeHello, register the node; returns its node key."""
        node_id = reply.metadata.src_node_id
        record = reply.content.config_records.get(REC_NODE)
        if record is None or "hello" not in record:
            raise UpdateRejected("no node identity in the reply")
        try:
            hello = NodeHello.model_validate_json(str(record["hello"]))
        except ValidationError as exc:
            raise UpdateRejected(f"bad node identity: {exc.errors()[0]['msg']}") from None
        pem = self.public_keys.get(node_id)
        if pem and key_fingerprint(pem) != hello.key_fingerprint:
            raise UpdateRejected("key fingerprint does not match the node's registered key")
        try:
            node_key = self.registry.upsert_node(hello, node_id, key_verified=bool(pem))
        except NameTakenError as exc:
            self.refused[node_id] = str(exc)
            raise UpdateRejected(str(exc)) from None
        self.identity[node_id] = node_key
        self.refused.pop(node_id, None)
        return node_key

    def handle_hellos(self, replies: Iterable[Message]) -> None:
        for reply in replies:
            if reply.has_error():
                log.warning("node %s: hello failed: %s", reply.metadata.src_node_id, reply.error)
                continue
            try:
                self.read_hello(reply)
            except UpdateRejected as exc:
                log.warning("node %s: refused: %s", reply.metadata.src_node_id, exc)
                self.registry.add_refusal(reply.metadata.src_node_id, str(exc))

    # -- experts ------------------------------------------------------------------------

    def nearest_experts(self, node_key: str) -> list[str]:
        """The k registered experts whose hardware is most similar to this node's."""
        node = self.registry.node(node_key)
        target = self.registry.profile(node_key)
        if node is None or target is None:
            return []
        candidates = {}
        for info in self.registry.experts():
            if info.name == node["name"]:
                continue  # its own expert lives on the node already
            profile = self.registry.profile(info.node_key)
            if profile is not None:
                candidates[info.name] = profile
        if not candidates:
            return []
        scores = self.similarity(self.current, target, candidates)
        ranked = sorted(candidates, key=lambda name: (-scores[name], name))
        return ranked[: self.k_experts]

    # -- the round ----------------------------------------------------------------------

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One message per known node: the global shared arrays plus its nearest experts."""
        self.current = record_to_arrays(arrays)
        self.outcome = RoundOutcome(round=server_round)
        self._bytes_down = {}
        node_ids = [n for n in grid.get_node_ids() if n in self.identity]
        if self.fraction_train < 1.0 and node_ids:
            count = max(1, int(len(node_ids) * self.fraction_train))
            rng = np.random.default_rng(self.seed + server_round)
            node_ids = sorted(rng.choice(node_ids, size=count, replace=False).tolist())
        messages = []
        version = self.registry.global_version()
        for node_id in node_ids:
            experts = self.nearest_experts(self.identity[node_id])
            instruction = TrainInstruction(
                server_round=server_round,
                global_version=version,
                experts=experts,
                epochs=self.epochs,
                seed=self.seed + server_round,
            )
            content = RecordDict({REC_GLOBAL: arrays})
            content[REC_CONFIG] = ConfigRecord({"instruction": instruction.model_dump_json()})
            for name in experts:
                expert = self.registry.expert(name)
                if expert is not None:
                    content[REC_EXPERT_PREFIX + name] = arrays_to_record(expert)
            self._bytes_down[node_id] = payload_bytes(content)
            self.outcome.delivered[self.identity[node_id]] = experts
            messages.append(
                Message(
                    content, dst_node_id=node_id, message_type=MSG_TRAIN, group_id=str(server_round)
                )
            )
        self.outcome.sampled = node_ids
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check each reply, store experts and metrics, average the accepted shared arrays."""
        updates: list[Arrays] = []
        weights: list[float] = []
        metric_sums: dict[str, float] = {}
        for reply in replies:
            node_id = reply.metadata.src_node_id
            if reply.has_error():
                self.outcome.failed += 1
                log.warning("round %d: node %s failed: %s", server_round, node_id, reply.error)
                continue
            who = self.identity.get(node_id, f"node_id:{node_id}")
            try:
                who = self.read_hello(reply)
                update, weight, metrics = self._check_reply(reply)
            except UpdateRejected as exc:
                self.outcome.rejected[who] = str(exc)
                self.registry.add_rejection(server_round, who, str(exc))
                log.warning("round %d: rejected the update of %s: %s", server_round, who, exc)
                continue
            self.registry.add_metrics(server_round, who, metrics)
            self.registry.add_traffic(
                server_round,
                who,
                bytes_down=self._bytes_down.get(node_id, 0),
                bytes_up=payload_bytes(reply.content),
            )
            self.registry.touch_node(who)
            if update is None:
                self.outcome.served.append(who)
                continue
            node = self.registry.node(who)
            own = record_to_arrays(reply.content.array_records[REC_OWN_EXPERT])
            if node is not None:
                self.registry.put_expert(
                    node["name"], who, own, round_=server_round, num_examples=int(weight)
                )
            updates.append(update)
            weights.append(weight)
            self.outcome.accepted.append(who)
            for key, value in metrics.items():
                metric_sums[key] = metric_sums.get(key, 0.0) + value * weight
        if not updates:
            return None, None
        averaged = self.aggregate_shared(updates, weights)
        total = sum(weights)
        metrics_out = MetricRecord(
            {k: v / total for k, v in metric_sums.items() if k != WEIGHT_METRIC}
        )
        metrics_out[WEIGHT_METRIC] = float(total)
        return arrays_to_record(averaged), metrics_out

    # -- aggregation --------------------------------------------------------------------

    def aggregate_shared(self, updates: list[Arrays], weights: list[float]) -> Arrays:
        """The new global shared arrays: current + combine(each update's (clipped) change)."""
        changes = [delta(update, self.current) for update in updates]
        if self.clip_norm is not None:
            changes = [clip_delta(change, self.clip_norm) for change in changes]
        combined = self.combine(changes, weights)
        return {
            key: (base.astype(np.float64) + combined[key]).astype(base.dtype)
            for key, base in self.current.items()
        }

    def combine(self, changes: list[Arrays], weights: list[float]) -> Arrays:
        """FedAvg: the changes' average weighted by num-examples (robust strategies override)."""
        return weighted_average(changes, weights)

    def _check_reply(self, reply: Message) -> tuple[Arrays | None, float, dict[str, float]]:
        """(shared update or None for a node without data yet, weight, metrics)."""
        content = reply.content
        extra = set(content.keys()) - {REC_SHARED, REC_OWN_EXPERT, REC_METRICS, REC_NODE}
        if extra:
            raise UpdateRejected(f"unexpected records {sorted(extra)}")
        metric_record = content.metric_records.get(REC_METRICS)
        if metric_record is None or WEIGHT_METRIC not in metric_record:
            raise UpdateRejected(f"no {WEIGHT_METRIC} metric")
        metrics: dict[str, float] = {}
        for key, value in metric_record.items():
            if key not in ALLOWED_METRICS or isinstance(value, list):
                raise UpdateRejected(f"metric {key!r} is not an allowed aggregate")
            if not math.isfinite(float(value)):
                raise UpdateRejected(f"metric {key!r} is not finite")
            metrics[key] = float(value)
        weight = metrics[WEIGHT_METRIC]
        if weight < 0:
            raise UpdateRejected(f"{WEIGHT_METRIC} must not be negative, got {weight}")
        if weight == 0:  # a node with no measurements yet: served, nothing to average
            if REC_SHARED in content or REC_OWN_EXPERT in content:
                raise UpdateRejected(f"arrays sent with {WEIGHT_METRIC} = 0")
            return None, 0.0, metrics
        if REC_SHARED not in content.array_records:
            raise UpdateRejected("no shared arrays in the reply")
        if REC_OWN_EXPERT not in content.array_records:
            raise UpdateRejected("no own expert in the reply")
        update = record_to_arrays(content.array_records[REC_SHARED])
        check_update(update, self.current)
        check_finite(record_to_arrays(content.array_records[REC_OWN_EXPERT]), "expert")
        return update, weight, metrics
