"""The node's Flower ClientApp: a thin adapter over the agent's state directory.

Flower starts a fresh process per message, so nothing lives here between messages:
the state directory (node config `state-dir`) holds the model, the store and what
the node knows of the federation. Replies carry only the shared arrays, the node's
own expert, its hardware profile (in NodeHello) and aggregate metrics.

The state directory's layout is agent.node_state.NodeState's: its config, key,
profile, federated model, federation state and store (the measurements, never sent).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from pydantic import ValidationError

from agent.audit import record_replies
from agent.node_state import NodeState
from agent.payload import (
    PayloadRefused,
    adopt_experts,
    adopt_global,
    check_protocol,
    decode,
    note_refusal,
)
from schemas import BadInputError, NodeHello, TrainInstruction
from schemas.errors import one_line
from schemas.messages import (
    BUSY_METRIC,
    REC_CONFIG,
    REC_EXPERT_PREFIX,
    REC_SHARED,
    WEIGHT_METRIC,
)
from schemas.protocol import node_reply, prepare_flower_env
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
    return Message(node_reply(_hello(node, context)), reply_to=message)


def refuse_payload(node: NodeState, text: str) -> None:
    """Log a refused payload and keep it in the node's state, with the model it kept."""
    state = node.federation_state()
    held = f"global model v{state.global_version}" if node.has_model() else "no model"
    text = f"{text}; kept {held}"
    note_refusal(node.federation_log_path, text)
    state.refused_payload = text
    node.save_federation_state(state)


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
    """Adopt the global shared parts and delivered experts; train on local data; reply."""
    from agent.store_datasets import node_dataset
    from simoe_model.expert_check import drop_refuted_experts
    from simoe_model.model import remove_expert
    from simoe_model.train import local_round

    started = time.perf_counter()
    node = _node(context)
    name = node.name()
    inbox = message.content
    try:  # nothing received touches the model before it is checked; a refusal keeps it
        try:
            instruction = TrainInstruction.model_validate_json(
                str(inbox.config_records[REC_CONFIG]["instruction"])
            )
        except (KeyError, ValidationError) as exc:
            raise PayloadRefused(f"bad train instruction ({one_line(exc)})") from None
        check_protocol(instruction.protocol)
        received = decode(inbox.array_records[REC_SHARED], "global model")
        model = node.load_model()
        adopt_global(model, received)
    except PayloadRefused as exc:
        refuse_payload(node, f"train: {exc}")
        raise
    offered = {
        key.removeprefix(REC_EXPERT_PREFIX): record
        for key, record in inbox.array_records.items()
        if key.startswith(REC_EXPERT_PREFIX) and key.removeprefix(REC_EXPERT_PREFIX) != name
    }
    delivered, bad = adopt_experts(model, offered)
    for expert, why in bad.items():
        kept = "kept the version it holds" if expert in model.expert_names else "left it out"
        refuse_payload(node, f"round {instruction.server_round}: {why}; {kept}")
    for stale in set(model.expert_names) - set(delivered) - set(bad) - {name}:
        remove_expert(model, stale)  # the bank is what the server chose this round

    profile = node.profile()
    dataset = node_dataset(node, profile)
    state = node.federation_state()
    metrics: dict[str, float] = {WEIGHT_METRIC: 0.0, "num-tasks": float(len(dataset.tasks))}
    state.checked_experts, state.refuted_experts = [], []
    if delivered and dataset.tasks and _check_experts(context):
        dropped = drop_refuted_experts(model, delivered, dataset)
        state.checked_experts, state.refuted_experts = sorted(delivered), dropped
        delivered = [e for e in delivered if e not in dropped]
        metrics["experts-dropped"] = float(len(dropped))
    shared_update = own_expert = None
    if dataset.tasks and instruction.train:
        result = local_round(
            model,
            name,
            dataset,
            received,
            with_bank=bool(delivered),
            epochs=instruction.epochs,
            seed=instruction.seed,
            local_batch=instruction.local_batch,
            prox_mu=instruction.prox_mu,
        )
        metrics.update(result.metrics)
        metrics[WEIGHT_METRIC] = float(dataset.num_candidates)
        state.rounds_trained += 1
        shared_update, own_expert = result.shared_update, result.expert
    node.save_model(model)
    metrics = {k: v for k, v in metrics.items() if np.isfinite(v)}
    metrics["train-seconds"] = time.perf_counter() - started
    metrics[BUSY_METRIC] = float(queued_jobs(node))  # its records are still coming
    state.global_version = instruction.global_version
    state.last_round = instruction.server_round
    state.experts = sorted(set(model.expert_names) - {name})
    state.refused = None
    state.last_metrics = metrics
    node.save_federation_state(state)
    hello = _hello(node, context)
    content = node_reply(hello, shared=shared_update, own_expert=own_expert, metrics=metrics)
    return Message(content, reply_to=message)
