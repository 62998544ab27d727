"""How much ptxas's facts move the simulator: registers, latencies, cross-GPU rank correlations.

The simulator estimates registers per thread from a kernel's local buffers and takes
static shared memory from the TIR; `agent.devices.sim.compiler_facts` takes both, and
the spills, from `nvcc -Xptxas -v` wherever nvcc compiles for the GPU's arch. This
benchmark labels the same candidates (the first K of each workload's sample in the
protocol's sample cache, `runs/cache`, built by `python -m bench.protocol --build-data`)
on every protocol unit twice, with the estimate and with the facts, and reports:

- per arch: ptxas's registers against the estimate, spills, candidates nvcc rejected;
- per unit whose arch has facts: how far its latencies move, how its own ranking moves
  (Spearman estimate vs facts per task), whether its best candidate changes;
- the mean per-task Spearman between units (the fleet's cross-GPU rank agreement),
  before and after, over all pairs and over pairs of different generations.

Everything is SIMULATED. Facts are cached (runs/ptxas_facts), so a rerun costs only
the lowering.

    python -m bench.simulator.ptxas_facts --workloads 4 --per-workload 12 --archs sm_75,sm_90
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from bench import protocol

ROOT = Path(__file__).resolve().parents[2]
FACTS_DIR = ROOT / "runs" / "ptxas_facts"


def _specs() -> dict[str, object]:
    from agent.devices.sim.catalog import resolve

    return {
        u: resolve(protocol.device_of(u).removeprefix("sim:"))
        for s in ("train", "validation", "test")
        for u in protocol.units(s)  # type: ignore[arg-type]
    }


def _rho(a: np.ndarray, b: np.ndarray) -> float | None:
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 4 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return None
    return float(spearmanr(a[ok], b[ok]).statistic)


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def run(n_workloads: int, per_workload: int, archs: list[str], jobs: int) -> dict:
    from agent.devices.cuda_env import nvcc_path
    from agent.devices.sim import compiler_facts as cf
    from agent.devices.sim import latency
    from agent.fleet_dataset import _cache_file, _load_cached, generic_target

    nvcc = nvcc_path()
    if nvcc is None:
        raise SystemExit("error: nvcc not found: this benchmark needs the CUDA toolkit")
    specs = _specs()
    names = list(specs)
    target = generic_target(list(specs.values()))
    params = latency.GpuParams.from_specs(list(specs.values()))
    gpu_archs = [specs[u].cuda_arch for u in names]
    supported = cf.nvcc_archs(nvcc)
    archs = [a for a in archs if a in supported]
    cache = cf.FactsCache(FACTS_DIR)
    started = time.perf_counter()
    per_task: list[dict] = []
    reg_pairs: dict[str, list[tuple[float, float, float, float]]] = {a: [] for a in archs}
    counts: dict[str, int] = {}
    for index, workload in enumerate(protocol.WORKLOADS[:n_workloads]):
        path = _cache_file(
            protocol.CACHE_DIR, workload, target, protocol.PER_WORKLOAD,
            protocol.SAMPLE_SEED + index,
        )  # fmt: skip
        sample = _load_cached(path, workload) if path.exists() else None
        if sample is None:
            raise SystemExit(
                f"error: no cached sample of {workload}: run `python -m bench.protocol "
                "--build-data` first"
            )
        keep = np.arange(min(per_workload, len(sample.traces)))
        rows = np.isin(sample.owner, keep)
        matrix, owner = sample.matrix[rows], sample.owner[rows]
        only = [a if a in archs else "none" for a in gpu_archs]  # facts for `archs` only
        facts, got = cf.sample_fact_arrays(
            sample.mod_json, sample.traces[: len(keep)], owner, target, only, cache,
            nvcc=nvcc, jobs=jobs,
        )  # fmt: skip
        for k, v in got.items():
            counts[k] = counts.get(k, 0) + v
        est = latency.candidate_latency(matrix, owner, len(keep), params)
        real = latency.candidate_latency(matrix, owner, len(keep), params, facts)
        times = latency.kernel_times(matrix, params)
        for g, arch in enumerate(gpu_archs):
            if arch in archs and gpu_archs.index(arch) == g:
                for r in range(len(owner)):
                    if np.isfinite(facts.registers[r, g]):
                        reg_pairs[arch].append(
                            (
                                float(times.registers[r, g]),
                                float(facts.registers[r, g]),
                                float(facts.spill_bytes[r, g]),
                                float(matrix[r, latency.COL["local_words"]]
                                      + latency.BASE_REGISTERS > latency.MAX_REGISTERS),
                            )
                        )  # fmt: skip
        per_task.append({"workload": workload, "estimate": est, "facts": real})
    seconds = time.perf_counter() - started
    return _summary(
        per_task, names, specs, gpu_archs, archs, reg_pairs, counts, seconds, per_workload
    )


def _summary(per_task, names, specs, gpu_archs, archs, reg_pairs, counts, seconds, k) -> dict:
    units_with = [u for u, a in zip(names, gpu_archs, strict=True) if a in archs]
    per_unit = {}
    for u in units_with:
        g = names.index(u)
        moves, rhos, top_changed, newly_failed = [], [], 0, 0
        for t in per_task:
            a, b = t["estimate"][:, g], t["facts"][:, g]
            ok = np.isfinite(a) & np.isfinite(b)
            moves += list(np.abs(np.log(b[ok] / a[ok])))
            rhos.append(_rho(a, b))
            newly_failed += int((np.isfinite(a) & ~np.isfinite(b)).sum())
            if np.isfinite(a).any() and np.isfinite(b).any():
                top_changed += int(np.argmin(a) != np.argmin(b))
        moves_arr = np.asarray(moves)
        per_unit[u] = {
            "arch": gpu_archs[g],
            "median_abs_log_ratio": float(np.median(moves_arr)) if moves else None,
            "share_moved_over_10pct": float(np.mean(moves_arr > np.log(1.1))) if moves else None,
            "own_rank_spearman": _mean(rhos),
            "best_changed_tasks": top_changed,
            "newly_failed": newly_failed,
        }

    def cross(kind: str, pair_filter) -> float | None:
        values = []
        for t in per_task:
            for i, j in itertools.combinations(range(len(names)), 2):
                if pair_filter(i, j):
                    values.append(_rho(t[kind][:, i], t[kind][:, j]))
        return _mean(values)

    arch_of = [specs[u].architecture for u in names]
    touched = {names.index(u) for u in units_with}
    filters = {
        "all pairs": lambda i, j: True,
        "pairs with a facts unit": lambda i, j: i in touched or j in touched,
        "different generations, a facts unit": lambda i, j: (
            arch_of[i] != arch_of[j] and (i in touched or j in touched)
        ),
        "both facts units, different generations": lambda i, j: (
            i in touched and j in touched and arch_of[i] != arch_of[j]
        ),
    }
    rank = {
        name: {"estimate": cross("estimate", f), "facts": cross("facts", f)}
        for name, f in filters.items()
    }
    registers = {}
    for arch, pairs in reg_pairs.items():
        if not pairs:
            continue
        arr = np.asarray(pairs)
        registers[arch] = {
            "kernels": len(arr),
            "estimate_median": float(np.median(arr[:, 0])),
            "ptxas_median": float(np.median(arr[:, 1])),
            "spearman": _rho(arr[:, 0], arr[:, 1]),
            "median_abs_diff": float(np.median(np.abs(arr[:, 0] - arr[:, 1]))),
            "ptxas_spilling_share": float(np.mean(arr[:, 2] > 0)),
            "estimate_spilling_share": float(np.mean(arr[:, 3] > 0)),
        }
    return {
        "simulated": True,
        "workloads": [t["workload"] for t in per_task],
        "per_workload": k,
        "archs": archs,
        "units_with_facts": units_with,
        "counts": counts,
        "registers": registers,
        "per_unit": per_unit,
        "cross_gpu_spearman": rank,
        "seconds": seconds,
    }


def markdown(result: dict) -> str:
    def f(x: float | None, fmt: str = ".3f") -> str:
        return "n/a" if x is None else format(x, fmt)

    lines = [
        "# ptxas facts in the simulator (SIMULATED; all units of the protocol)",
        "",
        f"Command: `{result['command']}`  ",
        f"Split: none (a simulator check over all {len(result['per_unit'])} units with facts "
        "and every protocol unit for the rank agreement; no method is scored).  ",
        f"Candidates: the first {result['per_workload']} of each of "
        f"{len(result['workloads'])} workloads' protocol samples "
        f"({', '.join(result['workloads'])}); archs with ptxas facts: "
        f"{', '.join(result['archs'])}.  ",
        f"Counts: {result['counts']}.  ",
        f"Wall {result['seconds']:.0f} s at load {result['load']} (facts cached afterwards).",
        "",
        "## Registers per thread: the estimate against ptxas (per kernel)",
        "",
        "| arch | kernels | estimate median | ptxas median | Spearman | median abs diff "
        "| spilling (ptxas) | spilling (estimate) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arch, r in result["registers"].items():
        lines.append(
            f"| {arch} | {r['kernels']} | {r['estimate_median']:.0f} | {r['ptxas_median']:.0f} "
            f"| {f(r['spearman'])} | {r['median_abs_diff']:.0f} | "
            f"{r['ptxas_spilling_share']:.2f} | {r['estimate_spilling_share']:.2f} |"
        )
    lines += [
        "",
        "## Latencies of the units whose arch has facts",
        "",
        "| unit | arch | median abs log ratio | share moved > 10 % | own ranking Spearman "
        "(estimate vs facts, mean over tasks) | tasks whose best changed | newly failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for u, r in result["per_unit"].items():
        lines.append(
            f"| {u} | {r['arch']} | {f(r['median_abs_log_ratio'])} | "
            f"{f(r['share_moved_over_10pct'], '.2f')} | {f(r['own_rank_spearman'])} | "
            f"{r['best_changed_tasks']}/{len(result['workloads'])} | {r['newly_failed']} |"
        )
    lines += [
        "",
        "## Cross-GPU rank agreement (mean per-task Spearman over unit pairs)",
        "",
        "| pairs | estimate | facts |",
        "|---|---|---|",
    ]
    for name, r in result["cross_gpu_spearman"].items():
        lines.append(f"| {name} | {f(r['estimate'])} | {f(r['facts'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=4, help="the protocol's first N")
    parser.add_argument("--per-workload", type=int, default=12, help="first K candidates each")
    parser.add_argument("--archs", default="sm_75,sm_90", help="archs that get ptxas facts")
    parser.add_argument("--jobs", type=int, default=1, help="parallel nvcc runs")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = parser.parse_args()
    if args.workloads < 1 or args.per_workload < 4:
        parser.exit(2, "error: --workloads >= 1 and --per-workload >= 4\n")
    result = run(args.workloads, args.per_workload, args.archs.split(","), args.jobs)
    result["command"] = "python -m bench.simulator.ptxas_facts " + " ".join(sys.argv[1:])
    result["load"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ptxas_facts.json").write_text(json.dumps(result, indent=1))
    (args.out / "ptxas_facts.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
