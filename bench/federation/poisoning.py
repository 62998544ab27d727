"""Poisoned nodes: what lying nodes do to the fleet's model, with and without the robust option.

    python -m bench.federation.poisoning --data DIR [DIR2 ...]  # the fleet dataset (DIR/*.sqlite)
    python -m bench.federation.poisoning --synthetic            # a synthetic fleet (development)

A federation of 12 simulated GPUs runs in this process, as federation_helps runs one
(bench/federation/inprocess_federation.py): the ServerApp's round loop
(`server.server_app.run_rounds`), the real strategy the CLI's `--aggregation` picks
(`server.aggregation.make_strategy`) and registry (SQLite), over the in-process Grid, which
hands every message (deep-copied) to the agent's real ClientApp over each node's state
directory. Only SuperLink processes and the network are left out (the chaos benchmark,
bench/reliability/chaos.py, runs those).

In an attacked run, three of the 12 nodes lie, every round:
- 2 nodes send a bad shared update (the attack of the run): `signflip` (their honest
  change against the global model, negated and scaled x10), `random` (every entry drawn
  N(0, 1), a broken node's garbage of the right shapes), or `stale` (the shared arrays
  of their first round, resent every round after);
- 1 node sends an expert that ranks everything backwards (its trained expert with the
  output layer negated), and trains the shared parts honestly.
The bad replies are finite and well-shaped, so the strategy's checks pass them: only the
aggregation rule and the nodes' expert check stand between them and the fleet.

Each run is scored on the 9 honest nodes' held-out tasks (top-1, TenSet definition) with
the model the ClientApp left, and on newcomers (GPUs that are none of the nodes) that
join at the last round without measurements: zero-shot top-1 on the test split of
bench/transfer/offline_transfer.py (same seed). A newcomer that received the backwards expert is
also scored after the node's expert check (`simoe_model.expert_check.drop_refuted_experts`, the
function the ClientApp runs on delivered experts) given its first N measurements per
task from the offline benchmark's pool (never the test candidates).

Rows: the clean run (FedAvg, expert check off: the reference); the clean run with each
robust rule and the check on (what robustness costs when nobody lies); and each attack
under FedAvg without the check, and under each robust rule with the check.
Everything here is SIMULATED (latencies from the analytical GPU model).
Writes OUT/poisoning.json and OUT/poisoning.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from bench import reporting
from bench.federation.federation_baselines import top1
from bench.federation.fleet import FleetGPU, load_gpus, split_tasks, synthetic_gpus
from bench.federation.inprocess_federation import InProcessFederation
from bench.federation.poisoning_report import (
    PoisoningReport,
    RunRow,
    markdown,
    merge_reports,
    write_report,
)
from bench.reporting import load_average
from schemas import BadInputError  # noqa: E402
from server.run_config import ServerRunConfig

ATTACKS = ("signflip", "random", "stale")
RULES = ("fedavg", "trimmed", "median", "krum")
DEFAULT_NODES = "m40,titanx,p100,1080ti,v100,t4,a10,a40,3090,a100-40gb,l4,h100-sxm"
DEFAULT_LIARS = "p100,3090"  # send bad shared updates
DEFAULT_BACKWARDS = "1080ti"  # sends a backwards expert (titanxp's nearest hardware)
DEFAULT_NEWCOMERS = "titanxp,2080ti,a30,4090"
SCALE = 10.0

Say = Callable[[str], None]


# -- the lying nodes -----------------------------------------------------------------------
class LyingNode:
    """The real ClientApp, whose train reply is then altered the way `kind` says."""

    def __init__(self, kind: str, seed: int) -> None:
        from agent.client_app import app

        self.app = app
        self.kind = kind
        self.rng = np.random.default_rng(seed)
        self.first: dict[str, np.ndarray] | None = None

    def __call__(self, message, context):  # noqa: ANN001, ANN204 - Message, Context -> Message
        from schemas.messages import MSG_TRAIN, REC_OWN_EXPERT, REC_SHARED
        from server.strategy import arrays_to_record, record_to_arrays

        received = None
        if message.metadata.message_type == MSG_TRAIN:
            received = record_to_arrays(message.content.array_records[REC_SHARED])
        reply = self.app(message, context)
        content = reply.content
        if received is None or REC_SHARED not in content.array_records:
            return reply
        if self.kind == "backwards":
            own = record_to_arrays(content.array_records[REC_OWN_EXPERT])
            content[REC_OWN_EXPERT] = arrays_to_record(backwards_expert(own))
            return reply
        honest = record_to_arrays(content.array_records[REC_SHARED])
        content[REC_SHARED] = arrays_to_record(self.corrupt(honest, received))
        return reply

    def corrupt(
        self, honest: dict[str, np.ndarray], received: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        if self.kind == "signflip":
            return {
                k: (received[k] - SCALE * (v - received[k])).astype(v.dtype)
                for k, v in honest.items()
            }
        if self.kind == "random":
            return {k: self.rng.standard_normal(v.shape).astype(v.dtype) for k, v in honest.items()}
        if self.kind == "stale":
            if self.first is None:
                self.first = {k: v.copy() for k, v in honest.items()}
            return {k: v.copy() for k, v in self.first.items()}
        raise ValueError(f"unknown attack {self.kind!r}")


def backwards_expert(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same expert with its output negated: it ranks every program backwards."""
    out = dict(arrays)
    for key in ("head.2.weight", "head.2.bias"):
        out[key] = (-arrays[key]).astype(arrays[key].dtype)
    return out


# -- one run ----------------------------------------------------------------------------------
class PoisoningSettings(BaseModel):
    """Who federates, who lies and how the federation runs: the same for every (attack,
    rule, seed) run of a report (the command line builds it once; the report carries it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: tuple[str, ...]
    liars: tuple[str, ...]  # send bad updates under an attack
    backwards: str  # its expert is reversed under an attack
    newcomers: tuple[str, ...]  # join at the last round, scored zero-shot
    rounds: int
    epochs: int
    k_experts: int
    trim: float  # trimmed mean: cut at each end
    krum_f: int  # Krum: nodes assumed malicious
    clip: float | None  # every change clipped to this L2 norm (None: off)
    check_measurements: int  # a newcomer's measurements per task to check experts with

    def server_config(self, rule: str, seed: int) -> ServerRunConfig:
        """The server's settings of one run: `rule` aggregates; plain FedAvg's step, no
        personal fine-tune, similarity fit or probe set, as the bench's recorded runs."""
        return ServerRunConfig(
            personal_epochs=0,
            similarity_steps=0,
            similarity_source="reported",
            probes="",
            aggregation=rule,  # type: ignore[arg-type]
            clip=self.clip or 0.0,
            trim=self.trim,
            krum_f=self.krum_f,
            k_experts=self.k_experts,
            epochs=self.epochs,
            seed=seed,
            server_optimizer="sgd",
            server_lr=1.0,
        )


def run_once(
    fleet: dict[str, FleetGPU],
    settings: PoisoningSettings,
    work: Path,
    *,
    attack: str,
    rule: str,
    expert_check: bool,
    seed: int,
    say: Say,
) -> RunRow:
    """One federation of `settings.nodes` under `attack` (none: honest), aggregated by `rule`,
    newcomers checking delivered experts or not; scored on the honest nodes and newcomers."""
    from agent.node_state import NodeState
    from bench.transfer.offline_transfer import split_device
    from server.aggregation import make_strategy
    from server.similarity import model_similarity
    from simoe_model.expert_check import drop_refuted_experts
    from simoe_model.task_data import DeviceDataset

    names, liars, backwards = settings.nodes, settings.liars, settings.backwards
    newcomers = settings.newcomers
    started = time.perf_counter()
    if work.exists():
        shutil.rmtree(work)
    check = {"check-experts": "true" if expert_check else "false"}
    splits = {n: split_tasks(fleet[n], 1 / 3, seed, False) for n in names}
    lying: dict[str, LyingNode] = {}
    for index, name in enumerate(names):
        if attack != "none" and name in liars:
            lying[name] = LyingNode(attack, seed * 100 + index)
        elif attack != "none" and name == backwards:
            lying[name] = LyingNode("backwards", seed)
    federation = InProcessFederation(work, check)
    federation.add_members([(fleet[name], splits[name][0]) for name in names], lying)
    registry = federation.open_registry()
    strategy = make_strategy(settings.server_config(rule, seed), registry, model_similarity)
    set_aside: dict[str, int] = {}
    counts = {"failed": 0, "rejected": 0}

    def on_round(outcome) -> None:  # noqa: ANN001 - RoundOutcome
        counts["failed"] += outcome.failed
        counts["rejected"] += len(outcome.rejected)
        for key in outcome.set_aside:
            node = registry.node(key)
            who = node["name"] if node else key
            set_aside[who] = set_aside.get(who, 0) + 1

    federation.run(strategy, seed, settings.rounds, [fleet[name] for name in newcomers], on_round)
    registry.close()

    honest = [n for n in names if attack == "none" or (n not in liars and n != backwards)]
    node_top1, dropped = {}, {}
    for name in honest:
        node = NodeState(federation.member_dir(name))
        hv = fleet[name].dataset.hardware_vector
        node_top1[name] = top1(node.load_model(), splits[name][1], hv)
        dropped[name] = int(node.federation_state().last_metrics.get("experts-dropped", 0))
    zero_shot, experts, receivers = {}, {}, {}
    for name in newcomers:
        node = NodeState(federation.newcomer_dir(name))
        gpu = fleet[name]
        split = split_device(gpu.dataset, seed)
        model = node.load_model()
        zero_shot[name] = top1(model, split.test, gpu.dataset.hardware_vector)
        experts[name] = node.federation_state().experts
        if backwards in experts[name] and attack != "none":
            n = settings.check_measurements
            first = [t.subset(list(range(min(n, len(t))))) for t in split.pool]
            mine = DeviceDataset(gpu.device, gpu.dataset.hardware_vector, first)
            drop = drop_refuted_experts(model, list(experts[name]), mine)
            receivers[name] = {
                "without_check": zero_shot[name],
                "with_check": top1(model, split.test, gpu.dataset.hardware_vector),
                "dropped_backwards": float(backwards in drop),
                "dropped_other": float(len([d for d in drop if d != backwards])),
            }
    row = RunRow(
        attack=attack,
        rule=rule,
        expert_check=expert_check,
        seed=seed,
        nodes_top1=float(np.mean(list(node_top1.values()))),
        node_top1=node_top1,
        newcomer_top1=float(np.mean(list(zero_shot.values()))) if zero_shot else float("nan"),
        newcomer_zero_shot=zero_shot,
        newcomer_experts=experts,
        backwards_receivers=receivers,
        set_aside=set_aside,
        experts_dropped=dropped,
        failed=counts["failed"],
        rejected=counts["rejected"],
        wall_s=time.perf_counter() - started,
    )
    say(
        f"seed {seed} {attack:>8} {rule:>7} check={'on' if expert_check else 'off'}: nodes "
        f"{row.nodes_top1:.3f}, newcomers {row.newcomer_top1:.3f}, failed {row.failed}, "
        f"set aside {sum(set_aside.values())} ({row.wall_s:.0f} s)"
    )
    shutil.rmtree(work, ignore_errors=True)
    return row


def plan(attacks: Sequence[str], rules: Sequence[str]) -> list[tuple[str, str, bool]]:
    """(attack, rule, expert check) of every run of one seed."""
    robust = [r for r in rules if r != "fedavg"]
    runs = [("none", "fedavg", False)] + [("none", r, True) for r in robust]
    for attack in attacks:
        runs += [(attack, "fedavg", False)] + [(attack, r, True) for r in robust]
    return runs


# -- the command ---------------------------------------------------------------------------
def _names(text: str) -> list[str]:
    return [n for n in text.split(",") if n]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, nargs="+", help="fleet dataset dirs")
    parser.add_argument("--synthetic", action="store_true", help="a synthetic fleet instead")
    parser.add_argument("--nodes", default=DEFAULT_NODES)
    parser.add_argument("--liars", default=DEFAULT_LIARS, help="nodes sending bad updates")
    parser.add_argument("--backwards", default=DEFAULT_BACKWARDS, help="its expert is reversed")
    parser.add_argument("--newcomers", default=DEFAULT_NEWCOMERS)
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--k-experts", type=int, default=3)
    parser.add_argument("--trim", type=float, default=0.2)
    parser.add_argument("--krum-f", type=int, default=2)
    parser.add_argument("--clip", type=float, default=0.0, help="clip every change (0: off)")
    parser.add_argument("--check-measurements", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--tag", default="")
    reporting.add_render_option(parser)
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="join reports of other seeds (same settings) into OUT"
    )
    args = parser.parse_args(argv)
    if args.render:
        reporting.render(args.render, PoisoningReport, markdown)
        return
    if args.merge:
        report = merge_reports([reporting.read_report(p, PoisoningReport) for p in args.merge])
        write_report(report, args.out, "poisoning" + (f"_{args.tag}" if args.tag else ""))
        print(markdown(report))
        return
    attacks, rules = _names(args.attacks), _names(args.rules)
    unknown = sorted(set(attacks) - set(ATTACKS)) + sorted(set(rules) - set(RULES))
    if unknown:
        raise BadInputError(f"unknown attack or rule: {unknown}")
    if args.rounds < 2:
        raise BadInputError("--rounds must be at least 2 (newcomers join at the last round)")
    seeds = [int(s) for s in _names(args.seeds)]

    import torch

    torch.set_num_threads(args.threads)
    names, liars, newcomers = _names(args.nodes), _names(args.liars), _names(args.newcomers)
    backwards = args.backwards
    if args.synthetic:
        fleet = synthetic_gpus(16, 9, 96)
        every = list(fleet)
        names, newcomers = every[:12], every[12:14]
        liars, backwards = names[:2], names[2]
        data = "synthetic fleet (simoe_model.synthetic)"
    elif args.data:
        fleet = load_gpus(args.data, names, newcomers)
        data = f"fleet dataset, {len(args.data)} dir(s), one store per simulated GPU"
    else:
        parser.error("give --data DIR or --synthetic")
    bad = [n for n in [*liars, backwards] if n not in names]
    if bad:
        raise BadInputError(f"liars and the backwards node must be nodes: {bad}")
    if len(names) < 10:
        raise BadInputError(f"the benchmark needs at least 10 nodes, got {len(names)}")
    settings = PoisoningSettings(
        nodes=tuple(names),
        liars=tuple(liars),
        backwards=backwards,
        newcomers=tuple(newcomers),
        rounds=args.rounds,
        epochs=args.epochs,
        k_experts=args.k_experts,
        trim=args.trim,
        krum_f=args.krum_f,
        clip=args.clip or None,
        check_measurements=args.check_measurements,
    )
    load_start = load_average()
    started = time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="poisoning-"))
    runs = []
    try:
        for seed in seeds:
            for attack, rule, check in plan(attacks, rules):
                row = run_once(
                    fleet,
                    settings,
                    work / "run",
                    attack=attack,
                    rule=rule,
                    expert_check=check,
                    seed=seed,
                    say=lambda text: print(text, flush=True),
                )
                runs.append(row)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report = PoisoningReport(
        **settings.model_dump(),
        command=reporting.public_command(
            "federation.poisoning", sys.argv[1:] if argv is None else argv
        ),
        data=data,
        seeds=seeds,
        runs=runs,
        total_wall_s=time.perf_counter() - started,
        load_average_start=load_start,
        load_average_end=load_average(),
    )
    stem = "poisoning_synthetic" if args.synthetic else "poisoning"
    write_report(report, args.out, stem + (f"_{args.tag}" if args.tag else ""))
    print(markdown(report))


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "poisoning")
