"""Chaos on loopback: kill -9 the server or a node, again and again; nothing committed is lost.

    python -m bench.reliability.chaos           # 4 nodes, ~5 minutes of faults, <= 10 minutes
    python -m bench.reliability.chaos --nodes 5 --faults-for 240 --interval 30,60 --seed 1

Real processes only, as a user deploys them: `simoe-server start` (SuperLink with TLS and
node authentication, the ServerApp, the registry), then per node `simoe-agent enroll` and
`simoe-agent run` (the daemon: its SuperNode, ClientApps, tuning jobs) on a simulated GPU,
with tiny tuning jobs queued (`simoe-agent submit`) so that records are being written
while the faults hit. Every 30-60 s (seeded draw) one target is killed with SIGKILL
together with every process it started (a crash of that machine), then restarted with
the same command: the server with probability 1/2, else a node drawn uniformly.

Before each fault and after the target is back, every node's store is read (read-only):
its committed record count and `PRAGMA integrity_check`. A record is lost if a count
after a fault is below the count before it. At the end: the registry's integrity and
consistency (round numbers without gaps, every expert's, metric's and traffic row's node
registered, every round closed or interrupted by a server kill), rounds resumed after
every server restart, and every node back (it replied in a round that started after its
own last restart and the server's). Writes OUT/chaos.json and OUT/chaos.md.

The nodes' devices are SIMULATED GPUs (`sim:<gpu>`): their records are simulated
measurements; the processes, the network on loopback, TLS and SQLite are real.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import psutil

from bench.reliability.chaos_facts import (
    first_round_back,
    iso_time,
    nodes_returned,
    read_only,
    registry_facts,
    store_facts,
)
from bench.reliability.chaos_report import ChaosReport, Fault, markdown
from bench.reporting import add_render_option, load_average, render, write_report
from schemas import BadInputError, RunFailure  # noqa: E402
from server.processes import free_port  # noqa: E402
from server.superlink import port_open  # noqa: E402

DEVICES = ("t4", "a10", "v100", "l4", "a100-40gb", "3090", "p100", "h100-sxm")
JOBS = ("matmul:64,64,64", "matmul:32,64,32")  # tiny: records written, little CPU taken
Say = Callable[[str], None]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def cli_path(name: str) -> str:
    """The product's console script next to this interpreter (venv not activated)."""
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        raise RunFailure(f"{path}: not installed (pip install -e .)")
    return str(path)


def environment() -> dict[str, str]:
    from schemas.protocol import flower_env

    return flower_env()


@dataclass
class Service:
    """A long-running product process (server or node daemon) that can crash and restart."""

    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: datetime | None = None
    starts: int = 0

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"\n=== start {self.starts + 1} at {utc_now().isoformat()} ===\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environment(),
                start_new_session=True,
            )
        self.started_at = utc_now()
        self.starts += 1

    def tree(self) -> list[psutil.Process]:
        """The process and everything it started (SuperLink, SuperNode, ClientApps, jobs)."""
        if self.process is None:
            return []
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def crash(self) -> int:
        """SIGKILL the whole tree at once, as a machine crash would; returns processes killed."""
        victims = self.tree()
        kill_all(victims)
        psutil.wait_procs(victims, timeout=10)
        if self.process is not None:
            self.process.wait()
        return len(victims)

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (the product's clean stop); SIGKILL what is left after `timeout`."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        victims = self.tree()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        _, alive = psutil.wait_procs(victims, timeout=20)
        kill_all(alive)
        return code

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def kill_all(processes: Sequence[psutil.Process]) -> None:
    for proc in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()


@dataclass
class Deployment:
    work: Path
    port: int
    nodes: dict[str, str]  # name -> sim device
    round_timeout: float
    say: Say
    server: Service | None = None
    daemons: dict[str, Service] = field(default_factory=dict)
    node_ports: dict[str, int] = field(default_factory=dict)

    @property
    def server_dir(self) -> Path:
        return self.work / "server"

    def node_dir(self, name: str) -> Path:
        return self.work / "nodes" / name

    def store(self, name: str) -> Path:
        return self.node_dir(name) / "store.sqlite"

    def start_server(self) -> None:
        if self.server is None:
            self.server = Service(
                "server",
                [
                    cli_path("simoe-server"), "start", "--port", str(self.port),
                    "--state-dir", str(self.server_dir), "--min-nodes", "1",
                    "--round-timeout", str(self.round_timeout),
                ],
                self.work / "logs" / "server.log",
            )  # fmt: skip
        self.server.start()

    def wait_server(self, timeout: float) -> float:
        started = time.monotonic()
        end = started + timeout
        while time.monotonic() < end:
            assert self.server is not None
            if not self.server.alive():
                raise RunFailure(f"simoe-server exited; see {self.server.log}")
            if port_open("127.0.0.1", self.port) and (self.server_dir / "registry.sqlite").exists():
                return time.monotonic() - started
            time.sleep(1.0)
        raise RunFailure(f"the server was not up within {timeout:.0f} s; see {self.server.log}")

    def enroll(self, timeout: float) -> None:
        """`simoe-agent enroll` for every node at once (each registers its key)."""
        ca = self.server_dir / "certs" / "ca.pem"
        procs = {}
        for name, device in self.nodes.items():
            self.node_ports[name] = free_port()
            procs[name] = subprocess.Popen(
                [
                    cli_path("simoe-agent"), "enroll", "--server", f"127.0.0.1:{self.port}",
                    "--ca", str(ca), "--name", name, "--device", f"sim:{device}",
                    "--port", str(self.node_ports[name]), "--no-download",
                    "--state-dir", str(self.node_dir(name)), "--json",
                ],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment(),
            )  # fmt: skip
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                raise RunFailure(f"enroll {name}: {err.decode().strip().splitlines()[-1:]}")
        self.say(f"enrolled {len(procs)} nodes")

    def queue_jobs(self, trials: int) -> None:
        """`simoe-agent submit` of every job at once (each is a process start)."""
        procs = [
            subprocess.Popen(
                [
                    cli_path("simoe-agent"),
                    "submit",
                    subject,
                    "--trials",
                    str(trials),
                    "--state-dir",
                    str(self.node_dir(name)),
                    "--json",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=environment(),
            )  # fmt: skip
            for name in self.nodes
            for subject in JOBS
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=900)
            if proc.returncode != 0:
                raise RunFailure(f"submit: {err.decode().strip().splitlines()[-1:]}")

    def start_daemon(self, name: str) -> None:
        if name not in self.daemons:
            self.daemons[name] = Service(
                name,
                [
                    cli_path("simoe-agent"), "run", "--port", str(self.node_ports[name]),
                    "--state-dir", str(self.node_dir(name)),
                ],
                self.work / "logs" / f"{name}.log",
            )  # fmt: skip
        self.daemons[name].start()

    def counts(self) -> tuple[dict[str, int], dict[str, str]]:
        counts, integrity = {}, {}
        for name in self.nodes:
            counts[name], integrity[name] = store_facts(self.store(name))
        return counts, integrity

    def last_round(self) -> int:
        path = self.server_dir / "registry.sqlite"
        if not path.exists():
            return 0
        with read_only(path) as db:
            return int(db.execute("select coalesce(max(round), 0) from rounds").fetchone()[0])

    def stop_all(self) -> None:
        for service in [*self.daemons.values(), self.server]:
            if service is not None:
                service.stop()


def run_chaos(
    work: Path,
    nodes: dict[str, str],
    *,
    faults_for: float,
    interval: tuple[float, float],
    recover_for: float,
    round_timeout: float,
    trials: int,
    seed: int,
    command: str,
    say: Say,
) -> ChaosReport:
    load_start = load_average()
    started = time.monotonic()
    rng = random.Random(seed)
    deployment = Deployment(work, free_port(), nodes, round_timeout, say)
    faults: list[Fault] = []
    server_restarts: list[datetime] = []
    node_restarts: dict[str, datetime] = {}
    try:
        deployment.start_server()
        say(f"server up in {deployment.wait_server(180):.0f} s on 127.0.0.1:{deployment.port}")
        deployment.enroll(timeout=900)  # a loaded 2-core machine: minutes each
        deployment.queue_jobs(trials)
        for name in nodes:
            deployment.start_daemon(name)
            node_restarts[name] = utc_now()
        records_start, _ = deployment.counts()
        chaos_started = time.monotonic()
        cycle = 0
        while True:
            wait = rng.uniform(*interval)
            if time.monotonic() - chaos_started + wait > faults_for:
                break
            time.sleep(wait)
            cycle += 1
            # half the faults hit the server (the one every node depends on), half a node
            target = "server" if rng.random() < 0.5 else rng.choice(list(nodes))
            before, _ = deployment.counts()
            last_round = deployment.last_round()
            at = time.monotonic() - chaos_started
            if target == "server":
                assert deployment.server is not None
                killed = deployment.server.crash()
                deployment.start_server()
                back = deployment.wait_server(180)
                server_restarts.append(utc_now())
                restarted_at = server_restarts[-1]
            else:
                killed = deployment.daemons[target].crash()
                t0 = time.monotonic()
                deployment.start_daemon(target)
                node_restarts[target] = restarted_at = utc_now()
                back = time.monotonic() - t0
            after, integrity = deployment.counts()
            lost = sum(max(0, before[n] - after[n]) for n in nodes)
            faults.append(
                Fault(
                    cycle=cycle, at_s=at, target=target, processes_killed=killed,
                    restart_s=back, restarted_at=restarted_at, records_before=before,
                    records_after=after, integrity_after=integrity, lost=lost,
                    last_round_before=last_round,
                )
            )  # fmt: skip
            say(
                f"fault {cycle} at {at:.0f} s: kill -9 {target} ({killed} processes), restarted "
                f"in {back:.0f} s; records {sum(before.values())} -> {sum(after.values())}, "
                f"lost {lost}, integrity {sorted(set(integrity.values()))}, round {last_round}"
            )
        say(f"faults over; waiting up to {recover_for:.0f} s for every node to reply again")
        back_since = {n: max([node_restarts[n], *server_restarts[-1:]]) for n in nodes}
        end = time.monotonic() + recover_for
        facts: dict = {}
        while time.monotonic() < end:
            facts = registry_facts(deployment.server_dir / "registry.sqlite", list(nodes))
            returned = nodes_returned(facts, back_since)
            if all(returned.values()):
                break
            time.sleep(5.0)
    finally:
        deployment.stop_all()
    facts = registry_facts(deployment.server_dir / "registry.sqlite", list(nodes))
    returned = nodes_returned(facts, back_since)
    for fault in faults:
        fault.back_in_round, fault.back_after_s = first_round_back(facts, fault)
    records_end, integrity_end = deployment.counts()
    lost_total = sum(f.lost for f in faults) + sum(
        max(0, records_start[n] - records_end[n]) for n in nodes
    )
    after_restart = [
        sum(
            1
            for r in facts["rounds_table"]
            if r[1] in {"done", "no-update"}
            and iso_time(r[2]) is not None
            and iso_time(r[2]) >= when
        )
        for when in server_restarts
    ]
    server_kills = sum(1 for f in faults if f.target == "server")
    interrupted = facts["interrupted"]
    problems = list(facts["problems"])
    if len(interrupted) > server_kills:
        problems.append(f"{len(interrupted)} rounds interrupted by {server_kills} server kills")
    if len(facts["open_rounds"]) > 1:  # only the one the final clean stop may cut short
        problems.append(f"rounds left open: {facts['open_rounds']}")
    ok = (
        lost_total == 0
        and all(v == "ok" for v in integrity_end.values())
        and all(v in {"ok", "absent"} for f in faults for v in f.integrity_after.values())
        and facts["integrity"] == "ok"
        and not problems
        and all(n > 0 for n in after_restart)
        and all(returned.values())
    )
    last_reply = {
        n: max([r for r, name in facts["replies"] if name == n], default=0) for n in nodes
    }
    return ChaosReport(
        command=command,
        nodes=nodes,
        interval_s=interval,
        faults_for_s=faults_for,
        seed=seed,
        faults=faults,
        cycles_survived=len(faults) if ok else 0,
        records_start=records_start,
        records_end=records_end,
        integrity_end=integrity_end,
        lost_total=lost_total,
        registry_integrity=facts["integrity"],
        registry_problems=problems,
        rounds_total=facts["rounds"],
        rounds_closed=facts["closed_rounds"],
        rounds_interrupted=interrupted,
        rounds_open=facts["open_rounds"],
        server_kills=server_kills,
        rounds_after_each_server_restart=after_restart,
        nodes_back=returned,
        last_reply_round=last_reply,
        verdict="survived" if ok else "FAILED",
        wall_s=time.monotonic() - started,
        load_average_start=load_start,
        load_average_end=load_average(),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4, help="node daemons (at least 4)")
    parser.add_argument("--faults-for", type=float, default=270.0, help="seconds of faults")
    parser.add_argument("--interval", default="30,60", help="seconds between faults: MIN,MAX")
    parser.add_argument("--recover-for", type=float, default=600.0, help="seconds to come back")
    parser.add_argument(
        "--round-timeout", type=float, default=300.0, help="a ClientApp start is slow at load"
    )
    parser.add_argument("--trials", type=int, default=8, help="trials per queued tuning job")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="keep the deployment here (default: temp)")
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    add_render_option(parser)
    args = parser.parse_args(argv)
    if args.render:
        render(args.render, ChaosReport, markdown)
        return
    try:
        low, high = (float(x) for x in args.interval.split(","))
    except ValueError:
        raise BadInputError(f"--interval {args.interval!r}: give MIN,MAX seconds") from None
    if not 0 < low <= high:
        raise BadInputError(f"--interval {args.interval!r}: need 0 < MIN <= MAX")
    if not 1 <= args.nodes <= len(DEVICES):
        raise BadInputError(f"--nodes must be between 1 and {len(DEVICES)}")
    nodes = {f"node{i + 1}-{d}": d for i, d in enumerate(DEVICES[: args.nodes])}
    work = args.work or Path(tempfile.mkdtemp(prefix="chaos-"))
    if args.work and work.exists():
        shutil.rmtree(work)
    argv_text = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m bench.reliability.chaos", *argv_text]).replace(str(work), "WORK")
    report = run_chaos(
        work,
        nodes,
        faults_for=args.faults_for,
        interval=(low, high),
        recover_for=args.recover_for,
        round_timeout=args.round_timeout,
        trials=args.trials,
        seed=args.seed,
        command=command,
        say=lambda text: print(text, flush=True),
    )
    write_report(report, markdown, args.out, "chaos")
    print(markdown(report))
    print(json.dumps({"verdict": report.verdict, "work": str(work)}))
    if args.work is None and report.verdict == "survived":
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "chaos")
