"""`simoe-agent tune`: tune one operator or a whole network on a device, into the store."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.progress import (
    Progress,
    TaskID,
)

from agent.cli.app import StateDir, app, node_state, progress_bar
from schemas import BadInputError
from schemas.cli import (
    Json,
    Seed,
    Trials,
    Verbose,
    checked,
    console,
    err_console,
    print_json,
    print_table,
)
from schemas.tables import Column
from schemas.tuning import HEDGE_RANKING, HEDGE_SPEARMAN, TuneResult


class _TuningBar:
    """One rich progress bar over all tasks' trials; its label names the task measured last."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.bar: TaskID | None = None
        self.measured: dict[str, int] = {}
        self.budgets: dict[str, int] = {}

    def __call__(self, task_name: str, measured: int, budget: int) -> None:
        self.measured[task_name] = min(measured, budget)
        self.budgets[task_name] = budget
        total, done = sum(self.budgets.values()), sum(self.measured.values())
        label = f"{len(self.budgets)} tasks, last {task_name[:30]}"
        if len(self.budgets) == 1:
            label = task_name[:40]
        if self.bar is None:
            self.bar = self.progress.add_task(label, total=total)
        self.progress.update(self.bar, description=label, total=total, completed=done)


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"


def _print_result(result: TuneResult) -> None:
    label = "simulated" if result.simulated else "measured"
    if result.modelled_measure_s is not None:
        label += f"; on the real GPU measuring would add {result.modelled_measure_s:.0f} s"
    rows = [
        (
            t.task_name,
            _us(t.tuned_latency_s),
            _us(t.untuned_latency_s),
            t.kept or "-",
            "-" if t.speedup is None else f"{t.speedup:.1f}x",
            t.trials,
            f"{t.weight:g}",
            "-" if t.gflops is None else f"{t.gflops:.1f}",
        )
        for t in result.tasks
    ]
    print_table(
        f"{result.subject} on {result.device} ({label}, cost model {result.cost_model}, "
        f"{result.trials} trials, search {result.search_wall_s:.0f} s)",
        [
            "task",
            *(Column(h, "right") for h in ("tuned us", "default us")),
            "kept",
            Column("speedup", "right", optional=True),
            Column("trials", "right", optional=True),
            Column("weight", "right", optional=True),
            Column("GFLOP/s", "right", optional=True),
        ],
        rows,
    )
    chosen = result.selection
    if chosen is not None:
        console.print(
            f"tuned {len(chosen.tuned)} of {chosen.total_tasks} tasks ({chosen.rule}): "
            f"{chosen.flops_share:.1%} of the network's FLOPs; the others keep TVM's default",
            markup=False,
            highlight=False,
        )
    if result.shared_schedules or result.shared_skipped:
        skipped = f"; {result.shared_skipped} did not apply" if result.shared_skipped else ""
        console.print(
            f"schedule sharing: {result.shared_schedules} schedules of the most similar units "
            f"ranked with the search's candidates{skipped}",
            markup=False,
            highlight=False,
        )
    used = result.model_used
    if used is not None:
        where = f" ({used.path})" if used.path else ""
        console.print(f"cost model: {used.label}{where}", markup=False, highlight=False)
    if result.population_retried:
        console.print(
            f"{len(result.population_retried)} of {len(result.tasks)} tasks sampled no valid "
            f"schedule for this GPU at the first population; searched again at population "
            f"{result.retry_population}",
            markup=False,
            highlight=False,
        )
    if result.hedged:
        rhos = ", ".join(
            f"{name} {(result.hedge_spearman or {}).get(name, float('nan')):+.2f}"
            for name in result.hedged
        )
        console.print(
            f"{len(result.hedged)} of {len(result.tasks)} tasks: the model's first picks "
            f"contradicted it (Spearman below {result.hedge_below}: {rhos}); the rest of "
            "their trials went to MetaSchedule's evolutionary search",
            markup=False,
            highlight=False,
        )
    unsearched = [t for t in result.tasks if t.trials == 0]
    if unsearched:
        console.print(
            f"{len(unsearched)} of {len(result.tasks)} tasks measured no candidate: the search "
            "sampled no valid schedule for this GPU at any population tried; they keep "
            "TVM's default schedule",
            markup=False,
            highlight=False,
        )
    defaults = [t for t in result.tasks if t.kept == "default" and t.trials > 0]
    if defaults:
        console.print(
            f"{len(defaults)} of {len(result.tasks)} tasks keep TVM's default schedule: "
            "their best tuned schedule was slower"
        )
    check = result.network
    if check is None:
        return
    if not check.compiled:
        console.print(f"network not run: {check.reason}")
        return
    reference = check.reference or "the reference"
    verdict = f"matches {reference}" if check.matches else f"DOES NOT match {reference}"
    console.print(
        f"end-to-end latency {_us(check.latency_s)} us; {verdict} "
        f"(max abs error {check.max_abs_error:.2e}, output scale {check.reference_scale:.2e})"
    )


@app.command("tune")
def tune(
    workload: str | None = typer.Option(
        None,
        "--workload",
        "-w",
        help="an operator: OP:D1,D2,... (e.g. matmul:512,512,512) "
        "or te:<family>:<index> (MetaSchedule's workloads, e.g. te:C2D:0)",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="a network: an .onnx file, a torch.export program (.pt2), FILE.py:FUNCTION "
        "(FUNCTION() returns an nn.Module and a tuple of example input tensors) or a suite name "
        "(resnet50, mobilenet_v2, bert_layer, tiny_cnn, tiny_mlp)",
    ),
    device_name: str | None = typer.Option(
        None, "--device", "-d", help="cpu, cuda:N or sim:<gpu> (default: the node's device)"
    ),
    trials: int | None = typer.Option(
        None, "--trials", "-n", help="candidates to measure, per task (default: the config's)"
    ),
    cost_model: str | None = typer.Option(
        None, "--cost-model", help="xgb, mlp, random or simoe (default: the config's)"
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the search"),
    population: int | None = typer.Option(
        None,
        "--population",
        help="evolutionary search population per round (default: 512, MetaSchedule's); "
        "smaller is faster where search, not measurement, is the cost (sim:), and finds less",
    ),
    model_rounds: int = typer.Option(
        0,
        "--model-rounds",
        help="fast mode: this many chained model-only searches per task first, then measure "
        "only the model's top --trials (e.g. --cost-model simoe --trials 32 --model-rounds 5)",
    ),
    hedge: float | None = typer.Option(
        None,
        "--hedge-spearman",
        help="fast mode: after the first 8 measured picks, a Spearman rho of the model's "
        f"scores against their latencies below this hands the rest of the trials to "
        f"MetaSchedule's evolutionary search (default {HEDGE_SPEARMAN}; -2 never, 2 always)",
    ),
    hedge_ranking: str = typer.Option(
        HEDGE_RANKING,
        "--hedge-ranking",
        help="fast mode: what ranks the hedge's evolutionary search: model (the cost model, "
        "having seen the first batch) or random (MetaSchedule's own ranking below XGB's "
        "warm-up)",
    ),
    warm_start: Path | None = typer.Option(
        None,
        "--warm-start",
        help="fast mode, opt-in: seed each task's first model-only search with the fastest "
        "schedules of the same workload in this MetaSchedule JSON database directory (e.g. "
        "the most similar units' best schedules); only their traces are used, nothing of "
        "this node is written there",
    ),
    largest_tasks: int | None = typer.Option(
        None,
        "--largest-tasks",
        help="a network: tune only its N largest tasks (weight x FLOPs); the others keep "
        "TVM's default schedule",
    ),
    flops_share: float | None = typer.Option(
        None,
        "--flops-share",
        help="a network: tune its largest tasks until they cover this share of its FLOPs "
        "(e.g. 0.9); with --largest-tasks, at most that many",
    ),
    baseline: bool = typer.Option(
        True,
        "--baseline/--no-baseline",
        help="measure TVM's default (untuned) schedule once per task and keep it wherever the "
        "best tuned one is slower, here and in the compiled network (--no-baseline: unchecked)",
    ),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Tune an operator or a network with MetaSchedule; every measurement goes to the store."""
    from agent.cost_models import check_cost_model
    from agent.devices import get_device
    from agent.networks import check_model_ref, load_network
    from agent.search_start import node_shared_seeds
    from agent.task_selection import TaskChoice
    from agent.tuner import check_fits, search_population, tune_network, tune_workload
    from agent.workloads import parse_workload

    if (workload is None) == (model is None):
        raise BadInputError("give exactly one of --workload SPEC or --model FILE|NAME")
    choice = TaskChoice(largest=largest_tasks, flops_share=flops_share)
    choice.check()
    if workload is not None and not choice.everything:
        raise BadInputError("--largest-tasks and --flops-share choose among a network's tasks")
    node = node_state(state_dir)
    config = node.config()
    parsed = parse_workload(workload) if workload is not None else None
    if model is not None:
        check_model_ref(model)
    trials = checked("--trials", config.trials_per_task if trials is None else trials, Trials)
    cost_model = cost_model or config.cost_model
    check_cost_model(cost_model)
    search_population(population)  # a bad --population fails before any work
    checked("--seed", seed, Seed)
    if model_rounds < 0:
        raise BadInputError(f"--model-rounds must be 0 or more, got {model_rounds}")
    if hedge_ranking not in ("model", "random"):
        raise BadInputError(f"--hedge-ranking must be model or random, got {hedge_ranking!r}")
    hedge_below = HEDGE_SPEARMAN if hedge is None else hedge
    if hedge is not None and not -2.0 <= hedge <= 2.0:  # also catches NaN
        raise BadInputError(f"--hedge-spearman must be in [-2, 2], got {hedge}")
    if hedge_below is not None and hedge_below < -1.0:  # below every rho: never hedge
        hedge_below = None
    if warm_start is not None and model_rounds == 0:
        raise BadInputError("--warm-start seeds fast mode's search: give --model-rounds too")
    device = get_device(device_name or config.device)
    if parsed is not None:
        check_fits(parsed, device)
    network = None
    if model is not None:  # a bad model file is one line, before any progress is drawn
        with err_console.status(f"importing {model}", spinner="dots"):
            network = load_network(model)

    log_level = logging.INFO if verbose else logging.WARNING
    with (
        node.open_store() as store,
        progress_bar(transient=json_out) as progress,
    ):
        store.check_writable(trials)  # a full disk: one line now, not after the search
        profile = store.latest_profile(device.name)
        if profile is None and cost_model == "simoe":  # SiMoE needs it: take it, once
            probing = progress.add_task(f"no profile of {device.name} yet: profiling", total=None)

            def on_probe(name: str, done: int, total: int) -> None:
                text = f"profiling {device.name}: {name}"
                progress.update(probing, completed=done, total=total, description=text)

            profile = node.profile(device, progress=on_probe)
            if store.latest_profile(device.name) is None:  # a cached file the store lacked
                store.save_profile(profile)
            progress.update(probing, visible=False)
        profile_id = profile.profile_id if profile is not None else None
        bars = _TuningBar(progress)
        shared = node_shared_seeds(node)  # schedule sharing (opt-in): what the fleet offered
        if parsed is not None:
            result = tune_workload(
                parsed, device, store, trials=trials, cost_model=cost_model, node=node,
                progress=bars, seed=seed, baseline=baseline, profile_id=profile_id,
                log_level=log_level, population=population, model_rounds=model_rounds,
                warm_start=warm_start, shared=shared, hedge_below=hedge_below,
                hedge_ranking=hedge_ranking,
            )  # fmt: skip
        else:
            assert network is not None
            status = progress.add_task(f"{network.name}: extracting tasks", total=None)
            result = tune_network(
                network, device, store, trials_per_task=trials, cost_model=cost_model,
                node=node, progress=bars, seed=seed, baseline=baseline, profile_id=profile_id,
                log_level=log_level, population=population, model_rounds=model_rounds,
                choice=choice, on_stage=lambda text: progress.update(status, description=text),
                warm_start=warm_start, shared=shared, hedge_below=hedge_below,
                hedge_ranking=hedge_ranking,
            )  # fmt: skip
            progress.update(status, visible=False)
    if json_out:
        print_json(result.model_dump(mode="json"))
    else:
        _print_result(result)
