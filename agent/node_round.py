"""The node's round: what a node does with a train instruction, without Flower.

`node_round(node, instruction, received, ...)` is a plain function of the node's state
directory (`NodeState`), the server's `TrainInstruction` and what the message brought,
decoded (`Received`: the global shared arrays and the delivered experts). It

1. loads the global shared parts into the node's model (a refused global fails the
   round, and the model file stays as it was);
2. adds the delivered experts (a refused one is left out, and noted) and prunes the
   expert bank to what the server chose this round;
3. leaves out delivered experts that rank the node's own measurements backwards
   (`simoe_model.expert_check`), when the node has records to test them on, and keeps
   each checked expert's rank agreement (2 decimals) for its reply: the server fits the
   hardware similarity on those numbers;
4. trains its round (`simoe_model.train.local_round`, FedRep) when it has records and
   the instruction says so; with `personal_epochs`, then fine-tunes a personal copy of the
   program encoder and its own expert on its records (`simoe_model.train.personalise`),
   kept as `personal.pt` for tuning and never sent (a trained round without it removes
   the personal model, now older than the global it holds);
5. with `teacher_epochs` (and the public probes the message carried), trains its teacher,
   a model of its own records alone kept across rounds as `teacher.pt` (never replaced by
   the average, never sent), that many epochs, and returns the teacher's scores on the
   probes: one float per public probe program, what the server distils its encoder toward;
6. keeps the model and the federation state (versions, rounds trained, the experts it
   holds, its verdicts, metrics).

It returns what the reply carries (`RoundResult`: shared update, own expert, metrics, the
teacher's probe scores).
The ClientApp (`agent.client_app`) decodes the message, calls this and encodes the reply.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from agent.node_state import NodeState
from agent.payload import PayloadRefused, adopt_experts, adopt_global, check_protocol, note_refusal
from schemas import TrainInstruction
from schemas.messages import WEIGHT_METRIC
from schemas.protocol import Arrays

if TYPE_CHECKING:
    from simoe_model.model import SiMoE
    from simoe_model.probe_file import ProbeTask
    from simoe_model.task_data import DeviceDataset


@dataclass
class Received:
    """What a train message brought, decoded."""

    shared: Arrays  # the global shared arrays
    experts: Mapping[str, Arrays] = field(default_factory=dict)  # delivered experts by name
    unreadable: Mapping[str, str] = field(default_factory=dict)  # expert -> why not decoded
    probes: Sequence[ProbeTask] = ()  # the public probe set (with teacher_epochs)


@dataclass
class RoundResult:
    """What the node's reply carries (no records, no features: aggregates only)."""

    shared_update: Arrays | None  # None: nothing trained (no records, or told not to)
    own_expert: Arrays | None
    metrics: dict[str, float]
    probe_scores: Arrays | None = None  # scores_<i>: the teacher's scores on probe task i


def refuse_payload(node: NodeState, text: str) -> None:
    """Log a refused payload and keep it in the node's state, with the model it kept."""
    state = node.federation_state()
    held = f"global model v{state.global_version}" if node.has_model() else "no model"
    text = f"{text}; kept {held}"
    note_refusal(node.federation_log_path, text)
    state.refused_payload = text
    node.save_federation_state(state)


def node_round(
    node: NodeState,
    instruction: TrainInstruction,
    received: Received,
    *,
    check_experts: bool = True,
    started: float | None = None,
) -> RoundResult:
    """One federated round on this node (see the module docstring); PayloadRefused if the
    global model is refused. `started`: when the round began (perf_counter), for the
    `train-seconds` metric."""
    from agent.store_datasets import node_dataset
    from simoe_model.expert_check import remove_refuted_experts
    from simoe_model.model import remove_expert
    from simoe_model.train import local_round, personalise

    started = time.perf_counter() if started is None else started
    name = node.name()
    try:  # nothing received touches the model before it is checked; a refusal keeps it
        check_protocol(instruction.protocol)
        model = node.load_model()
        adopt_global(model, received.shared)
    except PayloadRefused as exc:
        refuse_payload(node, f"train: {exc}")
        raise
    offered = {n: arrays for n, arrays in received.experts.items() if n != name}
    delivered, bad = adopt_experts(model, offered)
    bad = {n: why for n, why in received.unreadable.items() if n != name} | bad
    for expert, why in bad.items():
        kept = "kept the version it holds" if expert in model.expert_names else "left it out"
        refuse_payload(node, f"round {instruction.server_round}: {why}; {kept}")
    for stale in set(model.expert_names) - set(delivered) - set(bad) - {name}:
        remove_expert(model, stale)  # the bank is what the server chose this round

    profile = node.profile()
    dataset = node_dataset(node, profile)
    state = node.federation_state()
    metrics: dict[str, float] = {WEIGHT_METRIC: 0.0, "num-tasks": float(len(dataset.tasks))}
    state.checked_experts, state.refuted_experts, state.expert_agreement = [], [], {}
    if delivered and dataset.tasks and check_experts:
        dropped, agreement = remove_refuted_experts(model, delivered, dataset.tasks)
        state.checked_experts, state.refuted_experts = sorted(delivered), dropped
        # an aggregate over all its tasks, 2 decimals: what the reply may say of its records
        state.expert_agreement = {
            e: round(min(1.0, max(-1.0, v)), 2) for e, v in agreement.items() if np.isfinite(v)
        }
        delivered = [e for e in delivered if e not in dropped]
        metrics["experts-dropped"] = float(len(dropped))
    shared_update = own_expert = probe_scores = None
    if dataset.tasks and instruction.train:
        result = local_round(
            model,
            name,
            dataset,
            dict(received.shared),
            with_bank=bool(delivered),
            epochs=instruction.epochs,
            seed=instruction.seed,
            local_batch=instruction.local_batch,
            prox_mu=instruction.prox_mu,
            transfer_weight=instruction.transfer_weight,
        )
        metrics.update(result.metrics)
        metrics[WEIGHT_METRIC] = float(dataset.num_candidates)
        state.rounds_trained += 1
        shared_update, own_expert = result.shared_update, result.expert
        personal, state.personal_epochs, state.personal_seconds = None, 0, 0.0
        if instruction.personal_epochs > 0:
            cpu = time.process_time()
            personal = personalise(
                model, name, dataset, epochs=instruction.personal_epochs,
                seed=instruction.seed, local_batch=instruction.local_batch,
            )  # fmt: skip
            state.personal_epochs = instruction.personal_epochs
            state.personal_seconds = time.process_time() - cpu
        node.save_personal_model(personal)
        if instruction.teacher_epochs > 0 and received.probes:
            probe_scores = teach(node, model, name, dataset, instruction, received.probes)
    node.save_model(model)
    metrics = {k: v for k, v in metrics.items() if np.isfinite(v)}
    metrics["train-seconds"] = time.perf_counter() - started
    state.global_version = instruction.global_version
    state.last_round = instruction.server_round
    state.experts = sorted(set(model.expert_names) - {name})
    state.refused = None
    state.last_metrics = metrics
    node.save_federation_state(state)
    return RoundResult(shared_update, own_expert, metrics, probe_scores)


def teach(
    node: NodeState,
    model: SiMoE,
    name: str,
    dataset: DeviceDataset,
    instruction: TrainInstruction,
    probes: Sequence[ProbeTask],
) -> Arrays:
    """Train the node's teacher `instruction.teacher_epochs` more epochs on its own records
    (program encoder and own expert together, as its own-only model would be; the first
    time from a copy of `model`) and return its scores on the public probes."""
    import copy

    import torch

    from simoe_model.train import train_expert

    teacher = node.load_teacher_model()
    if teacher is None or name not in teacher.expert_names:
        teacher = copy.deepcopy(model)
    train_expert(
        teacher, name, dataset, epochs=instruction.teacher_epochs, seed=instruction.seed,
        tasks_per_step=instruction.local_batch,
    )  # fmt: skip
    node.save_teacher_model(teacher)
    teacher.eval()
    with torch.no_grad():
        head = teacher.expert(name)
        return {
            f"scores_{i}": head(teacher.embed(t.rows, t.segment, t.n)).numpy().astype(np.float32)
            for i, t in enumerate(probes)
        }
