"""What both sides of the wire need besides the payload models: one copy, imported by both.

- array <-> record conversion (numpy arrays in, Flower `ArrayRecord` on the wire);
- a node's reply as records (`node_reply`, `hello_record`): the record layout that the
  strategy checks, built in one place;
- `payload_bytes`: the one byte count of a message's content, as Flower serialises it
  (the registry's traffic table and the overhead benchmark both use it);
- the Flower environment: telemetry and update checks off (`prepare_flower_env`, for
  this process; `flower_env`, for the Flower processes we start), the Flower
  executables next to this interpreter (`flwr_bin`), and the connection settings
  the `flwr` CLI reads (`write_connection`, under the name `CONNECTION`).

The payload vocabulary itself (record keys, allowed metrics, NodeHello,
TrainInstruction) is `schemas.messages`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from schemas.messages import (
    REC_METRICS,
    REC_NODE,
    REC_OWN_EXPERT,
    REC_PROBE_SCORES,
    REC_SHARED,
    NodeHello,
)
from schemas.sharing import REC_SCHEDULES, SHARE_FIELD, ScheduleShare

if TYPE_CHECKING:  # flwr is imported where arrays meet the wire, not by the env helpers
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

Arrays = dict[str, np.ndarray]

CONNECTION = "simoe"  # the connection name in FLWR_HOME/config.toml, server and nodes alike
# No network beyond the loopback federation: Flower must not phone home.
OFFLINE_ENV: dict[str, str] = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}


def record_to_arrays(record: ArrayRecord) -> Arrays:
    return {k: v.numpy() for k, v in record.items()}


def arrays_to_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    from flwr.app import Array, ArrayRecord

    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def hello_record(hello: NodeHello) -> ConfigRecord:
    """A node's NodeHello as the record a reply carries it in (`REC_NODE`)."""
    from flwr.app import ConfigRecord

    return ConfigRecord({"hello": hello.model_dump_json()})


def node_reply(
    hello: NodeHello,
    *,
    shared: Mapping[str, np.ndarray] | None = None,
    own_expert: Mapping[str, np.ndarray] | None = None,
    metrics: Mapping[str, float] | None = None,
    share: ScheduleShare | None = None,
    probe_scores: Mapping[str, np.ndarray] | None = None,
) -> RecordDict:
    """A node's reply: its shared update, own expert, metrics, schedule share, its teacher's
    probe scores (each if given: the share only from a node that opted in, the scores only
    when the server asked) and hello.

    These are all the records a reply may carry (`schemas.messages.ALLOWED_REPLY_RECORDS`).
    """
    from flwr.app import ConfigRecord, MetricRecord, RecordDict

    content = RecordDict()
    if shared is not None:
        content[REC_SHARED] = arrays_to_record(shared)
    if own_expert is not None:
        content[REC_OWN_EXPERT] = arrays_to_record(own_expert)
    if metrics is not None:
        content[REC_METRICS] = MetricRecord(dict(metrics))
    if share is not None:
        content[REC_SCHEDULES] = ConfigRecord({SHARE_FIELD: share.model_dump_json()})
    if probe_scores is not None:
        content[REC_PROBE_SCORES] = arrays_to_record(probe_scores)
    content[REC_NODE] = hello_record(hello)
    return content


def payload_bytes(content: RecordDict) -> int:
    """Bytes of a message's content as Flower serialises it for the wire (protobuf)."""
    from flwr.common.serde import recorddict_to_proto

    return int(recorddict_to_proto(content).ByteSize())


def prepare_flower_env() -> None:
    """Keep Flower offline in this process; entry points call it before Flower runs.

    Values the user set win (`setdefault`): a test or an operator may turn them on.
    """
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


def flower_env(flwr_home: Path | None = None) -> dict[str, str]:
    """The environment of a process we start that runs Flower: offline, its own FLWR_HOME."""
    env = dict(os.environ)
    env.update(OFFLINE_ENV)
    if flwr_home is not None:
        env["FLWR_HOME"] = str(flwr_home)
    # Flower's processes start their helpers (flower-superexec, flwr-serverapp,
    # flwr-clientapp) by name: find them in this interpreter's venv even when it
    # is not activated (`.venv/bin/python -m pytest`, a systemd unit).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def flwr_bin(name: str) -> str:
    """A Flower executable next to this interpreter (the venv), else from PATH."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def write_connection(flwr_home: Path, address: str, ca: Path) -> Path:
    """The `flwr` CLI's connection settings (FLWR_HOME/config.toml); returns FLWR_HOME."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    (flwr_home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "{address}"\n'
        f'root-certificates = "{ca.resolve()}"\n'
    )
    return flwr_home
