"""How differently units of one GPU model rank the protocol's candidates (SIMULATED).

    python -m bench.simulator.unit_diversity      # docs/results/unit_diversity.md and .json

For every GPU model with several units in the protocol (bench/protocol.py, all splits): the
model's first unit (the full card, MAXN, the launch board) against each other unit of it,
per task of the protocol: the Spearman correlation of the task's candidate latencies, whether
the best candidate differs, and what the first unit's best candidate costs on the other unit
(its latency there over that unit's own best). Since issue 24 a unit may have its own SM
count, L2 and memory bandwidth (MIG slices, Jetson nvpmodel modes that gate TPCs off, board
variants): this table shows whether that changes the ranking, where a clock or ECC change
only rescales it.

Latencies come from the simulator itself, on the protocol's sample (the candidates of
`protocol.WORKLOADS`, sampled as the fleet build samples them, from its cache), labelled as
the build labels them (3 runs with the simulator's seeded noise, their mean) and also
noise-free. No store, no label of the built fleet is read, no method is scored: this is a
property of the simulator, and nothing in the simulator was chosen by looking at it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from bench import protocol

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


def unit_specs() -> dict[str, object]:
    """Every protocol unit's GpuSpec, in split order (training, validation, test)."""
    from agent.devices.sim.catalog import resolve

    return {
        unit: resolve(protocol.device_of(unit).removeprefix("sim:"))
        for split in ("train", "validation", "test")
        for unit in protocol.units(split)  # type: ignore[arg-type]
    }


def model_groups(specs: dict) -> dict[str, list[str]]:
    """{model: its units in protocol order} for models with two or more units."""
    groups: dict[str, list[str]] = {}
    for unit, spec in specs.items():
        groups.setdefault(spec.model or spec.key, []).append(unit)
    return {m: units for m, units in groups.items() if len(units) >= 2}


def task_latencies(specs: dict, workloads: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """{workload: {"noisy"/"exact": seconds [n_candidates, n_units]}} on the protocol's sample."""
    from agent.devices.sim import latency
    from agent.fleet_dataset import analyse_sample, generic_target

    gpus = list(specs.values())
    target = generic_target(gpus)  # the build's sampling target: the same candidates
    params = latency.GpuParams.from_specs(gpus)
    out = {}
    for index, workload in enumerate(workloads):
        sample = analyse_sample(
            workload, target, protocol.PER_WORKLOAD,
            seed=protocol.SAMPLE_SEED + index, cache_dir=protocol.CACHE_DIR,
        )  # fmt: skip
        noisy = latency.simulate(sample.matrix, sample.owner, sample.keys, params, repeats=3)
        exact = latency.candidate_latency(sample.matrix, sample.owner, len(sample.keys), params)
        out[workload] = {"noisy": noisy.mean(axis=2), "exact": exact}
    return out


def pair_row(a: np.ndarray, b: np.ndarray) -> dict[str, float | bool | int]:
    """One task, two units' latencies of the same candidates."""
    both = np.isfinite(a) & np.isfinite(b)
    a, b = a[both], b[both]
    rho = float(spearmanr(a, b).statistic)
    best_a, best_b = int(np.argmin(a)), int(np.argmin(b))
    return {
        "candidates": int(both.sum()),
        "spearman": rho,
        "best_differs": best_a != best_b,
        # the reference unit's best candidate, run on the other unit, against its own best
        "reference_best_cost": float(b[best_a] / b[best_b]),
        "latency_ratio": float(np.exp(np.mean(np.log(b / a)))),
    }


def vector_distances(a: str, b: str) -> dict[str, float]:
    """How far apart two units' hardware vectors are: the spec-sheet half and the probes'
    half (residuals against the specs), each as a Euclidean distance. The profiles are the
    protocol's (`protocol.profile_vector`, cached beside the fleet): no label is read."""
    from simoe_model.hardware import ANALYTICAL_SLICE, EMPIRICAL_SLICE

    va, vb = protocol.profile_vector(a), protocol.profile_vector(b)
    return {
        "analytical_distance": float(np.linalg.norm(va[ANALYTICAL_SLICE] - vb[ANALYTICAL_SLICE])),
        "empirical_distance": float(np.linalg.norm(va[EMPIRICAL_SLICE] - vb[EMPIRICAL_SLICE])),
    }


def build_report(workloads: list[str]) -> dict:
    from agent.devices.sim.catalog import unit_differences

    specs = unit_specs()
    index = {u: i for i, u in enumerate(specs)}
    lat = task_latencies(specs, workloads)
    rows = []
    for model, units in model_groups(specs).items():
        ref = units[0]
        for other in units[1:]:
            per_task = {}
            for w in workloads:
                cols = [index[ref], index[other]]
                per_task[w] = {
                    kind: pair_row(lat[w][kind][:, cols[0]], lat[w][kind][:, cols[1]])
                    for kind in ("noisy", "exact")
                }
            noisy = [t["noisy"] for t in per_task.values()]
            rows.append(
                {
                    "split": protocol.split_of(other),
                    "model": model,
                    "reference": ref,
                    "unit": other,
                    "reference_state": unit_differences(specs[ref]),
                    "unit_state": unit_differences(specs[other]),
                    "hardware_overrides": specs[other].hardware_overrides,
                    "tasks": per_task,
                    "mean_spearman": float(np.mean([t["spearman"] for t in noisy])),
                    "min_spearman": float(np.min([t["spearman"] for t in noisy])),
                    "mean_spearman_exact": float(
                        np.mean([t["exact"]["spearman"] for t in per_task.values()])
                    ),
                    "best_differs": int(sum(t["best_differs"] for t in noisy)),
                    "worst_reference_best_cost": float(
                        max(t["reference_best_cost"] for t in noisy)
                    ),
                    **vector_distances(ref, other),
                }
            )
    return {"workloads": workloads, "rows": rows}


def markdown(report: dict, command: str, wall_s: float) -> str:
    workloads = report["workloads"]
    tasks = [f"T{i + 1}" for i in range(len(workloads))]
    lines = [
        "# Units of one GPU model against each other (SIMULATED)",
        "",
        f"`{command}` ({wall_s:.0f} s wall). Every figure is the simulator's, on the protocol's "
        f"sample ({protocol.PER_WORKLOAD} candidates per task, sampling seed "
        f"{protocol.SAMPLE_SEED} + task index), labelled as the fleet build labels it (mean "
        "of 3 runs with the seeded noise); `exact` is the same without noise. No method is "
        "scored here. All splits' units are listed (a simulator property, not a result of any "
        "method); the split column says where each unit is.",
        "",
        "Per task: Spearman of the candidates' latencies, reference unit against the unit. "
        "`best differs`: tasks whose best candidate differs. `ref best cost`: the worst task's "
        "latency of the reference unit's best candidate on this unit over this unit's own best. "
        "`d spec` and `d probes`: Euclidean distance between the two units' hardware vectors, "
        "spec-sheet half and probe half (the protocol's profiles); 0 in `d spec` means only the "
        "probes can tell the two units apart.",
        "",
        "Tasks: " + "; ".join(f"{t} `{w}`" for t, w in zip(tasks, workloads, strict=True)),
        "",
        "| split | unit | reference | what the unit states | "
        + " | ".join(tasks)
        + " | mean | min | mean exact | best differs | ref best cost | d spec | d probes |",
        "|---|---|---|---|" + "---|" * len(tasks) + "---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        per = [f"{r['tasks'][w]['noisy']['spearman']:.2f}" for w in workloads]
        lines.append(
            f"| {r['split']} | {r['unit']} | {r['reference']} | {r['unit_state']} | "
            + " | ".join(per)
            + f" | {r['mean_spearman']:.3f} | {r['min_spearman']:.2f} | "
            f"{r['mean_spearman_exact']:.3f} | {r['best_differs']}/{len(workloads)} | "
            f"{r['worst_reference_best_cost']:.2f}x | {r['analytical_distance']:.2f} | "
            f"{r['empirical_distance']:.2f} |"
        )
    hw = [r for r in report["rows"] if r["hardware_overrides"]]
    rest = [r for r in report["rows"] if not r["hardware_overrides"]]
    if hw and rest:
        lines += [
            "",
            "Summary: pairs whose unit states its own SMs, L2 or bandwidth "
            f"({len(hw)}): mean per-task Spearman "
            f"{np.mean([r['mean_spearman'] for r in hw]):.3f}, lowest task "
            f"{min(r['min_spearman'] for r in hw):.2f}, best candidate differs on "
            f"{sum(r['best_differs'] for r in hw)} of {len(hw) * len(workloads)} unit-tasks; "
            f"pairs that differ in clock, power, ECC, memory clock or spread only ({len(rest)}): "
            f"{np.mean([r['mean_spearman'] for r in rest]):.3f}, lowest "
            f"{min(r['min_spearman'] for r in rest):.2f}, best differs on "
            f"{sum(r['best_differs'] for r in rest)} of {len(rest) * len(workloads)}.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "unit_diversity.md")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    report = build_report(list(protocol.WORKLOADS))
    wall = time.perf_counter() - started
    command = "python -m bench.simulator.unit_diversity"
    report.update(command=command, wall_s=wall, simulated=True)
    args.out.write_text(markdown(report, command, wall))
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
