"""`simoe-agent bundle export|run|import`: measure on a thin GPU node.

    simoe-agent bundle export --gpu h200 --workloads "matmul:1024,1024,1024" \\
        --per-workload 64 --out DIR            # here: DIR/bundle travels, DIR/home stays
    python3 DIR/bundle/run.py DIR/bundle --out RESULTS --deadline 300   # on the GPU node
    simoe-agent bundle import RESULTS --home DIR/home                   # here again
"""

from __future__ import annotations

from pathlib import Path

import typer

from agent.cli.app import StateDir, command_group, node_state
from schemas.cli import Json, Verbose, console, err_console, print_json, print_table

bundle_app = command_group(
    "bundle",
    help="Thin GPU nodes: export a measurement bundle, run it on the GPU, import the results.",
)


@bundle_app.command("export")
def export_command(
    out: Path = typer.Option(..., "--out", help="folder to write bundle/ and home/ into"),
    gpu: str = typer.Option(..., "--gpu", help="the GPU model: a catalog name or a spec.json"),
    workloads: str = typer.Option("", "--workloads", help="workloads, separated by spaces"),
    per_workload: int = typer.Option(0, "--per-workload", min=0, help="MetaSchedule samples"),
    store: Path | None = typer.Option(None, "--store", help="a node store: its best records"),
    top_k: int = typer.Option(8, "--top-k", min=1, help="records per workload from --store"),
    probes: bool = typer.Option(True, "--probes/--no-probes", help="the probe suite (profile)"),
    twin: str | None = typer.Option(None, "--twin", help="sim:<gpu> for a dry run's stand-in"),
    pick: int = typer.Option(0, "--pick", min=0, help="keep the K a SiMoE model ranks best"),
    model: Path | None = typer.Option(None, "--model", help="the SiMoE model file for --pick"),
    profile: Path | None = typer.Option(None, "--profile", help="the GPU's profile JSON"),
    seed: int = typer.Option(0, "--seed"),
    json_out: Json = False,
    verbose: Verbose = False,
) -> None:
    """Choose candidates and compile them HERE for the GPU's arch; write the bundle."""
    from agent.bundle.export import export_bundle
    from agent.fleet_dataset import resolve_workloads
    from schemas import BadInputError

    if pick and model is None:
        raise BadInputError("--pick needs --model (a SiMoE model file)")

    names = resolve_workloads(workloads) if workloads.strip() else []
    summary = export_bundle(
        out, gpu=gpu, workloads=names, per_workload=per_workload, store=store, top_k=top_k,
        probes=probes, twin=twin, seed=seed, progress=lambda msg: err_console.print(msg),
        pick=pick, model=model, profile=profile,
    )  # fmt: skip
    if json_out:
        print_json(summary.model_dump(mode="json"))
        return
    print_table(
        f"Bundle {summary.bundle_id} for {summary.arch}",
        ["what", "value"],
        [
            *((f"{kind} entries", n) for kind, n in summary.entries.items()),
            ("left out (see manifest 'skipped')", summary.skipped),
            ("cubin modules", summary.modules),
            ("bundle size", f"{summary.bundle_bytes / 2**20:.2f} MiB"),
            ("compile time", f"{summary.seconds_compiling:.0f} s"),
        ],
    )
    console.print(f"carry {summary.bundle_dir}; keep {summary.home_dir} here")


@bundle_app.command("run")
def run_command(
    bundle: Path = typer.Argument(..., help="the bundle folder"),
    out: Path = typer.Option(..., "--out", help="results folder"),
    deadline: float | None = typer.Option(None, "--deadline", help="stop after SECONDS"),
    device_index: int = typer.Option(0, "--device-index", help="CUDA device index"),
    standin: Path | None = typer.Option(None, "--standin", help="dry run: home/standin.json"),
) -> None:
    """Run a bundle on this machine (the same runner as the bundle's run.py)."""
    from agent.bundle.runtime import main

    argv = [str(bundle), "--out", str(out), "--device", str(device_index)]
    if deadline is not None:
        argv += ["--deadline", str(deadline)]
    if standin is not None:
        argv += ["--backend", "sim", "--standin", str(standin)]
    raise typer.Exit(main(argv))


@bundle_app.command("import")
def import_command(
    results: Path = typer.Argument(..., help="the folder run.py wrote"),
    home: Path = typer.Option(..., "--home", help="the export's home/ folder"),
    device_name: str | None = typer.Option(None, "--device", help="import as cuda:N"),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Import a bundle run's results into the node's store, with the GPU's profile."""
    from agent.bundle.importer import import_results

    store_path = node_state(state_dir).store_path
    summary = import_results(results, home, store_path, device=device_name)
    if json_out:
        print_json(summary.model_dump(mode="json"))
        return
    label = " (SIMULATED stand-in: not measurements)" if summary.simulated else ""
    print_table(
        f"Imported into {store_path} as {summary.device}{label}",
        ["what", "value"],
        [
            ("records", summary.records),
            ("failed records", summary.failed_records),
            (
                "entries measured / in bundle",
                f"{summary.measured_entries} / {summary.expected_entries}",
            ),  # fmt: skip
            ("run stopped", summary.stopped),
            ("first error", summary.first_error or "none"),
            ("profile", summary.profile_id or f"none: {summary.profile_error}"),
        ],
    )
