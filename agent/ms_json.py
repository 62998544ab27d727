"""MetaSchedule JSON databases in and out of the node's store.

`export_ms_json` writes a store's records as a MetaSchedule `JSONDatabase` directory
(`database_workload.json`, `database_tuning_record.json`) that any TVM can replay;
`import_ms_json` reads one into the store for a device (idempotent). TVM is imported
lazily.
"""

from __future__ import annotations

from pathlib import Path

from agent.ms_database import (
    WorkloadLoader,
    default_task_name,
    from_ms_record,
    save_module_json,
    to_ms_record,
    workload_key_of,
)
from agent.store import Store, check_labelled
from schemas import BadInputError

MS_WORKLOAD_FILE = "database_workload.json"
MS_RECORD_FILE = "database_tuning_record.json"


def export_ms_json(store: Store, directory: Path | str, *, device: str | None = None) -> int:
    """Write records (all, or one device's) as a MetaSchedule JSONDatabase; returns how many."""
    from tvm.s_tir import meta_schedule as ms

    directory = Path(directory)
    paths = [directory / MS_WORKLOAD_FILE, directory / MS_RECORD_FILE]
    if any(p.exists() for p in paths):
        raise BadInputError(f"{directory}: already holds a MetaSchedule database")
    directory.mkdir(parents=True, exist_ok=True)
    target_db = ms.database.JSONDatabase(work_dir=str(directory))
    loader = WorkloadLoader(store)
    count = 0
    for record in store.records(device=device):
        workload = loader.workload(record.workload_key)
        if workload is None:
            continue  # a record without its workload cannot be replayed anywhere
        workload = target_db.commit_workload(workload.mod)
        target_db.commit_tuning_record(to_ms_record(record, workload))
        count += 1
    return count


def import_ms_json(
    store: Store, directory: Path | str, *, device: str, simulated: bool = False
) -> int:
    """Read a MetaSchedule JSONDatabase into this store for `device`; returns new records."""
    from tvm.s_tir import meta_schedule as ms

    check_labelled(device, simulated)
    directory = Path(directory)
    for path in (directory / MS_WORKLOAD_FILE, directory / MS_RECORD_FILE):
        if not path.is_file():
            raise BadInputError(f"{path}: no such file (not a MetaSchedule JSON database)")
    try:
        source = ms.database.JSONDatabase(work_dir=str(directory), allow_missing=False)
        ms_records = list(source.get_all_tuning_records())
    except Exception as exc:  # noqa: BLE001 - TVM raises its own error types for bad files
        lines = str(exc).strip().splitlines()
        reason = lines[-1] if lines else type(exc).__name__
        raise BadInputError(
            f"{directory}: not a valid MetaSchedule JSON database ({reason})"
        ) from None
    before = store.count_records(device=device)
    task_names: dict[str, str] = {}  # by workload key
    records = []
    for ms_record in ms_records:
        mod = ms_record.workload.mod
        key = workload_key_of(mod)
        if key not in task_names:
            row = store.workload(key)
            if row is None:  # a workload new here: named after its function and key
                task_names[key] = default_task_name(mod, key)
                store.add_workload(key, task_names[key], save_module_json(mod))
            else:
                task_names[key] = row["task_name"]
        records.append(
            from_ms_record(
                ms_record,
                workload_key=key,
                task_name=task_names[key],
                device=device,
                profile_id=None,
                simulated=simulated,
            )
        )
    store.add_records(records)
    return store.count_records(device=device) - before
