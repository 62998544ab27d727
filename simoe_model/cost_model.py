"""SiMoE as a MetaSchedule cost model, so the tuner can search with it.

`predict` scores candidates on the target device: the gate's mixture over the
expert bank, which includes the target's own expert once it has one.
`update` is few-shot learning while tuning: measured candidates accumulate per
task, and the target's own expert (started from the most similar expert, see
`train.adapt`) is re-trained on them with earlier tasks replayed.
With `sharpness` > 0 the measurements also move the gate (simoe_model.online_gate): on a
task with measured candidates, each expert's gate weight is multiplied by how well it
ranks them, so `predict` stops following an expert the target's measurements contradict,
whether or not the own expert is fine-tuned (`online`).

Built by `SiMoECostModel.for_device(profile, model_path)` from plain inputs; the agent
(agent.cost_models) gives it the node's model file, profile and expert name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.utils import shash2hex

from schemas import HardwareProfile
from schemas.records import failed_run
from simoe_model.features import extract_features
from simoe_model.hardware import hardware_vector as profile_vector
from simoe_model.model import SiMoE, load_model, save_model
from simoe_model.online_gate import DEFAULT_SHARPNESS, online_predict, task_evidence
from simoe_model.task_data import DeviceDataset, TaskData
from simoe_model.train import ReplayBuffer, adapt, predict, train_expert

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule.runner import RunnerResult
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    from tvm.s_tir.meta_schedule.tune_context import TuneContext

TARGET_EXPERT = "target"


@derived_object
class SiMoECostModel(PyCostModel):
    """MetaSchedule cost model backed by a SiMoE model and the target's hardware vector.

    Args:
        model: the SiMoE model (a fresh one when None: it then learns from scratch).
        hardware_vector: the target device's h (simoe_model.hardware.hardware_vector).
        expert_name: name of the target's own expert in the bank.
        online: train the own expert in `update` (False: a frozen, zero-shot model).
        update_epochs: epochs of each online update.
        max_per_task: measured candidates kept per task for online training.
        sharpness: how fast a task's measurements move the experts' gate weights
            (simoe_model.online_gate; 0: never, the gate alone; the default was chosen on
            the protocol's validation split). The own expert is exempt.
    """

    def __init__(
        self,
        model: SiMoE | None = None,
        hardware_vector: np.ndarray | None = None,
        *,
        expert_name: str = TARGET_EXPERT,
        online: bool = True,
        update_epochs: int = 8,
        max_per_task: int = 512,
        seed: int = 0,
        sharpness: float = DEFAULT_SHARPNESS,
    ) -> None:
        super().__init__()
        self.model = model if model is not None else SiMoE()
        if hardware_vector is None:
            hardware_vector = np.zeros(self.model.config.hardware_dim, dtype=np.float32)
        self.hardware_vector = np.asarray(hardware_vector, dtype=np.float32)
        self.expert_name = expert_name
        self.online = online
        self.update_epochs = update_epochs
        self.max_per_task = max_per_task
        self.seed = seed
        self.extractor = ms.feature_extractor.PerStoreFeature()
        self.measured: dict[str, TaskData] = {}
        self.replay = ReplayBuffer(max_tasks=32, per_task=128, seed=seed)
        self.updates = 0
        self.sharpness = float(sharpness)
        # task key -> (model version, expert names, evidence): recomputed after an update
        self._evidence: dict[str, tuple[int, list[str], np.ndarray]] = {}

    def reseed(self, seed: int) -> None:
        """Draw the online fine-tune's and the replay buffer's randomness from `seed`; only
        before the first update (what was drawn already cannot be redrawn)."""
        if self.updates or len(self.replay):
            raise ValueError("reseed before the first update")
        self.seed = seed
        self.replay = ReplayBuffer(
            max_tasks=self.replay.max_tasks, per_task=self.replay.per_task, seed=seed
        )

    @classmethod
    def for_device(
        cls, profile: HardwareProfile, model_path: str | Path | None = None, **options: object
    ) -> SiMoECostModel:
        """The cost model of a profiled device, from a saved model if there is one."""
        model = load_model(model_path) if model_path and Path(model_path).exists() else None
        return cls(model, profile_vector(profile), **options)  # type: ignore[arg-type]

    # -- PyCostModel --------------------------------------------------------------------
    def load(self, path: str) -> None:
        self.model = load_model(path)
        self._evidence.clear()

    def save(self, path: str) -> None:
        save_model(self.model, path)

    def predict(self, context: TuneContext, candidates: list[MeasureCandidate]) -> np.ndarray:
        if not candidates:
            return np.zeros(0, dtype=np.float64)
        if not self.model.expert_names:  # nothing learned yet: every candidate alike
            return np.zeros(len(candidates), dtype=np.float64)
        features = extract_features(context, candidates, self.extractor)
        evidence = self.task_evidence(shash2hex(context.mod))
        if evidence is None:  # the gate alone: today's scores, exactly
            return predict(self.model, features, self.hardware_vector)
        return online_predict(self.model, features, self.hardware_vector, evidence)

    def task_evidence(self, key: str) -> tuple[list[str], np.ndarray] | None:
        """The experts' evidence from the task's measured candidates (None: the gate off,
        or fewer than 2 measured)."""
        task = self.measured.get(key)
        if self.sharpness <= 0 or task is None or len(task) < 2:
            return None
        cached = self._evidence.get(key)
        if cached is None or cached[0] != self.updates:
            names, ev = task_evidence(
                self.model,
                task.features,
                task.latencies,
                self.hardware_vector,
                self.sharpness,
                exempt=(self.expert_name,),
            )
            cached = (self.updates, names, ev)
            self._evidence[key] = cached
        return cached[1], cached[2]

    def update(
        self,
        context: TuneContext,
        candidates: list[MeasureCandidate],
        results: list[RunnerResult],
    ) -> None:
        if not (self.online or self.sharpness > 0) or not candidates:
            return
        features = extract_features(context, candidates, self.extractor)
        keep_feats, latencies = [], []
        for feat, result in zip(features, results, strict=True):
            secs = [float(s) for s in (result.run_secs or [])]
            if result.error_msg is None and not failed_run(secs):
                keep_feats.append(feat)
                latencies.append(float(np.mean(secs)))
        if not latencies:
            return
        key = shash2hex(context.mod)
        task = self._remember(key, keep_feats, np.asarray(latencies))
        if len(task) < 2 or not self.online:  # the online gate alone: no fine-tuning
            return
        dataset = DeviceDataset(self.expert_name, self.hardware_vector, [task])
        others = [n for n in self.model.expert_names if n != self.expert_name]
        if others:  # few-shot: start from the most similar expert, shared parts fixed
            old_tasks = [t for t in self.replay.tasks if t.task_name != key]
            dataset.tasks += old_tasks
            adapt(self.model, self.expert_name, dataset, epochs=self.update_epochs, seed=self.seed)
            self.replay.add([task])
        else:  # no bank to start from: learn the target's expert and the encoder
            train_expert(
                self.model,
                self.expert_name,
                dataset,
                epochs=self.update_epochs,
                seed=self.seed + self.updates,
                replay=self.replay,
            )
        self.updates += 1

    def observe(self, mod: object, features: list[np.ndarray], latencies: np.ndarray) -> None:
        """Measurements of a task made before this run (the node's store): they move the
        gate for that task (with `sharpness` > 0) and are kept with the task's new ones;
        nothing is trained on them here."""
        if len(features):
            self._remember(shash2hex(mod), list(features), np.asarray(latencies, np.float64))

    def _remember(self, key: str, features: list[np.ndarray], latencies: np.ndarray) -> TaskData:
        old = self.measured.get(key)
        task = TaskData(
            key,
            (old.features if old else []) + features,
            np.concatenate([old.latencies if old else np.zeros(0), latencies]),
        )
        if len(task) > self.max_per_task:  # keep the best half and the newest
            task = task.subset(_keep_index(task.latencies, self.max_per_task))
        self.measured[key] = task
        self._evidence.pop(key, None)
        return task


def _keep_index(latencies: np.ndarray, limit: int) -> np.ndarray:
    """Indices to keep: the fastest half of `limit`, then the most recent."""
    fastest = set(np.argsort(latencies)[: limit // 2].tolist())
    recent = [i for i in range(len(latencies) - 1, -1, -1) if i not in fastest]
    return np.sort(np.array(sorted(fastest) + recent[: limit - len(fastest)]))
