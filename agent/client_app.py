"""The node's Flower ClientApp: a thin adapter over the agent's state directory.

Flower starts a fresh process per message, so nothing lives here between messages:
the state directory (node config `state-dir`) holds the model, the store and what
the node knows of the federation. Replies carry only the shared arrays, the node's
own expert, its hardware profile (in NodeHello) and aggregate metrics, and, where the
node opted in to schedule sharing (`agent.sharing`), its schedule share.

The node's round itself (adopt the global model and the experts, prune the bank, drop
refuted experts, train, keep the federation state) is `agent.node_round`, a plain
function of the node's state; here each message is decoded, handed to it and encoded.

The state directory's layout is agent.node_state.NodeState's: its config, key,
profile, federated model, federation state and store (the measurements, never sent).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from pydantic import ValidationError

from agent.audit import record_replies
from agent.node_round import Received, node_round, refuse_payload
from agent.node_state import NodeState
from agent.payload import (
    PayloadRefused,
    adopt_global,
    check_protocol,
    decode,
    decode_experts,
    decode_offer,
)
from agent.sharing import keep_offer, schedule_share, sharing_on
from schemas import BadInputError, NodeHello, TrainInstruction
from schemas.errors import one_line
from schemas.messages import BUSY_METRIC, REC_CONFIG, REC_EXPERT_PREFIX, REC_PROBES, REC_SHARED
from schemas.protocol import node_reply, prepare_flower_env
from schemas.sharing import REC_SCHEDULES
from simoe_model import tvm_compat

log = logging.getLogger("simoe.agent")


def _node(context: Context) -> NodeState:
    value = context.node_config.get("state-dir")
    if not value:
        raise BadInputError("node config has no 'state-dir' (start the SuperNode with it)")
    return NodeState(Path(str(value)))


def queued_jobs(node: NodeState) -> int:
    """Tuning jobs waiting or running in the node's queue (the daemon's files; a count)."""
    return sum(len(list((node.queue_dir / d).glob("*.json"))) for d in ("pending", "running"))


def _check_experts(context: Context) -> bool:
    """Node config `check-experts` (default on): test delivered experts on own records."""
    return str(context.node_config.get("check-experts", "true")).lower() not in {"0", "false"}


def _leaving(context: Context) -> bool:
    """Node config `leaving` (set by `enroll`): this SuperNode replies once and stops."""
    return str(context.node_config.get("leaving", "false")).lower() in {"1", "true"}


def _hello(node: NodeState, context: Context) -> NodeHello:
    return node.hello(leaving=_leaving(context))


def _entry_point(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower starts a fresh process per message: prepare it as every entry point does."""
    prepare_flower_env()
    tvm_compat.install()
    return call_next(message, context)


# record_replies: a copy of each reply under audit/, if asked
app = ClientApp(mods=[_entry_point, record_replies])


@app.query("hello")
def hello(message: Message, context: Context) -> Message:
    """Say who this node is; keep the global model it came with if it is newer (and sound)."""
    node = _node(context)
    state = node.federation_state()
    config = message.content.config_records[REC_CONFIG]
    version = int(config.get("global-version", 0))
    if REC_SHARED in message.content.array_records and (
        version > state.global_version or not node.has_model()
    ):
        try:
            check_protocol(config.get("protocol"))
            model = node.load_model()
            adopt_global(model, decode(message.content.array_records[REC_SHARED], "global model"))
        except PayloadRefused as exc:
            refuse_payload(node, f"global model v{version} at hello: {exc}")
        else:
            node.save_model(model)
            state.global_version = version
            state.refused = None
            node.save_federation_state(state)
    # schedule sharing (opt-in): the share goes with the hello, so the server can answer
    # a newcomer's first round with the most similar units' schedules
    return Message(node_reply(_hello(node, context), share=schedule_share(node)), reply_to=message)


@app.query("refused")
def refused(message: Message, context: Context) -> Message:
    """Remember why the server refused this node (enroll reports it)."""
    node = _node(context)
    state = node.federation_state()
    state.refused = str(message.content.config_records[REC_CONFIG].get("reason", "refused"))
    node.save_federation_state(state)
    return Message(RecordDict(), reply_to=message)


@app.query("received")
def received(message: Message, context: Context) -> Message:
    """The server holds this node's reply of a round: a leaving node may stop now."""
    node = _node(context)
    state = node.federation_state()
    state.receipt_round = int(message.content.config_records[REC_CONFIG].get("round", 0))
    node.save_federation_state(state)
    return Message(RecordDict(), reply_to=message)


@app.train()
def train(message: Message, context: Context) -> Message:
    """Decode the instruction, the global model and the experts; run the node's round
    (`agent.node_round`); encode its reply."""
    started = time.perf_counter()
    node = _node(context)
    name = node.name()
    inbox = message.content
    try:  # a message that does not decode fails the round; the model is untouched
        try:
            instruction = TrainInstruction.model_validate_json(
                str(inbox.config_records[REC_CONFIG]["instruction"])
            )
        except (KeyError, ValidationError) as exc:
            raise PayloadRefused(f"bad train instruction ({one_line(exc)})") from None
        check_protocol(instruction.protocol)
        shared = decode(inbox.array_records[REC_SHARED], "global model")
    except PayloadRefused as exc:
        refuse_payload(node, f"train: {exc}")
        raise
    experts, unreadable = decode_experts(
        {
            key.removeprefix(REC_EXPERT_PREFIX): record
            for key, record in inbox.array_records.items()
            if key.startswith(REC_EXPERT_PREFIX) and key.removeprefix(REC_EXPERT_PREFIX) != name
        }
    )
    if REC_SCHEDULES in inbox.config_records and sharing_on(node):
        try:  # a bad offer is refused and noted; the round goes on without it
            keep_offer(node, decode_offer(inbox.config_records[REC_SCHEDULES]))
        except PayloadRefused as exc:
            refuse_payload(node, f"round {instruction.server_round}: {exc}")
    probes = []
    if instruction.teacher_epochs > 0:
        from agent.probe_cache import ProbesUnavailable, round_probes

        # the probe set comes once per node, then by its digest (agent.probe_cache)
        record = inbox.array_records.get(REC_PROBES)
        try:  # bad probes are refused and noted; the round goes on without the teacher
            sent = None if record is None else decode(record, "probes")
            probes = round_probes(node, instruction, sent)
        except ProbesUnavailable as exc:  # the reply's hello lists what it holds: sent next
            log.warning("round %d: %s", instruction.server_round, exc)
        except (PayloadRefused, BadInputError) as exc:
            refuse_payload(node, f"round {instruction.server_round}: {exc}")
    result = node_round(
        node,
        instruction,
        Received(shared, experts, unreadable, probes),
        check_experts=_check_experts(context),
        started=started,
    )
    content = node_reply(
        _hello(node, context),
        shared=result.shared_update,
        own_expert=result.own_expert,
        # a node still tuning: its records are still coming
        metrics={**result.metrics, BUSY_METRIC: float(queued_jobs(node))},
        share=schedule_share(node),
        probe_scores=result.probe_scores,
    )
    return Message(content, reply_to=message)
