"""The SiMoE strategy: FedAvg over the shared parameters only, experts kept apart.

Flower's FedAvg would average every ArrayRecord of a reply and sends one RecordDict
to all nodes; SiMoE needs per-node messages (each node gets the experts of the
hardware most similar to its own) and must never average experts. So this class
follows Flower's strategy split (configure the round's messages, aggregate the
replies) and does the rest itself:

- message in, message out: the round loop hands `configure_train` a `RoundInputs`
  (round number, global arrays, online nodes, their registered keys, the loop's
  `Roster`) and gets the messages back as a `RoundPlan`; `aggregate_train` takes the
  replies and returns a `RoundOutcome` that says what happened (who was accepted,
  served, rejected and why, failed, their hellos, experts, metrics and traffic, the new
  averages);
- it persists nothing and changes no roster: it reads the registry (who holds a name,
  experts, profiles) and the loop's recorder (`server.round_recorder`) writes the
  outcome to the registry; the loop updates its roster from the outcome. A round's
  replies go one way: strategy -> outcome -> recorder -> registry;
- every reply is checked (identity, keys, shapes, NaN/Inf, weight) and a bad one is
  rejected with its reason, never averaged;
- the accepted shared arrays are averaged by `aggregate_shared`: each update's
  change against the current global model, clipped to a maximum L2 norm if asked,
  then `select`ed and `combine`d (FedAvg: all of them, weighted by `num-examples`;
  the math is `server.averaging`);
- each node's own expert is in the outcome, for the registry to keep as a new version;
- after the average, the hardware encoder of the new global arrays is fitted so that
  cos(z_i, z_j) follows how well node i's records are ranked by node j's expert (the
  agreements nodes report with their verdicts: this round's replies over the registry's
  latest; `similarity_fit`, `similarity_steps`; skipped below `MIN_FIT_PAIRS` pairs).
  Values are clipped to [-1, 1] and each reporting node weighs the same, so one that
  reports many experts cannot dominate; a node can still misreport its own agreements,
  as it can any update (they only move the similarity, never a node's records).
  With `probes` (a public probe set, `server.distillation`), before that fit the averaged
  program encoder is distilled toward the ensemble of the accepted nodes' own encoders and
  experts on the probes (`distill_steps`, FedDF), and with `similarity_source="probes"` the
  fit's agreements are how alike the nodes' experts rank the probes, computed here from
  model outputs on public inputs instead of the nodes' reported values. With
  `teacher_epochs` the train message also names the probes by their sha256 (carrying them
  only to a node whose hello does not list it: `holds_probes`) and each node replies with its
  own-records teacher's scores on them (checked against the probe set's shapes: a wrong one
  rejects the update in one line); `teacher_distill_steps` then distils the averaged encoder
  toward those scores, each read through the node's expert; with `teacher_balance` each
  teacher weighs 1 / its summed positive z-cosine to the teachers (each hardware cluster
  about alike; off by default). With `newcomer_distill_steps` (the average untouched by it)
  a newcomer (a node with no records of its own, `Roster.can_check`) is served a copy of
  the global whose program encoder is distilled toward the latest teacher scores of every
  node, or with `newcomer_teachers="sent"` of the experts it is sent (`newcomer_arrays`):
  what a newcomer tunes with zero-shot, while the nodes' shared trajectory stays the plain
  average.

Robust aggregation is a choice of strategy, one class per file as Flower's are:
`server/strategy_trimmed.py`, `strategy_median.py` override `combine`,
`strategy_krum.py` overrides `select`; `server/aggregation.py` picks one by name.

What the strategy keeps between rounds is the server optimizer's state (FedAdam's
moments). Who the nodes are (`server.roster.Roster`) is the round loop's: it comes in
each round's `RoundInputs` and with the hello replies, and only the loop changes it.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from pydantic import ValidationError

from schemas import BadInputError, HardwareProfile
from schemas.messages import (
    ALLOWED_METRICS,
    MSG_HELLO,
    MSG_RECEIVED,
    MSG_TRAIN,
    PROTOCOL_VERSION,
    REC_CONFIG,
    REC_EXPERT_PREFIX,
    REC_METRICS,
    REC_NODE,
    REC_OWN_EXPERT,
    REC_PROBE_SCORES,
    REC_PROBES,
    REC_SHARED,
    WEIGHT_METRIC,
    NodeHello,
    SimilarityFitInfo,
    TrainInstruction,
    key_fingerprint,
    probe_score_arrays,
)
from schemas.protocol import Arrays, arrays_to_record, payload_bytes, record_to_arrays
from schemas.sharing import (
    MAX_OFFER_PER_WORKLOAD,
    MAX_WORKLOADS,
    OFFER_FIELD,
    REC_SCHEDULES,
    OfferedTrace,
    ScheduleOffer,
)
from server.averaging import (
    ServerAdam,
    apply_change,
    clip_delta,
    delta,
    is_statistic,
    weighted_average,
)
from server.registry import Registry
from server.reply_checks import (
    AlreadyServed,
    NameBook,
    NameTaken,
    UpdateRejected,
    check_finite,
    check_update,
    read_share,
)
from server.roster import Identified, Roster
from server.round_outcome import (
    HelloOutcome,
    NodeReply,
    RoundInputs,
    RoundOutcome,
    RoundPlan,
)
from server.run_config import settings_problem

log = logging.getLogger("simoe.server")

# similarity(global shared arrays, target profile, candidate profiles by expert name)
#   -> similarity score of each candidate (higher = more alike)
SimilarityFn = Callable[
    [Mapping[str, np.ndarray], HardwareProfile, Mapping[str, HardwareProfile]], dict[str, float]
]

if TYPE_CHECKING:
    from simoe_model.probe_file import ProbeTask

MIN_FIT_PAIRS = 3  # fewer (checking node, expert's node) pairs say too little to fit on
SimilaritySource = Literal["reported", "probes"]
NewcomerTeachers = Literal["all", "sent"]


class SimilarityFit(Protocol):
    """Fit the shared hardware encoder on (node a, node b, a's agreement with b's expert):
    (new shared arrays, loss before, loss after); `server.similarity.fit_shared_similarity`."""

    def __call__(
        self,
        arrays: Mapping[str, np.ndarray],
        profiles: Mapping[str, HardwareProfile],
        agreements: Sequence[tuple[str, str, float]],
        *,
        steps: int,
        seed: int,
    ) -> tuple[dict[str, np.ndarray], float, float]: ...


class SiMoEStrategy:
    """Weighted FedAvg over shared keys, per-node expert delivery; reads the registry only."""

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
        local_batch: int = 8,
        prox_mu: float = 0.0,
        transfer_weight: float = 0.0,
        personal_epochs: int = 0,
        server_lr: float = 1.0,
        server_optimizer: str = "sgd",
        matched_global: bool = False,
        share_units: int = 3,
        similarity_fit: SimilarityFit | None = None,
        similarity_steps: int = 10,
        probes: Sequence[ProbeTask] = (),
        distill_steps: int = 0,
        similarity_source: SimilaritySource = "reported",
        teacher_epochs: int = 0,
        teacher_distill_steps: int = 0,
        teacher_balance: bool = False,
        newcomer_distill_steps: int = 0,
        newcomer_teachers: NewcomerTeachers = "all",
    ) -> None:
        self.registry = registry
        # the nodes' own-records teachers: their probe scores, distilled into the average
        if teacher_epochs < 0 or teacher_distill_steps < 0:
            raise ValueError("teacher_epochs and teacher_distill_steps must not be negative")
        # the rules across settings are the run config's (a strategy built directly, as the
        # tests and the poisoning bench do, gets the same one-line refusal)
        problem = settings_problem(
            {
                "probes": bool(probes),
                "distill_steps": distill_steps,
                "similarity_source": similarity_source,
                "teacher_epochs": teacher_epochs,
                "teacher_distill_steps": teacher_distill_steps,
                "teacher_balance": teacher_balance,
                "newcomer_distill_steps": newcomer_distill_steps,
            }
        )
        if problem:
            raise ValueError(problem)
        self.teacher_epochs = teacher_epochs
        self.teacher_distill_steps = teacher_distill_steps
        self.teacher_balance = teacher_balance  # each hardware cluster's teachers weigh alike
        if newcomer_distill_steps < 0:
            raise ValueError("newcomer_distill_steps must not be negative")
        # the copy served to newcomers: distilled toward each node's latest teacher scores
        # (kept by node name, so their order never depends on enrolment), cached per version
        self.newcomer_distill_steps = newcomer_distill_steps
        self._teachers: dict[str, tuple[Arrays, list[np.ndarray]]] = {}
        if newcomer_teachers not in {"all", "sent"}:
            raise ValueError(f"newcomer_teachers must be all or sent, got {newcomer_teachers!r}")
        self.newcomer_teachers = newcomer_teachers
        self._newcomer_copies: dict[tuple[int, tuple[str, ...]], Arrays] = {}
        self._probe_record: ArrayRecord | None = None
        self._probe_digest: str | None = None  # its sha256: sent once per node, then named
        # FedDF on public probes after each average (no probes or 0 steps: off)
        if distill_steps < 0:
            raise ValueError(f"distill_steps must not be negative, got {distill_steps}")
        self.probes = list(probes)
        if newcomer_distill_steps and self.probes:  # a restarted server serves the copy at once
            self._teachers = registry.teachers(self.probe_digest())
        self.distill_steps = distill_steps
        self.similarity_source = similarity_source
        # the fit of the hardware similarity after each average (None or 0 steps: off)
        self.similarity_fit = similarity_fit
        if similarity_steps < 0:
            raise ValueError(f"similarity_steps must not be negative, got {similarity_steps}")
        self.similarity_steps = similarity_steps
        # schedule sharing (opt-in): an opted-in node gets the shared schedules of this
        # many units most similar to it
        self.share_units = share_units
        self.similarity = similarity
        self.k_experts = k_experts
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"clip_norm must be positive, got {clip_norm}")
        self.clip_norm = clip_norm
        self.fraction_train = fraction_train
        self.min_available_nodes = min_available_nodes
        self.epochs = epochs
        self.seed = seed
        # how each node trains its round (TrainInstruction): tasks per step, FedProx's mu
        self.local_batch = local_batch
        self.prox_mu = prox_mu
        self.transfer_weight = transfer_weight  # the cross-node loss on the encoder (0: off)
        # each node's personal fine-tune, asked in a run's final round only: its cost is local
        self.personal_epochs = personal_epochs
        if not server_lr > 0:
            raise ValueError(f"server_lr must be positive, got {server_lr}")
        self.server_lr = server_lr
        if server_optimizer not in {"sgd", "adam"}:
            raise ValueError(f"server_optimizer must be sgd or adam, got {server_optimizer!r}")
        self.server_optimizer = server_optimizer
        self.server_adam = ServerAdam(server_lr) if server_optimizer == "adam" else None
        self.matched_global = matched_global

    # -- aggregation: the hooks robust strategies override -----------------------------

    def aggregate_shared(
        self, updates: list[Arrays], weights: list[float], current: Arrays
    ) -> tuple[Arrays, list[int]]:
        """The new global shared arrays, and the indices of the updates left out.

        current + server_lr * combine(the selected updates' (clipped) changes). A server
        learning rate above 1 (FedOpt's server SGD, Flower's FedAvgM without momentum) takes
        a longer step along the nodes' average change: a round of few local steps moves the
        shared parts little. With `server_optimizer="adam"` the combined change goes through
        `ServerAdam` (FedAdam) instead. Normalizer statistics are averages, never stepped.
        """
        changes = [delta(update, current) for update in updates]
        if self.clip_norm is not None:
            changes = [clip_delta(change, self.clip_norm) for change in changes]
        kept = self.select(changes, weights)
        combined = self.combine([changes[i] for i in kept], [weights[i] for i in kept])
        if self.server_adam is not None:
            combined = self.server_adam.step(combined)
        elif self.server_lr != 1.0:
            combined = {
                k: v if is_statistic(k) else v * self.server_lr for k, v in combined.items()
            }
        left_out = [i for i in range(len(changes)) if i not in set(kept)]
        return apply_change(current, combined), left_out

    def select(self, changes: list[Arrays], weights: list[float]) -> list[int]:
        """Which changes to combine (indices): all of them (Krum overrides)."""
        return list(range(len(changes)))

    def combine(self, changes: list[Arrays], weights: list[float]) -> Arrays:
        """FedAvg: the changes' average weighted by num-examples (robust strategies override)."""
        return weighted_average(changes, weights)

    # -- identity -----------------------------------------------------------------------

    def hello_messages(self, node_ids: Iterable[int], global_arrays: Arrays) -> list[Message]:
        """Ask nodes we do not know yet who they are; they get the global model with it."""
        messages = []
        for node_id in node_ids:
            content = RecordDict({REC_SHARED: arrays_to_record(global_arrays)})
            content[REC_CONFIG] = ConfigRecord(
                {"global-version": self.registry.global_version(), "protocol": PROTOCOL_VERSION}
            )
            messages.append(Message(content, dst_node_id=node_id, message_type=MSG_HELLO))
        return messages

    def read_hello(
        self, reply: Message, public_keys: Mapping[int, bytes], roster: Roster, names: NameBook
    ) -> Identified:
        """Validate a reply's NodeHello: who the node is (UpdateRejected says why not)."""
        node_id = reply.metadata.src_node_id
        record = reply.content.config_records.get(REC_NODE)
        if record is None or "hello" not in record:
            raise UpdateRejected("no node identity in the reply")
        try:
            hello = NodeHello.model_validate_json(str(record["hello"]))
        except ValidationError as exc:
            raise UpdateRejected(f"bad node identity: {exc.errors()[0]['msg']}") from None
        if hello.leaving and node_id in roster.departed:
            raise AlreadyServed(f"{hello.name} was served this run and is leaving")
        pem = public_keys.get(node_id)
        if pem and key_fingerprint(pem) != hello.key_fingerprint:
            raise UpdateRejected("key fingerprint does not match the node's registered key")
        share = read_share(reply.content)
        names.claim(hello.name, hello.key_fingerprint)
        return Identified(
            node_id, hello.key_fingerprint, hello, key_verified=bool(pem), share=share
        )

    def read_hellos(
        self, replies: Iterable[Message], public_keys: Mapping[int, bytes], roster: Roster
    ) -> HelloOutcome:
        """Who each node that answered a hello is; the refused ones and why."""
        outcome = HelloOutcome()
        names = NameBook(self.registry)
        for reply in replies:
            node_id = reply.metadata.src_node_id
            if reply.has_error():
                log.warning("node %s: hello failed: %s", node_id, reply.error)
                continue
            try:
                outcome.identified.append(self.read_hello(reply, public_keys, roster, names))
            except AlreadyServed as exc:
                log.info("node %s: %s", node_id, exc)
            except UpdateRejected as exc:
                log.warning("node %s: refused: %s", node_id, exc)
                outcome.refusals.append((node_id, str(exc)))
                if isinstance(exc, NameTaken):
                    outcome.name_taken[node_id] = str(exc)
        return outcome

    # -- experts ------------------------------------------------------------------------

    def nearest_experts(
        self, node_key: str, global_arrays: Arrays, can_check: bool = True
    ) -> list[str]:
        """The k registered experts whose hardware is most similar to this node's.

        Only experts of the node's own target kind (CPU or GPU) are candidates: an expert
        learned on CPU schedules scores features of a CUDA schedule space it never saw, and
        the hardware similarity, learned from profiles alone, can still put a CPU next to a
        GPU. A node that has never trained on records of its own (a newcomer) cannot test
        what it is sent, so it is not sent experts that most of the nodes that tested them
        refuted (at least two); nodes with records still get them and judge for themselves.
        """
        node = self.registry.node(node_key)
        target = self.registry.profile(node_key)
        if node is None or target is None:
            return []
        withheld = set() if can_check else self.registry.distrusted_experts()
        candidates = {}
        for info in self.registry.experts():
            if info.name == node["name"] or info.name in withheld:
                continue  # its own expert lives on the node already; refuted ones wait
            profile = self.registry.profile(info.node_key)
            if profile is not None and profile.target_kind == target.target_kind:
                candidates[info.name] = profile
        if not candidates:
            return []
        scores = self.similarity(global_arrays, target, candidates)
        ranked = sorted(candidates, key=lambda name: (-scores[name], name))
        return ranked[: self.k_experts]

    # -- shared schedules (opt-in) ------------------------------------------------------

    def schedule_offer(
        self, node_key: str, global_arrays: Arrays, wanted: Sequence[str], server_round: int
    ) -> ScheduleOffer:
        """The shared schedules for an opted-in node: those of the `share_units` units most
        similar to it (same target kind, the similarity that picks its experts), for the
        workloads it asked about (none asked: every workload they shared, up to
        `MAX_WORKLOADS`). Per workload, rank 1 of each unit (most similar first), then
        rank 2, ..., at most `MAX_OFFER_PER_WORKLOAD`. Units are labelled by their
        similarity rank, never named."""
        target = self.registry.profile(node_key)
        if target is None:
            return ScheduleOffer(round=server_round)
        profiles = {k: self.registry.profile(k) for k in self.registry.schedule_sharers()}
        candidates = {
            key: profile
            for key, profile in profiles.items()
            if key != node_key and profile is not None and profile.target_kind == target.target_kind
        }
        if not candidates:
            return ScheduleOffer(round=server_round)
        scores = self.similarity(global_arrays, target, candidates)
        units = sorted(candidates, key=lambda k: (-scores[k], k))[: self.share_units]
        shared = [self.registry.shared_schedules(k) for k in units]
        if wanted:
            keys = [k for k in dict.fromkeys(wanted) if any(k in s for s in shared)]
        else:
            keys = sorted({k for s in shared for k in s})
        offered: list[OfferedTrace] = []
        for workload in keys[:MAX_WORKLOADS]:
            seen: set[str] = set()
            depth = max(len(s.get(workload, [])) for s in shared)
            for rank in range(depth):
                for unit, schedules in enumerate(shared, start=1):
                    traces = schedules.get(workload, [])
                    if rank >= len(traces) or traces[rank] in seen:
                        continue
                    if len(seen) >= MAX_OFFER_PER_WORKLOAD:
                        break
                    seen.add(traces[rank])
                    offered.append(
                        OfferedTrace(
                            workload_key=workload,
                            trace=traces[rank],
                            source=f"similar-{unit}",
                            rank=rank + 1,
                        )
                    )
        return ScheduleOffer(round=server_round, schedules=offered)

    # -- the round ----------------------------------------------------------------------

    def configure_train(self, inputs: RoundInputs) -> RoundPlan:
        """One message per known node: the global shared arrays plus its nearest experts."""
        server_round = inputs.server_round
        roster = inputs.roster
        node_ids = roster.known(inputs.node_ids)
        if self.fraction_train < 1.0 and node_ids:
            count = max(1, int(len(node_ids) * self.fraction_train))
            rng = np.random.default_rng(self.seed + server_round)
            node_ids = sorted(rng.choice(node_ids, size=count, replace=False).tolist())
        plan = RoundPlan(messages=[], sampled=node_ids, delivered={}, bytes_down={})
        current = arrays_to_record(inputs.arrays)
        latest = self.registry.global_version()
        for node_id in node_ids:
            node_key = roster.identity[node_id]
            can_check = roster.can_check(node_id)
            experts = self.nearest_experts(node_key, inputs.arrays, can_check)
            version, arrays = latest, current
            base = None if can_check else self.matched_base(experts, latest)
            if base is not None:
                version, plan.bases[node_id] = base
                arrays = arrays_to_record(plan.bases[node_id])
            elif not can_check and (distilled := self.newcomer_arrays(inputs, latest, experts)):
                arrays = arrays_to_record(distilled)
            instruction = TrainInstruction(
                server_round=server_round,
                global_version=version,
                experts=experts,
                epochs=self.epochs,
                seed=self.seed + server_round,
                local_batch=self.local_batch,
                prox_mu=self.prox_mu,
                transfer_weight=self.transfer_weight,
                personal_epochs=self.personal_epochs if inputs.final else 0,
                teacher_epochs=self.teacher_epochs,
                probes_sha256=self.probe_digest() if self.teacher_epochs else None,
            )
            content = RecordDict({REC_SHARED: arrays})
            if self.teacher_epochs and not self.holds_probes(roster, node_id):
                content[REC_PROBES] = self.probe_record()
            content[REC_CONFIG] = ConfigRecord({"instruction": instruction.model_dump_json()})
            for name in experts:
                expert = self.registry.expert(name)
                if expert is not None:
                    content[REC_EXPERT_PREFIX + name] = arrays_to_record(expert)
            wanted = self.registry.sharing(node_key)
            if wanted is not None:  # it opted in to schedule sharing
                offer = self.schedule_offer(node_key, inputs.arrays, wanted, server_round)
                content[REC_SCHEDULES] = ConfigRecord({OFFER_FIELD: offer.model_dump_json()})
            plan.bytes_down[node_id] = payload_bytes(content)
            plan.delivered[node_key] = experts
            plan.messages.append(
                Message(
                    content, dst_node_id=node_id, message_type=MSG_TRAIN, group_id=str(server_round)
                )
            )
        return plan

    def probe_record(self) -> ArrayRecord:
        """The public probe set as a train message carries it (built once)."""
        if self._probe_record is None:
            from simoe_model.probe_file import probe_arrays

            self._probe_record = arrays_to_record(probe_arrays(self.probes))
        return self._probe_record

    def probe_digest(self) -> str:
        """The public probe set's sha256 (`simoe_model.probe_file.probe_digest`), which
        every train message with teacher_epochs names it by (computed once)."""
        if self._probe_digest is None:
            from simoe_model.probe_file import probe_digest

            self._probe_digest = probe_digest(self.probes)
        return self._probe_digest

    def holds_probes(self, roster: Roster, node_id: int) -> bool:
        """Whether the node's last hello (or reply) said it holds the probe set: then its
        train message names the set and does not carry it. A node told a digest it no
        longer holds replies without scores and a hello without it: it gets them next."""
        hello = roster.hellos.get(node_id)
        return hello is not None and self.probe_digest() in hello.probes_held

    def matched_base(self, experts: Sequence[str], latest: int) -> tuple[int, Arrays] | None:
        """For a node with no expert of its own: the global its delivered experts were
        trained on, where that is older than the latest (None: send the latest).

        Each expert is trained on the global its node was sent, and the round's average
        then moves the global on: the experts in the registry always match the global one
        version back. A node with its own expert tunes mostly with that one (trained on the
        global it gets); a newcomer tunes with the delivered experts alone, so with
        `matched_global` it gets the encoder they were trained on. The bigger the server's
        step (`server_optimizer="adam"`), the more that matters.
        """
        if not self.matched_global or not experts:
            return None
        sent = set(experts)
        rounds = [info.round for info in self.registry.experts() if info.name in sent]
        base = self.registry.global_sent_in(max(rounds)) if rounds else None
        return base if base is not None and base[0] != latest else None

    def aggregate_train(
        self, inputs: RoundInputs, plan: RoundPlan, replies: Iterable[Message]
    ) -> RoundOutcome:
        """Check each reply and average the accepted shared arrays; persists nothing.

        The outcome says what the round did, reply by reply: the loop's recorder writes
        it to the registry (hellos, rejections, metrics, traffic, checks, experts, the new
        global) and the loop updates its roster from it.
        """
        server_round = inputs.server_round
        roster = inputs.roster
        outcome = RoundOutcome(
            round=server_round, sampled=list(plan.sampled), delivered=dict(plan.delivered)
        )
        names = NameBook(self.registry)
        updates: list[Arrays] = []
        weights: list[float] = []
        accepted_metrics: list[dict[str, float]] = []
        accepted_names: list[str] = []
        teacher_scores: dict[str, list[np.ndarray]] = {}  # node -> its teacher's probe scores
        # The SuperLink answers for a node that is gone with an error reply of its own
        # (source node 0): match replies to what was sent, so that node counts once.
        sent = {m.metadata.message_id: m.metadata.dst_node_id for m in plan.messages}
        answered: set[int] = set()
        errored: set[int] = set()
        for reply in replies:
            node_id = sent.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)
            answered.add(node_id)
            if reply.has_error():
                outcome.failed += 1
                errored.add(node_id)
                log.warning("round %d: node %s failed: %s", server_round, node_id, reply.error)
                continue
            outcome.replied += 1
            who = roster.identity.get(node_id, f"node_id:{node_id}")
            try:
                node = self.read_hello(reply, inputs.public_keys, roster, names)
                who = node.node_key
                outcome.identified.append(node)
                if node.hello.leaving:
                    outcome.leaving.append(node_id)
                update, weight, metrics = self._check_reply(reply, inputs.arrays)
            except UpdateRejected as exc:
                if isinstance(exc, NameTaken):
                    outcome.name_taken[node_id] = str(exc)
                outcome.rejected[who] = str(exc)
                log.warning("round %d: rejected the update of %s: %s", server_round, who, exc)
                continue
            answer = NodeReply(
                node_key=who,
                name=node.hello.name,
                metrics=metrics,
                bytes_down=plan.bytes_down.get(node_id, 0),
                bytes_up=payload_bytes(reply.content),
            )
            outcome.replies.append(answer)
            if update is None:
                outcome.served.append(who)
                continue
            sent_to = set(plan.delivered.get(who, []))  # verdicts only on what it was sent
            answer.checked = sorted(sent_to & set(node.hello.checked_experts))
            answer.refuted = list(node.hello.refuted_experts)
            answer.agreement = {
                e: v for e, v in node.hello.expert_agreement.items() if e in answer.checked
            }
            answer.expert = record_to_arrays(reply.content.array_records[REC_OWN_EXPERT])
            scores = self.check_probe_scores(reply.content)  # checked: it passed above
            if scores is not None:
                teacher_scores[who] = scores
            answer.num_examples = int(weight)
            if node_id in plan.bases:  # trained from an older global: its change, on the current
                update = apply_change(inputs.arrays, delta(update, plan.bases[node_id]))
            updates.append(update)
            weights.append(weight)
            outcome.accepted.append(who)
            accepted_metrics.append(metrics)
            accepted_names.append(node.hello.name)
        # Replies arrive in any order over gRPC, and float sums depend on the order of their
        # terms: the accepted updates are combined in the order of the nodes' names (then
        # keys), so the same replies give the same bits however they arrived. Names, not
        # keys or node ids: those are drawn afresh when a node enrols or reconnects.
        order = sorted(range(len(updates)), key=lambda i: (accepted_names[i], outcome.accepted[i]))
        updates = [updates[i] for i in order]
        weights = [weights[i] for i in order]
        outcome.accepted = [outcome.accepted[i] for i in order]
        metric_sums: dict[str, float] = {}
        for i, weight in zip(order, weights, strict=True):
            for key, value in accepted_metrics[i].items():
                metric_sums[key] = metric_sums.get(key, 0.0) + value * weight
        outcome.missing = sorted(set(sent.values()) - answered)
        outcome.errored = sorted(errored)
        outcome.failed += len(outcome.missing)
        if updates:
            outcome.aggregated, left_out = self.aggregate_shared(updates, weights, inputs.arrays)
            outcome.set_aside = [outcome.accepted[i] for i in left_out]
            total = sum(weights)
            outcome.metrics = {k: v / total for k, v in metric_sums.items() if k != WEIGHT_METRIC}
            outcome.metrics[WEIGHT_METRIC] = float(total)
            own = {a.node_key: a.expert for a in outcome.replies if a.expert is not None}
            set_aside = set(left_out)
            kept = [
                (i, who)
                for i, who in enumerate(outcome.accepted)
                if i not in set_aside and who in own
            ]
            self.distill(outcome, [(updates[i], own[who]) for i, who in kept])
            self.distill(
                outcome,
                [(own[who], teacher_scores[who]) for _, who in kept if who in teacher_scores],
                to_teacher_scores=True,
            )
            if self.newcomer_distill_steps:  # each node's latest teacher, for newcomers
                name_of = {a.node_key: a.name for a in outcome.replies}
                for _, who in kept:
                    if who in teacher_scores:
                        self._teachers[name_of[who]] = (own[who], teacher_scores[who])
                        self.registry.put_teacher(
                            who, name_of[who], self.probe_digest(), own[who],
                            teacher_scores[who], round_=outcome.round,
                        )  # fmt: skip
            self.fit_similarity(outcome)
        return outcome

    def newcomer_arrays(
        self, inputs: RoundInputs, version: int, experts: Sequence[str] = ()
    ) -> Arrays | None:
        """The global `inputs.arrays` (registry version `version`) with its program encoder
        distilled toward the nodes' latest teacher scores on the probes, each read through
        that node's expert (`newcomer_distill_steps`; None: off or no teacher yet): every
        node's (`newcomer_teachers="all"`) or only those of the `experts` the newcomer is
        sent (`"sent"`: the only experts its model mixes, so the copy need not serve the rest).

        Why a copy for newcomers only: distilling the average itself each round (the
        `teacher_distill_steps` rounds) did not carry over, since the nodes' next local
        round and average undo part of it, while distilling the FINAL global once, many
        steps, toward the nodes' own-records teachers nearly closed the newcomers' gap to a
        central model (VALIDATION, one seed; docs/results/model_evaluation.md, sixth round).
        A newcomer tunes zero-shot with what it is sent, so it gets that; the nodes, who
        have records and their own expert, keep the plain average. Computed at most once per
        global version and set of teachers; the teachers are kept in the registry, so a
        restarted server serves the same copy before any round."""
        names = sorted(self._teachers)
        if self.newcomer_teachers == "sent":
            sent = set(experts)
            names = [name for name in names if name in sent]
        if not self.newcomer_distill_steps or not names:
            return None
        key = (version, tuple(names))
        if key in self._newcomer_copies:
            return self._newcomer_copies[key]
        from server.distillation import distill_to_scores

        teachers = [self._teachers[name] for name in names]
        try:
            arrays, before, after = distill_to_scores(
                inputs.arrays,
                teachers,
                self.probes,
                steps=self.newcomer_distill_steps,
                seed=self.seed + inputs.server_round,
            )
        except BadInputError as exc:  # arrays the model cannot load: newcomers get the global
            log.warning("round %d: no distilled copy for newcomers: %s", inputs.server_round, exc)
            return None
        log.info(
            "round %d: the newcomers' copy distilled toward %d teachers on %d probes, "
            "loss %.4f -> %.4f",
            inputs.server_round,
            len(teachers),
            len(self.probes),
            before,
            after,
        )
        self._newcomer_copies = {k: v for k, v in self._newcomer_copies.items() if k[0] == version}
        self._newcomer_copies[key] = arrays
        return arrays

    def distill(
        self,
        outcome: RoundOutcome,
        teachers: Sequence[tuple[Arrays, Arrays | Sequence[np.ndarray]]],
        *,
        to_teacher_scores: bool = False,
    ) -> None:
        """The new global's program encoder distilled on the public probes, in place
        (`outcome.aggregated`): toward the accepted nodes' (contribution encoder, expert)
        (FedDF, `distill_steps`), or with `to_teacher_scores` toward their teachers' probe
        scores, each read through the node's expert (`teacher_distill_steps`). Off (no
        steps), nothing aggregated or no teachers: nothing."""
        steps = self.teacher_distill_steps if to_teacher_scores else self.distill_steps
        if not steps or outcome.aggregated is None or not teachers:
            return
        from server import distillation

        toward = "the teachers' probe scores" if to_teacher_scores else "the encoders"
        run = (
            functools.partial(distillation.distill_to_scores, balance=self.teacher_balance)
            if to_teacher_scores
            else distillation.distill_shared
        )
        try:
            arrays, before, after = run(
                outcome.aggregated,
                teachers,
                self.probes,
                steps=steps,
                seed=self.seed + outcome.round,
            )
        except BadInputError as exc:  # arrays the model cannot load: the average stands
            log.warning("round %d: not distilled toward %s: %s", outcome.round, toward, exc)
            return
        outcome.aggregated = arrays
        log.info(
            "round %d: encoder distilled toward %s of %d nodes on %d probes, loss %.4f -> %.4f",
            outcome.round,
            toward,
            len(teachers),
            len(self.probes),
            before,
            after,
        )

    def probe_agreements(self, outcome: RoundOutcome) -> dict[tuple[str, str], float]:
        """How alike each pair of nodes' latest experts rank the probes on the new global
        encoder (this round's experts over the registry's), keyed by node keys."""
        from server.distillation import probe_agreements

        assert outcome.aggregated is not None
        experts: dict[str, Arrays] = {}
        for info in self.registry.experts():
            if (arrays := self.registry.expert(info.name)) is not None:
                experts[info.node_key] = arrays
        for answer in outcome.replies:
            if answer.expert is not None:
                experts[answer.node_key] = answer.expert
        pairs = probe_agreements(outcome.aggregated, experts, self.probes)
        return {(a, b): value for a, b, value in pairs}

    def fit_similarity(self, outcome: RoundOutcome) -> None:
        """Fit the new global's hardware encoder on the nodes' rank agreements (in place:
        `outcome.aggregated` and `outcome.similarity_fit`); off, or too few pairs: nothing.

        Pairs: each node's latest agreement with each expert's owner, from the registry,
        overridden by this round's accepted replies (the recorder has not written them)."""
        if self.similarity_fit is None or self.similarity_steps == 0:
            return
        if outcome.aggregated is None:
            return
        owner = {info.name: info.node_key for info in self.registry.experts()}
        latest = {(a, b): value for a, b, value in self.registry.expert_agreements()}
        for answer in outcome.replies:
            for name, value in answer.agreement.items():
                if owner.get(name, answer.node_key) != answer.node_key:
                    latest[(answer.node_key, owner[name])] = value
        if self.similarity_source == "probes":
            latest = self.probe_agreements(outcome)
        # The fit names each node by its name, not its key: the fit's sums run in the order
        # of its units and pairs, and a key is drawn afresh at each enrolment, so an order by
        # key differs between two runs of the same fleet (names are unique, as keys are).
        names: dict[str, str] = {}
        profiles: dict[str, HardwareProfile] = {}
        for key in {key for pair in latest for key in pair}:
            node, profile = self.registry.node(key), self.registry.profile(key)
            if node is not None and profile is not None:
                names[key] = node["name"]
                profiles[node["name"]] = profile
        profiles = dict(sorted(profiles.items()))
        agreements = sorted(
            (names[a], names[b], min(1.0, max(-1.0, value)))
            for (a, b), value in latest.items()
            if a in names and b in names
        )
        if len(agreements) < MIN_FIT_PAIRS:
            log.info(
                "round %d: similarity not fitted (%d agreement pairs, %d needed)",
                outcome.round,
                len(agreements),
                MIN_FIT_PAIRS,
            )
            return
        try:
            arrays, before, after = self.similarity_fit(
                outcome.aggregated,
                profiles,
                agreements,
                steps=self.similarity_steps,
                seed=self.seed + outcome.round,
            )
        except BadInputError as exc:  # arrays the model cannot load: the average stands
            log.warning("round %d: similarity not fitted: %s", outcome.round, exc)
            return
        outcome.aggregated = arrays
        outcome.similarity_fit = SimilarityFitInfo(
            round=outcome.round,
            pairs=len(agreements),
            nodes=len({a for a, _, _ in agreements}),
            steps=self.similarity_steps,
            loss_before=before,
            loss_after=after,
        )
        log.info(
            "round %d: similarity fitted on %d pairs from %d nodes, loss %.4f -> %.4f",
            outcome.round,
            len(agreements),
            outcome.similarity_fit.nodes,
            before,
            after,
        )

    def receipt_messages(self, outcome: RoundOutcome) -> list[Message]:
        """Tell each leaving node the server holds its reply of the round, so it may stop.

        Sent once the round is recorded. Flower turns the reply of a node that stopped
        before the server pulled it into an error ("node unavailable"), even though it
        had arrived; so a node that only enrolls waits for this before it goes.
        """
        return [
            Message(
                RecordDict({REC_CONFIG: ConfigRecord({"round": outcome.round})}),
                dst_node_id=node_id,
                message_type=MSG_RECEIVED,
            )
            for node_id in outcome.leaving
        ]

    def _check_reply(
        self, reply: Message, current: Arrays
    ) -> tuple[Arrays | None, float, dict[str, float]]:
        """(shared update or None for a node without data yet, weight, metrics)."""
        content = reply.content
        extra = set(content.keys()) - {
            REC_SHARED, REC_OWN_EXPERT, REC_METRICS, REC_NODE, REC_SCHEDULES, REC_PROBE_SCORES
        }  # fmt: skip
        if extra:
            raise UpdateRejected(f"unexpected records {sorted(extra)}")
        if REC_PROBE_SCORES in content and not self.teacher_epochs:
            raise UpdateRejected("probe scores the server did not ask for")
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
        check_update(update, current)
        check_finite(record_to_arrays(content.array_records[REC_OWN_EXPERT]), "expert")
        self.check_probe_scores(content)
        return update, weight, metrics

    def check_probe_scores(self, content: RecordDict) -> list[np.ndarray] | None:
        """A reply's teacher scores, checked against the probe set sent (None: it sent
        none); UpdateRejected, one line, if their shapes or values are wrong."""
        if REC_PROBE_SCORES not in content.array_records:
            return None
        try:
            arrays = record_to_arrays(content.array_records[REC_PROBE_SCORES])
            return probe_score_arrays(arrays, [t.n for t in self.probes])
        except ValueError as exc:
            raise UpdateRejected(str(exc)) from None
