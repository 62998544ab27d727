"""Helpers shared by the federation tests: toy nodes, toy profiles, a toy similarity."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from schemas import AnalyticalSpecs, EmpiricalFingerprint, HardwareProfile
from schemas.messages import (
    REC_CONFIG,
    REC_EXPERT_PREFIX,
    REC_SHARED,
    WEIGHT_METRIC,
    NodeHello,
    TrainInstruction,
)
from schemas.protocol import node_reply, record_to_arrays
from schemas.sharing import (
    OFFER_FIELD,
    REC_SCHEDULES,
    SHARE_FIELD,
    ScheduleOffer,
    ScheduleShare,
)

SHARED_SHAPES = {"encoder.w": (3, 2), "gate.b": (4,)}


def toy_profile(name: str, fp32_gflops: float, device_kind: str = "sim") -> HardwareProfile:
    specs = AnalyticalSpecs(
        compute_units=40,
        clock_mhz=1500,
        fp32_gflops=fp32_gflops,
        fp16_gflops=fp32_gflops * 2,
        mem_bandwidth_gbs=fp32_gflops / 20,
        l2_cache_kb=4096,
        shared_mem_per_unit_kb=64,
        registers_per_unit=65536,
        max_threads_per_unit=1024,
        max_blocks_per_unit=16,
        warp_size=32,
        compute_capability=7.5,
    )
    empirical = EmpiricalFingerprint(
        probe_suite_version="toy", probe_latency_us={"p": 10.0}, bandwidth_gbs=100, fma_gflops=1000
    )
    return HardwareProfile(
        device_kind=device_kind,
        device=f"sim:{name}" if device_kind == "sim" else device_kind,
        name=name,
        analytical=specs,
        empirical=empirical,
        simulated=device_kind == "sim",
    )


def toy_similarity(
    _arrays: Mapping[str, np.ndarray],
    target: HardwareProfile,
    candidates: Mapping[str, HardwareProfile],
) -> dict[str, float]:
    """Closer peak FP32 rate = more similar (stands in for the learned encoder)."""
    t = math.log(target.analytical.fp32_gflops)
    return {name: -abs(math.log(p.analytical.fp32_gflops) - t) for name, p in candidates.items()}


def initial_arrays() -> dict[str, np.ndarray]:
    return {k: np.zeros(s, dtype=np.float32) for k, s in SHARED_SHAPES.items()}


@dataclass
class ToyNode:
    """A node whose 'training' returns fixed shared arrays; it remembers what it got."""

    name: str
    fp32_gflops: float
    weight: float = 1.0
    value: float = 1.0  # the shared arrays it sends back are all this value
    corrupt: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None
    received_experts: list[list[str]] = field(default_factory=list)
    hellos: int = 0
    refused: list[str] = field(default_factory=list)
    got_global: list[dict[str, np.ndarray]] = field(default_factory=list)
    refutes: list[str] = field(default_factory=list)  # experts its "records" refute
    agreement: dict[str, float] = field(default_factory=dict)  # its rank agreement with each
    instructions: list[TrainInstruction] = field(default_factory=list)
    trained_from: list[dict[str, np.ndarray]] = field(default_factory=list)  # globals sent
    device_kind: str = "sim"
    extra_metrics: dict[str, float] = field(default_factory=dict)  # e.g. queued-jobs
    share: ScheduleShare | None = None  # schedule sharing: what it shares in each reply
    raw_share: str | None = None  # a share's JSON as sent in its train replies (malformed)
    offers: list[ScheduleOffer] = field(default_factory=list)  # the offers it was sent

    @property
    def key(self) -> str:
        return f"key-{self.name}-0123456789"

    def hello(self) -> NodeHello:
        got = self.received_experts[-1] if self.received_experts else []
        return NodeHello(
            name=self.name,
            key_fingerprint=self.key,
            profile=toy_profile(self.name, self.fp32_gflops, self.device_kind),
            expert_version=len(self.received_experts),
            checked_experts=got,
            refuted_experts=[e for e in got if e in self.refutes],
            expert_agreement={e: self.agreement[e] for e in got if e in self.agreement},
        )

    def app(self) -> ClientApp:
        app = ClientApp()
        node = self

        @app.query("hello")
        def _hello(message: Message, _context: Context) -> Message:
            node.hellos += 1
            node.got_global.append(record_to_arrays(message.content.array_records[REC_SHARED]))
            return Message(node_reply(node.hello(), share=node.share), reply_to=message)

        @app.query("refused")
        def _refused(message: Message, _context: Context) -> Message:
            node.refused.append(str(message.content[REC_CONFIG]["reason"]))
            return Message(RecordDict(), reply_to=message)

        @app.train()
        def _train(message: Message, _context: Context) -> Message:
            instruction = TrainInstruction.model_validate_json(
                str(message.content.config_records[REC_CONFIG]["instruction"])
            )
            delivered = [
                k.removeprefix(REC_EXPERT_PREFIX)
                for k in message.content.array_records
                if k.startswith(REC_EXPERT_PREFIX)
            ]
            assert sorted(delivered) == sorted(instruction.experts)
            node.received_experts.append(instruction.experts)
            node.instructions.append(instruction)
            node.trained_from.append(record_to_arrays(message.content.array_records[REC_SHARED]))
            shared = {k: np.full(s, node.value, dtype=np.float32) for k, s in SHARED_SHAPES.items()}
            if node.corrupt is not None:
                shared = node.corrupt(shared)
            own = {"head.w": np.full((2, 2), node.fp32_gflops, dtype=np.float32)}
            metrics = {WEIGHT_METRIC: node.weight, "shared-loss": 0.5, **node.extra_metrics}
            if REC_SCHEDULES in message.content.config_records:
                offer = message.content.config_records[REC_SCHEDULES][OFFER_FIELD]
                node.offers.append(ScheduleOffer.model_validate_json(str(offer)))
            content = node_reply(
                node.hello(), shared=shared, own_expert=own, metrics=metrics, share=node.share
            )
            if node.raw_share is not None:
                content[REC_SCHEDULES] = ConfigRecord({SHARE_FIELD: node.raw_share})
            return Message(content, reply_to=message)

        return app


def seed_node(state_dir, name: str, device, tasks) -> None:  # noqa: ANN001
    """A node's state directory as enroll + tuning would leave it, with synthetic data.

    `device` is a simoe_model.synthetic.SyntheticDevice, `tasks` SyntheticTasks; the
    records go through the real Store (traces are placeholders: nothing is tuned).
    """
    from agent.enroll import create_node_key
    from agent.node_state import NodeState
    from schemas import AgentConfig, TuningRecord
    from simoe_model.synthetic import device_dataset

    node = NodeState(state_dir)
    config = AgentConfig(name=name, device=f"sim:{name}")
    node.save_config(config)
    create_node_key(state_dir)
    node.save_profile(device.profile())
    dataset = device_dataset(device, tasks)
    with node.open_store() as store:
        for task in dataset.tasks:
            records = [
                TuningRecord(
                    workload_key=f"wk-{task.task_name}",
                    task_name=task.task_name,
                    trace={"candidate": cid},
                    run_secs=[float(lat)],
                    target={"kind": "cuda"},
                    device=config.device,
                    simulated=True,
                )
                for cid, lat in zip(task.candidate_ids, task.latencies, strict=True)
            ]
            ids = store.add_records(records)
            store.put_features(dict(zip(ids, task.features, strict=True)))


def fake_trace(factor: int) -> str:
    """A trace's JSON as MetaSchedule writes it (one split of a matmul's first loop)."""
    return json.dumps(
        [
            [
                ["GetSBlock", [], ["C", "main"], ["b0"]],
                ["GetLoops", ["b0"], [], ["l1", "l2", "l3"]],
                ["Split", ["l1", "None", factor], [True, False], ["l4", "l5"]],
            ],
            [],
        ],
        separators=(",", ":"),
    )


def add_shareable_records(state_dir, workload_key: str, latencies: Mapping[int, float]) -> None:  # noqa: ANN001
    """Records of one workload with MetaSchedule-shaped traces (split factor -> seconds) in a
    node's store (seed_node's), with feature rows so training reads them as it does the rest."""
    from agent.node_state import NodeState
    from schemas import TuningRecord

    node = NodeState(state_dir)
    device = node.config().device
    with node.open_store() as store:
        records = [
            TuningRecord(
                workload_key=workload_key,
                task_name=f"shareable-{workload_key[:6]}",
                trace=json.loads(fake_trace(factor)),
                run_secs=[seconds],
                target={"kind": "cuda"},
                device=device,
                simulated=True,
            )
            for factor, seconds in latencies.items()
        ]
        ids = store.add_records(records)
        rng = np.random.default_rng(len(ids))
        store.put_features({i: rng.random((2, 164)).astype(np.float32) for i in ids})
