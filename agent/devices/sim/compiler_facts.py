"""Real compiler facts for the simulator: registers, spills and static shared memory from ptxas.

The latency model estimates a kernel's registers per thread from its local buffers
(`latency.BASE_REGISTERS` + local words) and takes static shared memory from the TIR.
Where nvcc can compile for a GPU's architecture (CUDA 13: sm_75 and newer), the real
figures are to be had without a GPU: TVM lowers the candidate to CUDA source, nvcc
compiles it (`-Xptxas -v`, through `agent.bundle.nvcc`, in batches) and ptxas reports
per kernel "Used N registers, ... M bytes smem" and its spill stores and loads. These
facts replace the estimate for that architecture; a candidate nvcc rejects is a failed
build there. Older architectures keep the estimate.

Facts are cached on disk, one JSON file per (sha256 of the candidate's CUDA source,
arch): compiling the same source for the same arch again costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from schemas import RunFailure

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
CACHE_VERSION = "v1"


@dataclass(frozen=True)
class KernelFacts:
    """What ptxas reports for one kernel on one architecture."""

    registers: int
    smem_bytes: int = 0  # static shared memory per block
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


def parse_ptxas(log: str) -> dict[str, dict[str, KernelFacts]]:
    """ptxas's `-v` report -> {arch: {kernel: facts}} (entry functions only)."""
    out: dict[str, dict[str, KernelFacts]] = {}
    entry: tuple[str, str] | None = None  # (kernel, arch) being reported
    spills: tuple[int, int, int] = (0, 0, 0)
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry, spills = (m.group(1), m.group(2)), (0, 0, 0)
        elif _PROPS.search(line):
            continue
        elif (m := _SPILLS.search(line)) and entry is not None:
            spills = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED.search(line)) and entry is not None:
            kernel, arch = entry
            out.setdefault(arch, {})[kernel] = KernelFacts(
                registers=int(m.group(1)),
                smem_bytes=int(s.group(1)) if (s := _SMEM.search(line)) else 0,
                spill_store_bytes=spills[1],
                spill_load_bytes=spills[2],
                stack_bytes=spills[0],
            )
            entry = None
    return out


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


@dataclass
class ProgramFacts:
    """One candidate on one arch: its kernels' facts, or nvcc's first error."""

    kernels: dict[str, KernelFacts]
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(
            {"kernels": {k: asdict(f) for k, f in self.kernels.items()}, "error": self.error}
        )

    @classmethod
    def from_json(cls, text: str) -> ProgramFacts:
        data = json.loads(text)
        kernels = {k: KernelFacts(**f) for k, f in data["kernels"].items()}
        return cls(kernels, data.get("error"))


class FactsCache:
    """Facts on disk, one file per (source hash, arch); writes are atomic."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: str, arch: str) -> Path:
        return self.folder / f"{digest[:24]}-{arch}-{CACHE_VERSION}.json"

    def get(self, digest: str, arch: str) -> ProgramFacts | None:
        try:
            return ProgramFacts.from_json(self._path(digest, arch).read_text())
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing or damaged: compiled again

    def put(self, digest: str, arch: str, facts: ProgramFacts) -> None:
        path = self._path(digest, arch)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(facts.to_json())
        tmp.replace(path)


def nvcc_archs(nvcc: Path) -> set[str]:
    """The real architectures this nvcc compiles for (`--list-gpu-arch`), e.g. {'sm_75'}."""
    try:
        proc = subprocess.run(
            [str(nvcc), "--list-gpu-arch"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {f"sm_{a.split('_', 1)[1]}" for a in proc.stdout.split() if a.startswith("compute_")}


def program_facts(
    programs: Sequence[Any],
    archs: Sequence[str],
    cache: FactsCache,
    *,
    nvcc: Path | None = None,
    batch_size: int = 32,
    jobs: int = 1,
) -> list[dict[str, ProgramFacts]]:
    """Facts of each lowered program (`agent.bundle.lowering.LoweredProgram`) per arch.

    Cached programs cost nothing; the rest are compiled by nvcc in batches (a batch that
    fails is bisected, so a rejected candidate fails alone with nvcc's first error).
    """
    from agent.bundle.nvcc import compile_programs
    from agent.devices.cuda_env import nvcc_path

    nvcc = nvcc or nvcc_path()
    if nvcc is None:
        raise RunFailure("nvcc not found: install the CUDA toolkit or set CUDA_PATH")
    digests = [source_hash(p.source) for p in programs]
    out: list[dict[str, ProgramFacts]] = [{} for _ in programs]
    for arch in archs:
        todo: dict[str, int] = {}  # digest -> first program index with that source
        for i, digest in enumerate(digests):
            cached = cache.get(digest, arch)
            if cached is not None:
                out[i][arch] = cached
            else:
                todo.setdefault(digest, i)
        if todo:
            batch = [(d, programs[i].renamed(f"s{n}")) for n, (d, i) in enumerate(todo.items())]
            prefix = {d: f"s{n}_" for n, d in enumerate(todo)}
            modules, failures = compile_programs(
                batch, arch, batch_size=batch_size, jobs=jobs, nvcc=nvcc, ptxas_verbose=True
            )
            reported: dict[str, KernelFacts] = {}
            for module in modules:
                reported.update(parse_ptxas(module.log).get(arch, {}))
            for digest, index in todo.items():
                if digest in failures:
                    facts = ProgramFacts({}, failures[digest])
                else:
                    kernels = {
                        name: reported[prefix[digest] + name]
                        for name in programs[index].kernels
                        if prefix[digest] + name in reported
                    }
                    facts = ProgramFacts(kernels)
                cache.put(digest, arch, facts)
        for i, digest in enumerate(digests):
            cached = out[i].get(arch) or cache.get(digest, arch)
            if cached is not None:  # else (cache unwritable) the arch keeps the estimate
                out[i][arch] = cached
    return out


@dataclass
class FactArrays:
    """Facts aligned with a kernel matrix: [n_kernels, n_gpus]; NaN where the estimate stays.

    `rejected` marks kernels of candidates nvcc refused for that GPU's arch (failed build).
    """

    registers: np.ndarray
    smem_bytes: np.ndarray
    spill_bytes: np.ndarray
    rejected: np.ndarray

    @classmethod
    def empty(cls, n_kernels: int, n_gpus: int) -> FactArrays:
        nan = np.full((n_kernels, n_gpus), np.nan)
        return cls(nan, nan.copy(), nan.copy(), np.zeros((n_kernels, n_gpus), bool))


def fact_arrays(
    owner: np.ndarray,
    launch_order: Sequence[Sequence[str] | None],
    facts: Sequence[dict[str, ProgramFacts]],
    gpu_archs: Sequence[str],
) -> tuple[FactArrays, int]:
    """Align per-candidate facts with the kernel matrix rows (and count unmapped candidates).

    `launch_order[c]` names candidate c's kernels in launch order, which is the order of
    its rows in the matrix (both follow the TIR body); None when it could not be lowered.
    A candidate whose kernel count differs from its rows keeps the estimate.
    """
    n_kernels = len(owner)
    arrays = FactArrays.empty(n_kernels, len(gpu_archs))
    rows: dict[int, list[int]] = {}
    for r, c in enumerate(np.asarray(owner).tolist()):
        rows.setdefault(int(c), []).append(r)
    unmapped = 0
    for c, names in enumerate(launch_order):
        mine = rows.get(c, [])
        if names is None or len(names) != len(mine):
            unmapped += 1
            continue
        for g, arch in enumerate(gpu_archs):
            program = facts[c].get(arch)
            if program is None:
                continue  # this arch keeps the estimate
            if program.error is not None:
                arrays.rejected[mine, g] = True
                continue
            for r, name in zip(mine, names, strict=True):
                k = program.kernels.get(name)
                if k is not None:
                    arrays.registers[r, g] = k.registers
                    arrays.smem_bytes[r, g] = k.smem_bytes
                    arrays.spill_bytes[r, g] = k.spill_bytes
    return arrays, unmapped


def lower_candidates(mod_json: str, traces: Sequence[Any], target: Any) -> list[Any]:
    """Each candidate's CUDA source and launches (`LoweredProgram`), None where TVM cannot.

    `traces` are MetaSchedule traces (JSON) of the workload `mod_json`; the target is
    the one the candidates were sampled for (its limits, not its arch, shape the code).
    """
    import tvm
    from tvm.s_tir import Schedule, Trace

    from agent.bundle.lowering import Unsupported, lower

    mod = tvm.ir.load_json(mod_json)
    out: list[Any] = []
    for trace in traces:
        try:
            sch = Schedule(mod)
            Trace.apply_json_to_schedule(trace, sch)
            out.append(lower(sch.mod, target))
        except (Unsupported, tvm.TVMError, ValueError):
            out.append(None)  # the estimate stays for this candidate
    return out


def sample_fact_arrays(
    mod_json: str,
    traces: Sequence[Any],
    owner: np.ndarray,
    target: Any,
    gpu_archs: Sequence[str],
    cache: FactsCache,
    *,
    nvcc: Path | None = None,
    jobs: int = 1,
) -> tuple[FactArrays, dict[str, int]]:
    """Facts of a workload's sampled candidates on every GPU whose arch nvcc supports.

    Returns the arrays for `latency.simulate` and counts: candidates lowered, unmapped,
    rejected per arch.
    """
    from agent.devices.cuda_env import nvcc_path

    nvcc = nvcc or nvcc_path()
    if nvcc is None:
        raise RunFailure("nvcc not found: install the CUDA toolkit or set CUDA_PATH")
    supported = nvcc_archs(nvcc)
    archs = sorted({a for a in gpu_archs if a in supported})
    programs = lower_candidates(mod_json, traces, target)
    lowered = [i for i, p in enumerate(programs) if p is not None]
    got = program_facts([programs[i] for i in lowered], archs, cache, nvcc=nvcc, jobs=jobs)
    facts: list[dict[str, ProgramFacts]] = [{} for _ in programs]
    for i, f in zip(lowered, got, strict=True):
        facts[i] = f
    order = [[launch.kernel for launch in p.launches] if p is not None else None for p in programs]
    arrays, unmapped = fact_arrays(owner, order, facts, gpu_archs)
    counts = {"candidates": len(programs), "lowered": len(lowered), "unmapped": unmapped}
    for arch in archs:
        counts[f"rejected_{arch}"] = sum(
            1 for f in facts if arch in f and f[arch].error is not None
        )
    return arrays, counts
