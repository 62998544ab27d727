"""MetaSchedule's view of the node's store: a PyDatabase whose writes go through to SQLite.

`ms_database(store, device=...)` is what the tuner hands MetaSchedule: every tuning
record it commits lands in SQLite at once, and `compile_tir` / `compile_relax` read the
best schedules straight from the store. Also here: the conversions between MetaSchedule
objects and the store's plain-JSON records (workload keys, traces, tuning records).
Only the store's public methods are used. TVM is imported lazily.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from agent.store import Store, canonical_json
from schemas import TuningRecord

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import meta_schedule as ms


def workload_key_of(mod: tvm.IRModule | tvm.tirx.PrimFunc) -> str:
    """A workload's key: the structural hash, as MetaSchedule's JSONDatabase writes it.

    The module is first normalized as MetaSchedule does (a PrimFunc or a one-function
    module becomes `{"main": func}`), so the key is the one its records get.
    """
    import tvm_ffi
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return str(tvm_ffi.structural_hash(_normalize_mod(mod)))


def plain_json(obj: Any) -> Any:
    """A JSON value of plain Python types from one holding TVM containers and immediates.

    Objects with no JSON shape of their own (the IndexMap of a layout-rewrite trace) become
    TVM's JSON text, which is how traces already carry index maps.
    """
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [plain_json(item) for item in obj]
    if isinstance(obj, dict):
        return {str(key): plain_json(value) for key, value in obj.items()}
    import tvm
    from tvm.tirx import FloatImm, IntImm
    from tvm_ffi import Array, Map

    if isinstance(obj, (IntImm, FloatImm)):
        return obj.value
    if isinstance(obj, Array):
        return [plain_json(item) for item in obj]
    if isinstance(obj, Map):
        return {str(plain_json(key)): plain_json(value) for key, value in obj.items()}
    return tvm.ir.save_json(obj)


def trace_json(trace: Any) -> str:
    """The canonical JSON text of a MetaSchedule `Trace` (e.g. `candidate.sch.trace`).

    `Store.candidate_id(workload_key, trace_json(trace))` is the id its record gets.
    """
    return canonical_json(plain_json(trace.as_json()))


def ms_database(
    store: Store,
    *,
    device: str,
    profile_id: str | None = None,
    simulated: bool = False,
    task_name: str | None = None,
) -> ms.database.Database:
    """A MetaSchedule database over `store`, for one device.

    Records committed through it are written to SQLite at once, labelled with
    `device`, `profile_id` and `simulated`; queries see only this device's
    records. `task_name` names workloads it commits that the store does not know
    yet (default: the function's name and the key). Committing through a `sim:`
    device's database without `simulated=True` raises BadInputError.
    """
    return _database_class()(
        store, device=device, profile_id=profile_id, simulated=simulated, task_name=task_name
    )


def save_module_json(mod: tvm.IRModule) -> str:
    import tvm

    return tvm.ir.save_json(mod)


def default_task_name(mod: tvm.IRModule, key: str) -> str:
    names = [gv.name_hint for gv in mod.get_global_vars()]
    return f"{names[0] if len(names) == 1 else 'module'}-{key[:8]}"


def to_ms_record(record: TuningRecord, workload: ms.database.Workload) -> ms.database.TuningRecord:
    from tvm.s_tir import meta_schedule as ms

    args_info = record.args_info or None
    return ms.database.TuningRecord.from_json(
        [record.trace, record.run_secs, record.target, args_info], workload
    )


def from_ms_record(
    ms_record: ms.database.TuningRecord,
    *,
    workload_key: str,
    task_name: str,
    device: str,
    profile_id: str | None,
    simulated: bool,
) -> TuningRecord:
    # Not `ms_record.as_json()`: its unpacking raises on the IndexMap of a layout-rewrite
    # trace (dense, batch_matmul on llvm); plain_json handles it.
    from tvm.s_tir.meta_schedule import _ffi_api as ms_api

    trace, run_secs, target, args_info = plain_json(ms_api.TuningRecordAsJSON(ms_record))
    return TuningRecord(
        workload_key=workload_key,
        task_name=task_name,
        trace=trace,
        run_secs=[float(s) for s in (run_secs or [])],
        target=target or {},
        args_info=args_info or [],
        device=device,
        profile_id=profile_id,
        simulated=simulated,
    )


class WorkloadLoader:
    """MetaSchedule Workload objects of a store, one object per structurally equal module.

    A key's module as saved in SQLite is loaded once; modules committed in this
    process are kept too, so `commit_workload` returns the same object every time.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._stored: dict[str, ms.database.Workload | None] = {}
        self._committed: dict[str, list[ms.database.Workload]] = {}

    def find(self, mod: tvm.IRModule, key: str | None = None) -> ms.database.Workload | None:
        """The Workload of an equal module: from memory, else from SQLite, else None."""
        import tvm_ffi

        key = key or workload_key_of(mod)
        for workload in self._committed.get(key, []):
            if tvm_ffi.structural_equal(workload.mod, mod):
                return workload
        stored = self.stored(key)
        if stored is not None and tvm_ffi.structural_equal(stored.mod, mod):
            return stored
        return None

    def stored(self, key: str) -> ms.database.Workload | None:
        """The workload of a key as SQLite holds it, loaded once."""
        import tvm
        from tvm.s_tir import meta_schedule as ms

        if key not in self._stored:
            row = self.store.workload(key)
            self._stored[key] = (
                None if row is None else ms.database.Workload(tvm.ir.load_json(row["mod_json"]))
            )
        return self._stored[key]

    def workload(self, key: str) -> ms.database.Workload | None:
        """The Workload records of this key are replayed on."""
        return self.stored(key)

    def remember(self, key: str, workload: ms.database.Workload, *, saved: bool) -> None:
        """Keep a committed Workload; `saved`: SQLite now holds its module for the key."""
        self._committed.setdefault(key, []).append(workload)
        if saved:
            self._stored[key] = workload


@functools.cache
def _database_class() -> type:
    """Define the PyDatabase subclass on first use (it needs TVM, which is slow to import)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class StoreDatabase(ms.database.PyDatabase):
        """MetaSchedule's view of a Store, for one device: writes go through to SQLite."""

        def __init__(
            self,
            store: Store,
            *,
            device: str,
            profile_id: str | None,
            simulated: bool,
            task_name: str | None,
        ) -> None:
            super().__init__()
            self.store = store
            self.device = device
            self.profile_id = profile_id
            self.simulated = simulated
            self.task_name = task_name
            self.loader = WorkloadLoader(store)
            self.task_names: dict[str, str] = {}  # by workload key

        def has_workload(self, mod: tvm.IRModule) -> bool:
            return self.loader.find(mod) is not None

        def commit_workload(self, mod: tvm.IRModule) -> ms.database.Workload:
            key = workload_key_of(mod)
            workload = self.loader.find(mod, key)
            if workload is not None:
                return workload
            workload = ms.database.Workload(mod)
            row = self.store.workload(key)
            if row is None:
                name = self.task_name or default_task_name(mod, key)
                self.store.add_workload(key, name, save_module_json(mod))
            else:
                # Same hash, module not structurally equal (e.g. saved before MetaSchedule
                # normalized it): keep the module MetaSchedule tunes, which queries will use.
                self.store.replace_workload_module(key, save_module_json(mod))
            self.loader.remember(key, workload, saved=True)
            return workload

        def _task_name(self, key: str, mod: tvm.IRModule) -> str:
            if key not in self.task_names:
                row = self.store.workload(key)
                if row is None:  # a record whose workload was never committed here
                    self.commit_workload(mod)
                    row = self.store.workload(key)
                self.task_names[key] = row["task_name"] if row else key
            return self.task_names[key]

        def commit_tuning_record(self, record: ms.database.TuningRecord) -> None:
            mod = record.workload.mod
            key = workload_key_of(mod)
            task_name = self._task_name(key, mod)
            self.store.add_records(
                [
                    from_ms_record(
                        record,
                        workload_key=key,
                        task_name=task_name,
                        device=self.device,
                        profile_id=self.profile_id,
                        simulated=self.simulated,
                    )
                ]
            )

        def get_top_k(
            self, workload: ms.database.Workload, top_k: int
        ) -> list[ms.database.TuningRecord]:
            if top_k <= 0:
                return []
            key = workload_key_of(workload.mod)
            records = self.store.fastest_records(key, self.device, top_k)
            return [to_ms_record(record, workload) for record in records]

        def get_all_tuning_records(self) -> list[ms.database.TuningRecord]:
            result = []
            for record in self.store.records(device=self.device):
                workload = self.loader.workload(record.workload_key)
                if workload is not None:
                    result.append(to_ms_record(record, workload))
            return result

        def __len__(self) -> int:
            return self.store.count_records(device=self.device)

    return StoreDatabase
