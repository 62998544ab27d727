"""`simoe-agent enroll | run | submit`: joining the federation and working in it."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import typer

from agent.cli.app import StateDir, app, node_state
from agent.node_state import NodeState
from schemas import BadInputError
from schemas.cli import (
    Json,
    Port,
    Seconds,
    Seed,
    Trials,
    Verbose,
    checked,
    err_console,
    print_json,
    print_table,
)

DEFAULT_SUPERNODE_PORT = 9094


def _state_dir(state_dir: Path | None) -> Path:
    return node_state(state_dir).dir.resolve()  # the SuperNode gets it as an absolute path


@app.command()
def enroll(
    server: str = typer.Option(..., "--server", help="the SuperLink's HOST:PORT"),
    ca: Path = typer.Option(..., "--ca", help="the federation's CA certificate (PEM)"),
    name: str = typer.Option(..., "--name", help="this node's name in the federation"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda:N or sim:<gpu>"),
    no_download: bool = typer.Option(
        False, "--no-download", help="only register; the model comes with the first round"
    ),
    timeout: float = typer.Option(180.0, "--timeout", help="seconds to wait for the model"),
    port: int = typer.Option(
        9094, "--port", help="local port of the node's SuperNode API (kept for `run`)"
    ),
    share_schedules: bool | None = typer.Option(
        None,
        "--share-schedules/--no-share-schedules",
        help="opt in to schedule sharing (off by default): send the workload keys and "
        "schedule traces of this node's fastest records per workload (never latencies) and "
        "get the most similar units' (see docs/usage.md); kept in agent.json",
    ),
    share_top_k: int | None = typer.Option(
        None, "--share-top-k", help="schedules shared per workload (1-8, default 3)"
    ),
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """Create the node key, profile the hardware, register, fetch the model (idempotent)."""
    from agent.enroll import enroll as do_enroll

    checked("--timeout", timeout, Seconds)  # before anything is written or started
    checked("--port", port, Port)
    started = time.monotonic()
    with err_console.status("enrolling", spinner="dots") as spinner:

        def say(step: str) -> None:  # the step on the spinner: enrolling takes a while
            # (on the spinner only: an error after a step is still the command's one line)
            spinner.update(f"enroll: {step} (from {time.monotonic() - started:.0f} s)")

        result = do_enroll(
            state_dir=_state_dir(state_dir),
            server=server,
            ca=ca,
            name=name,
            device=device,
            download=not no_download,
            download_timeout=timeout,
            supernode_port=port,
            share_schedules=share_schedules,
            share_top_k=share_top_k,
            say=say,
        )
    if as_json:
        print_json(dataclasses.asdict(result))
        return
    print_table(
        f"enrolled {result.name}",
        ["", "value"],
        [(k.replace("_", " "), v) for k, v in dataclasses.asdict(result).items()],
    )


@app.command()
def run(
    port: int | None = typer.Option(
        None, "--port", help="local port of the node's SuperNode API (default: enroll's, 9094)"
    ),
    no_tune: bool = typer.Option(False, "--no-tune", help="federate only; leave the queue"),
    drain: bool = typer.Option(
        False, "--drain", help="work through the queued jobs, then stop (exit 0)"
    ),
    state_dir: StateDir = None,
    verbose: Verbose = False,
) -> None:
    """Run the node: keep its SuperNode connected and tune queued work between rounds."""
    from agent.daemon import AgentDaemon

    directory = _state_dir(state_dir)
    if port is None:
        port = NodeState(directory).config().supernode_port or DEFAULT_SUPERNODE_PORT
    checked("--port", port, Port)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    daemon = AgentDaemon(directory, port=port, tune=not no_tune, drain=drain)
    daemon.install_signal_handlers()
    raise typer.Exit(daemon.run())


@app.command()
def submit(
    subject: str = typer.Argument(..., help="an operator (matmul:512,512,512) or a network"),
    trials: int | None = typer.Option(None, "--trials", help="trials per task"),
    cost_model: str | None = typer.Option(
        None,
        "--cost-model",
        help="xgb, mlp, random or simoe (default: simoe once the node holds a federated "
        "model, else the config's)",
    ),
    largest_tasks: int | None = typer.Option(
        None, "--largest-tasks", help="a network: tune only its N largest tasks (as `tune`)"
    ),
    flops_share: float | None = typer.Option(
        None,
        "--flops-share",
        help="a network: tune its largest tasks covering this share of its FLOPs (as `tune`)",
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the search (as `tune`)"),
    population: int | None = typer.Option(
        None,
        "--population",
        help="evolutionary search population per round (as `tune`; default: 512)",
    ),
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """Queue tuning work for the daemon (`simoe-agent run`)."""
    from agent.daemon import Queue, make_job
    from agent.task_selection import TaskChoice
    from agent.tuner import search_population

    choice = TaskChoice(largest=largest_tasks, flops_share=flops_share)
    choice.check()
    node = NodeState(_state_dir(state_dir))
    if trials is not None:
        checked("--trials", trials, Trials)
    job = make_job(subject, trials or node.config().trials_per_task)
    if job.kind == "workload" and not choice.everything:
        raise BadInputError("--largest-tasks and --flops-share choose among a network's tasks")
    job.largest_tasks, job.flops_share = largest_tasks, flops_share
    job.seed = checked("--seed", seed, Seed)
    if population is not None:
        job.population = search_population(population)  # a bad one fails here, not in the job
    if cost_model is not None:
        from agent.cost_models import COST_MODELS

        if cost_model not in COST_MODELS:
            known = ", ".join(COST_MODELS)
            raise BadInputError(f"--cost-model {cost_model!r}: unknown (known: {known})")
        job.cost_model = cost_model
    if job.kind == "workload" and node.config().share_schedules:
        from agent.ms_database import workload_key_of
        from agent.sharing import ask_for
        from agent.workloads import parse_workload, prim_func

        # the next round asks the fleet about it (a network's tasks: once it is tuned)
        ask_for(node, [workload_key_of(prim_func(parse_workload(job.subject)))])
    path = Queue(node.queue_dir).put(job)
    if as_json:
        print_json(job.model_dump(mode="json") | {"path": str(path)})
        return
    print_table(
        "queued", ["id", "kind", "subject", "trials"], [(job.id, job.kind, job.subject, job.trials)]
    )
