"""`simoe-agent probes build`: the public probe file a server's `--probes` reads."""

from __future__ import annotations

from pathlib import Path

import typer

from agent.cli.app import command_group, progress_bar
from schemas.cli import Json, console, print_json

probes_app = command_group(
    "probes",
    help="The public probe set: candidate programs of public workloads, features only.",
)


@probes_app.command("build")
def build_command(
    out: Path = typer.Option(..., "--out", help="the probe file to write (.npz)"),
    workloads: str = typer.Option(
        "suite",
        "--workloads",
        help="`suite` (agent.workloads.OPERATOR_SUITE), `tiny`, or workloads separated by "
        "spaces or semicolons (a workload's own shape holds commas)",
    ),
    per_task: int = typer.Option(32, "--per-task", help="candidates sampled per workload"),
    seed: int = typer.Option(0, "--seed", help="sampling seed (workload i samples with seed + i)"),
    device: str | None = typer.Option(
        None,
        "--device",
        help="sim:<gpu> or cuda:N: the target whose design space is sampled (default: a cuda "
        "target with the loosest limits of the simulated catalog)",
    ),
    json_out: Json = False,
) -> None:
    """Write the probe file of `simoe-server start --probes FILE` (features, no latency)."""
    from agent.fleet_dataset import resolve_workloads
    from agent.probe_set import build_probe_set, probe_target

    names = resolve_workloads(workloads)
    target = probe_target(device)
    with progress_bar(disable=json_out) as bar:
        task = bar.add_task("sampling", total=len(names))

        def progress(name: str, done: int, total: int) -> None:
            bar.update(task, completed=done, description=f"sampling {name}")

        summary = build_probe_set(
            out, names, per_task=per_task, seed=seed, target=target, progress=progress
        )
    if json_out:
        print_json(summary.model_dump())
        return
    kept = {w: n for w, n in summary.candidates.items() if n}
    console.print(
        f"wrote {summary.out}: {len(kept)} probe tasks, {sum(kept.values())} candidates "
        f"(features only, no latency), seed {summary.seed}"
    )
    for workload, n in summary.candidates.items():
        if not n:
            console.print(f"left out {workload}: fewer than 2 distinct candidates")
