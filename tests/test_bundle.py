"""Thin GPU nodes, dry run: export a bundle (real TVM lowering, real nvcc for sm_90), run it
with a simulated stand-in for the GPU, import it; and the faults a real run can meet."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.bundle.lowering import LoweredProgram, Unsupported, launches_from_host_script
from agent.devices.cuda_env import nvcc_path
from schemas import BadInputError

HAS_NVCC = nvcc_path() is not None
needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="no nvcc on this machine")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small bundle for sim:h200's arch: the probes, one default, 4 matmul samples."""
    from agent.bundle.export import export_bundle

    out = tmp_path_factory.mktemp("export")
    export_bundle(
        out, gpu="h200", workloads=["matmul:64,64,64"], per_workload=4, twin="sim:h200",
        batch_size=8, jobs=2,
    )  # fmt: skip
    return out


def _run(bundle: Path, out: Path, standin: Path, *extra: str) -> subprocess.CompletedProcess:
    """The bundle's own run.py, in an isolated Python (-I): no project on the path."""
    return subprocess.run(
        [sys.executable, "-I", str(bundle / "run.py"), str(bundle), "--out", str(out),
         "--backend", "sim", "--standin", str(standin), *extra],
        capture_output=True, text=True, timeout=120, cwd=out.parent,
    )  # fmt: skip


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@needs_nvcc
@pytest.mark.slow
def test_dry_run_export_run_import(exported: Path, tmp_path: Path) -> None:
    from agent.bundle.export import folder_bytes
    from agent.bundle.importer import import_results
    from agent.store import Store

    bundle, home = exported / "bundle", exported / "home"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["arch"] == "sm_90" and len(manifest["modules"]) >= 2
    assert {e["kind"] for e in manifest["entries"]} == {"probe", "default", "candidate"}
    assert sorted(p.name for p in bundle.iterdir() if p.suffix == ".py") == [
        "cuda_backend.py", "run.py",
    ]  # fmt: skip
    assert not (bundle / "entries.jsonl").exists()  # traces and features stay home
    assert folder_bytes(bundle) < 1 << 20  # tiny here; the evidence bundle is measured in docs

    out = tmp_path / "results"
    done = _run(bundle, out, home / "standin.json")
    assert done.returncode == 0, done.stderr
    rows = _rows(out)
    assert len(rows) == len(manifest["entries"]) and all(r["ok"] for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "done" and summary["self_check"]["ok"]

    store_path = tmp_path / "store.sqlite"
    result = import_results(out, home, store_path)
    assert result.simulated and result.device == "sim:h200"
    assert result.records == 4 and result.profile_id is not None
    standin = json.loads((home / "standin.json").read_text())["latencies"]
    with Store(store_path) as store:
        records = store.records(device="sim:h200")
        assert len(records) == 4 and all(r.simulated for r in records)
        assert not store.records(device="cuda:0")  # a dry run never passes for a measurement
        got = sorted(r.run_secs[0] for r in records)
        want = sorted(standin[r["id"]][0] for r in rows if r["kind"] == "candidate")
        assert got == pytest.approx(want)
        assert store.latest_profile("sim:h200").simulated
        assert len(store.get_features(store.candidate_ids(device="sim:h200"))) == 4
    with pytest.raises(BadInputError, match="import only as their twin"):
        import_results(out, home, store_path, device="cuda:0")


def _rewrite_module(bundle: Path, index: int, data: bytes | None) -> None:
    """Replace module `index`: with `data` (manifest updated), or corrupt it (not updated)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    module = manifest["modules"][index]
    path = bundle / module["file"]
    if data is None:
        path.write_bytes(path.read_bytes()[:-7] + b"corrupt")
        return
    path.write_bytes(data)
    module["sha256"] = hashlib.sha256(data).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest))


@needs_nvcc
@pytest.mark.slow
def test_artifacts_that_fail_to_load_keep_the_rest_and_name_the_first_error(
    exported: Path, tmp_path: Path
) -> None:
    from agent.bundle.importer import import_results

    bundle = tmp_path / "bundle"
    shutil.copytree(exported / "bundle", bundle)
    _rewrite_module(bundle, 1, None)  # damaged in transit
    _rewrite_module(bundle, 2, lzma.compress(b"not a cubin"))  # the driver refuses it
    out = tmp_path / "results"
    done = _run(bundle, out, exported / "home" / "standin.json")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    module_of = {e["id"]: e["module"] for e in manifest["entries"]}
    rows = _rows(out)
    assert len(rows) == len(manifest["entries"])
    for row in rows:
        assert row["ok"] == (module_of[row["id"]] not in (1, 2)), row
    errors = {module_of[r["id"]]: r["error"] for r in rows if not r["ok"]}
    assert "sha256" in errors[1] and "not an ELF cubin" in errors[2]
    summary = json.loads((out / "summary.json").read_text())
    assert "sha256" in summary["first_error"] or "ELF" in summary["first_error"]
    result = import_results(out, exported / "home", tmp_path / "store.sqlite")
    assert result.measured_entries == sum(r["ok"] for r in rows)
    assert result.profile_id is None and "probes not measured" in result.profile_error
    assert result.first_error == summary["first_error"]


@needs_nvcc
@pytest.mark.slow
def test_a_failing_self_check_stops_the_run_at_once(exported: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(exported / "bundle", bundle)
    _rewrite_module(bundle, 0, None)  # the first probe's module
    out = tmp_path / "results"
    done = _run(bundle, out, exported / "home" / "standin.json")
    assert done.returncode == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "self-check failed"
    assert summary["first_error"].startswith("self-check p_launch_tiny") and len(_rows(out)) == 1


@needs_nvcc
@pytest.mark.slow
def test_deadline_and_kill_keep_what_was_measured(exported: Path, tmp_path: Path) -> None:
    from agent.bundle.importer import import_results

    bundle, standin = exported / "bundle", exported / "home" / "standin.json"
    total = len(json.loads((bundle / "manifest.json").read_text())["entries"])
    out = tmp_path / "deadline"
    done = _run(bundle, out, standin, "--deadline", "2.5", "--standin-delay", "0.25")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "deadline" and summary["wall_s"] < 4
    assert 0 < len(_rows(out)) < total
    partial = import_results(out, exported / "home", tmp_path / "a.sqlite")
    assert partial.stopped == "deadline" and partial.measured_entries == len(_rows(out))

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-I", str(bundle / "run.py"), str(bundle), "--out", str(killed),
         "--backend", "sim", "--standin", str(standin), "--standin-delay", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        limit = time.monotonic() + 60
        while time.monotonic() < limit:
            path = killed / "results.jsonl"
            if path.exists() and len(path.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    measured = len(_rows(killed))
    assert 3 <= measured < total
    result = import_results(killed, exported / "home", tmp_path / "b.sqlite")
    assert result.measured_entries == measured and result.stopped is None


@needs_nvcc
@pytest.mark.slow
def test_nvcc_batches_isolate_the_program_that_fails(tmp_path: Path) -> None:
    from agent.bundle.nvcc import compile_programs

    def program(name: str, body: str) -> LoweredProgram:
        source = f'extern "C" __global__ void {name}(float* a) {{ {body} }}\n'
        return LoweredProgram(source, [name], [], [])

    good = [(f"g{i}", program(f"k{i}", "a[threadIdx.x] += 1.0f;")) for i in range(3)]
    bad = ("bad", program("kbad", "a[threadIdx.x] = undefined_name;"))
    modules, failures = compile_programs([good[0], bad, good[1], good[2]], "sm_90", batch_size=4)
    assert list(failures) == ["bad"] and "undefined_name" in failures["bad"]
    assert sorted(i for m in modules for i in m.ids) == ["g0", "g1", "g2"]
    assert all(m.cubin.startswith(b"\x7fELF") for m in modules)


HOST_SCRIPT = """
        A_handle: T.let[T.handle] = T.if_then_else(A_type_index == 70, T.handle_add_byte_offset(T.tvm_struct_get(args, 0, 15, T.handle().ty), 24), T.tvm_struct_get(args, 0, 15, T.handle().ty))
        C_handle: T.let[T.handle] = T.if_then_else(C_type_index == 70, T.handle_add_byte_offset(T.tvm_struct_get(args, 1, 15, T.handle().ty), 24), T.tvm_struct_get(args, 1, 15, T.handle().ty))
                    A = T.decl_buffer((2050, 2050), data=T.reinterpret(T.handle("float32", "global").ty, T.tvm_struct_get(A_handle, 0, 1, T.handle().ty)))
                    C = T.decl_buffer((2048, 2048), data=T.reinterpret(T.handle("float32", "global").ty, T.tvm_struct_get(C_handle, 0, 1, T.handle().ty)))
                        A_1 = A.view(4202500)
                        C_1 = T.decl_buffer((4194304,), data=C.data)
                        T.call_ffi_kernel("main_kernel", C_1.data, A_1.data, 7, 128, 64, 16, 16, 2048, launch_params=["blockIdx.y", "blockIdx.x", "threadIdx.x", "threadIdx.y", "tirx.use_dyn_shared_memory"], ret_ty="int32")
"""  # noqa: E501  (TVM's own printed lines)


def test_launches_are_read_off_the_host_function() -> None:
    params = {
        "main_kernel": (
            ["T.handle(T.float32)", "T.handle(T.float32)", "T.int32"],
            ["blockIdx.y", "blockIdx.x", "threadIdx.x", "threadIdx.y",
             "tirx.use_dyn_shared_memory"],
        )
    }  # fmt: skip
    (launch,) = launches_from_host_script(HOST_SCRIPT, params)
    assert launch.args == [{"buffer": 1}, {"buffer": 0}, {"int": 7, "bits": 32}]
    assert launch.grid == [64, 128, 1] and launch.block == [16, 16, 1] and launch.dyn_smem == 2048
    with pytest.raises(Unsupported, match="workspace"):
        launches_from_host_script(HOST_SCRIPT + "T.TVMBackendAllocWorkspace(2, 0, 64)", params)
    with pytest.raises(Unsupported, match="not a constant"):
        launches_from_host_script(HOST_SCRIPT.replace(", 7, 128,", ", n, 128,"), params)
    renamed = LoweredProgram("void main_kernel(); main_kernel_x", ["main_kernel"], [launch], [])
    renamed = renamed.renamed("c3")
    assert renamed.source == "void c3_main_kernel(); main_kernel_x"
    assert renamed.launches[0].kernel == "c3_main_kernel"


def test_import_of_a_folder_without_results_is_a_one_line_bad_input(tmp_path: Path) -> None:
    from agent.bundle.importer import read_results

    with pytest.raises(BadInputError, match="no summary.json"):
        read_results(tmp_path)


@needs_nvcc
@pytest.mark.slow
def test_a_hung_self_check_is_ended_within_its_limit(exported: Path, tmp_path: Path) -> None:
    """A first probe that never returns (a hung kernel) ends the run, named, in time."""
    out = tmp_path / "results"
    started = time.monotonic()
    done = _run(exported / "bundle", out, exported / "home" / "standin.json",
                "--standin-delay", "30", "--self-check-limit", "1")  # fmt: skip
    assert done.returncode == 1 and time.monotonic() - started < 20
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "self-check failed"
    assert summary["first_error"] == "self-check p_launch_tiny: no result within 1 s"


# What a real GPU's runner reports about itself (an H200 as torch, CUDA and NVML see it).
H200_DEVICE = {
    "backend": "cuda", "simulated": False, "device": "cuda:0",
    "attributes": {
        "name": "NVIDIA H200", "sm_count": 132, "compute_capability": [9, 0],
        "total_memory_bytes": 150_754_820_096, "l2_cache_bytes": 62_914_560, "warp_size": 32,
        "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
        "cuda_sm_clock_khz": 1_980_000, "cuda_mem_clock_khz": 3_201_000,
        "cuda_mem_bus_width_bits": 6144, "sm_clock_mhz": 1980,
        "nvml_errors": {"mem_clock_mhz": "Not Supported", "mem_bus_width_bits": "Not Supported"},
    },
}  # fmt: skip


@needs_nvcc
@pytest.mark.slow
def test_a_gpu_run_imports_as_real_cuda_records_with_the_gpus_profile(
    exported: Path, tmp_path: Path
) -> None:
    from agent.bundle.importer import import_results
    from agent.store import Store

    out = tmp_path / "results"
    assert _run(exported / "bundle", out, exported / "home" / "standin.json").returncode == 0
    summary = json.loads((out / "summary.json").read_text())
    summary["device"] = H200_DEVICE  # as if the runner had run on the GPU
    (out / "summary.json").write_text(json.dumps(summary))
    store_path = tmp_path / "store.sqlite"
    result = import_results(out, exported / "home", store_path)
    assert not result.simulated and result.device == "cuda:0" and result.records == 4
    with Store(store_path) as store:
        records = store.records(device="cuda:0")
        assert len(records) == 4 and not any(r.simulated for r in records)
        assert {r.profile_id for r in records} == {result.profile_id}
        profile = store.latest_profile("cuda:0")
    assert not profile.simulated and profile.name == "NVIDIA H200"
    # NVML's unsupported fields fell back to CUDA's: 3201 MHz x 2 x 6144 bits = 4917 GB/s
    assert profile.analytical.mem_bandwidth_gbs == pytest.approx(4917, rel=0.01)
    assert profile.analytical.compute_capability == 9.0
    with pytest.raises(BadInputError, match="import as cuda:N"):
        import_results(out, exported / "home", store_path, device="sim:h200")


def test_a_simoe_model_picks_the_candidates_it_ranks_fastest(tmp_path: Path) -> None:
    """`export --pick K --model M --profile P`: SiMoE's top K of the sampled pool."""
    import numpy as np

    from agent.bundle.export import _Item, _model_picks
    from simoe_model import synthetic
    from simoe_model.hardware import hardware_vector
    from simoe_model.model import SiMoE, SiMoEConfig, save_model
    from simoe_model.train import predict, train_experts

    (device,) = synthetic.make_devices(1, seed=0)
    data = synthetic.device_dataset(device, synthetic.make_tasks(2, 12, seed=0))
    model = SiMoE(SiMoEConfig())
    train_experts(model, [(device.name, data)], epochs=1, seed=0)
    save_model(model, tmp_path / "model.pt")
    profile = tmp_path / "profile.json"
    profile.write_text(device.profile().model_dump_json())
    task = data.tasks[0]
    items = [
        _Item(f"c{i}", "candidate", "w", None, features=f) for i, f in enumerate(task.features)
    ]
    picked = _model_picks(items, 3, tmp_path / "model.pt", profile, "h200")
    scores = predict(model, list(task.features), hardware_vector(device.profile()))
    assert [i.id for i in picked] == [f"c{i}" for i in sorted(np.argsort(-scores)[:3])]
    with pytest.raises(BadInputError, match="not a profile"):
        _model_picks(items, 3, tmp_path / "model.pt", tmp_path / "model.pt", "h200")


@needs_nvcc
@pytest.mark.slow
def test_a_kernel_fault_stops_the_run_and_names_it(exported: Path, tmp_path: Path) -> None:
    """After an illegal address the CUDA context is lost: stop, keep, name it."""
    standin = json.loads((exported / "home" / "standin.json").read_text())
    standin["latencies"]["p_vadd"] = (
        "cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access)"  # noqa: E501
    )
    path = tmp_path / "standin.json"
    path.write_text(json.dumps(standin))
    out = tmp_path / "results"
    done = _run(exported / "bundle", out, path)
    assert done.returncode == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "context lost" and "ILLEGAL_ADDRESS" in summary["first_error"]
    assert [r["id"] for r in _rows(out)] == ["p_launch_tiny", "p_vadd"]


@pytest.mark.slow  # two CLI processes: about 10 s each on a loaded machine
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["import", "{tmp}", "--home", "{tmp}"], "not a bundle's home folder"),
        (["export", "--out", "{tmp}/x", "--gpu", "h200", "--pick", "3"], "--pick needs --model"),
    ],
)
def test_bundle_cli_bad_input_is_one_line_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run(
        [sys.executable, "-c", "from agent.cli import main; main()", "bundle", *argv],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "SIMOE_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
