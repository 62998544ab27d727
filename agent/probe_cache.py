"""The public probe sets a node holds, so the server sends one only once.

With teacher scores on (`TrainInstruction.teacher_epochs`) every train message names the
server's public probe set by its sha256 (`probes_sha256`) and carries its arrays
(`REC_PROBES`, about 2.3 MB for the shipped set) only to a node whose hello does not list
that digest (`NodeHello.probes_held`). A node holds:

- the probe set SiMoE ships (`simoe_model.probe_file.SUITE_PROBES`), always;
- the last probe set a server sent it, kept as `federation/probes/<sha256>.npz` in its
  state directory (the one file there: a new set replaces it).

A cached file is used only when its content's digest is the one its name and the message
say; one that does not match (a damaged disk, a half write) is dropped with one log line,
and the hello then no longer lists it, so the server sends the set again next round.
Everything here is public data the server sent; nothing of the node's records.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from agent.payload import PayloadRefused
from schemas import BadInputError
from schemas.messages import MAX_PROBES_HELD, TrainInstruction

if TYPE_CHECKING:
    from agent.node_state import NodeState
    from simoe_model.probe_file import ProbeTask

log = logging.getLogger("simoe.agent.probes")

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class ProbesUnavailable(Exception):
    """The message names a probe set this node does not hold (or sent one that does not
    match its digest): the round goes on without teacher scores."""


def held_digests(node: NodeState) -> list[str]:
    """Digests of the probe sets this node holds (what its hello lists): the shipped set's,
    then the cached ones' (by name; a file is checked when it is used)."""
    from simoe_model.probe_file import suite_digest

    held = [suite_digest()]
    if node.probes_dir.is_dir():
        cached = sorted(p.stem for p in node.probes_dir.glob("*.npz") if _DIGEST.match(p.stem))
        held += [d for d in cached if d not in held]
    return held[:MAX_PROBES_HELD]


def cached_probes(node: NodeState, digest: str) -> list[ProbeTask] | None:
    """The probe set of `digest` if this node holds it, checked against the digest; None if
    not. A cached file whose content does not match is dropped (one log line)."""
    from simoe_model.probe_file import SUITE_PROBES, load_probes, probe_digest, suite_digest

    if digest == suite_digest():
        return load_probes(SUITE_PROBES)
    path = node.probes_dir / f"{digest}.npz"
    if not _DIGEST.match(digest) or not path.is_file():
        return None
    try:
        probes = load_probes(path)
        if probe_digest(probes) == digest:
            return probes
        why = "its content does not match its digest"
    except BadInputError as exc:
        why = str(exc)
    log.warning("cached probe set %s dropped: %s", digest[:12], why)
    path.unlink(missing_ok=True)
    return None


def keep_probes(node: NodeState, probes: list[ProbeTask], digest: str) -> None:
    """Keep a probe set the server sent, under its digest, in place of any other sent one
    (the shipped set is not copied). Written via a temporary file: a crash leaves no half
    file under a digest's name; a failed write only means the set is sent again."""
    from simoe_model.probe_file import probe_arrays, save_probes, suite_digest

    if digest == suite_digest():
        return
    directory = node.probes_dir
    path = directory / f"{digest}.npz"
    tmp = directory / f".{digest}.{os.getpid()}.tmp"
    arrays = probe_arrays(probes)
    tasks = [(arrays[f"rows_{i}"], arrays[f"offsets_{i}"]) for i in range(len(probes))]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        save_probes(tmp, tasks)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        log.warning("cannot keep probe set %s (%s): it will be sent again", digest[:12], exc)
        return
    for other in directory.glob("*.npz"):
        if other != path:
            other.unlink(missing_ok=True)


def round_probes(
    node: NodeState, instruction: TrainInstruction, sent: Mapping[str, np.ndarray] | None
) -> list[ProbeTask]:
    """The public probe set of a train message: the arrays it carried (`sent`, checked
    against the digest it names, then kept), else the held set of that digest.
    ProbesUnavailable (one line) when neither; BadInputError for malformed arrays,
    PayloadRefused for arrays that are not the set the message names."""
    from simoe_model.probe_file import probe_digest, probes_from_arrays

    digest = instruction.probes_sha256
    if sent is not None:
        probes = probes_from_arrays(sent, "probes")
        actual = probe_digest(probes)
        if digest is not None and actual != digest:  # refused as any bad payload is
            raise PayloadRefused(
                f"the probes sent have sha256 {actual[:12]}, the message names {digest[:12]}"
            )
        keep_probes(node, probes, actual)
        return probes
    if digest is None:  # a server that sends no digest sent no probes either
        raise ProbesUnavailable("the message carries no probe set")
    probes = cached_probes(node, digest)
    if probes is None:
        raise ProbesUnavailable(f"probe set {digest[:12]} is not held here: no teacher scores")
    return probes
