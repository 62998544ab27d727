"""Helper of test_store_sigkill: writes into a store until it is killed.

usage: python tests/store_writer.py STORE_PATH batches|tune SEED

- batches: big transactions without TVM (records plus their feature blobs), so a
  kill often lands inside a transaction.
- tune: a real MetaSchedule search (matmul 32^3) committing through the store's
  PyDatabase, one transaction per record. Builder and runner are MetaSchedule's
  dummies (random latencies), so the records are labelled simulated.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from agent.ms_database import ms_database
from agent.store import Store
from schemas import TuningRecord
from schemas.records import FEATURE_DIM
from simoe_model import tvm_compat

BATCH = 40


def write_batches(store: Store, seed: int) -> None:
    rng = np.random.default_rng(seed)
    key = f"writer-{seed}"
    store.add_workload(key, f"synthetic-{seed}", "{}")
    step = 0
    while True:
        records = [
            TuningRecord(
                workload_key=key,
                task_name=f"synthetic-{seed}",
                trace=[["Sample", step, i, int(rng.integers(1 << 30))]],
                run_secs=[float(rng.uniform(1e-6, 1e-3))],
                target={"kind": "llvm"},
                device="cpu",
            )
            for i in range(BATCH)
        ]
        ids = store.add_records(records)
        store.put_features(
            {cid: rng.standard_normal((int(rng.integers(5, 40)), FEATURE_DIM)) for cid in ids}
        )
        step += 1


def tune(store: Store, seed: int, work_dir: Path) -> None:
    from tvm import te
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.testing.dummy_object import DummyBuilder, DummyRunner

    a = te.placeholder((32, 32), name="A")
    b = te.placeholder((32, 32), name="B")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((32, 32), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    ms.tune_tir(
        te.create_prim_func([a, b, c]),
        {"kind": "llvm", "num-cores": 1},
        str(work_dir),
        max_trials_global=100_000,
        num_trials_per_iter=8,
        builder=DummyBuilder(),
        runner=DummyRunner(),
        database=ms_database(store, device="sim:writer", simulated=True, task_name="matmul-32"),
        cost_model="random",
        strategy="replay-trace",
        measure_callbacks=[ms.measure_callback.AddToDatabase()],
        seed=seed,
    )


def main() -> None:
    tvm_compat.install()  # an entry point: TVM's inspect patch before any tuning
    path, mode, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    with Store(path) as store:
        print("open", flush=True)
        if mode == "batches":
            write_batches(store, seed)
        else:
            tune(store, seed, path.parent / f"work-{seed}")


if __name__ == "__main__":
    main()
