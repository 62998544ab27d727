"""`simoe-server`: start the federation and watch it.

Monitoring commands read the registry (`STATE_DIR/registry.sqlite`) only, so they
work while the server runs (WAL) and after it stopped.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from schemas import BadInputError, RunFailure
from schemas.cli import (
    Json,
    Verbose,
    console,
    print_json,
    print_table,
    state_folder,
    typer_app,
)
from schemas.errors import run_cli
from schemas.tables import Column, human_bytes, short_time
from server.demo_command import demo
from server.heatmap import check_plot_path, write_heatmap
from server.run_config import DEFAULTS, ServerRunConfig

if TYPE_CHECKING:
    from schemas.messages import RoundInfo

app = typer_app(
    "simoe-server",
    help="The SiMoE federation server: start it, watch nodes, rounds and experts.",
)
StateDir = Annotated[
    Path | None,
    typer.Option("--state-dir", help="the server's state directory (default $SIMOE_HOME/server)"),
]


def default_state_dir() -> Path:
    home = os.environ.get("SIMOE_HOME")
    return (Path(home) if home else Path.home() / ".simoe") / "server"


def registry_path(state_dir: Path | None) -> Path:
    return (state_dir or default_state_dir()) / "registry.sqlite"


def open_registry(state_dir: Path | None):  # noqa: ANN201 - server.registry.Registry
    from server.registry import Registry

    state_folder(state_dir or default_state_dir())
    path = registry_path(state_dir)
    if not path.exists():
        raise BadInputError(f"{path}: no registry (start the server or pass --state-dir)")
    return Registry(path, read_only=True)  # checked (quick_check); never written


@app.callback()
def _root() -> None:
    """The SiMoE federation server."""


@app.command()
def status(
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """One line per fact: nodes, experts, rounds, the global model version."""
    with open_registry(state_dir) as registry:
        rounds = registry.rounds()
        last = rounds[-1] if rounds else None
        traffic = registry.traffic(last.round) if last else []
        data = {
            "registry": str(registry.path),
            "nodes": len(registry.nodes()),
            "experts": len(registry.experts()),
            "rounds": len(rounds),  # every run's on this state directory
            "rounds_by_status": dict(Counter(r.status for r in rounds)),
            "runs": len(run_numbers(rounds)),
            "last_round": last.model_dump() if last else None,
            "global_version": registry.global_version(),
            "rejections": len(registry.rejections()),
            "refused_hellos": len(registry.refusals()),
            "last_round_bytes_per_node": (
                sum(t["bytes_down"] + t["bytes_up"] for t in traffic) / len(traffic)
                if traffic
                else 0
            ),
        }
    if as_json:
        print_json(data)
        return
    rows = [
        ("registry", data["registry"]),
        ("nodes", data["nodes"]),
        ("experts", data["experts"]),
        ("rounds", rounds_text(data["rounds"], data["rounds_by_status"], data["runs"])),
        ("global model version", data["global_version"]),
        ("rejected updates", data["rejections"]),
        ("refused hellos", data["refused_hellos"]),
    ]
    if last:
        rows.append(("last round", f"{last.round} ({last.status}, {last.finished_at or '...'})"))
        rows.append(
            ("bytes per node, last round", human_bytes(int(data["last_round_bytes_per_node"])))
        )
    print_table("SiMoE server", ["", "value"], rows)


def rounds_text(total: int, by_status: dict[str, int], runs: int) -> str:
    """'6 (5 done, 1 interrupted) in 2 runs': the rounds of every `start` on this state
    directory (their numbers continue from one run to the next)."""
    if not total:
        return "0"
    parts = ", ".join(f"{count} {status}" for status, count in sorted(by_status.items()))
    return f"{total} ({parts}) in {runs} run{'s' if runs != 1 else ''}"


@app.command()
def nodes(
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """The enrolled nodes: name, device, key fingerprint, rounds replied in, last seen."""
    with open_registry(state_dir) as registry:
        rows = registry.nodes()
    if as_json:
        print_json(rows)
        return
    print_table(
        "nodes",
        ["name", "device", Column("rounds", "right"), Column("last seen", optional=True),
         Column("simulated", optional=True), Column("key", optional=True),
         Column("flower node id", optional=True)],
        [
            (
                r["name"],
                r["device"],
                r["rounds"],
                short_time(r["last_seen"]),
                "yes" if r["simulated"] else "no",
                r["node_key"][:12],
                r["flower_node_id"],
            )
            for r in rows
        ],
    )  # fmt: skip


def similarity_cell(fit: dict[str, Any] | None) -> str:
    """A round's similarity fit in a table cell: pairs, and the loss before -> after."""
    if fit is None:
        return ""
    return f"{fit['pairs']} pairs {fit['loss_before']:.3f}->{fit['loss_after']:.3f}"


@app.command()
def rounds(
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """Every round: who took part, rejections, failures, bytes moved, the model version,
    the fit of the hardware similarity on the nodes' rank agreements (pairs, loss)."""
    with open_registry(state_dir) as registry:
        data = []
        fits = registry.similarity_fits()
        infos = registry.rounds()
        runs = run_numbers(infos)
        for info in infos:
            traffic = registry.traffic(info.round)
            metrics = registry.metrics(info.round)
            losses = [m["value"] for m in metrics if m["key"] == "expert-loss"]
            data.append(
                info.model_dump()
                | {
                    "run": runs[info.run_id],
                    "bytes_down": sum(t["bytes_down"] for t in traffic),
                    "bytes_up": sum(t["bytes_up"] for t in traffic),
                    "mean_expert_loss": sum(losses) / len(losses) if losses else None,
                    "similarity_fit": fit.model_dump() if (fit := fits.get(info.round)) else None,
                }
            )
    if as_json:
        print_json(data)
        return
    counts = ["sampled", "replied", "rejected", "failed"]
    print_table(
        "rounds",
        [
            Column("round", "right"),
            Column("run", "right", optional=True),
            "status",
            *(Column(h, "right") for h in counts),
            Column("model", optional=True),
            Column("down", "right", optional=True),
            Column("up", "right", optional=True),
            Column("loss", "right", optional=True),
            Column("similarity fit", "right", optional=True),
        ],  # fmt: skip
        [
            (
                d["round"],
                d["run"],
                d["status"],
                *(d[h] for h in counts),
                f"v{d['global_version']}",
                human_bytes(d["bytes_down"]),
                human_bytes(d["bytes_up"]),
                f"{d['mean_expert_loss']:.4f}" if d["mean_expert_loss"] is not None else "",
                similarity_cell(d["similarity_fit"]),
            )
            for d in data
        ],
    )


@app.command()
def experts(
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """The expert registry: one expert per node, its version and size."""
    with open_registry(state_dir) as registry:
        infos = registry.experts()
    if as_json:
        print_json([i.model_dump() for i in infos])
        return
    print_table(
        "experts",
        [
            "name",
            "device",
            *(Column(h, "right") for h in ("version", "round", "examples")),
            Column("size", "right", optional=True),
            Column("simulated", optional=True),
        ],
        [
            (
                i.name,
                i.device,
                i.version,
                i.round,
                i.num_examples,
                human_bytes(i.bytes),
                "yes" if i.simulated else "no",
            )
            for i in infos
        ],
    )


@app.command()
def similarity(
    state_dir: StateDir = None,
    plot: Path | None = typer.Option(None, "--plot", help="write a heatmap PNG here"),
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """cos(z_i, z_j) between the nodes' hardware, by the current global encoder."""
    from server.similarity import similarity_matrix

    if plot is not None:  # before any work: an unwritable path is the user's to fix
        check_plot_path(plot)
    with open_registry(state_dir) as registry:
        latest = registry.latest_global()
        profiles = registry.profiles()
    if latest is None or not profiles:
        raise BadInputError("no global model or no node profiles in the registry yet")
    version, arrays = latest
    names, matrix = similarity_matrix(arrays, profiles)
    if plot is not None:
        write_heatmap(plot, names, matrix, f"hardware similarity (global model v{version})")
    if as_json:
        print_json({"version": version, "names": names, "matrix": matrix.round(4).tolist()})
        return
    # Columns are numbered, not named: N long node names side by side cannot fit 80 columns.
    print_table(
        f"similarity, global model v{version}",
        [Column("#", "right"), "node", *(Column(str(j + 1), "right") for j in range(len(names)))],
        [
            (i + 1, n, *(f"{v:+.2f}" for v in row))
            for i, (n, row) in enumerate(zip(names, matrix, strict=True))
        ],
    )
    if plot is not None:
        console.print(f"heatmap written to {plot}")


@app.command("init-certs")
def init_certs_command(
    directory: Path = typer.Argument(..., help="where to write ca.pem, server.pem, server.key"),
    host: list[str] = typer.Option(
        ["127.0.0.1", "localhost"], "--host", help="names the server certificate is valid for"
    ),
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """A development CA and server certificate (existing files are kept)."""
    from server.superlink import init_certs

    certs = init_certs(directory, hosts=tuple(host))
    data = {"ca": str(certs.ca), "cert": str(certs.cert), "key": str(certs.key)}
    if as_json:
        print_json(data)
        return
    print_table("certificates", ["", "path"], list(data.items()))
    console.print("give nodes the CA: simoe-agent enroll --ca " + str(certs.ca))


# Every run setting is a parameter spelled out here, typer's idiom: typer reads the options
# from this signature. Generated from ServerRunConfig's fields they would lose their help,
# written for the command line (--wait-nodes names --min-nodes; --probes the options that
# need it), and be hidden from readers; tests/test_server_cli_options.py holds the two to
# each other instead.
@app.command()
def start(
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on"),
    port: int = typer.Option(9093, "--port", help="the SuperLink's port (nodes and control)"),
    certs_dir: Path | None = typer.Option(
        None, "--certs", help="a dir with ca.pem, server.pem, server.key (default: dev certs)"
    ),
    rounds: int = typer.Option(
        DEFAULTS.num_rounds, "--rounds", help="rounds to run; 0 = keep running"
    ),
    k_experts: int = typer.Option(
        DEFAULTS.k_experts, "--k-experts", help="experts sent to each node"
    ),
    epochs: int = typer.Option(DEFAULTS.epochs, "--epochs", help="local epochs per round"),
    local_batch: int = typer.Option(
        DEFAULTS.local_batch, "--local-batch", help="tasks per local training step on each node"
    ),
    prox_mu: float = typer.Option(
        DEFAULTS.prox_mu,
        "--prox-mu",
        help="FedProx's mu: each node's local training is pulled toward the global (0: off)",
    ),
    transfer_weight: float = typer.Option(
        DEFAULTS.transfer_weight,
        "--transfer-weight",
        help="weight of each node's cross-node loss on the program encoder: the delivered "
        "experts' mixture ranking its own records (0: off)",
    ),
    personal_epochs: int = typer.Option(
        DEFAULTS.personal_epochs,
        "--personal-epochs",
        help="epochs each node fine-tunes a personal, never-sent copy of the encoder and its "
        "expert, in the run's last round (every round with --rounds 0; 0: off)",
    ),
    min_nodes: int = typer.Option(
        DEFAULTS.min_nodes, "--min-nodes", help="nodes needed to start a round"
    ),
    round_timeout: float = typer.Option(
        DEFAULTS.round_timeout, "--round-timeout", help="seconds per round"
    ),
    wait_nodes: float = typer.Option(
        DEFAULTS.wait_nodes,
        "--wait-nodes",
        help="seconds a round waits for --min-nodes nodes before it starts with fewer",
    ),
    seed: int = typer.Option(
        DEFAULTS.seed, "--seed", help="seed of the first global model and the nodes' training"
    ),
    round_interval: float = typer.Option(
        DEFAULTS.round_interval,
        "--round-interval",
        help="seconds from one round's start to the next's, at least",
    ),
    idle_probe: float = typer.Option(
        DEFAULTS.idle_probe,
        "--idle-probe",
        help="after a round with nothing new (no new records, no tuning, no newcomer), "
        "the longest wait before the next; 0: a round every --round-interval",
    ),
    aggregation: str = typer.Option(
        DEFAULTS.aggregation,
        "--aggregation",
        help="fedavg, trimmed, median or krum (robust to bad nodes)",
    ),
    clip: float = typer.Option(DEFAULTS.clip, "--clip", help="clip each update's L2 norm (0: off)"),
    trim: float = typer.Option(DEFAULTS.trim, "--trim", help="trimmed: fraction cut at each end"),
    krum_f: int = typer.Option(DEFAULTS.krum_f, "--krum-f", help="krum: nodes assumed malicious"),
    server_optimizer: str = typer.Option(
        DEFAULTS.server_optimizer,
        "--server-optimizer",
        help="the server's step on the nodes' average change: "
        "sgd (FedAvg at --server-lr 1) or adam (FedAdam)",
    ),
    server_lr: float = typer.Option(
        DEFAULTS.server_lr, "--server-lr", help="the server's step size"
    ),
    matched_global: bool = typer.Option(
        DEFAULTS.matched_global,
        "--matched-global/--latest-global",
        help="send a node without an expert of its own the global its experts were trained on",
    ),
    similarity_steps: int = typer.Option(
        DEFAULTS.similarity_steps,
        "--similarity-steps",
        help="after each average, steps fitting the hardware similarity on the nodes' "
        "reported rank agreement with the experts they checked (0: off)",
    ),
    probes: str = typer.Option(
        DEFAULTS.probes,
        "--probes",
        help="the public probe programs (features only; server/distillation.py) for "
        "--similarity-source probes, --distill-steps and --teacher-epochs: suite (the shipped "
        "set), an .npz file (simoe-agent probes build) or none",
    ),
    distill_steps: int = typer.Option(
        DEFAULTS.distill_steps,
        "--distill-steps",
        help="after each average, steps distilling the averaged program encoder toward the "
        "nodes' encoders and experts on the probes (FedDF; 0: off)",
    ),
    similarity_source: str = typer.Option(
        DEFAULTS.similarity_source,
        "--similarity-source",
        help="what the similarity fit follows: reported (the nodes' agreements) or probes "
        "(how alike their experts rank the probes)",
    ),
    teacher_epochs: int = typer.Option(
        DEFAULTS.teacher_epochs,
        "--teacher-epochs",
        help="epochs per round each node trains a teacher on its own records alone; it sends "
        "the teacher's scores on the probes (one float per probe program; 0: off)",
    ),
    teacher_distill_steps: int = typer.Option(
        DEFAULTS.teacher_distill_steps,
        "--teacher-distill-steps",
        help="after each average, steps distilling the averaged program encoder toward the "
        "nodes' teacher scores on the probes (0: off; needs --teacher-epochs)",
    ),
    teacher_balance: bool = typer.Option(
        DEFAULTS.teacher_balance,
        "--teacher-balance",
        help="weight each node's teacher so each hardware cluster counts about alike "
        "(needs --teacher-distill-steps)",
    ),
    newcomer_distill_steps: int = typer.Option(
        DEFAULTS.newcomer_distill_steps,
        "--newcomer-distill-steps",
        help="steps distilling the copy of the global served to newcomers (nodes with no "
        "records yet) toward the nodes' teacher scores on the probes (0: off; needs "
        "--teacher-epochs)",
    ),
    newcomer_teachers: str = typer.Option(
        DEFAULTS.newcomer_teachers,
        "--newcomer-teachers",
        help="whose teacher scores the newcomers' copy follows: all (every node's) or sent "
        "(those of the experts the newcomer is sent)",
    ),
    state_dir: StateDir = None,
    verbose: Verbose = False,
) -> None:
    """Start the SuperLink (TLS, node auth, persistent) and the SiMoE run; Ctrl-C stops both."""
    import signal
    import threading
    import time

    from server.superlink import Certs, SuperLink, check_certs, init_certs, submit_run

    directory = (state_dir or default_state_dir()).expanduser().resolve()
    run_config = ServerRunConfig.from_options(
        registry=str(directory / "registry.sqlite"),
        num_rounds=rounds,
        k_experts=k_experts,
        epochs=epochs,
        local_batch=local_batch,
        prox_mu=prox_mu,
        transfer_weight=transfer_weight,
        personal_epochs=personal_epochs,
        min_nodes=min_nodes,
        round_timeout=round_timeout,
        wait_nodes=wait_nodes,
        seed=seed,
        round_interval=round_interval,
        idle_probe=idle_probe,
        aggregation=aggregation,
        clip=clip,
        trim=trim,
        krum_f=krum_f,
        server_optimizer=server_optimizer,
        server_lr=server_lr,
        matched_global=matched_global,
        similarity_steps=similarity_steps,
        probes=probes,
        distill_steps=distill_steps,
        similarity_source=similarity_source,
        teacher_epochs=teacher_epochs,
        teacher_distill_steps=teacher_distill_steps,
        teacher_balance=teacher_balance,
        newcomer_distill_steps=newcomer_distill_steps,
        newcomer_teachers=newcomer_teachers,
    )
    # the rules across settings were checked by ServerRunConfig; the file system's here
    if run_config.probes:  # a missing or malformed probe file: refused now, in one line
        from simoe_model.probe_file import load_probes

        load_probes(run_config.probes)
    state_folder(directory)
    if registry_path(directory).exists():  # a damaged or foreign registry: refused now
        open_registry(directory).close()
    if certs_dir is not None:
        certs = Certs(certs_dir / "ca.pem", certs_dir / "server.pem", certs_dir / "server.key")
        missing = [str(p) for p in (certs.ca, certs.cert, certs.key) if not p.exists()]
        if missing:
            raise BadInputError(f"--certs {certs_dir}: missing {', '.join(missing)}")
    else:
        certs = init_certs(directory / "certs")
    check_certs(certs)
    link = SuperLink(directory, host=host, port=port, certs=certs)
    stop = threading.Event()
    # installed before the SuperLink starts: a SIGTERM while starting still stops it
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: stop.set())  # its terminal closed: stop its children
    with console.status(f"starting the SuperLink on {link.address}"):
        link.start()
    try:
        close_cut_rounds(directory)  # a killed predecessor's (its processes are stopped now)
        if stop.is_set():
            return
        run_id = submit_run(directory, link.address, certs.ca, run_config)
        console.print(f"SuperLink on {link.address} (TLS, node auth); run {run_id}")
        console.print(f"nodes: simoe-agent enroll --server {link.address} --ca {certs.ca} ...")
        console.print(f"watch: simoe-server rounds --state-dir {directory}")
        reported: set[int] = set()
        run_ids = {run_id}
        last_alive = time.monotonic()
        while not stop.wait(5.0):
            if link.process is not None and link.process.poll() is not None:
                raise RunFailure(f"the SuperLink exited ({link.process.returncode})")
            link.record()  # its ServerApps come and go: a successor must find them all
            if link.serverapp_running():
                last_alive = time.monotonic()
            elif time.monotonic() - last_alive > 90:  # Flower ended the run: start it again
                run_id = submit_run(directory, link.address, certs.ca, run_config)
                run_ids.add(run_id)
                last_alive = time.monotonic()
                console.print(f"the SiMoE run had ended (no ServerApp); started run {run_id}")
            path = registry_path(directory)
            if path.exists():
                with open_registry(directory) as registry:
                    ours = finished_rounds_of(registry.rounds(), run_ids)
                for info in ours:
                    if info.round not in reported:
                        console.print(
                            f"round {info.round}: {info.status}, {info.replied} replied, "
                            f"{info.rejected} rejected, {info.failed} failed, "
                            f"model v{info.global_version}"
                        )
                        reported.add(info.round)
                if rounds and len(ours) >= rounds:
                    break
    except KeyboardInterrupt:
        pass
    finally:
        link.stop()
        close_cut_rounds(directory)  # the ServerApp is gone: a round it ran ends here
        console.print("SuperLink stopped")


def finished_rounds_of(infos: Sequence[RoundInfo], run_ids: Collection[str]) -> list[RoundInfo]:
    """The finished rounds of these runs (this `start`'s). Round numbers continue across
    runs on one state directory, so a second `start` begins at the last number + 1; the
    rounds of earlier starts were printed by them, and `--rounds N` counts this one's."""
    return [r for r in infos if r.run_id in run_ids and r.status != "running"]


def run_numbers(infos: Sequence[RoundInfo]) -> dict[str, int]:
    """Each run's number on this state directory (1: the first), in the order of its first
    round: Flower's run ids are 64-bit numbers, too long for a table."""
    numbers: dict[str, int] = {}
    for info in sorted(infos, key=lambda r: r.round):
        numbers.setdefault(info.run_id, len(numbers) + 1)
    return numbers


def close_cut_rounds(directory: Path) -> None:
    """Rounds that no ServerApp runs any more, marked `interrupted` (not left `running`).

    Called by `start` when its processes are stopped (a clean stop, and a killed
    predecessor's at the next start), so `status` and `watch` never show a round
    that will not end."""
    from server.registry import Registry

    path = registry_path(directory)
    if not path.exists():
        return
    try:
        with Registry(path) as registry:
            cut = registry.close_interrupted_rounds()
    except (RunFailure, BadInputError) as exc:  # a full disk: the next start marks them
        console.print(f"rounds left running in the registry: {exc}")
        return
    if cut:
        console.print(f"round {', '.join(map(str, cut))}: cut short by the stop, interrupted")


@app.command()
def watch(
    state_dir: StateDir = None,
    interval: float = typer.Option(2.0, "--interval", help="seconds between refreshes"),
    once: bool = typer.Option(False, "--once", help="print one frame and exit"),
    verbose: Verbose = False,
) -> None:
    """A live view of the fleet: nodes, last contact, the round, experts, rejections."""
    from schemas.cli import Seconds, checked
    from server.watch import watch as watch_fleet

    checked("--interval", interval, Seconds)
    open_registry(state_dir).close()  # no registry, a damaged or foreign one: one line now
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the last frame stays on screen
        watch_fleet(registry_path(state_dir), console, interval=interval, once=once)


@app.command("round")
def round_now(
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """Ask the running server for a round now (an idle federation waits for news)."""
    from server.idle import request_round

    path = registry_path(state_dir)
    open_registry(state_dir).close()  # a registry of a server, checked
    request = request_round(path)
    if as_json:
        print_json({"requested": str(request)})
    else:
        console.print(f"round requested ({request}); the server starts it within seconds")


@app.command()
def check(
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """SQLite's full integrity_check of the registry (every open runs the cheap quick_check)."""
    with open_registry(state_dir) as registry:
        result = registry.integrity("integrity_check")
        data = {"registry": str(registry.path), "integrity_check": result}
    if as_json:
        print_json(data)
    else:
        print_table("registry check", ["", "value"], list(data.items()))
    if result != "ok":
        raise RunFailure(
            f"{data['registry']}: the registry is damaged ({result}); restore a backup"
        )


def _print_backup(title: str, result: Any, as_json: bool) -> None:
    if as_json:
        print_json(result.model_dump())
        return
    rows = [("from", result.source), ("to", result.target), ("bytes", result.bytes)]
    rows += [("integrity_check", result.integrity)]
    rows += [(f"rows: {table}", count) for table, count in result.rows.items()]
    if result.kept:
        rows.append(("replaced registry kept in", result.kept))
    print_table(title, ["", "value"], rows)


@app.command()
def backup(
    file: Path = typer.Argument(..., help="the backup file to write (must not exist)"),
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """Copy the registry to FILE with SQLite's online backup; safe while the server runs."""
    from server.backup import backup as backup_registry

    path = registry_path(state_dir)
    if not path.exists():
        raise BadInputError(f"{path}: no registry (start the server or pass --state-dir)")
    _print_backup("registry backup", backup_registry(path, file), as_json)


@app.command()
def restore(
    file: Path = typer.Argument(..., help="a backup written by `simoe-server backup`"),
    state_dir: StateDir = None,
    as_json: Json = False,
    verbose: Verbose = False,
) -> None:
    """Put a backup back as the registry; the registry it replaces is kept beside it."""
    from server.backup import restore as restore_registry

    _print_backup("registry restored", restore_registry(file, registry_path(state_dir)), as_json)


app.command()(demo)


def main() -> None:
    from schemas.protocol import prepare_flower_env
    from simoe_model import tvm_compat

    prepare_flower_env()
    tvm_compat.install()
    run_cli(lambda: app(standalone_mode=True), "simoe-server")
