"""An idle federation stays idle: a round starts only when there is something new to learn.

Something new is: a node the run has not served yet (a newcomer, seen by polling the
SuperLink's node list, which starts no process), a node whose last reply counted other
examples than its reply before (new records), a node still tuning (its reply's
`queued-jobs` > 0: its records are coming), or an operator's request
(`simoe-server round`, a file beside the registry). After a round with nothing new the
loop waits for one of those, or at the longest `idle_probe_s` (a round that asks the
nodes again: records tuned outside the daemon's queue are found then). A round costs
every node a ClientApp process and a training step; with nothing new it teaches nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from flwr.app import Message

from schemas.messages import BUSY_METRIC, REC_METRICS, WEIGHT_METRIC

REQUEST_FILE = "round.request"  # beside the registry: `simoe-server round` creates it


def request_path(registry: Path) -> Path:
    return registry.with_name(REQUEST_FILE)


def request_round(registry: Path) -> Path:
    """Ask the running ServerApp for a round now (it looks every 2 s, every 5 s while idle)."""
    path = request_path(registry)
    path.touch()
    return path


class News:
    """What the rounds so far tell about whether the next one has anything to learn."""

    def __init__(self, registry: Path | None = None) -> None:
        self.request = request_path(registry) if registry is not None else None
        self.examples: dict[int, float] = {}  # each node's num-examples in its last reply
        self.fresh = True  # the next round is worth running (a run starts with one)

    def after_round(self, replies: Iterable[Message], *, joined: bool = False) -> bool:
        """Note a round's replies; whether it brought news (and so the next round is due)."""
        news = joined
        for reply in replies:
            if reply.has_error():
                continue
            metrics = reply.content.metric_records.get(REC_METRICS)
            node = reply.metadata.src_node_id
            if metrics is None:
                continue
            examples = float(metrics.get(WEIGHT_METRIC, 0.0))  # type: ignore[arg-type]
            busy = float(metrics.get(BUSY_METRIC, 0.0)) > 0  # type: ignore[arg-type]
            if busy or self.examples.get(node) != examples:
                news = True
            self.examples[node] = examples
        self.fresh = news
        return news

    def requested(self) -> bool:
        """Whether an operator asked for a round (the request is taken: it counts once)."""
        if self.request is None or not self.request.exists():
            return False
        with contextlib.suppress(OSError):
            self.request.unlink()
        self.fresh = True
        return True
