"""Federation helps: each node's federated cost model against one trained on its own data.

    python -m bench.federation.federation_helps --protocol validation|test [--seeds 0,1,2]
        [--rounds R --epochs E --central-epochs R*E] [--server-optimizer adam --server-lr L]
        [--local-batch B] [--prox-mu M] [--transfer-weight W] [--k-experts K] [--matched-global]
        [--similarity-steps N] [--personal-epochs E] [--teacher-epochs E
        --teacher-distill-steps N [--teacher-balance] [--newcomer-distill-steps N
        [--newcomer-teachers all|sent]]] [--tag T]
    python -m bench.federation.federation_helps --compare OUT/federation_helps_*.json --tag T
    python -m bench.federation.federation_helps --data DIR [DIR2 ...]     # the fleet dataset
    python -m bench.federation.federation_helps --synthetic     # synthetic fleet (development)

One federation per seed (the protocol's seeds with --protocol), all with the same
settings; the variant options are the deployment's own (TrainInstruction, SiMoEStrategy).

A real federation runs in this process: the ServerApp's round loop
(`server.server_app.run_rounds`), the real `SiMoEStrategy` and expert registry
(SQLite), over the in-process Grid (`server.inprocess.InProcessGrid`), which hands
every message (deep-copied, as serialization would) to the agent's real ClientApp
(`agent.client_app:app`) over each node's state directory. Only the SuperLink
processes and the network are left out (a real round costs ~30 s of process starts
on 2 cores; tests/test_federation_processes.py covers that path).

Each node is one simulated GPU of the fleet dataset. Its tasks (workloads) are
split once (fixed seed) into TRAIN and HELD-OUT tasks; its state directory's store
holds the candidates of its train tasks only (features and latencies copied from
the fleet store; traces replaced by the candidate id, which training never reads).
By default each node draws its own split (nodes of a real fleet tune different
workloads); `--same-split` holds out the same tasks everywhere (no node has seen them).

After the rounds, on each node's held-out tasks (all candidates), the top-1 score
(TenSet definition, simoe_model.metrics) of:
- federated: the node's model.pt as the ClientApp left it (global shared parts, the
  experts the server sent, its own expert): what the node tunes with; with
  `--personal-epochs E` (the deployment's ServerRunConfig.personal_epochs) the node's
  personal.pt instead: in the last round its ClientApp fine-tuned a never-sent copy of the
  program encoder and its own expert on its own records for E epochs (the averaged model's
  score and the fine-tune's CPU seconds are kept beside it);
- own-only: the same architecture trained on the node's own train tasks alone (one
  `train_expert` per round, as its ClientApp), no federation; under the protocol for the
  budget chosen on validation (`--select-own-only`, bench/protocol.py OWN_ONLY_RULE, kept in
  bench/federation_own_only.json), otherwise for the federation's rounds x epochs.

Newcomers: GPUs that are none of the nodes enrol at the last round (hello, then a
train message with no local data: served the global model and its k nearest
experts) and are scored zero-shot on the test split of bench/transfer/offline_transfer.py
(same seed, same shuffle: each task's candidates after its first 64), next to the
offline SiMoE figure for the same GPUs (docs/results/offline_transfer.json).

Each newcomer's similarity (issue 23): the final model's cos(z_newcomer, z_node) over the
nodes against the measured agreement of their latencies (mean per-task Spearman on the
candidates both have), and the Spearman between the two; `--similarity-steps N` turns on
the server's fit of the hardware encoder on the nodes' agreements, N steps per round (the
deployment's ServerRunConfig.similarity_steps; default 0, off).

Everything here is SIMULATED: latencies come from the analytical GPU model.
Writes OUT/federation_helps[_<protocol>][_<tag>].{json,md}: every seed's report and the
summary over seeds (bench/federation/federation_report.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from bench import reporting
from bench.federation.federation_baselines import (
    OWN_ONLY_CHOICE,
    central_model,
    own_only_budget,
    own_only_model,
    select_own_only,
    similarity_against_agreement,
    top1,
)
from bench.federation.federation_report import (  # noqa: F401 (the report's names, as they were here)
    GOAL_NEWCOMER_GAP,
    FederationHelpsReport,
    FederationHelpsSeeds,
    NewcomerRow,
    NodeRow,
    choose_variant,
    choose_variant_r3,
    markdown,
    markdown_seeds,
    offline_figures,
    variants_markdown,
    with_offline_figures,
)
from bench.federation.fleet import (
    FleetGPU,
    load_gpus,
    protocol_gpus,
    protocol_units,
    split_tasks,
    synthetic_gpus,
)
from bench.federation.inprocess_federation import InProcessFederation
from bench.reporting import load_average
from schemas import BadInputError  # noqa: E402
from server.run_config import ServerRunConfig

# the training GPUs of docs/results/offline_transfer.md (every generation, Maxwell to
# Hopper, and the embedded Jetsons), so the newcomers compare with that benchmark
DEFAULT_NODES = (
    "m40,titanx,p4,p100,1080,1080ti,titanv,v100,t4,a2,a10,a40,3090,a100-40gb,a100-80gb,"
    "l4,l40s,h100-sxm,h200,jetson-nano,tx2,orin"
)
# the held-out GPUs of docs/results/offline_transfer.md: never nodes here
DEFAULT_NEWCOMERS = "k80,titanxp,2080ti,a30,4090,h100-pcie,xavier"
# the second round's pick, scored on test: the third round's rule weighs its variants against it
R3_INCUMBENT = "da10r2_sim0_pers24"

Say = Callable[[str], None]
# the settings the command line gives as they are (its options of those names)
OPTIONS = [
    "rounds",
    "epochs",
    "k_experts",
    "held_out_fraction",
    "same_split",
    "central_epochs",
    "local_batch",
    "prox_mu",
    "transfer_weight",
    "server_lr",
    "server_optimizer",
    "matched_global",
    "similarity_steps",
    "personal_epochs",
    "distill_steps",
    "similarity_source",
    "probe_file",
    "teacher_epochs",
    "teacher_distill_steps",
    "teacher_balance",
    "newcomer_distill_steps",
    "newcomer_teachers",
    "threads",
]
# the public probe set the server distils on (ServerRunConfig.probes): this many candidates of
# each suite task, drawn with this fixed seed (the same for every run and seed)
PROBES_PER_TASK = 32
PROBE_SEED = 0


class FederationHelpsSettings(BaseModel):
    """How one federation-helps run federates and scores (the command line builds it once;
    every seed's run takes it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rounds: int = 4
    epochs: int = 3  # local epochs per round
    k_experts: int = 3  # experts the server sends each node
    held_out_fraction: float = 1 / 3  # of each node's tasks, for scoring
    same_split: bool = False  # the same held-out tasks on every node
    held_out_tasks: tuple[str, ...] | None = None  # the protocol's, on every node
    offline: dict[str, float] = {}  # offline SiMoE zero-shot top-1 per newcomer, to compare
    central_epochs: int = 0  # 0: no central reference
    # the federation's training variant (TrainInstruction / the strategy's server step)
    local_batch: int = 8
    prox_mu: float = 0.0
    transfer_weight: float = 0.0  # the node's cross-node loss on the encoder (0: off)
    server_lr: float = 1.0  # 1 with sgd: plain FedAvg, the strategy class's default
    server_optimizer: Literal["sgd", "adam"] = "sgd"
    matched_global: bool = False
    # the server's similarity fit after each average (ServerRunConfig.similarity_steps; 0: off).
    # This bench's defaults are its own, fixed (the deployment's moved to the validated pick on
    # 2026-12-02), so that every recorded command still means what it meant
    similarity_steps: int = 0
    # each node's personal fine-tune in the last round (ServerRunConfig.personal_epochs; 0: off)
    personal_epochs: int = 0
    # FedDF on public probes (ServerRunConfig.distill_steps; 0: off) and where the similarity
    # fit's agreements come from (ServerRunConfig.similarity_source)
    distill_steps: int = 0
    similarity_source: Literal["reported", "probes"] = "reported"
    # an external probe file (e.g. `simoe-agent probes build`'s) instead of the bench's own
    # (write_probe_file: the fleet's candidates); its sha256 goes into the report
    probe_file: str = ""
    probe_file_sha256: str = ""
    # each node's own-records teacher and the server's distillation toward its probe scores
    # (ServerRunConfig.teacher_epochs, teacher_distill_steps; 0: off)
    teacher_epochs: int = 0
    teacher_distill_steps: int = 0
    teacher_balance: bool = False  # each hardware cluster's teachers weigh alike
    # the copy of the global served to newcomers, distilled toward the teachers' scores
    # (ServerRunConfig.newcomer_distill_steps; 0: off)
    newcomer_distill_steps: int = 0
    newcomer_teachers: Literal["all", "sent"] = "all"  # every node's, or the sent experts'
    own_only_epochs: int | None = None  # None: the federation's rounds x epochs
    fleet: str | None = None  # the protocol fleet's digest (bench.protocol.fleet_hashes)
    # what the report says about the run
    command: str = ""
    data: str = ""
    threads: int = 1

    def server_config(self, seed: int, probes: str = "") -> ServerRunConfig:
        """The server's settings for this run: those of its fields of the same names; the
        rest are the defaults, which build the strategy as `SiMoEStrategy` built directly is
        (no clipping, FedAvg's rule). A bad value is one line naming its option."""
        shared = set(type(self).model_fields) & set(ServerRunConfig.model_fields)
        # no probe set unless the run needs one (then its own: see run_federation_helps)
        fields = self.model_dump(include=shared)
        return ServerRunConfig.from_options(seed=seed, probes=probes, **fields)

    @property
    def needs_probes(self) -> bool:
        return (
            self.distill_steps > 0 or self.similarity_source == "probes" or self.teacher_epochs > 0
        )


def write_probe_file(path: Path, nodes: Sequence[FleetGPU]) -> Path:
    """The server's public probe set (server.distillation's .npz): for each suite task,
    PROBES_PER_TASK candidate programs drawn with PROBE_SEED, program features only.

    Why from the fleet's candidates: every unit of the fleet holds the same sample of TVM's
    design space for each public workload of the suite (the same candidates, but a few a
    GPU could not run), which is what a server would sample itself with TVM. Only their
    features are read, never a latency. They are the programs the nodes train on and the
    newcomers are scored on (other candidates of the same sample): the probes carry no
    label of any unit, and the central reference trains on those programs with labels."""
    from simoe_model.features import pack_rows
    from simoe_model.probe_file import save_probes

    rng = np.random.default_rng(PROBE_SEED)
    tasks = []
    for task in nodes[0].dataset.tasks:
        if len(task) < 2:
            continue
        chosen = sorted(rng.choice(len(task), size=min(PROBES_PER_TASK, len(task)), replace=False))
        tasks.append(pack_rows([task.features[i] for i in chosen]))
    save_probes(path, tasks)
    return path


def probe_file_digest(path: str, distill_steps: int, similarity_source: str) -> str:
    """The sha256 of `--probe-file` after checking it loads ('' when none is given);
    BadInputError, one line, for a bad file or one no option would use."""
    if not path:
        return ""
    if distill_steps <= 0 and similarity_source != "probes":
        raise BadInputError(
            "--probe-file is read only with --distill-steps, --teacher-epochs or "
            "--similarity-source probes"
        )
    import hashlib

    from simoe_model.probe_file import load_probes

    load_probes(path)  # a missing or malformed file: refused now, in one line
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# the settings a report carries as they are: its fields of those names (but central_epochs: 0
# when no central reference was trained)
REPORTED = set(FederationHelpsSettings.model_fields) & set(FederationHelpsReport.model_fields)
REPORTED -= {"central_epochs"}


# -- the run ------------------------------------------------------------------------------------
def run_federation_helps(
    nodes: Sequence[FleetGPU],
    newcomers: Sequence[FleetGPU],
    work_dir: Path,
    settings: FederationHelpsSettings,
    *,
    seed: int = 0,
    say: Say = lambda _text: None,
) -> FederationHelpsReport:
    """Federate `nodes` for `settings.rounds`, newcomers join at the last round; score
    everyone."""
    from agent.node_state import NodeState
    from bench.transfer.offline_transfer import split_device
    from server.aggregation import make_strategy
    from server.similarity import model_similarity

    rounds, epochs = settings.rounds, settings.epochs
    held_out_tasks = settings.held_out_tasks
    if rounds < 2:
        raise BadInputError("--rounds must be at least 2 (newcomers join at the last round)")
    if len(nodes) < 2:
        raise BadInputError("a federation needs at least 2 nodes")
    overlap = {n.name for n in nodes} & {n.name for n in newcomers}
    if overlap:
        raise BadInputError(f"newcomers must not be nodes: {sorted(overlap)}")
    probes = ""  # the probe file the run needs, written below unless given
    if settings.needs_probes:
        probes = settings.probe_file or str(work_dir / "probes.npz")
    server = settings.server_config(seed, probes)  # checked before anything is written
    load_start = load_average()
    started = time.perf_counter()
    work_dir.mkdir(parents=True, exist_ok=True)
    if settings.needs_probes and not settings.probe_file:
        write_probe_file(work_dir / "probes.npz", nodes)

    splits = {
        g.name: split_tasks(
            g, settings.held_out_fraction, seed, settings.same_split, held_out_tasks
        )
        for g in nodes
    }
    federation = InProcessFederation(work_dir)
    federation.add_members([(gpu, splits[gpu.name][0]) for gpu in nodes])
    say(f"{len(nodes)} nodes written; federation: {rounds} rounds, {epochs} epochs each")

    registry = federation.open_registry()
    strategy = make_strategy(server, registry, model_similarity)
    fed_started = time.perf_counter()

    def report_round(outcome) -> None:  # noqa: ANN001
        say(
            f"round {outcome.round}: {len(outcome.accepted)} trained, {len(outcome.served)} "
            f"served, {len(outcome.rejected)} rejected, {outcome.failed} failed "
            f"({time.perf_counter() - fed_started:.0f} s)"
        )
        if outcome.rejected or outcome.failed:
            raise RuntimeError(f"round {outcome.round}: {outcome.rejected or 'a node failed'}")

    last = federation.run(strategy, seed, rounds, newcomers, report_round)
    federation_wall = time.perf_counter() - fed_started
    # by name: the registry lists traffic by node key, drawn afresh at each enrolment
    traffic = {
        registry.node(row["node_key"])["name"]: {"down": row["bytes_down"], "up": row["bytes_up"]}
        for row in registry.traffic(last.round)
    }
    traffic = dict(sorted(traffic.items()))
    registry.close()

    own_started = time.perf_counter()
    node_rows = []
    for gpu in nodes:
        train, held = splits[gpu.name]
        node = NodeState(federation.member_dir(gpu.name))
        averaged = top1(node.load_model(), held, gpu.dataset.hardware_vector)
        personal = node.load_personal_model()
        federated = (
            averaged if personal is None else top1(personal, held, gpu.dataset.hardware_vector)
        )
        if settings.personal_epochs and personal is None:
            raise RuntimeError(f"{gpu.name}: asked for a personal model, it holds none")
        cpu = time.process_time()
        alone = (
            own_only_model(gpu, train, rounds, epochs, seed, settings.local_batch)
            if settings.own_only_epochs is None  # the federation's rounds x epochs
            else own_only_model(gpu, train, settings.own_only_epochs, 1, seed, settings.local_batch)
        )
        own_cpu = time.process_time() - cpu
        own = top1(alone, held, gpu.dataset.hardware_vector)
        state = node.federation_state()
        row = NodeRow(
            gpu=gpu.name,
            train_tasks=len(train),
            held_out_tasks=len(held),
            train_candidates=sum(len(t) for t in train),
            held_out_candidates=sum(len(t) for t in held),
            experts=state.experts,
            own_only_top1=own,
            federated_top1=federated,
            federated_global_top1=None if personal is None else averaged,
            personal_cpu_s=None if personal is None else state.personal_seconds,
            own_only_cpu_s=own_cpu,
        )
        say(f"{gpu.name}: own-only {own:.3f}, federated {federated:.3f} ({row.difference:+.3f})")
        node_rows.append(row)
    own_wall = time.perf_counter() - own_started

    offline, central_epochs = settings.offline, settings.central_epochs
    central = None
    if central_epochs > 0 and newcomers:
        say(f"central reference: one SiMoE on the nodes' train data, {central_epochs} epochs")
        central = central_model(nodes, splits, central_epochs, seed)
    newcomer_rows = []
    for gpu in newcomers:
        node = NodeState(federation.newcomer_dir(gpu.name))
        model = node.load_model()
        similarity = similarity_against_agreement(model, gpu, nodes)
        test = split_device(gpu.dataset, seed).test
        hv = gpu.dataset.hardware_vector
        row = NewcomerRow(
            gpu=gpu.name,
            experts=node.federation_state().experts,
            test_tasks=len(test),
            zero_shot_top1=top1(model, test, hv),
            zero_shot_top1_all=top1(model, gpu.dataset.tasks, hv),
            offline_top1=offline.get(gpu.name),
            central_top1=None if central is None else top1(central, test, hv),
            **similarity,
        )
        say(
            f"newcomer {gpu.name}: zero-shot {row.zero_shot_top1:.3f} (experts {row.experts}), "
            f"similarity vs agreement rho {row.similarity_rank_correlation}"
        )
        newcomer_rows.append(row)
    offline_values = [r.offline_top1 for r in newcomer_rows if r.offline_top1 is not None]
    return FederationHelpsReport(
        **settings.model_dump(include=REPORTED),
        nodes=node_rows,
        newcomers=newcomer_rows,
        seed=seed,
        split=(
            f"the protocol's held-out tasks on every node: {', '.join(held_out_tasks)}"
            if held_out_tasks
            else "same held-out tasks on every node"
            if settings.same_split
            else "per node"
        ),
        offline_zero_shot_top1=(
            float(np.mean(offline_values))
            if offline_values and len(offline_values) == len(newcomer_rows)
            else None
        ),
        central_epochs=central_epochs if central is not None else 0,
        bytes_per_node_last_round=traffic,
        federation_wall_s=federation_wall,
        own_only_wall_s=own_wall,
        total_wall_s=time.perf_counter() - started,
        load_average_start=load_start,
        load_average_end=load_average(),
    )


def write_report(report: FederationHelpsReport, out: Path, stem: str = "federation_helps") -> None:
    reporting.write_report(report, markdown, out, stem)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, nargs="+", help="fleet dataset dirs (DIR/<gpu>.sqlite)"
    )
    parser.add_argument("--synthetic", action="store_true", help="a synthetic fleet instead")
    parser.add_argument(
        "--protocol",
        choices=["validation", "test"],
        help="bench/protocol.py: training units federate, this split's units join last, "
        "the protocol's held-out tasks on every node",
    )
    parser.add_argument(
        "--node-split",
        choices=["protocol", "per-node"],
        default="protocol",
        help="with --protocol: the protocol's held-out tasks on every node, or a third of each "
        "node's own tasks drawn per node, which other nodes train on (bench/protocol.py "
        "NODE_SPLIT_RULE)",
    )
    parser.add_argument("--nodes", default=DEFAULT_NODES, help="GPUs that federate")
    parser.add_argument("--newcomers", default=DEFAULT_NEWCOMERS, help="GPUs that join last")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=4, help="epochs per round on each node")
    parser.add_argument("--k-experts", type=int, default=3)
    parser.add_argument("--held-out-fraction", type=float, default=1 / 3)
    parser.add_argument(
        "--same-split", action="store_true", help="hold out the same tasks everywhere"
    )
    parser.add_argument(
        "--seeds",
        help="comma-separated seeds, one federation each (default: the protocol's with "
        "--protocol, else 0)",
    )
    parser.add_argument(
        "--central-epochs",
        type=int,
        default=12,
        help="also train one SiMoE centrally on the nodes' train data (0: skip)",
    )
    parser.add_argument(
        "--local-batch", type=int, default=8, help="tasks per optimizer step on each node"
    )
    parser.add_argument(
        "--prox-mu", type=float, default=0.0, help="FedProx term on the shared encoder (0: off)"
    )
    parser.add_argument(
        "--transfer-weight",
        type=float,
        default=0.0,
        help="each node's cross-node loss on the encoder: the delivered experts' mixture "
        "ranking its records (ServerRunConfig; 0: off)",
    )
    parser.add_argument(
        "--server-lr", type=float, default=1.0, help="server learning rate (1: FedAvg)"
    )
    parser.add_argument(
        "--server-optimizer", choices=["sgd", "adam"], default="sgd", help="adam: FedAdam"
    )
    parser.add_argument(
        "--matched-global",
        action="store_true",
        help="serve a newcomer the global its delivered experts were trained on",
    )
    parser.add_argument(
        "--similarity-steps",
        type=int,
        default=0,
        help="the server's similarity fit steps after each average (ServerRunConfig; 0: off)",
    )
    parser.add_argument(
        "--personal-epochs",
        type=int,
        default=0,
        help="each node's personal fine-tune of encoder and own expert in the last round "
        "(ServerRunConfig; 0: off)",
    )
    parser.add_argument(
        "--distill-steps",
        type=int,
        default=0,
        help="server steps distilling the averaged encoder toward the nodes' on public probes "
        "after each average (ServerRunConfig; 0: off)",
    )
    parser.add_argument(
        "--similarity-source",
        choices=["reported", "probes"],
        default="reported",
        help="the similarity fit's agreements: the nodes' reported ones, or how alike their "
        "experts rank the public probes (ServerRunConfig)",
    )
    parser.add_argument(
        "--teacher-epochs",
        type=int,
        default=0,
        help="epochs per round each node trains its own-records teacher, whose probe scores it "
        "sends (ServerRunConfig; 0: off)",
    )
    parser.add_argument(
        "--teacher-distill-steps",
        type=int,
        default=0,
        help="server steps distilling the averaged encoder toward the teachers' probe scores "
        "after each average (ServerRunConfig; 0: off)",
    )
    parser.add_argument(
        "--teacher-balance",
        action="store_true",
        help="weight each node's teacher by 1 / its summed positive z-similarity to the "
        "teachers, so each hardware cluster counts about alike (ServerRunConfig; needs "
        "--teacher-distill-steps)",
    )
    parser.add_argument(
        "--newcomer-distill-steps",
        type=int,
        default=0,
        help="server steps distilling the copy of the global served to newcomers toward the "
        "teachers' probe scores (ServerRunConfig; 0: off; needs --teacher-epochs)",
    )
    parser.add_argument(
        "--newcomer-teachers",
        choices=["all", "sent"],
        default="all",
        help="whose teacher scores the newcomers' copy follows: every node's, or those of the "
        "experts the newcomer is sent (ServerRunConfig)",
    )
    parser.add_argument(
        "--probe-file",
        default="",
        help="the server's public probe file (e.g. `simoe-agent probes build --out FILE`) "
        "instead of the bench's own drawn from the fleet's candidates; needs --distill-steps "
        "or --similarity-source probes",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", type=Path, help="keep the nodes' state dirs here")
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--tag", default="", help="suffix of the report files")
    reporting.add_render_option(parser)
    parser.add_argument(
        "--compare",
        type=Path,
        nargs="+",
        help="over-seeds reports (.json) to set side by side in OUT/federation_helps_variants"
        "_TAG.md (TAG: --tag); runs nothing",
    )
    parser.add_argument(
        "--select-own-only",
        action="store_true",
        help="choose the own-only baseline's budget on the validation units (bench/protocol.py "
        f"OWN_ONLY_RULE) into {OWN_ONLY_CHOICE.name}, then exit",
    )
    parser.add_argument(
        "--refresh-offline",
        action="store_true",
        help="with --render: take the offline figures from the current offline report",
    )
    args = parser.parse_args(argv)
    from bench import protocol

    if args.compare:
        reports = {
            path.stem.removeprefix("federation_helps_"): reporting.read_report(
                path, FederationHelpsSeeds
            )
            for path in args.compare
        }
        args.out.mkdir(parents=True, exist_ok=True)
        text = variants_markdown(reports)
        # the rule chooses among one fleet's validation runs: the last recorded fleet's
        fleets = [r.runs[0].fleet for r in reports.values() if r.runs[0].fleet]
        among = {
            tag: r
            for tag, r in reports.items()
            if r.runs[0].fleet == (fleets[-1] if fleets else None)
            and "validation split" in r.runs[0].data
            and r.runs[0].split != "per node"  # NODE_SPLIT_RULE's footing chooses nothing
        }
        if among:
            fleet = fleets[-1][:8] if fleets else "not recorded"
            text += (
                f"\nChosen by bench/protocol.py FEDERATION_VARIANT_RULE among the validation "
                f"rows of fleet {fleet} ({', '.join(among)}): {choose_variant(among)}\n"
            )
        # later rounds, each against its incumbent (the second round's pick until the fifth,
        # the fifth's pick for the sixth and seventh), listed first: the rule's last tie-break
        # goes to it
        later = [("Third", "R3", protocol.FEDERATION_VARIANTS_DA10_R3, R3_INCUMBENT),
                 ("Fourth", "R4", protocol.FEDERATION_VARIANTS_DA10_R4, R3_INCUMBENT),
                 ("Fifth", "R5", protocol.FEDERATION_VARIANTS_DA10_R5, R3_INCUMBENT),
                 ("Sixth", "R6", protocol.FEDERATION_VARIANTS_DA10_R6,
                  protocol.FEDERATION_R6_INCUMBENT),
                 ("Seventh", "R7", protocol.FEDERATION_VARIANTS_DA10_R7,
                  protocol.FEDERATION_R7_INCUMBENT),
                 ("Eighth", "R8", protocol.FEDERATION_VARIANTS_DA10_R8,
                  protocol.FEDERATION_R8_INCUMBENT),
                 ("Ninth", "R9", protocol.FEDERATION_VARIANTS_DA10_R9,
                  protocol.FEDERATION_R9_INCUMBENT),
                 ("Tenth", "R10", protocol.FEDERATION_VARIANTS_DA10_R10,
                  protocol.FEDERATION_R10_INCUMBENT)]  # fmt: skip
        for name, rule, variants, incumbent in later:
            listed = [f"validation_{t}" for t in [incumbent, *variants]]
            if any(t in among for t in listed[1:]):
                picked = choose_variant_r3(among, listed, protocol.FEDERATION_R3_MAX_NODE_LOSS)
                text += (
                    f"\n{name} round: chosen by bench/protocol.py FEDERATION_VARIANT_RULE_{rule} "
                    f"among {', '.join(t for t in listed if t in among)}: "
                    f"{picked or 'none qualifies'}\n"
                )
        (args.out / f"federation_helps_variants{'_' + args.tag if args.tag else ''}.md").write_text(
            text
        )
        print(text)
        return
    if args.render:
        if "runs" in json.loads(args.render.read_text()):
            over_seeds = reporting.read_report(args.render, FederationHelpsSeeds)
            args.render.with_suffix(".md").write_text(markdown_seeds(over_seeds))
            return
        report = reporting.read_report(args.render, FederationHelpsReport)
        if args.refresh_offline:
            report = with_offline_figures(report, offline_figures())
            args.render.write_text(report.model_dump_json(indent=1))
        args.render.with_suffix(".md").write_text(markdown(report))
        return

    import torch

    torch.set_num_threads(args.threads)
    node_names = [g for g in args.nodes.split(",") if g]
    newcomer_names = [g for g in args.newcomers.split(",") if g]
    held_out_tasks, fleet_digest = None, None
    own_only_epochs = None  # outside the protocol: the federation's rounds x epochs
    if args.select_own_only:
        seeds = [int(v) for v in args.seeds.split(",")] if args.seeds else list(protocol.SEEDS)
        units = protocol_units("validation", "select")
        choice = select_own_only(
            units, protocol.HELD_OUT_TASKS, seeds, protocol.OWN_ONLY_GRID, args.local_batch,
            say=lambda text: print(text, flush=True),
        )  # fmt: skip
        choice["fleet"] = protocol.fleet_hashes()["digest"]
        choice["command"] = reporting.public_command(
            "federation.federation_helps", sys.argv[1:] if argv is None else argv
        )
        OWN_ONLY_CHOICE.write_text(json.dumps(choice, indent=1) + "\n")
        print(json.dumps({k: choice[k] for k in ("mean_top1", "chosen")}))
        return
    if args.protocol:
        # the own-only budget was chosen on validation (bench/protocol.py OWN_ONLY_RULE)
        fleet_digest = protocol.fleet_hashes()["digest"]
        own_only_epochs = own_only_budget(fleet_digest, OWN_ONLY_CHOICE)
        nodes, newcomers = protocol_gpus(args.protocol)
        fleet = {g.name: g for g in [*nodes, *newcomers]}
        node_names, newcomer_names = [g.name for g in nodes], [g.name for g in newcomers]
        data = f"protocol fleet dataset ({args.protocol} split as newcomers; bench/protocol.py)"
        offline, held_out_tasks = {}, list(protocol.HELD_OUT_TASKS)
        if args.node_split == "per-node":  # NODE_SPLIT_RULE: the nodes' tasks drawn per node
            held_out_tasks = None
            data += ", per-node split"
    elif args.node_split != "protocol":
        parser.error("--node-split per-node is a footing of --protocol")
    elif args.synthetic:
        fleet = synthetic_gpus(12, 12, 48)
        node_names, newcomer_names = list(fleet)[:6], list(fleet)[6:8]
        data, offline = "synthetic fleet (simoe_model.synthetic)", {}
    elif args.data:
        fleet = load_gpus(args.data, node_names, newcomer_names)
        data = f"fleet dataset, {len(args.data)} dir(s), one store per simulated GPU"
        offline = offline_figures()
    else:
        parser.error("give --data DIR or --synthetic")
    if args.seeds:
        seeds = [int(v) for v in args.seeds.split(",") if v.strip()]
    else:
        seeds = list(protocol.SEEDS) if args.protocol else [0]
    command = reporting.public_command(
        "federation.federation_helps", sys.argv[1:] if argv is None else argv
    )
    probe_sha = probe_file_digest(
        args.probe_file, args.distill_steps or args.teacher_epochs, args.similarity_source
    )
    settings = FederationHelpsSettings(
        **{name: getattr(args, name) for name in OPTIONS},
        probe_file_sha256=probe_sha,
        held_out_tasks=held_out_tasks,
        offline=offline,
        own_only_epochs=own_only_epochs,
        fleet=fleet_digest,
        command=command,
        data=data,
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="federation_helps-"))
    if args.work and work.exists():
        shutil.rmtree(work)
    runs = []
    try:
        for seed in seeds:
            runs.append(
                run_federation_helps(
                    [fleet[g] for g in node_names],
                    [fleet[g] for g in newcomer_names],
                    work / f"seed{seed}",
                    settings,
                    seed=seed,
                    say=lambda text: print(text, flush=True),
                )
            )
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    stem = "federation_helps_synthetic" if args.synthetic else "federation_helps"
    stem = f"federation_helps_{args.protocol}" if args.protocol else stem
    stem += f"_{args.tag}" if args.tag else ""
    over_seeds = FederationHelpsSeeds(command=command, runs=runs)
    previous = args.out / f"{stem}.json"
    if previous.exists():  # a report adds runs, it never drops one: the one it held is kept
        before = reporting.read_report(previous, FederationHelpsSeeds)
        over_seeds.earlier_runs = [
            *before.earlier_runs,
            before.model_copy(update={"earlier_runs": []}),
        ]
    reporting.write_report(over_seeds, markdown_seeds, args.out, stem)
    print(markdown_seeds(over_seeds))


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "federation_helps")
