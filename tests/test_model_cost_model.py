"""SiMoECostModel inside a real, tiny MetaSchedule tuning run on the llvm target."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from simoe_model import tvm_compat
from simoe_model.cost_model import TARGET_EXPERT, SiMoECostModel
from simoe_model.hardware import HARDWARE_DIM
from simoe_model.model import SiMoE, SiMoEConfig, load_model

torch.set_num_threads(1)


@pytest.mark.slow
def test_simoe_cost_model_in_tune_tir(tmp_path: Path) -> None:
    import tvm
    import tvm_ffi
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    a = te.placeholder((64, 64), name="A")
    b = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    func = te.create_prim_func([a, b, c])
    mcpu = tvm_ffi.get_global_func("target.llvm_get_system_cpu")()
    target = tvm.target.Target({"kind": "llvm", "num-cores": 1, "mcpu": str(mcpu)})

    cost_model = SiMoECostModel(
        SiMoE(SiMoEConfig(store_hidden=16, program_dim=16, expert_hidden=16)),
        np.zeros(HARDWARE_DIM, np.float32),
        update_epochs=2,
    )
    database = ms.tune_tir(
        mod=func,
        target=target,
        work_dir=str(tmp_path / "work"),
        max_trials_global=4,
        num_trials_per_iter=4,
        # generous timeouts: on a loaded 2-core machine a build can take a minute
        builder=ms.builder.LocalBuilder(timeout_sec=300, initializer=tvm_compat.install),
        runner=ms.runner.LocalRunner(
            evaluator_config=ms.runner.EvaluatorConfig(number=1, repeat=1, min_repeat_ms=1),
            initializer=tvm_compat.install,
        ),
        cost_model=cost_model,
        seed=0,
    )
    records = database.get_all_tuning_records()
    assert len(records) >= 2
    # update() saw the measurements and trained the target's own expert on them
    assert cost_model.updates >= 1
    assert cost_model.model.expert_names == [TARGET_EXPERT]
    task = next(iter(cost_model.measured.values()))
    assert len(task) >= 2 and np.all(task.latencies > 0)
    path = tmp_path / "cost_model.pt"
    cost_model.save(str(path))
    assert load_model(path).expert_names == [TARGET_EXPERT]
