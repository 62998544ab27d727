"""The CUDA software around a GPU: toolkit root, nvcc, NVRTC, the libraries TVM loads.

Each check answers with the real reason when something is missing, because the
generic failures downstream ("Cannot find CUDA headers", `tvm.cuda(0).exist` is
False) name none.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any


def _is_toolkit(root: Path) -> bool:
    return (root / "include" / "cuda_runtime.h").is_file() and (root / "bin" / "nvcc").exists()


def _wrapped_nvcc(path: Path) -> Path | None:
    """The real nvcc behind a small wrapper script (`exec /opt/cuda/bin/nvcc "$@"`)."""
    try:
        if path.stat().st_size > 4096:
            return None
        text = path.read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r"(/\S+/bin/nvcc)\b", text)
    return Path(match.group(1)) if match else None


def find_cuda_root(environ: dict[str, str] | None = None) -> Path | None:
    """The CUDA toolkit's root, or None.

    CUDA_PATH, then CUDA_HOME, win when they hold a toolkit. Otherwise nvcc on PATH,
    followed through symlinks and through a wrapper script (a bare `which nvcc`
    guess, as TVM makes, lands on /usr/local when nvcc is a wrapper there), then
    /usr/local/cuda.
    """
    env = os.environ if environ is None else environ
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if env.get(var) and _is_toolkit(Path(env[var])):
            return Path(env[var])
    found = shutil.which("nvcc", path=env.get("PATH"))
    if found:
        nvcc = Path(found).resolve()
        for candidate in (nvcc, _wrapped_nvcc(nvcc)):
            if candidate is not None and _is_toolkit(candidate.resolve().parent.parent):
                return candidate.resolve().parent.parent
    default = Path("/usr/local/cuda")
    return default if _is_toolkit(default) else None


def export_cuda_root() -> Path | None:
    """Set CUDA_PATH to the real toolkit when it is unset, so TVM finds the headers."""
    root = find_cuda_root()
    if root is not None and not os.environ.get("CUDA_PATH"):
        os.environ["CUDA_PATH"] = str(root)
    return root


def nvcc_path() -> Path | None:
    root = find_cuda_root()
    if root is not None:
        return root / "bin" / "nvcc"
    found = shutil.which("nvcc")
    return Path(found) if found else None


def nvcc_version(nvcc: Path | None = None) -> str | None:
    """`13.0.88` from `nvcc --version`, or None without a working nvcc."""
    nvcc = nvcc or nvcc_path()
    if nvcc is None:
        return None
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"V(\d+\.\d+\.\d+)", out.stdout)
    return match.group(1) if match else None


def nvrtc_status() -> tuple[bool, str]:
    """Whether NVRTC can really compile here, and why not.

    `from cuda.bindings import nvrtc` succeeds without libnvrtc; only a call shows
    whether the library loads, so ask it for its version.
    """
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        return False, f"cuda-bindings is not installed ({exc})"
    try:
        result = nvrtc.nvrtcVersion()
    except Exception as exc:  # noqa: BLE001 - a missing libnvrtc raises at the first call
        return False, f"libnvrtc does not load: {type(exc).__name__}: {exc}"
    err, *version = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        return False, f"nvrtcVersion failed: {err}"
    return True, "NVRTC " + ".".join(str(v) for v in version)


def load_library(name: str) -> str | None:
    """None when the shared library loads; else the loader's own message."""
    try:
        ctypes.CDLL(name)
    except OSError as exc:
        return str(exc)
    return None


def tvm_cuda_library() -> Path | None:
    """TVM's CUDA runtime library in the installed wheel, if any."""
    try:
        import tvm
    except ImportError:
        return None
    for lib_dir in (Path(tvm.__file__).parent / "lib", Path(tvm.__file__).parent):
        path = lib_dir / "libtvm_runtime_cuda.so"
        if path.is_file():
            return path
    return None


def cuda_load_failure() -> str | None:
    """Why TVM's CUDA runtime cannot open a GPU here, naming the library; None if unknown.

    `tvm.cuda(0).exist` is False both without a GPU and when libtvm_runtime_cuda.so
    cannot load (libcudart.so.13 or libcuda.so.1 not on the loader path).
    """
    for library in ("libcuda.so.1",):
        error = load_library(library)
        if error is not None:
            return f"the NVIDIA driver library does not load: {error}"
    tvm_cuda = tvm_cuda_library()
    if tvm_cuda is not None:
        error = load_library(str(tvm_cuda))
        if error is not None:
            return f"TVM's CUDA runtime does not load: {error}"
    return None


def preflight() -> dict[str, Any]:
    """What this machine has for CUDA: driver, toolkits, libraries, TVM's CUDA support."""
    report: dict[str, Any] = {
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER"),
        "CUDA_PATH": os.environ.get("CUDA_PATH"),
    }
    root = find_cuda_root()
    report["cuda_root"] = str(root) if root else None
    report["nvcc"] = nvcc_version()
    report["nvrtc"] = nvrtc_status()[1]
    report["libraries"] = {
        name: load_library(name) or "ok"
        for name in ("libcuda.so.1", "libcudart.so.13", "libnvrtc.so.13", "libnvidia-ml.so.1")
    }
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        report["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        report["nvml_gpus"] = pynvml.nvmlDeviceGetCount()
    except Exception as exc:  # noqa: BLE001 - no driver, no package: say so
        report["driver"] = f"unavailable: {type(exc).__name__}: {exc}"
    try:
        import tvm

        report["tvm"] = tvm.__version__
        report["tvm_cuda_enabled"] = bool(tvm.runtime.enabled("cuda"))
    except Exception as exc:  # noqa: BLE001
        report["tvm"] = f"unavailable: {exc}"
    report["tvm_cuda_load_failure"] = cuda_load_failure()
    try:
        import torch

        report["torch"] = torch.__version__
        report["torch_cuda"] = torch.version.cuda
        report["torch_sees_gpu"] = bool(torch.cuda.is_available())
    except Exception as exc:  # noqa: BLE001
        report["torch"] = f"unavailable: {exc}"
    return report
