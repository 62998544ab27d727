"""`simoe-server demo`: the real deployment on loopback (server, enrolled daemons, rounds),
then a newcomer; its options here, the run in server/demo.py (registered by server/cli.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from schemas.cli import Json, Verbose, console, err_console
from server.demo_plan import DemoPlan
from server.run_config import DEFAULTS


def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="where everything goes"),
    gpus: str = typer.Option(
        "k80-u1,v100-sxm2,t4-cool,a100-pcie-250w",
        "--gpus",
        help="simulated GPU units (or models) of the fleet, one node each",
    ),
    cpu: bool = typer.Option(True, "--cpu/--no-cpu", help="this machine's CPU as a node too"),
    new_gpu: str = typer.Option(
        "a10-ecc-on", "--new-gpu", help="the newcomer: a simulated GPU none of them is"
    ),
    network: str = typer.Option(
        "bert_layer", "--network", help="what the fleet's nodes tune (their experts' data)"
    ),
    fleet_largest_tasks: int = typer.Option(
        2, "--fleet-largest-tasks", help="the fleet tunes that network's N largest tasks (0: all)"
    ),
    cpu_largest_tasks: int = typer.Option(
        1,
        "--cpu-largest-tasks",
        help="the CPU node tunes N of them (it builds and runs each for real; 0: as the fleet)",
    ),
    new_network: str = typer.Option(
        "bert_layer", "--new-network", help="the network of the suite the newcomer tunes"
    ),
    flops_share: float = typer.Option(
        0.3, "--flops-share", help="the newcomer tunes the largest tasks covering this share"
    ),
    fleet_trials: int = typer.Option(
        DemoPlan.fleet_trials,
        "--fleet-trials",
        help="trials/task each node tunes",
    ),
    fleet_seed: int = typer.Option(
        DemoPlan.fleet_seed,
        "--fleet-seed",
        help="seed of the fleet's searches (another seed: another draw)",
    ),
    budget: int = typer.Option(8, "--budget", help="trials per task, zero-shot and baseline"),
    full_budget: int = typer.Option(32, "--full-budget", help="the baseline's larger budget"),
    epochs: int = typer.Option(
        DEFAULTS.epochs, "--epochs", help="local epochs per round (the deployment's default)"
    ),
    teacher_epochs: int = typer.Option(
        DEFAULTS.teacher_epochs,
        "--teacher-epochs",
        help="opt-in: epochs per round each node trains its own-records teacher (0: off)",
    ),
    newcomer_distill_steps: int = typer.Option(
        DEFAULTS.newcomer_distill_steps,
        "--newcomer-distill-steps",
        help="opt-in: the newcomer is served a copy of the global distilled this many steps "
        "toward the teachers (needs --teacher-epochs; 0: off)",
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the newcomer's three searches"),
    share_schedules: bool = typer.Option(
        False,
        "--share-schedules/--no-share-schedules",
        help="every node and the newcomer enroll with schedule sharing on (opt-in)",
    ),
    share_top_k: int | None = typer.Option(
        None, "--share-top-k", help="schedules each node shares per workload (1-8)"
    ),
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """The real deployment on loopback (server, enrolled daemons, rounds), then a newcomer."""
    from server.demo import run_demo_with_progress
    from server.demo_report import print_report

    plan = DemoPlan(
        gpus=[g.strip() for g in gpus.split(",") if g.strip()],
        cpu=cpu,
        new_gpu=new_gpu,
        network=network,
        fleet_largest_tasks=fleet_largest_tasks or None,
        cpu_largest_tasks=cpu_largest_tasks or None,
        new_network=new_network,
        flops_share=flops_share,
        fleet_trials=fleet_trials,
        fleet_seed=fleet_seed,
        budget=budget,
        full_budget=full_budget,
        epochs=epochs,
        teacher_epochs=teacher_epochs,
        newcomer_distill_steps=newcomer_distill_steps,
        seed=seed,
        share_schedules=share_schedules,
        share_top_k=share_top_k,
    )
    report = run_demo_with_progress(out.resolve(), plan, console, err_console, quiet=as_json)
    if as_json:
        print(report.model_dump_json(indent=2))
        return
    print_report(report, console)
