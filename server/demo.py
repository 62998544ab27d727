"""`simoe-server demo`: the real deployment on loopback, then a zero-shot newcomer.

Everything runs as the separate processes a user would start, through the product's
own commands; the server never imports agent code:

1. `simoe-server start`: a SuperLink with TLS and node authentication and the SiMoE
   run (continual rounds), its registry a SQLite file.
2. One node per simulated GPU of a different generation, plus this machine's CPU:
   `simoe-agent enroll` (node key, hardware profile, key registration), `simoe-agent
   submit` (the network to tune, queued) and `simoe-agent run` (the daemon: its
   SuperNode, and MetaSchedule tuning of the queue on its device). Each node trains
   its own expert from its own records in the rounds; the server averages the shared
   parts and keeps the experts.
3. A GPU type none of them is enrolls (`simoe-agent enroll` waits for its first round:
   the global model and the experts of the most similar hardware), then tunes a
   network of the suite, its largest tasks (`--flops-share`), with that zero-shot
   model (`simoe-agent tune --cost-model simoe`), next to MetaSchedule's default cost
   model at the same budget and at a larger one.
4. `simoe-server status | nodes | rounds | experts | similarity --plot`.

On a simulated GPU every latency comes from the analytical model: the table says so.
Compile time is the real search wall time plus the modelled time the measurements
would take on the real GPU, both also shown apart.
"""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from schemas import BadInputError, RunFailure
from server.demo_plan import DemoPlan, settings_text
from server.demo_report import DemoNode, DemoReport, DemoRow, failed_tasks, network_latency
from server.processes import Background, cli, free_port, wait_until

# how the daemon's console reports a job's end (agent.daemon.AgentDaemon.run_next_job)
JOB_ENDED = re.compile(r"\bjob \w+: .*: (done) in |\bjob \w+: .*: (failed) after ")


class DemoUI(Protocol):
    def event(self, text: str) -> None:
        """Something happened (printed as a line)."""

    def status(self, text: str) -> None:
        """What is going on now (the spinner's text)."""

    def show(self, text: str) -> None:
        """A command's own output, as the user would see it."""


@dataclass
class _Node:
    name: str
    device: str
    state_dir: Path
    port: int
    daemon: Background | None = None
    job: str = "queued"  # then done or failed
    records: int = 0
    tuned_at: str = ""  # when the demo saw its job end (the registry's time format)
    extra: dict[str, Any] = field(default_factory=dict)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Demo:
    """One run of the demo: its processes, its directories, what it has seen so far."""

    def __init__(self, out: Path, plan: DemoPlan, ui: DemoUI) -> None:
        plan.check()
        self.out = out
        self.plan = plan
        self.ui = ui
        self.server_dir = out / "server"
        self.logs = out / "logs"
        self.registry_path = self.server_dir / "registry.sqlite"
        self.ca = self.server_dir / "certs" / "ca.pem"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.server: Background | None = None
        self.nodes: list[_Node] = []
        self.rounds_seen = 0

    # -- helpers ------------------------------------------------------------------------

    def agent(self, args: list[str], node: str, **kw: Any) -> Any:
        return cli("simoe-agent", args, log=self.logs / f"{node}.cli.log", **kw)

    def finished_rounds(self) -> list[Any]:
        from server.registry import Registry

        if not self.registry_path.exists():
            return []
        with Registry(self.registry_path, read_only=True) as registry:
            return [r for r in registry.rounds() if r.status != "running"]

    def report_rounds(self) -> list[Any]:
        rounds = self.finished_rounds()
        for info in rounds[self.rounds_seen :]:
            self.ui.event(
                f"round {info.round}: {info.replied} of {info.sampled} nodes replied, "
                f"{info.rejected} rejected, {info.failed} failed, global model "
                f"v{info.global_version} ({info.status})"
            )
        self.rounds_seen = len(rounds)
        return rounds

    def check_processes(self) -> None:
        if self.server is not None:
            self.server.check()
        for node in self.nodes:
            if node.daemon is not None:
                node.daemon.check()

    # -- the steps ----------------------------------------------------------------------

    def start_server(self) -> None:
        self.ui.status("starting the server")
        self.server = Background(
            "simoe-server start",
            "simoe-server",
            [
                "start",
                "--state-dir", str(self.server_dir),
                "--port", str(self.port),
                *self.plan.server_config().start_options(),
            ],
            self.logs / "server.log",
        )  # fmt: skip

        def up() -> bool:
            assert self.server is not None
            self.server.check()
            return self.ca.exists() and self.registry_path.exists()

        wait_until("the server's SuperLink and run", up, timeout=300)
        self.ui.event(
            f"server: SuperLink on {self.address} (TLS, node authentication), SiMoE run "
            f"started; registry {self.registry_path}"
        )
        self.ui.event(
            f"server settings: {settings_text(self.plan.server_config())}; off the "
            f"deployment's defaults: {'; '.join(self.plan.server_overrides()) or 'nothing'}"
        )

    def bring_up_fleet(self) -> None:
        """Each node, on its own: enroll, queue its work, start its daemon.

        Nodes come up independently (a CPU node profiles its probes for real, a
        simulated one in seconds), so the first daemons tune while others still enroll.
        """
        fleet = [(gpu, f"sim:{gpu}") for gpu in self.plan.gpus]
        if self.plan.cpu:
            fleet.append(("cpu", "cpu"))
        for name, device in fleet:
            self.nodes.append(_Node(name, device, self.out / "nodes" / name, free_port()))
        self.ui.status(f"enrolling {len(self.nodes)} nodes (key, hardware profile, registration)")
        largest = self.plan.fleet_largest_tasks
        tasks = f"its {largest} largest tasks, " if largest else ""
        self.ui.event(
            f"{len(self.nodes)} nodes: simoe-agent enroll, submit {self.plan.network} "
            f"({tasks}{self.plan.fleet_trials} trials/task, MetaSchedule on its own device), run"
        )
        cpu_tasks = self.plan.largest_tasks("cpu")
        if self.plan.cpu and cpu_tasks != largest:
            which = {None: "every task", 1: "its largest task"}.get(
                cpu_tasks, f"its {cpu_tasks} largest tasks"
            )
            self.ui.event(
                f"the CPU node tunes {which} only: it builds and runs every candidate for "
                "real, and the whole fleet would wait for it (its expert is never sent to a GPU)"
            )
        if self.plan.cpu and self.plan.gpus and self.plan.sim_nice:
            self.ui.event(
                f"the simulated GPUs' daemons run at nice {self.plan.sim_nice}: the CPU node's "
                "real builds and measurements get this machine's cores first"
            )
        sharing = self.plan.enroll_sharing_options()
        self.ui.event(
            f"schedule sharing: on, every node and the newcomer enroll with {' '.join(sharing)}"
            if sharing
            else "schedule sharing: off (opt-in; --share-schedules turns it on)"
        )
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            for future in [pool.submit(self.bring_up, node) for node in self.nodes]:
                future.result()

    def bring_up(self, node: _Node) -> None:
        result = self.agent(
            [
                "enroll",
                "--server", self.address,
                "--ca", str(self.ca),
                "--name", node.name,
                "--device", node.device,
                "--no-download",  # the daemon's SuperNode gets the model in its first round
                "--state-dir", str(node.state_dir),
                *self.plan.enroll_sharing_options(),
            ],
            node.name,
            timeout=900,
        )  # fmt: skip
        largest = self.plan.largest_tasks(node.device)
        population = self.plan.fleet_population
        self.agent(
            [
                "submit", self.plan.network,
                "--trials", str(self.plan.fleet_trials),
                "--cost-model", "xgb",
                "--seed", str(self.plan.fleet_seed),
                *(["--largest-tasks", str(largest)] if largest else []),
                *(["--population", str(population)] if population else []),
                "--state-dir", str(node.state_dir),
            ],
            node.name,
        )  # fmt: skip
        node.daemon = Background(
            f"{node.name}'s daemon",
            "simoe-agent",
            ["run", "--port", str(node.port), "--state-dir", str(node.state_dir)],
            self.logs / f"{node.name}.daemon.log",
            nice=self.plan.sim_nice if node.device.startswith("sim:") and self.plan.cpu else 0,
        )
        self.ui.event(
            f"{node.name} ({node.device}) enrolled (key {result['key_fingerprint'][:12]}, "
            f"{result['registration']}); its daemon is tuning"
        )

    def poll_jobs(self) -> list[_Node]:
        """The nodes whose job ended since the last look; each gets its `tuned_at`.

        The daemon says so on its console (the log the demo keeps of it), which costs
        nothing to read; `simoe-agent status` (a process: about 1 CPU s) is asked only
        then, for the outcome and the records.
        """
        ended = []
        for node in self.nodes:
            if node.job in ("done", "failed") or node.daemon is None:
                continue
            if daemon_job_ended(node.daemon.log) is None:
                continue
            from server.registry import now_iso

            node.tuned_at = now_iso()
            status = self.agent(["status", "--state-dir", str(node.state_dir)], node.name)
            daemon = (status.get("federation") or {}).get("daemon") or {}
            node.records = int((status.get("store") or {}).get("records") or 0)
            if daemon.get("failed"):
                node.job = "failed"
                self.ui.event(f"{node.name}: its tuning job failed; see {node.daemon.log}")
            else:
                node.job = "done"
                self.ui.event(f"{node.name}: tuned {self.plan.network}, {node.records} records")
            ended.append(node)
        return ended

    def run_fleet(self) -> float:
        """Until every node tuned its work and its expert was trained on all its records.

        That is an event, not a round count: the fleet is ready once each tuned node's
        expert was recorded in a round that started after its job ended (`fleet_ready`);
        then the newcomer enrolls. While nodes tune, rounds come every `round_interval`;
        when a job ends, a round is asked for at once (as an operator would: `simoe-server
        round`), so each expert is trained on all its records as early as it can be.
        """
        from server.idle import request_path, request_round
        from server.registry import Registry, now_iso

        started = time.monotonic()
        deadline = started + self.plan.timeout_s
        asked_at: str | None = None
        while True:
            self.check_processes()
            self.report_rounds()
            if self.poll_jobs():  # a round now, not at the interval: their experts train
                request_round(self.registry_path)  # on all their records (one request
                asked_at = now_iso()  # file: job ends close together share a round)
            tuned = sum(n.job in ("done", "failed") for n in self.nodes)
            with Registry(self.registry_path, read_only=True) as registry:
                rounds = registry.rounds()
                experts = {e.name: e.round for e in registry.experts()}
            finished = [r for r in rounds if r.status != "running"]
            self.ui.status(
                f"fleet: {tuned}/{len(self.nodes)} nodes tuned, {len(finished)} rounds, "
                f"{len(experts)} experts in the registry"
            )
            if tuned == len(self.nodes):
                tuned_at = {n.name: n.tuned_at for n in self.nodes if n.job == "done"}
                if not tuned_at:
                    raise RunFailure(f"every node's tuning job failed; logs in {self.logs}")
                ready = fleet_ready(tuned_at, experts, finished)
                if ready is not None:
                    self.ui.event(
                        f"every node has tuned, and round {ready} trained each one's expert "
                        "on all its records: the newcomer enrolls"
                    )
                    return time.monotonic() - started
                # the round asked for ran, but an expert is still not in (a rejected
                # reply): ask again, once no round runs
                ran = asked_at is not None and any(r.started_at >= asked_at for r in finished)
                running = any(r.status == "running" for r in rounds)
                if ran and not running and not request_path(self.registry_path).exists():
                    request_round(self.registry_path)
                    asked_at = now_iso()
            if time.monotonic() > deadline:
                raise RunFailure(
                    f"the fleet did not finish in {self.plan.timeout_s:.0f} s; logs in {self.logs}"
                )
            time.sleep(3)

    def stop_all(self) -> None:
        """The server first (no new round starts), then the daemons, side by side."""
        if self.server is not None:
            self.server.stop()
        daemons = [n.daemon for n in self.nodes if n.daemon is not None]
        if daemons:
            with ThreadPoolExecutor(max_workers=len(daemons)) as pool:
                list(pool.map(lambda daemon: daemon.stop(), daemons))

    def newcomer(self) -> tuple[Path, str, list[str]]:
        name = f"new-{self.plan.new_gpu}"
        device = f"sim:{self.plan.new_gpu}"
        state_dir = self.out / "nodes" / name
        self.ui.status(f"{name} ({device}) enrolls and waits for its first round")
        result = self.agent(
            [
                "enroll",
                "--server", self.address,
                "--ca", str(self.ca),
                "--name", name,
                "--device", device,
                "--timeout", "600",
                "--port", str(free_port()),
                "--state-dir", str(state_dir),
                *self.plan.enroll_sharing_options(),
            ],
            name,
            timeout=900,
        )  # fmt: skip
        self.report_rounds()
        experts = list(result.get("experts") or [])
        self.ui.event(
            f"newcomer {name} ({device}, none of the fleet is one) enrolled: global model "
            f"v{result['global_version']}, experts of the most similar hardware: "
            f"{', '.join(experts) or 'none'}"
        )
        return state_dir, device, experts

    def tune_newcomer(self, state_dir: Path, device: str) -> tuple[list[DemoRow], dict[str, Any]]:
        """The three tunes of the newcomer's network; the rows and which tasks were tuned."""

        def run_tune(args: list[str]) -> dict[str, Any]:
            return self.agent(args, "tune", timeout=3600)

        return newcomer_tunes(
            self.plan, state_dir, device, self.out / "baselines", run_tune, self.ui
        )

    def monitoring(self) -> Path | None:
        """The server's own monitoring commands, as a user runs them (side by side: each
        is a process that only reads; shown in order)."""
        directory = ["--state-dir", str(self.server_dir)]
        plot = self.out / "similarity.png"
        commands = [[c, *directory] for c in ("status", "nodes", "rounds", "experts")]
        commands.append(["similarity", *directory, "--plot", str(plot)])

        def run(args: list[str]) -> str | RunFailure:
            try:
                return str(cli("simoe-server", args, as_json=False))
            except RunFailure as exc:
                return exc

        with ThreadPoolExecutor(max_workers=2) as pool:
            outputs = list(pool.map(run, commands))
        for args, output in zip(commands, outputs, strict=True):
            if isinstance(output, RunFailure):
                if args[0] != "similarity":
                    raise output
                self.ui.event(f"similarity: {output}")
                return None
            self.ui.show(output)
        return plot


def newcomer_tunes(
    plan: DemoPlan,
    state_dir: Path,
    device: str,
    baselines: Path,
    run_tune: Callable[[list[str]], dict[str, Any]],
    ui: DemoUI,
) -> tuple[list[DemoRow], dict[str, Any]]:
    """The newcomer's network three ways, at `plan.seed`: SiMoE zero-shot with the
    newcomer's state (`state_dir`: its federated model), MetaSchedule at the same budget
    and at the larger one (fresh state dirs under `baselines`). The rows, and which tasks
    were tuned. `run_tune(args)` runs `simoe-agent tune ... --json` and returns its result.
    """
    plans = [
        ("SiMoE zero-shot", "simoe", plan.budget, state_dir),
        ("MetaSchedule, same budget", "xgb", plan.budget, None),
        ("MetaSchedule, larger budget", "xgb", plan.full_budget, None),
    ]
    rows = []
    selection: dict[str, Any] = {}
    for label, cost_model, trials, directory in plans:
        directory = directory or baselines / f"{cost_model}-{trials}"
        ui.status(f"{device}: {label}, {trials} trials/task of {plan.new_network}")
        result = run_tune(
            [
                "tune",
                "--model", plan.new_network,
                "--flops-share", str(plan.flops_share),
                "--device", device,
                "--trials", str(trials),
                "--cost-model", cost_model,
                "--seed", str(plan.seed),
                "--no-baseline",
                "--state-dir", str(directory),
            ]
        )  # fmt: skip
        row = DemoRow(
            method=label,
            cost_model=cost_model,
            trials_per_task=trials,
            search_wall_s=float(result["search_wall_s"]),
            modelled_measure_s=result.get("modelled_measure_s"),
            network_latency_s=network_latency(result),
            failed_tasks=failed_tasks(result),
            simulated=bool(result["simulated"]),
            shared_schedules=int(result.get("shared_schedules") or 0),
            shared_skipped=int(result.get("shared_skipped") or 0),
        )
        ui.event(f"{label}: {row.latency_text()}")
        rows.append(row)
        selection = result.get("selection") or {}
    return rows, selection


def daemon_job_ended(log: Path) -> str | None:
    """'done' or 'failed' once a daemon's console (its log) reports its job's end."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    match = JOB_ENDED.search(text)
    return None if match is None else (match.group(1) or match.group(2))


def fleet_ready(
    tuned_at: Mapping[str, str], expert_rounds: Mapping[str, int], rounds: Sequence[Any]
) -> int | None:
    """The round by which every tuned node's expert was trained on all its records, or
    None while one still waits.

    `tuned_at`: each tuned node's name and when its job was seen to end (ISO, seconds);
    `expert_rounds`: the round each expert in the registry was last recorded in;
    `rounds`: the finished rounds (`RoundInfo`). A round counts for a node if it started
    at or after that moment (its ClientApp reads the store seconds after the round
    starts, and a job commits its records before it reports its end).
    """
    started = {r.round: r.started_at for r in rounds}
    last = 0
    for name, when in tuned_at.items():
        number = expert_rounds.get(name)
        if number is None or number not in started or started[number] < when:
            return None
        last = max(last, number)
    return last or None


def check_gpus(plan: DemoPlan) -> None:
    """Every simulated GPU of the plan exists (asked of `simoe-agent`: the server never
    imports agent code), before anything starts: one line naming the unknown one."""
    names = [*plan.gpus, plan.new_gpu]
    try:
        cli("simoe-agent", ["dataset", "gpus", "--check", ",".join(names)], timeout=120)
    except RunFailure as exc:
        why = str(exc).removeprefix("simoe-agent dataset: ").removeprefix("error: ")
        raise BadInputError(f"--gpus/--new-gpu: {why.split(': ', 1)[-1]}") from None


def run_demo(out: Path, plan: DemoPlan, ui: DemoUI, *, gpus_checked: bool = False) -> DemoReport:
    plan.check()
    if not gpus_checked:  # a GPU that does not exist: refused now, not after servers start
        check_gpus(plan)
    started = time.perf_counter()
    cpu_before = _children_cpu_s()
    load_start = os.getloadavg()[0]
    if out.exists():
        if any(out.iterdir()) and not (out / "demo.json").exists() and not (out / "nodes").exists():
            raise BadInputError(f"--out {out}: not empty and not an earlier demo; pick another")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    demo = Demo(out, plan, ui)
    try:
        demo.start_server()
        demo.bring_up_fleet()
        federation_s = demo.run_fleet()
        # enroll returns once its round is recorded (the server's receipt): no round to
        # wait for here; one that opened since is cut short by the stop
        state_dir, device, delivered = demo.newcomer()
        rounds = len(demo.finished_rounds())
    finally:
        ui.status("stopping the daemons and the server")
        demo.stop_all()
    rows, selection = demo.tune_newcomer(state_dir, device)
    # their records as `simoe-agent status` said when their jobs ended (nothing since)
    nodes = [
        DemoNode(name=n.name, device=n.device, records=n.records, job=n.job) for n in demo.nodes
    ]
    plot = demo.monitoring()
    report_path = out / "demo.json"
    report = DemoReport(
        out_dir=str(out),
        server_dir=str(demo.server_dir),
        nodes=nodes,
        network=plan.new_network,
        fleet_network=plan.network,
        plan=dataclasses.asdict(plan),
        server_settings=settings_text(plan.server_config()),
        server_overrides=plan.server_overrides(),
        tuned_tasks=list(selection.get("tuned") or []),
        total_tasks=int(selection.get("total_tasks") or 0),
        flops_share=selection.get("flops_share"),
        fleet_trials=plan.fleet_trials,
        new_gpu=plan.new_gpu,
        experts_delivered=delivered,
        rounds=rounds,
        federation_wall_s=federation_s,
        rows=rows,
        total_wall_s=time.perf_counter() - started,
        cpu_s=_children_cpu_s() - cpu_before,
        load_average=(load_start, os.getloadavg()[0]),
        report=str(report_path),
        plot=str(plot) if plot else None,
    )
    report_path.write_text(report.model_dump_json(indent=2))
    return report


class _RichUI:
    """Progress on stderr (a spinner with the elapsed time); command output on stdout."""

    def __init__(self, progress: Any, out_console: Any, quiet: bool) -> None:
        self.progress = progress
        self.task = progress.add_task("starting", total=None)
        self.out = out_console
        self.quiet = quiet

    def event(self, text: str) -> None:
        self.progress.console.print(f"  {text}")

    def status(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def show(self, text: str) -> None:
        if not self.quiet:
            from rich.text import Text

            self.progress.console.print(Text.from_ansi(text.rstrip()))


def run_demo_with_progress(
    out: Path, plan: DemoPlan, console: Any, err_console: Any, *, quiet: bool = False
) -> DemoReport:
    import signal

    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    def interrupted(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the demo's processes as Ctrl-C does

    signal.signal(signal.SIGTERM, interrupted)
    plan.check()  # bad input: one line, before the spinner draws anything
    check_gpus(plan)
    with Progress(
        SpinnerColumn(), TimeElapsedColumn(), TextColumn("{task.description}"),
        console=err_console,
    ) as progress:  # fmt: skip
        return run_demo(out, plan, _RichUI(progress, console, quiet), gpus_checked=True)
