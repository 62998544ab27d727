"""Which of a network's tasks to tune: all of them, the N largest, or a share of its FLOPs.

A network's arithmetic sits in a few tasks (one BERT layer: its three dense layers are
97% of its FLOPs), so tuning only those buys most of the gain for a fraction of the
search; the other tasks keep TVM's default schedule. A task's size is its weight (how
often the network calls it) times the FLOPs of one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas import BadInputError
from schemas.tuning import TaskSelection


@dataclass(frozen=True)
class TaskChoice:
    """`--largest-tasks N` and/or `--flops-share F`; neither: every task."""

    largest: int | None = None
    flops_share: float | None = None

    def check(self) -> None:
        if self.largest is not None and self.largest < 1:
            raise BadInputError(f"--largest-tasks must be at least 1, got {self.largest}")
        if self.flops_share is not None and not 0 < self.flops_share <= 1:
            raise BadInputError(f"--flops-share must be in (0, 1], got {self.flops_share}")

    @property
    def everything(self) -> bool:
        return self.largest is None and self.flops_share is None

    def describe(self) -> str:
        parts = []
        if self.flops_share is not None:
            parts.append(f"tasks covering {self.flops_share:.0%} of its FLOPs")
        if self.largest is not None:
            parts.append(f"at most the {self.largest} largest")
        return ", ".join(parts)


def select_tasks(
    names: Sequence[str], sizes: Sequence[float], choice: TaskChoice
) -> tuple[list[int], TaskSelection | None]:
    """Indices of the tasks to tune (in the network's order) and what they cover.

    Largest first, until the FLOPs share is reached, and never more than `largest`
    tasks (the share may then fall short: the report says what it is). Every task, and
    no TaskSelection, when nothing is asked.
    """
    choice.check()
    everything = list(range(len(names)))
    if choice.everything:
        return everything, None
    total = sum(sizes)
    order = sorted(everything, key=lambda i: (-sizes[i], i))
    chosen: list[int] = []
    covered = 0.0
    for i in order:
        if choice.largest is not None and len(chosen) >= choice.largest:
            break
        if choice.flops_share is not None and total > 0 and covered / total >= choice.flops_share:
            break
        chosen.append(i)
        covered += sizes[i]
    chosen.sort()
    selection = TaskSelection(
        rule=choice.describe(),
        tuned=[names[i] for i in chosen],
        total_tasks=len(names),
        flops_share=covered / total if total > 0 else 0.0,
    )
    return chosen, selection
