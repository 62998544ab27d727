"""Both CLIs as a user sees them: unwritable output paths (exit 2, what to do) and tables that
stay readable at 80 columns when stdout is not a terminal (issue 13, defects 6 and 7)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_line_error, run_main
from federation_helpers import toy_profile

import agent.cli
import server.cli
from agent.store import Store
from schemas import AnalyticalSpecs, EmpiricalFingerprint, HardwareProfile, TuningRecord
from schemas.messages import NodeHello
from server.registry import Registry
from server.similarity import initial_shared_arrays


def _unwritable_targets(tmp_path: Path) -> dict[str, Path]:
    """Paths no one can write (the tests run as root, so permissions would not stop them)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    return {"under a file": blocker / "out", "an existing folder": folder}


@pytest.fixture()
def registry_dir(tmp_path: Path) -> Path:
    """A registry with the initial global model and three profiles (enough for similarity)."""
    state = tmp_path / "server"
    state.mkdir()
    with Registry(state / "registry.sqlite") as registry:
        registry.save_global(initial_shared_arrays(0), round_=0)
        for i, (name, gflops) in enumerate(
            [("geforce-rtx-3090-ti-unit-07", 4000), ("t4", 8000), ("a100-sxm4-80gb", 19500)]
        ):
            hello = NodeHello(
                name=name, key_fingerprint=f"fp-{name}-000000", profile=toy_profile(name, gflops)
            )
            registry.upsert_node(hello, 2**63 + i)
        node_key = registry.nodes()[0]["node_key"]
        registry.put_expert(
            "geforce-rtx-3090-ti-unit-07", node_key, {"w": np.zeros(3)}, round_=1, num_examples=9
        )
        registry.finish_round(
            registry.start_round(7, sampled=3), replied=3, rejected=0, failed=0,
            global_version=0, updated=False,
        )  # fmt: skip
        registry.start_round(8, sampled=3)
        registry.close_interrupted_rounds()
    return state


@pytest.mark.parametrize("where", ["under a file", "an existing folder"])
def test_similarity_plot_to_an_unwritable_path_is_exit_2_saying_what_to_do(
    where: str,
    registry_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    plot = _unwritable_targets(tmp_path)[where]
    args = ["similarity", "--state-dir", str(registry_dir), "--plot", str(plot)]
    line = one_line_error(
        "simoe-server", *run_main(server.cli.main, "simoe-server", args, monkeypatch, capsys)
    )
    assert str(plot) in line and "--plot" in line  # names the path and the fix
    assert "[Errno" not in line


def test_records_export_into_a_folder_that_cannot_be_created_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    state = tmp_path / "agent"
    with Store(state / "store.sqlite"):
        pass  # an empty store: export gets as far as the folder
    target = _unwritable_targets(tmp_path)["under a file"]
    args = ["records", "export", str(target), "--state-dir", str(state)]
    line = one_line_error(
        "simoe-agent", *run_main(agent.cli.main, "simoe-agent", args, monkeypatch, capsys)
    )
    assert str(target) in line and "another folder" in line and "[Errno" not in line


# --- defect 7: tables at 80 columns -------------------------------------------------------

LONG_TASK = "fused_conv2d_add_relu_conv2d1_add1_relu1"


def _cpu_profile() -> HardwareProfile:
    return HardwareProfile(
        device_kind="cpu",
        device="cpu",
        name="AMD EPYC 7B13 64-Core Processor",
        analytical=AnalyticalSpecs(
            compute_units=2,
            clock_mhz=3000,
            fp32_gflops=200,
            fp16_gflops=200,
            mem_bandwidth_gbs=20,
            l2_cache_kb=32768,
            shared_mem_per_unit_kb=32,
            registers_per_unit=32,
            max_threads_per_unit=2,
            max_blocks_per_unit=1,
            warp_size=8,
            compute_capability=0,
        ),  # fmt: skip
        empirical=EmpiricalFingerprint(
            probe_suite_version="t", probe_latency_us={"p": 1.0}, bandwidth_gbs=10, fma_gflops=100
        ),
        simulated=False,
    )


@pytest.fixture()
def agent_dir(tmp_path: Path) -> Path:
    """A node store with records of long task names on a long device name."""
    state = tmp_path / "agent"
    with Store(state / "store.sqlite") as store:
        store.save_profile(_cpu_profile())
        for i in range(3):
            store.add_workload(f"key-{i}", f"{LONG_TASK}_{i}", "{}", None)
            record = TuningRecord(
                workload_key=f"key-{i}", task_name=f"{LONG_TASK}_{i}", trace=[i],
                run_secs=[1e-5 * (i + 1)], target={"kind": "cuda"},
                device="sim:geforce-rtx-3090-ti", simulated=True,
            )  # fmt: skip
            store.add_records([record])
    return state


def _table_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip()]


def check_readable(out: str, words: list[str]) -> None:
    """Fits 80 columns, cuts nothing with an ellipsis, and no word is split across lines."""
    lines = _table_lines(out)
    assert lines, "no output"
    assert max(len(line) for line in lines) <= 80, "\n" + out
    assert "…" not in out, "\n" + out
    for word in words:
        assert word in out, f"{word!r} is cut or wrapped:\n{out}"


TABLES = [
    ("simoe-agent", ["records"], [f"{LONG_TASK}_0", "sim:geforce-rtx-3090-ti", "simulated"]),
    ("simoe-agent", ["records", "best"], [f"{LONG_TASK}_2", "sim:geforce-rtx-3090-ti"]),
    ("simoe-agent", ["status"], []),
    ("simoe-agent", ["model", "show"], []),
    ("simoe-agent", ["dataset", "gpus"], ["GeForce GTX Titan X (Maxwell)"]),
    ("simoe-server", ["status"], []),
    ("simoe-server", ["nodes"], ["geforce-rtx-3090-ti-unit-07", "a100-sxm4-80gb"]),
    ("simoe-server", ["rounds"], ["no-update", "interrupted"]),
    ("simoe-server", ["experts"], ["geforce-rtx-3090-ti-unit-07"]),
    ("simoe-server", ["similarity"], ["geforce-rtx-3090-ti-unit-07", "a100-sxm4-80gb"]),
]


@pytest.mark.parametrize(
    ("prog", "args", "words"), TABLES, ids=[f"{p} {' '.join(a)}" for p, a, _ in TABLES]
)
def test_every_table_fits_80_columns_when_piped(
    prog: str,
    args: list[str],
    words: list[str],
    agent_dir: Path,
    registry_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Defect 7: `COLUMNS=80 cmd | cat` for each table command of both CLIs."""
    main, state = (
        (agent.cli.main, agent_dir) if prog == "simoe-agent" else (server.cli.main, registry_dir)
    )
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_main(main, prog, [*args, "--state-dir", str(state)], monkeypatch, capsys)
    assert code == 0, err
    check_readable(out, words)


def test_tune_table_fits_80_columns(capsys: pytest.CaptureFixture) -> None:
    from agent.cli.tune import _print_result
    from schemas.tuning import ModelUsed, TaskResult, TuneResult

    tasks = [
        TaskResult(
            task_name=f"{LONG_TASK}_{i}",
            workload_key=f"k{i}",
            weight=2,
            trials=16,
            flops=1e9,
            best_latency_s=1.2345e-3,
            best_measured_during_tuning_s=1.2e-3,
            untuned_latency_s=9.8765e-3,
            tuned_latency_s=1.2345e-3,
            kept="tuned",
            gflops=810.1,
            speedup=8.0,
        )  # fmt: skip
        for i in range(3)
    ]
    result = TuneResult(
        subject="vit_block.onnx", kind="network", device="sim:geforce-rtx-3090-ti",
        simulated=True, cost_model="simoe", trials=48, search_wall_s=12.0, tasks=tasks,
        model_used=ModelUsed(source="imported", path="/m/[x]/imported.pt", label="my model"),
    )  # fmt: skip
    _print_result(result)
    out = capsys.readouterr().out
    check_readable(out, [f"{LONG_TASK}_1", "9876.5", "1234.5"])
    assert "cost model: my model (/m/[x]/imported.pt)" in out  # which model, path and label


def test_tune_says_which_tasks_measured_nothing(capsys: pytest.CaptureFixture) -> None:
    """A task whose search found no valid schedule (0 trials) keeps the default; the user is
    told that, not that its tuned schedule was slower."""
    from agent.cli.tune import _print_result
    from schemas.tuning import TaskResult, TuneResult

    def task(name: str, trials: int, tuned: float | None) -> TaskResult:
        return TaskResult(
            task_name=name, workload_key=name, weight=1, trials=trials, flops=1e9,
            best_latency_s=1e-3, best_measured_during_tuning_s=tuned, untuned_latency_s=1e-3,
            tuned_latency_s=tuned, kept="default", gflops=1000.0, speedup=1.0,
        )  # fmt: skip

    result = TuneResult(
        subject="ops.py", kind="network", device="sim:rtx4060", simulated=True,
        cost_model="simoe", trials=16, search_wall_s=1.0,
        tasks=[task("empty", 0, None), task("slower", 8, 2e-3)],
    )  # fmt: skip
    _print_result(result)
    out = " ".join(capsys.readouterr().out.split())
    assert "1 of 2 tasks measured no candidate" in out
    assert "1 of 2 tasks keep TVM's default schedule: their best tuned schedule was slower" in out
