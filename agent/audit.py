"""An exact copy of everything this node sends to the server, kept on the node for an audit.

Opt-in: when the state directory has an `audit/` directory, every reply the ClientApp
sends is also written there, as Flower serializes it (the RecordDict's protobuf), one
file per message. An operator (or the privacy test over a real deployment) can then
check that only the allowed payloads ever left the node. The copy never leaves the
node and holds nothing the server did not get.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from flwr.app import Context, Message, RecordDict

from agent.node_state import NodeState


def _audit_dir(context: Context) -> Path | None:
    value = context.node_config.get("state-dir")
    if not value:
        return None
    directory = NodeState(Path(str(value))).audit_dir
    return directory if directory.is_dir() else None


def record_replies(
    message: Message, context: Context, call_next: Callable[[Message, Context], Message]
) -> Message:
    """A ClientApp mod: pass the message on; keep a copy of the reply if auditing is on."""
    reply = call_next(message, context)
    directory = _audit_dir(context)
    if directory is not None and not reply.has_error():
        from flwr.common.serde import recorddict_to_proto

        kind = message.metadata.message_type.replace(".", "-")
        name = f"{time.time_ns()}-{os.getpid()}-{kind}.pb"
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(recorddict_to_proto(reply.content).SerializeToString())
        tmp.replace(directory / name)
    return reply


def read_audit(directory: Path) -> list[tuple[str, RecordDict]]:
    """(file name, content) of every recorded reply, oldest first."""
    from flwr.common.serde import recorddict_from_proto
    from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

    out = []
    for path in sorted(directory.glob("*.pb"), key=lambda p: int(p.name.split("-")[0])):
        proto = ProtoRecordDict()
        proto.ParseFromString(path.read_bytes())
        out.append((path.name, recorddict_from_proto(proto)))
    return out
