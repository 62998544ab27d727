"""The node's SQLite store: round trips, best records, MetaSchedule database, JSON import/export."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from agent.ms_database import ms_database, plain_json, trace_json, workload_key_of
from agent.ms_json import export_ms_json, import_ms_json
from agent.store import Store
from schemas import (
    FAILED_RUN_SECS,
    AnalyticalSpecs,
    BadInputError,
    EmpiricalFingerprint,
    HardwareProfile,
    TuningRecord,
)
from schemas.records import FEATURE_DIM

REPO = Path(__file__).resolve().parents[1]


def _record(key: str, trace: object, secs: list[float], device: str = "cpu", **kw) -> TuningRecord:
    return TuningRecord(
        workload_key=key,
        task_name=kw.pop("task_name", f"task-{key}"),
        trace=trace,
        run_secs=secs,
        target={"kind": "llvm"},
        device=device,
        **kw,
    )


def _profile(device: str = "cpu", clock: float = 3000.0) -> HardwareProfile:
    return HardwareProfile(
        device_kind="cpu",
        device=device,
        name="Test CPU",
        analytical=AnalyticalSpecs(
            compute_units=2,
            clock_mhz=clock,
            fp32_gflops=100,
            fp16_gflops=100,
            mem_bandwidth_gbs=20,
            l2_cache_kb=1024,
            shared_mem_per_unit_kb=48,
            registers_per_unit=32,
            max_threads_per_unit=2,
            max_blocks_per_unit=1,
            warp_size=16,
            compute_capability=0,
        ),
        empirical=EmpiricalFingerprint(
            probe_suite_version="t1",
            probe_latency_us={"p": 1.0},
            bandwidth_gbs=10,
            fma_gflops=50,
        ),
        simulated=False,
    )


# -- plain store --------------------------------------------------------------------------


def test_round_trip_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    recs = [
        _record("w1", [["Split", 1]], [2e-6, 4e-6], profile_id="p1"),
        _record("w1", [["Split", 2]], [FAILED_RUN_SECS]),
        _record("w2", {"b": 1, "a": [0.25]}, [1e-3], device="sim:t4", simulated=True),
    ]
    with Store(path) as store:
        store.add_workload("w1", "matmul", "{}", spec="GMM-1")
        ids = store.add_records(recs)
        assert len(set(ids)) == 3
        assert ids[0] == Store.candidate_id("w1", json.dumps([["Split", 1]], indent=2))
    with Store(path) as store:
        back = store.records()
        assert [r.trace for r in back] == [r.trace for r in recs]
        assert back[0].run_secs == [2e-6, 4e-6] and back[0].latency_s == pytest.approx(3e-6)
        assert back[0].profile_id == "p1" and back[0].created_at == recs[0].created_at
        assert back[1].failed and back[1].latency_s is None
        assert back[2].simulated and back[2].device == "sim:t4"
        assert store.count_records() == 3 and store.count_records(device="cpu") == 2
        assert store.devices() == ["cpu", "sim:t4"]
        assert [r.trace for r in store.records(workload_key="w2")] == [recs[2].trace]
        assert store.workload("w1")["spec"] == "GMM-1"
        assert store.integrity_check() == "ok"
        assert store.journal_mode() == "wal"


def test_simulated_device_records_must_say_so(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(BadInputError, match="simulated"):
            store.add_records([_record("w", [1], [1e-3], device="sim:t4")])
        assert store.count_records() == 0


def test_adding_a_record_twice_keeps_one(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite") as store:
        rec = _record("w", [1], [1e-3])
        assert store.add_records([rec]) == store.add_records([rec])
        assert store.count_records() == 1
        store.add_records([_record("w", [1], [1e-3], device="cuda:0")])
        assert store.count_records() == 2  # same candidate, other device: its own record


def test_best_per_workload_and_device_skips_failures(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite") as store:
        store.add_records(
            [
                _record("w1", [1], [FAILED_RUN_SECS]),  # failed: never best
                _record("w1", [2], [3e-3]),
                _record("w1", [3], [1e-3, 3e-3]),  # mean 2e-3: best on cpu
                _record("w1", [4], [5e-4], device="sim:t4", simulated=True),
                _record("w2", [5], [FAILED_RUN_SECS]),  # only failures: no best at all
                _record("w3", [6], [7e-3]),
            ]
        )
        best = {(r.workload_key, r.device): r for r in store.best_records()}
        assert set(best) == {("w1", "cpu"), ("w1", "sim:t4"), ("w3", "cpu")}
        assert best[("w1", "cpu")].trace == [3]
        assert best[("w1", "sim:t4")].trace == [4]
        assert [r.trace for r in store.best_records(device="cpu")] == [[3], [6]]
        summaries = {(s.workload_key, s.device): s for s in store.best_summaries()}
        assert summaries[("w1", "cpu")].n_records == 2  # successful records behind the best


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["w1", "w2", "w3"]),
            st.lists(st.floats(1e-7, 1.0), min_size=1, max_size=3) | st.just([FAILED_RUN_SECS]),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_best_is_the_minimum_mean(tmp_path_factory: pytest.TempPathFactory, items: list) -> None:
    path = tmp_path_factory.mktemp("best") / "s.sqlite"
    recs = [_record(key, [i], secs) for i, (key, secs) in enumerate(items)]
    with Store(path) as store:
        store.add_records(recs)
        best = {r.workload_key: r.latency_s for r in store.best_records()}
    expected: dict[str, float] = {}
    for rec in recs:
        if rec.latency_s is not None:
            expected[rec.workload_key] = min(expected.get(rec.workload_key, 1e99), rec.latency_s)
    assert best == pytest.approx(expected)


def test_profiles_latest_per_device(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite") as store:
        assert store.latest_profile("cpu") is None
        old, new = _profile(clock=2000), _profile(clock=3000)
        old.created_at = datetime(2025, 1, 1, tzinfo=timezone.utc)
        store.save_profile(new)
        store.save_profile(old)
        assert store.latest_profile("cpu") == new
        assert store.latest_profile("cuda:0") is None
        assert len(store.summary().profiles) == 2


def test_features_cache_and_labelled_candidates(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    with Store(tmp_path / "s.sqlite") as store:
        ids = store.add_records([_record("w", [1], [1e-3]), _record("w", [2], [FAILED_RUN_SECS])])
        feats = rng.standard_normal((7, FEATURE_DIM)).astype(np.float64)  # cast on the way in
        store.put_features({ids[0]: feats})
        got = store.get_features([ids[0], ids[1], "nope"])
        assert set(got) == {ids[0]}
        assert got[ids[0]].dtype == np.float32
        np.testing.assert_allclose(got[ids[0]], feats.astype(np.float32))
        labelled = store.labelled_candidates(device="cpu")
        assert [c.candidate_id for c in labelled] == ids
        assert labelled[0].latency_s == pytest.approx(1e-3) and labelled[0].features.shape == (
            7,
            164,
        )
        assert labelled[1].latency_s is None and labelled[1].features is None
        with pytest.raises(BadInputError, match="164"):
            store.put_features({"x": np.zeros((3, 10))})
        with pytest.raises(BadInputError, match="NaN"):
            store.put_features({"x": np.full((1, FEATURE_DIM), np.nan)})


def test_not_sqlite_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    path.write_text("this is not a database\n")
    with pytest.raises(BadInputError, match="not a SQLite database"):
        Store(path)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE birds (name TEXT)").connection.commit()
    with pytest.raises(BadInputError, match="not a SiMoE store"):
        Store(other)
    newer = tmp_path / "newer.sqlite"
    Store(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with pytest.raises(BadInputError, match="newer"):
        Store(newer)


def _cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from agent.cli import main; main()",
            *args,
            "--state-dir",
            str(state_dir),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def _invoke(state_dir: Path, *args: str) -> Result:
    """The CLI in this process (fast); errors stay exceptions, as run_cli receives them."""
    from agent.cli import app

    return CliRunner().invoke(app, [*args, "--state-dir", str(state_dir)])


def test_cli_refuses_a_non_sqlite_store_with_exit_2(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "store.sqlite").write_bytes(b"\x00garbage" * 100)
    result = _cli(state, "records")  # the real entry point: exit code and stderr
    assert result.returncode == 2, result.stderr
    assert "not a SQLite database" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1  # one line, no traceback
    for args in (["status"], ["records", "best"], ["records", "import", str(tmp_path)]):
        result = _invoke(state, *args, *(["--device", "cpu"] if "import" in args else []))
        assert isinstance(result.exception, BadInputError), (args, result.output)
        assert "not a SQLite database" in str(result.exception)


def test_cli_records_and_status_json(tmp_path: Path) -> None:
    state = tmp_path / "state"
    empty = _invoke(state, "records", "--json")
    assert empty.exit_code == 0 and json.loads(empty.stdout) == []
    assert not (state / "store.sqlite").exists()  # reading never creates a store
    with Store(state / "store.sqlite") as store:
        store.add_records(
            [_record("w1", [1], [1e-3], task_name="mm"), _record("w1", [2], [2e-3], task_name="mm")]
        )
        store.add_records([_record("w1", [3], [5e-4], device="sim:t4", simulated=True)])
    listed = json.loads(_invoke(state, "records", "--json", "--device", "cpu").stdout)
    assert [r["latency_us"] for r in listed] == pytest.approx([2000.0, 1000.0])  # newest first
    assert len(json.loads(_invoke(state, "records", "--json", "--limit", "1").stdout)) == 1
    by_task = json.loads(_invoke(state, "records", "--json", "--workload", "mm").stdout)
    assert len(by_task) == 2
    best = json.loads(_invoke(state, "records", "best", "--json").stdout)
    assert {b["device"]: (round(b["latency_us"], 6), b["simulated"]) for b in best} == {
        "cpu": (1000.0, False),
        "sim:t4": (500.0, True),
    }
    status = json.loads(_invoke(state, "status", "--json").stdout)
    assert status["store"]["records"] == 3
    assert {d["device"]: d["records"] for d in status["store"]["devices"]} == {
        "cpu": 2,
        "sim:t4": 1,
    }
    assert status["federation"] is None
    table = _invoke(state, "records")
    assert table.exit_code == 0 and "simulated" in table.stdout and "measured" in table.stdout
    bad = _invoke(state, "records", "import", str(tmp_path), "--device", "gpu0")
    assert isinstance(bad.exception, BadInputError)


# -- MetaSchedule: a real tiny tune into the store ---------------------------------------------


_MATMUL_KEY: list[str] = []


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory):
    """A 32x32x32 matmul tuned for 4 trials on this CPU, straight into a store."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    from agent.devices.cpu import CPUDevice
    from simoe_model import tvm_compat

    a = te.placeholder((32, 32), name="A")
    b = te.placeholder((32, 32), name="B")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((32, 32), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    func = te.create_prim_func([a, b, c])
    device = CPUDevice(num_cores=1)
    tmp = tmp_path_factory.mktemp("tuned")
    store = Store(tmp / "store.sqlite")
    db = ms_database(store, device="cpu", profile_id="prof-1", task_name="matmul-32")
    ms.tune_tir(
        func,
        device.target(),
        str(tmp / "work"),
        max_trials_global=4,
        num_trials_per_iter=4,
        # Generous timeouts: on a loaded 2-core machine the default 30 s builds time out.
        builder=ms.builder.LocalBuilder(timeout_sec=300, initializer=tvm_compat.install),
        runner=ms.runner.LocalRunner(timeout_sec=300, initializer=tvm_compat.install),
        database=db,
        cost_model="random",
        seed=0,
    )
    _MATMUL_KEY[:] = [workload_key_of(ms.tune_context._normalize_mod(func))]
    yield store, db, func, device.target(), tmp
    store.close()
    del tvm


def test_tune_writes_through_and_compile_tir_reads_the_best(tuned) -> None:
    from tvm.s_tir import meta_schedule as ms

    store, db, func, target, _ = tuned
    records = store.records(device="cpu")
    assert len(records) == 4 == len(db)
    assert all(r.task_name == "matmul-32" and r.profile_id == "prof-1" for r in records)
    assert not any(r.simulated for r in records)
    best = min((r for r in records if not r.failed), key=lambda r: r.latency_s)
    assert store.best_records(device="cpu")[0].trace == best.trace

    # A fresh database over the same file (a new process would see the same) finds it.
    fresh_store = Store(store.path)
    fresh = ms_database(fresh_store, device="cpu")
    sch = ms.tir_integration.compile_tir(fresh, func, target)
    assert sch is not None
    assert _cid(sch) == Store.candidate_id(best.workload_key, best.trace)
    record = fresh.query_tuning_record(
        ms.tune_context._normalize_mod(func), target, workload_name="main"
    )
    assert [float(s) for s in record.run_secs] == pytest.approx(best.run_secs)
    # Another device's view of the same store has nothing for it.
    assert (
        ms.tir_integration.compile_tir(ms_database(fresh_store, device="sim:t4"), func, target)
        is None
    )
    fresh_store.close()


def test_commit_workload_returns_the_same_object(tuned) -> None:
    import tvm

    store, db, func, _, _ = tuned
    mod = ms_normalize(func)
    first = db.commit_workload(mod)
    again = db.commit_workload(tvm.ir.load_json(tvm.ir.save_json(mod)))
    assert first.same_as(again)
    assert db.has_workload(mod)
    # The key is that of the module MetaSchedule tunes, however the caller spells it.
    key = store.records()[0].workload_key
    assert workload_key_of(func) == workload_key_of(tvm.IRModule({"mm": func})) == key
    assert len(store.workloads()) == 1 and store.workloads()[0]["workload_key"] == workload_key_of(
        mod
    )


def _cid(sch) -> str:
    """The candidate id of the schedule compile_tir gave back (a matmul-32 schedule)."""
    return Store.candidate_id(_MATMUL_KEY[0], trace_json(sch.trace))


def ms_normalize(func):
    from tvm.s_tir import meta_schedule as ms

    return ms.tune_context._normalize_mod(func)


def test_ms_json_export_import_round_trip(tuned, tmp_path: Path) -> None:
    from tvm.s_tir import meta_schedule as ms

    store, _, func, target, _ = tuned
    out = tmp_path / "exported"
    assert export_ms_json(store, out, device="cpu") == 4
    with pytest.raises(BadInputError, match="already holds"):
        export_ms_json(store, out)

    json_db = ms.database.JSONDatabase(work_dir=str(out), allow_missing=False)
    assert len(json_db) == 4
    best = store.best_records(device="cpu")[0]
    sch = ms.tir_integration.compile_tir(json_db, func, target)
    assert _cid(sch) == Store.candidate_id(best.workload_key, best.trace)

    with Store(tmp_path / "other.sqlite") as other:
        assert import_ms_json(other, out, device="sim:t4", simulated=True) == 4
        assert import_ms_json(other, out, device="sim:t4", simulated=True) == 0  # idempotent
        back = other.records()
        assert all(r.simulated and r.device == "sim:t4" for r in back)
        assert sorted(Store.candidate_id(r.workload_key, r.trace) for r in back) == sorted(
            Store.candidate_id(r.workload_key, r.trace) for r in store.records(device="cpu")
        )
        assert sorted(r.latency_s or 0 for r in back) == pytest.approx(
            sorted(r.latency_s or 0 for r in store.records(device="cpu"))
        )
        sch2 = ms.tir_integration.compile_tir(ms_database(other, device="sim:t4"), func, target)
        assert _cid(sch2) == Store.candidate_id(best.workload_key, best.trace)


def test_import_refuses_a_non_database_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(BadInputError, match="no such file"):
            import_ms_json(store, tmp_path / "d", device="cpu")
        (tmp_path / "d" / "database_workload.json").write_text("not json\n")
        (tmp_path / "d" / "database_tuning_record.json").write_text("")
        with pytest.raises(BadInputError, match="not a valid MetaSchedule JSON database"):
            import_ms_json(store, tmp_path / "d", device="cpu")


def test_plain_json_keeps_index_maps_of_layout_rewrite_traces() -> None:
    """dense/batch_matmul traces on llvm carry an IndexMap; MetaSchedule's as_json raises."""
    import json

    import tvm
    from tvm.tirx import IndexMap
    from tvm_ffi import convert

    index_map = IndexMap.from_func(lambda i, j: (j, i))
    value = plain_json(convert([1, "x", [index_map], {"k": 2.5}]))
    assert value[:2] == [1, "x"] and value[3] == {"k": 2.5}
    json.dumps(value)  # plain JSON all the way down
    assert tvm.ir.load_json(value[2][0]).is_equivalent_to(index_map)
