"""The fleet schedule warm start of `tune` (opt-in): seeds read from a MetaSchedule database."""

from __future__ import annotations

from pathlib import Path

import pytest
import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from agent.search_start import warm_start_seeds
from agent.tune_harness import TuneTask
from agent.workloads import parse_workload, prim_func
from schemas import BadInputError


def _task(spec: str) -> TuneTask:
    return TuneTask(spec, tvm.IRModule({"main": prim_func(parse_workload(spec))}), 1.0, 0.0)


def test_seeds_are_the_fastest_schedules_of_the_same_workload(tmp_path: Path) -> None:
    mine, other = _task("matmul:64,64,64"), _task("matmul:32,32,32")
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    workload = db.commit_workload(mine.mod)
    args = ms.arg_info.ArgInfo.from_prim_func(mine.mod["main"])
    for secs in (3e-3, 1e-3, 2e-3, 1e10):  # the last one failed: never a seed
        sch = s_tir.Schedule(mine.mod)
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [secs], None, args))
    assert [len(s) for s in warm_start_seeds([mine, other], tmp_path, 2)] == [2, 0]
    assert [len(s) for s in warm_start_seeds([mine, other], tmp_path, 9)] == [3, 0]


def test_a_directory_without_a_database_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="not a MetaSchedule JSON database"):
        warm_start_seeds([_task("matmul:64,64,64")], tmp_path, 4)


def test_the_default_schedule_leaves_the_tasks_module_unscheduled() -> None:
    """DLight schedules a module in place when it alone holds it: the task's module must stay
    the unscheduled one every search starts from."""
    import tvm_ffi

    from agent.devices import get_device
    from agent.tuner import _default_schedule

    mod = _task("matmul:256,256,256").mod
    before = tvm_ffi.structural_hash(mod)
    scheduled = _default_schedule(mod, get_device("sim:a30-u1").target())
    assert tvm_ffi.structural_hash(mod) == before
    assert not mod["main"].attrs.get("tirx.is_scheduled")
    assert scheduled["main"].attrs.get("tirx.is_scheduled")
