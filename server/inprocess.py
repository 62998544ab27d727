"""A Grid that hands messages straight to ClientApps in this process.

Why: whole federations (late joiners, dead nodes, bad updates) run in about a
second in tests, and the demo runs without a SuperLink when asked to. Each message
is deep-copied before delivery, as serialization would, so a node can never share
objects with the server. Nodes can be added and killed at any time; a dead node
stays listed but never answers (like a node that vanished mid-round).
"""

from __future__ import annotations

import copy
import itertools
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

ClientCallable = Callable[[Message, Context], Message]
SUPERLINK_NODE_ID = 0


def set_task_identity(run_id: int, node_id: int, task_id: int = 1) -> None:
    """Message() reads run/node/task ids from TaskIdentity; outside a runtime set them."""
    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = node_id
    TaskIdentity.task_id = task_id


@dataclass
class InProcessNode:
    app: ClientCallable
    context: Context
    alive: bool = True


@dataclass
class InProcessGrid(Grid):
    """Delivers each pushed message to the destination node's ClientApp when pulled."""

    run_id: int = 1
    nodes: dict[int, InProcessNode] = field(default_factory=dict)
    # every reply a node sent, in order (the privacy audit reads this)
    sent_by_nodes: list[Message] = field(default_factory=list)
    on_reply: Callable[[Message], None] | None = None
    _pending: dict[str, Message] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self._run = Run.create_empty(self.run_id)
        set_task_identity(self.run_id, SUPERLINK_NODE_ID)

    # -- fleet management (tests and the demo) -------------------------------------------

    def add_node(
        self, node_id: int, app: ClientCallable, node_config: dict[str, str | int | float]
    ) -> None:
        context = Context(
            run_id=self.run_id,
            node_id=node_id,
            node_config=dict(node_config),
            state=RecordDict(),
            run_config={},
        )
        self.nodes[node_id] = InProcessNode(app, context)

    def kill_node(self, node_id: int) -> None:
        self.nodes[node_id].alive = False

    # -- Grid ---------------------------------------------------------------------------

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        set_task_identity(self.run_id, SUPERLINK_NODE_ID)
        return Message(
            content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl
        )

    def get_node_ids(self) -> Iterable[int]:
        return list(self.nodes)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            message_id = f"m{next(self._ids)}"
            message.metadata.__dict__["_message_id"] = message_id
            self._pending[message_id] = message
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = []
        for message_id in message_ids:
            message = self._pending.pop(message_id, None)
            if message is None:
                continue
            node = self.nodes.get(message.metadata.dst_node_id)
            if node is None or not node.alive:
                continue  # never answers: the round goes on without it
            delivered = copy.deepcopy(message)
            set_task_identity(self.run_id, message.metadata.dst_node_id)
            try:
                reply = node.app(delivered, node.context)
            except Exception as exc:  # noqa: BLE001 - a SuperNode turns this into an error reply
                reason = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
                reply = Message(Error(code=1, reason=reason), reply_to=delivered)
            finally:
                set_task_identity(self.run_id, SUPERLINK_NODE_ID)
            reply = copy.deepcopy(reply)
            self.sent_by_nodes.append(reply)
            if self.on_reply is not None:
                self.on_reply(reply)
            replies.append(reply)
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))
