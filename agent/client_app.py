"""The node's Flower ClientApp: a thin adapter over the agent's state directory.

Flower starts a fresh process per message, so nothing lives here between messages:
the state directory (node config `state-dir`) holds the model, the store and what
the node knows of the federation. Replies carry only the shared arrays, the node's
own expert, its hardware profile (in NodeHello) and aggregate metrics.

State directory layout used here:
  agent.json                 the AgentConfig (name, device, server)
  keys/node.key, node.pub    the node's ECDSA key (written by `enroll`)
  federation/profile.json    the hardware profile sent to the server
  federation/model.pt        the current SiMoE (global shared parts, bank, own expert)
  federation/state.json      NodeFederationState
  store.sqlite               the measurements (agent.store.Store); never sent
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from pydantic import ValidationError

from agent.audit import record_replies
from agent.payload import (
    PayloadRefused,
    adopt_experts,
    adopt_global,
    check_protocol,
    decode,
    note_refusal,
)
from schemas import AgentConfig, BadInputError, HardwareProfile
from schemas.errors import one_line
from schemas.messages import (
    REC_CONFIG,
    REC_EXPERT_PREFIX,
    REC_GLOBAL,
    REC_METRICS,
    REC_NODE,
    REC_OWN_EXPERT,
    REC_SHARED,
    WEIGHT_METRIC,
    NodeFederationState,
    NodeHello,
    TrainInstruction,
    key_fingerprint,
)
from schemas.protocol import arrays_to_record, prepare_flower_env
from simoe_model import tvm_compat

if TYPE_CHECKING:
    from simoe_model.data import DeviceDataset

log = logging.getLogger("simoe.agent")


class NodeState:
    """The federation's part of a node's state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.dir = self.state_dir / "federation"

    @property
    def config(self) -> AgentConfig:
        return AgentConfig.load(self.state_dir)

    @property
    def key_path(self) -> Path:
        return self.state_dir / "keys" / "node.key"

    @property
    def public_key_path(self) -> Path:
        return self.state_dir / "keys" / "node.pub"

    @property
    def profile_path(self) -> Path:
        return self.dir / "profile.json"

    @property
    def model_path(self) -> Path:
        return self.dir / "model.pt"

    @property
    def state_path(self) -> Path:
        return self.dir / "state.json"

    def name(self) -> str:
        name = self.config.name
        if not name:
            raise BadInputError(f"{self.state_dir}: not enrolled (no node name); run enroll")
        return name

    def fingerprint(self) -> str:
        if not self.public_key_path.exists():
            raise BadInputError(f"{self.state_dir}: no node key; run `simoe-agent enroll`")
        return key_fingerprint(self.public_key_path.read_bytes())

    def profile(self) -> HardwareProfile:
        """The saved profile; profiles the device once (and saves it) if there is none."""
        if self.profile_path.exists():
            return HardwareProfile.model_validate_json(self.profile_path.read_text())
        from agent.devices import get_device
        from agent.profiler import load_or_profile

        profile = load_or_profile(get_device(self.config.device), self.state_dir)
        self.save_profile(profile)
        return profile

    def save_profile(self, profile: HardwareProfile) -> None:
        write_atomic(self.profile_path, profile.model_dump_json(indent=2))

    def load(self) -> NodeFederationState:
        if not self.state_path.exists():
            return NodeFederationState()
        try:
            return NodeFederationState.model_validate_json(self.state_path.read_text())
        except ValueError:
            return NodeFederationState()  # a torn file: start over, the server resends

    def save(self, state: NodeFederationState) -> None:
        write_atomic(self.state_path, state.model_dump_json(indent=2))

    def hello(self) -> NodeHello:
        state = self.load()
        return NodeHello(
            name=self.name(),
            key_fingerprint=self.fingerprint(),
            profile=self.profile(),
            has_model=self.model_path.exists(),
            expert_version=state.rounds_trained,
            checked_experts=state.checked_experts,
            refuted_experts=state.refuted_experts,
        )

    def load_model(self):  # noqa: ANN201 - SiMoE, imported lazily (torch is slow to import)
        from simoe_model.model import SiMoE, load_model

        return load_model(self.model_path) if self.model_path.exists() else SiMoE()


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def local_dataset(state_dir: Path, device: str, profile: HardwareProfile) -> DeviceDataset:
    """The node's measurements as a DeviceDataset (features cached in its store).

    Records the tuner wrote have no features yet: they are extracted here, once.
    """
    from agent.store import Store
    from agent.training_data import cache_missing_features, load_device_dataset
    from simoe_model.data import DeviceDataset
    from simoe_model.hardware import hardware_vector

    store_path = state_dir / "store.sqlite"
    if not store_path.exists():
        return DeviceDataset(device, hardware_vector(profile), [])
    with Store(store_path) as store:
        cache_missing_features(store, device)
        return load_device_dataset(store, device, profile)


def _state_dir(context: Context) -> Path:
    value = context.node_config.get("state-dir")
    if not value:
        raise BadInputError("node config has no 'state-dir' (start the SuperNode with it)")
    return Path(str(value)).expanduser()


def _check_experts(context: Context) -> bool:
    """Node config `check-experts` (default on): test delivered experts on own records."""
    return str(context.node_config.get("check-experts", "true")).lower() not in {"0", "false"}


def drop_refuted_experts(model, delivered: list[str], dataset: DeviceDataset) -> list[str]:  # noqa: ANN001
    """Leave out delivered experts that rank this node's own measurements backwards."""
    from simoe_model.expert_check import screen_experts
    from simoe_model.model import remove_expert

    drop, agreement = screen_experts(model, delivered, dataset.tasks)
    for name in drop:
        remove_expert(model, name)
        log.warning(
            "expert %s left out: it ranks this node's measurements backwards "
            "(rank correlation %.2f)",
            name,
            agreement[name],
        )
    return drop


def _hello_record(node: NodeState) -> ConfigRecord:
    return ConfigRecord({"hello": node.hello().model_dump_json()})


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
    node = NodeState(_state_dir(context))
    state = node.load()
    config = message.content.config_records[REC_CONFIG]
    version = int(config.get("global-version", 0))
    if REC_GLOBAL in message.content.array_records and (
        version > state.global_version or not node.model_path.exists()
    ):
        from simoe_model.model import save_model

        try:
            check_protocol(config.get("protocol"))
            model = node.load_model()
            adopt_global(model, decode(message.content.array_records[REC_GLOBAL], "global model"))
        except PayloadRefused as exc:
            refuse_payload(node, f"global model v{version} at hello: {exc}")
        else:
            save_model(model, node.model_path)
            state.global_version = version
            state.refused = None
            node.save(state)
    return Message(RecordDict({REC_NODE: _hello_record(node)}), reply_to=message)


def refuse_payload(node: NodeState, text: str) -> None:
    """Log a refused payload and keep it in the node's state, with the model it kept."""
    state = node.load()
    held = f"global model v{state.global_version}" if node.model_path.exists() else "no model"
    text = f"{text}; kept {held}"
    note_refusal(node.state_dir, text)
    state.refused_payload = text
    node.save(state)


@app.query("refused")
def refused(message: Message, context: Context) -> Message:
    """Remember why the server refused this node (enroll reports it)."""
    node = NodeState(_state_dir(context))
    state = node.load()
    state.refused = str(message.content.config_records[REC_CONFIG].get("reason", "refused"))
    node.save(state)
    return Message(RecordDict(), reply_to=message)


@app.train()
def train(message: Message, context: Context) -> Message:
    """Adopt the global shared parts and delivered experts; train on local data; reply."""
    from simoe_model.model import (
        expert_arrays,
        load_shared_arrays,
        remove_expert,
        save_model,
        shared_arrays,
    )
    from simoe_model.train import train_expert, train_shared

    started = time.perf_counter()
    node = NodeState(_state_dir(context))
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
        received = decode(inbox.array_records[REC_GLOBAL], "global model")
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
    dataset = local_dataset(node.state_dir, node.config.device, profile)
    state = node.load()
    metrics: dict[str, float] = {WEIGHT_METRIC: 0.0, "num-tasks": float(len(dataset.tasks))}
    state.checked_experts, state.refuted_experts = [], []
    if delivered and dataset.tasks and _check_experts(context):
        dropped = drop_refuted_experts(model, delivered, dataset)
        state.checked_experts, state.refuted_experts = sorted(delivered), dropped
        delivered = [e for e in delivered if e not in dropped]
        metrics["experts-dropped"] = float(len(dropped))
    content = RecordDict()
    if dataset.tasks and instruction.train:
        if delivered and instruction.epochs > 0:
            shared = train_shared(
                model,
                [dataset],
                epochs=instruction.epochs,
                seed=instruction.seed,
                frozen_experts=True,
                expert_of={dataset.device: name},
            )
            metrics["shared-loss"] = float(shared.get("loss", float("nan")))
        model.ensure_expert(name, dataset.hardware_vector)
        epochs = max(instruction.epochs, 1)
        if delivered:
            # Two parts, as in FedRep. The contribution to the average: the program
            # encoder trained with the own expert on local data (a copy). What the node
            # keeps and sends as its expert: the own expert trained on the global encoder
            # it was sent, frozen, so that expert and encoder match (and match the other
            # nodes' experts). Trained on its own tasks only, the local encoder forgets
            # what the fleet taught it: the node tunes with the global shared parts.
            contribution = copy.deepcopy(model)
            train_expert(contribution, name, dataset, epochs=epochs, seed=instruction.seed)
            shared_update = shared_arrays(contribution)
            own = train_expert(
                model, name, dataset, epochs=epochs, seed=instruction.seed, train_encoder=False
            )
            load_shared_arrays(model, received)
        else:  # no fleet model yet (first round, a node alone): encoder and expert together
            own = train_expert(model, name, dataset, epochs=epochs, seed=instruction.seed)
            shared_update = shared_arrays(model)
        metrics["expert-loss"] = float(own.get("loss", float("nan")))
        metrics[WEIGHT_METRIC] = float(dataset.num_candidates)
        state.rounds_trained += 1
        content[REC_SHARED] = arrays_to_record(shared_update)
        content[REC_OWN_EXPERT] = arrays_to_record(expert_arrays(model, name))
    save_model(model, node.model_path)
    metrics = {k: v for k, v in metrics.items() if np.isfinite(v)}
    metrics["train-seconds"] = time.perf_counter() - started
    state.global_version = instruction.global_version
    state.last_round = instruction.server_round
    state.experts = sorted(set(model.expert_names) - {name})
    state.refused = None
    state.last_metrics = metrics
    node.save(state)
    content[REC_METRICS] = MetricRecord(metrics)
    content[REC_NODE] = _hello_record(node)
    return Message(content, reply_to=message)
