"""`simoe-agent dataset`: the simulated GPU catalog and fleet datasets labelled on every GPU."""

from __future__ import annotations

from pathlib import Path

import typer

from agent.cli.app import StateDir, command_group, progress_bar
from schemas import BadInputError
from schemas.cli import Json, Verbose, console, print_json, print_table
from schemas.tables import Column

dataset_app = command_group(
    "dataset",
    help="Simulated GPU fleet: the spec catalog and datasets labelled on every GPU (simulated).",
)


@dataset_app.command("gpus")
def gpus_command(
    spec: Path | None = typer.Option(
        None, "--spec", help="validate and show a GPU spec file instead of the catalog"
    ),
    check: str | None = typer.Option(
        None,
        "--check",
        help="only these GPUs (names, aliases or units, comma-separated): "
        "an unknown one is an error",
    ),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """The GPU catalog of the simulated fleet: its models, then its units (or one user spec
    file, validated). Reads only the catalog files: no TVM import."""
    from agent.devices.sim.catalog import (
        load_catalog,
        load_spec_file,
        load_units,
        resolve,
        unit_differences,
    )

    if check is not None:
        names = [n.strip() for n in check.split(",") if n.strip()]
        specs = []
        for name in names:
            try:
                specs.append(resolve(name))
            except BadInputError as exc:
                raise BadInputError(f"--check {name}: {exc}") from None
    elif spec is not None:
        specs = [load_spec_file(spec)]
    else:
        specs = [*load_catalog().values(), *load_units().values()]
    if json_out:
        print_json([s.model_dump() for s in specs])
        return
    models = [s for s in specs if s.model is None]
    units = [s for s in specs if s.model is not None]
    if models or not units:
        print_table(
            "Simulated GPUs (spec sheets; latencies from them are modelled, not measured)",
            [
                "key",
                "name",
                *(Column(h, "right") for h in ("cc", "SMs", "TFLOPS", "GB/s")),
                Column("L2 MB", "right", optional=True),
                Column("arch", optional=True),
                Column("source", optional=True),
            ],
            [
                (
                    s.key,
                    s.name,
                    f"{s.compute_capability:.1f}",
                    s.sms,
                    f"{s.fp32_gflops / 1000:.1f}",
                    f"{s.mem_bandwidth_gbs:g}",
                    f"{s.l2_cache_kb / 1024:g}",
                    s.architecture,
                    s.source.split(";")[0],
                )
                for s in models
            ],
        )
    if units:
        print_table(
            "Simulated units (a model's sheet plus the unit's own state; sources in "
            "agent/devices/sim/units.json)",
            [
                "unit",
                "model",
                *(Column(h, "right") for h in ("SMs", "GB/s", "L2 MB")),
                "what differs from the model",
            ],
            [
                (
                    s.key,
                    s.model,
                    s.sms,
                    f"{s.mem_bandwidth_gbs:g}",
                    f"{s.l2_cache_kb / 1024:g}",
                    unit_differences(s),
                )
                for s in units
            ],
        )


@dataset_app.command("build")
def build_command(
    out: Path = typer.Option(..., "--out", help="directory for one SQLite store per GPU"),
    workloads: str = typer.Option(
        "suite", "--workloads", help="`suite`, `tiny`, or workloads separated by spaces"
    ),
    gpus: str = typer.Option("all", "--gpus", help="`all` or comma-separated catalog names"),
    per_workload: int = typer.Option(
        64, "--per-workload", min=1, help="candidates sampled per workload"
    ),
    seed: int = typer.Option(0, "--seed", help="sampling seed"),
    cache: Path | None = typer.Option(
        None, "--cache", help="keep each workload's sample here; a rebuild only relabels"
    ),
    ptxas_facts: Path | None = typer.Option(
        None,
        "--ptxas-facts",
        help="take registers, spills and static shared memory from nvcc/ptxas where it "
        "compiles for the GPU's arch (facts cached in this folder)",
    ),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Sample candidates once per workload, label them on every GPU (simulated), write stores."""
    from agent.fleet_dataset import build_fleet_dataset, resolve_gpus, resolve_workloads

    specs = resolve_gpus(gpus)
    names = resolve_workloads(workloads)
    with progress_bar("[progress.description]{task.description}", disable=json_out) as bar:
        task = bar.add_task("sampling", total=len(names))

        def progress(name: str, done: int, total: int) -> None:
            bar.update(task, completed=done, description=f"sampling {name}")

        summary = build_fleet_dataset(
            names, specs, per_workload, out, seed=seed, progress=progress, cache_dir=cache,
            ptxas_cache=ptxas_facts,
        )  # fmt: skip
    if json_out:
        print_json(summary.model_dump())
        return
    shown = [
        g
        for g in ("k80", "titanx", "1080ti", "v100", "t4", "a100-40gb", "h100-sxm", "tx2")
        if g in summary.gpus
    ] or summary.gpus[:6]
    print_table(
        f"Fleet dataset in {summary.out_dir} (SIMULATED latencies): best us per GPU",
        ["workload", Column("candidates", "right"), *(Column(g, "right") for g in shown)],
        [
            (
                w.workload,
                w.candidates,
                *(
                    "failed" if w.best_us_per_gpu.get(g) is None else f"{w.best_us_per_gpu[g]:.1f}"
                    for g in shown
                ),
            )
            for w in summary.workloads
        ],
    )
    console.print(
        f"{summary.candidates} candidates x {len(summary.gpus)} GPUs = {summary.pairs} "
        f"labelled pairs; sampling {summary.seconds_sampling:.1f} s, features "
        f"{summary.seconds_features:.1f} s, TIR analysis {summary.seconds_analysis:.1f} s, "
        f"labelling {summary.seconds_labelling:.3f} s, writing {summary.seconds_writing:.1f} s"
    )
