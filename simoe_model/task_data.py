"""In-memory training data: what one device measured, grouped by task.

`agent.store_datasets` fills these from a node's store; tests and benches build them
directly. `PackedTask` is the same task as tensors, prepared once so that training
steps only gather rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from simoe_model.features import FEATURE_DIM, pack_rows


@dataclass
class TaskData:
    """The measured candidates of one task (workload) on one device.

    Attributes:
        task_name: the task; the same name on two devices means the same workload.
        features: one [n_stores, 164] PerStoreFeature array per candidate.
        latencies: seconds per run of each candidate (finite, positive).
        candidate_ids: optional ids; equal ids on two devices are the same schedule
            (used by the similarity alignment loss).
    """

    task_name: str
    features: list[np.ndarray]
    latencies: np.ndarray
    candidate_ids: list[str] | None = None

    def __post_init__(self) -> None:
        self.latencies = np.asarray(self.latencies, dtype=np.float64)
        if len(self.features) != len(self.latencies):
            raise ValueError(
                f"task {self.task_name}: {len(self.features)} features, "
                f"{len(self.latencies)} latencies"
            )
        if self.candidate_ids is not None and len(self.candidate_ids) != len(self.features):
            raise ValueError(f"task {self.task_name}: candidate_ids length mismatch")

    def __len__(self) -> int:
        return len(self.features)

    def subset(self, index: np.ndarray | list[int]) -> TaskData:
        """The candidates at `index` (e.g. the first N measurements of a few-shot budget)."""
        index = list(index)
        ids = None if self.candidate_ids is None else [self.candidate_ids[i] for i in index]
        return TaskData(
            self.task_name,
            [self.features[i] for i in index],
            self.latencies[index],
            ids,
        )


@dataclass
class DeviceDataset:
    """Everything one device measured, plus its hardware vector."""

    device: str
    hardware_vector: np.ndarray
    tasks: list[TaskData] = field(default_factory=list)

    @property
    def num_candidates(self) -> int:
        return sum(len(t) for t in self.tasks)


@dataclass
class PackedTask:
    """A task as tensors: transformed store rows, row offsets per candidate, targets."""

    task_name: str
    rows: torch.Tensor  # [total_rows, FEATURE_DIM], already log-transformed
    offsets: np.ndarray  # [n + 1] row offsets of the candidates
    latencies: torch.Tensor  # [n] float64 seconds
    candidate_ids: list[str] | None

    @classmethod
    def from_task(cls, task: TaskData) -> PackedTask:
        rows, offsets = pack_rows(task.features)
        return cls(
            task.task_name,
            torch.from_numpy(rows),
            offsets,
            torch.as_tensor(task.latencies, dtype=torch.float64),
            task.candidate_ids,
        )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def gather(self, index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows and segment ids (0..len(index)-1) of the candidates at `index`."""
        starts, ends = self.offsets[index], self.offsets[index + 1]
        counts = ends - starts
        seg = np.repeat(np.arange(len(index)), counts)
        # row index = start of its candidate + position inside it
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        row_index = np.repeat(starts, counts) + within
        return self.rows[torch.from_numpy(row_index)], torch.from_numpy(seg)


assert FEATURE_DIM == 164
