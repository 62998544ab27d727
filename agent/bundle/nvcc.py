"""Compile many lowered programs into few cubins with nvcc, here, for the target's arch.

One nvcc run costs seconds of fixed work (preprocessing the CUDA headers, starting
cicc and ptxas), so candidates are compiled in batches: each program's source goes
into its own C++ namespace of one translation unit, after the headers they include
(which their include guards then skip), with its kernels renamed apart. A batch
that fails is split in halves until the programs that fail are alone; each keeps
nvcc's first error line.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agent.bundle.lowering import LoweredProgram
from agent.devices.cuda_env import nvcc_path
from schemas import RunFailure

_INCLUDE = re.compile(r'^\s*#include\s*[<"]([^>"]+)[>"]', re.M)
NVCC_FLAGS = ["-O3", "-w", "--cubin"]  # what TVM's nvcc path uses, minus its fatbin


@dataclass
class CompiledModule:
    """One cubin holding the kernels of `ids`."""

    cubin: bytes
    ids: list[str]
    log: str = ""  # nvcc's stderr: ptxas's resource report when asked for (`ptxas_verbose`)


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if "error" in line.lower():
            return line.strip()[:300]
    lines = [line for line in stderr.splitlines() if line.strip()]
    return lines[0][:300] if lines else "nvcc failed without a message"


def _translation_unit(programs: list[tuple[str, LoweredProgram]], folder: Path) -> Path:
    headers: list[str] = []
    for _, program in programs:
        for header in _INCLUDE.findall(program.source):
            if not header.startswith("cuda/std") and header not in headers:
                headers.append(header)
    parts = [f"#include <{h}>" for h in headers]
    for index, (_, program) in enumerate(programs):
        name = f"p{index}.cu"
        (folder / name).write_text(program.source)
        parts.append(f'namespace simoe_p{index} {{\n#include "{name}"\n}}')
    unit = folder / "batch.cu"
    unit.write_text("\n".join(parts) + "\n")
    return unit


def compile_batch(programs: list[tuple[str, LoweredProgram]], arch: str, nvcc: Path) -> bytes:
    """One cubin for all `programs` (kernels already renamed apart); RunFailure on error."""
    return compile_batch_logged(programs, arch, nvcc)[0]


def compile_batch_logged(
    programs: list[tuple[str, LoweredProgram]],
    arch: str,
    nvcc: Path,
    flags: tuple[str, ...] = (),
) -> tuple[bytes, str]:
    """`compile_batch` with extra nvcc flags, also returning nvcc's stderr."""
    with tempfile.TemporaryDirectory(prefix="simoe-nvcc-") as tmp:
        folder = Path(tmp)
        unit = _translation_unit(programs, folder)
        out = folder / "batch.cubin"
        cmd = [str(nvcc), *NVCC_FLAGS, *flags, f"-arch={arch}", "-o", str(out), str(unit)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            raise RunFailure("nvcc ran over 30 minutes") from None
        if proc.returncode != 0:
            raise RunFailure(_first_error(proc.stderr))
        return out.read_bytes(), proc.stderr


def compile_programs(
    programs: list[tuple[str, LoweredProgram]],
    arch: str,
    *,
    batch_size: int = 32,
    jobs: int = 1,
    nvcc: Path | None = None,
    ptxas_verbose: bool = False,
) -> tuple[list[CompiledModule], dict[str, str]]:
    """Cubins for all programs, and the first nvcc error of each program that failed.

    With `ptxas_verbose`, each module's `log` holds ptxas's per-kernel resource report
    (registers, spills, static shared memory: `-Xptxas -v`).
    """
    nvcc = nvcc or nvcc_path()
    if nvcc is None:
        raise RunFailure("nvcc not found: install the CUDA toolkit or set CUDA_PATH")
    failures: dict[str, str] = {}

    def build(batch: list[tuple[str, LoweredProgram]]) -> list[CompiledModule]:
        try:
            flags = ("-Xptxas", "-v") if ptxas_verbose else ()
            cubin, log = compile_batch_logged(batch, arch, nvcc, flags)
            return [CompiledModule(cubin, [i for i, _ in batch], log if ptxas_verbose else "")]
        except RunFailure as exc:
            if len(batch) == 1:
                failures[batch[0][0]] = str(exc)
                return []
            half = len(batch) // 2
            return build(batch[:half]) + build(batch[half:])

    batches = [programs[i : i + batch_size] for i in range(0, len(programs), batch_size)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        modules = [m for result in pool.map(build, batches) for m in result]
    return modules, failures
