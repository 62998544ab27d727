"""Opt-in schedule sharing on the node: what it shares, what it asks for, what it received.

Off unless the node's config says `share_schedules` (`simoe-agent enroll --share-schedules`
or `simoe-agent sharing on`). Then each reply the ClientApp sends carries a
`schemas.sharing.ScheduleShare`: for every workload this node measured on its device, the
workload key and the trace JSON of its `share_top_k` fastest records (rank order only,
no latencies), and the keys of the workloads it is about to tune (`ask_for`: `tune` and
`submit` add them). The server's answer (`ScheduleOffer`: the most similar units' traces)
is kept in the federation directory; the tuner seeds each task's search with the traces
offered for its workload key (`seed_traces`): they are measured before or with its own
candidates (agent.tune_harness.seeded).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agent.node_state import NodeState, write_atomic
from agent.store import canonical_json
from schemas.sharing import (
    MAX_WORKLOADS,
    ScheduleOffer,
    ScheduleShare,
    SharedTrace,
)

if TYPE_CHECKING:
    from agent.tune_harness import TuneTask

log = logging.getLogger("simoe.agent.sharing")


def wanted_path(node: NodeState) -> Path:
    """The workload keys this node asks the federation about (its next tuning work)."""
    return node.federation_dir / "wanted_workloads.json"


def offer_path(node: NodeState) -> Path:
    """The last schedules the federation offered this node (`ScheduleOffer` JSON)."""
    return node.federation_dir / "shared_schedules.json"


def sharing_on(node: NodeState) -> bool:
    return node.config().share_schedules


def wanted(node: NodeState) -> list[str]:
    path = wanted_path(node)
    try:
        keys = json.loads(path.read_text()) if path.exists() else []
    except ValueError:
        return []  # a torn file: ask again when tuning
    if not isinstance(keys, list):
        return []
    return [str(k) for k in keys if str(k).isdigit()][-MAX_WORKLOADS:]


def ask_for(node: NodeState, keys: Iterable[str]) -> None:
    """Ask about these workload keys in the next reply (sharing on only; the most recent
    `MAX_WORKLOADS` are kept)."""
    if not sharing_on(node):
        return
    keys = list(keys)
    known = wanted(node)
    merged = [k for k in known if k not in set(keys)] + [k for k in dict.fromkeys(keys)]
    node.federation_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(wanted_path(node), json.dumps(merged[-MAX_WORKLOADS:]))


def schedule_share(node: NodeState) -> ScheduleShare | None:
    """What this node shares in a reply: None unless it opted in.

    Per workload it measured on its configured device (at most `MAX_WORKLOADS`): the
    traces of its `share_top_k` fastest successful records, rank 1 the fastest. Only the
    workload key, the rank and the trace JSON; the latencies only order them."""
    config = node.config()
    if not config.share_schedules:
        return None
    schedules: list[SharedTrace] = []
    if node.store_path.exists():
        with node.open_store() as store:
            keys = sorted({r.workload_key for r in store.best_records(device=config.device)})
            for key in [k for k in keys if k.isdigit()][:MAX_WORKLOADS]:
                rank = 0
                for record in store.fastest_records(key, config.device, config.share_top_k):
                    try:  # one that is not a MetaSchedule trace (an import) is not shared
                        item = SharedTrace(
                            workload_key=key, rank=rank + 1, trace=canonical_json(record.trace)
                        )
                    except ValidationError:
                        continue  # the next one takes its rank
                    rank += 1
                    schedules.append(item)
    return ScheduleShare(top_k=config.share_top_k, schedules=schedules, wanted=wanted(node))


def keep_offer(node: NodeState, offer: ScheduleOffer) -> None:
    """Keep what the server offered (it replaces the last offer)."""
    node.federation_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(offer_path(node), offer.model_dump_json())


def received_schedules(node: NodeState) -> dict[str, list[str]]:
    """Workload key -> offered trace JSON texts, best first; empty unless sharing is on."""
    path = offer_path(node)
    if not sharing_on(node) or not path.exists():
        return {}
    try:
        return ScheduleOffer.model_validate_json(path.read_text()).by_workload()
    except (ValidationError, ValueError):
        log.warning("%s: unreadable, ignored (the next round replaces it)", path)
        return {}


def seed_traces(
    tasks: Sequence[TuneTask], traces: dict[str, list[str]]
) -> tuple[list[list[Any]], int]:
    """Per task, the offered traces of its workload key that apply to its module (as
    MetaSchedule Traces), and how many did not apply (skipped, counted, never fatal)."""
    import tvm
    from tvm.s_tir.schedule import Trace

    from agent.ms_database import workload_key_of

    seeds: list[list[Any]] = []
    skipped = 0
    for task in tasks:
        found = []
        for text in traces.get(workload_key_of(task.mod), []):
            sch = tvm.s_tir.Schedule(task.mod)
            try:
                Trace.apply_json_to_schedule(json.loads(text), sch)
            except Exception:  # noqa: BLE001 - a trace of another target or TVM: skipped
                skipped += 1
                continue
            found.append(sch.trace)
        seeds.append(found)
    return seeds, skipped


def measured_shared(node: NodeState) -> tuple[int, int, int]:
    """How the offered schedules fared on this node: (offered, measured, measured among
    the offered), over the workloads it was offered and measured on its device. A measured
    candidate is an offered one when the two traces schedule the workload into the same
    module (structural hash): the trace a search measures is a replay, not the same text."""
    import tvm
    import tvm_ffi

    def scheduled(mod: Any, trace: Any) -> int | None:
        sch = tvm.s_tir.Schedule(mod)
        try:
            Trace.apply_json_to_schedule(trace, sch)
        except Exception:  # noqa: BLE001 - a trace of another target: not comparable
            return None
        return int(tvm_ffi.structural_hash(sch.mod))

    from tvm.s_tir.schedule import Trace

    offered = received_schedules(node)
    if not offered or not node.store_path.exists():
        return sum(len(t) for t in offered.values()), 0, 0
    device = node.config().device
    measured = hits = 0
    with node.open_store() as store:
        for key, texts in offered.items():
            row = store.workload(key)
            records = store.records(workload_key=key, device=device)
            if row is None or not records:
                continue
            mod = tvm.ir.load_json(row["mod_json"])
            shared = {scheduled(mod, json.loads(text)) for text in texts} - {None}
            measured += len(records)
            hits += sum(scheduled(mod, r.trace) in shared for r in records)
    return sum(len(t) for t in offered.values()), measured, hits
