"""Federation overhead: round time and bytes per node for 4, 16 and 64 nodes.

The real server side runs: `server.server_app.run_rounds` with `SiMoEStrategy` (weighted
FedAvg of the shared arrays, expert registry in SQLite, similarity by the shared encoder,
the k most similar experts delivered to each node), over the in-process Grid
(`server.inprocess.InProcessGrid`: every message is deep-copied as serialization would).
The nodes are stand-ins that answer at once with payloads of the real sizes: the
shared arrays of a SiMoE model, one expert's arrays, a hardware profile and metrics.
So the round time is the federation's own overhead (server aggregation, registry,
similarity, message handling), without node-side training or network transfer time;
the bytes are each message's content as Flower serialises it for the wire
(`schemas.protocol.payload_bytes`, the count the registry's traffic table keeps too).
`bench.run --sections federation` runs it as a section; alone, with torch's thread count:

    python -m bench.federation.federation_overhead [--nodes 4,16,64] [--rounds 3] [--threads N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

from schemas import HardwareProfile
from schemas.messages import REC_CONFIG, WEIGHT_METRIC, NodeHello, TrainInstruction
from schemas.protocol import node_reply, payload_bytes
from server.run_config import DEFAULTS, ServerRunConfig


def stand_in_node(name: str, profile: HardwareProfile, seed: int) -> ClientApp:
    """A node that 'trains' instantly and answers with real-sized SiMoE payloads."""
    from simoe_model.hardware import hardware_vector
    from simoe_model.model import SiMoE, expert_arrays, shared_arrays

    model = SiMoE()
    model.ensure_expert(name, hardware_vector(profile))
    rng = np.random.default_rng(seed)
    shared = {
        k: v + rng.normal(0, 1e-3, v.shape).astype(v.dtype) for k, v in shared_arrays(model).items()
    }
    own = expert_arrays(model, name)
    hello = NodeHello(name=name, key_fingerprint=f"bench-{name}-fingerprint", profile=profile)
    app = ClientApp()

    def hello_of(has_model: bool) -> NodeHello:
        return hello.model_copy(update={"has_model": has_model})

    @app.query("hello")
    def _hello(message: Message, _context: Context) -> Message:
        return Message(node_reply(hello_of(False)), reply_to=message)

    @app.query("refused")
    def _refused(message: Message, _context: Context) -> Message:
        return Message(RecordDict(), reply_to=message)

    @app.train()
    def _train(message: Message, _context: Context) -> Message:
        TrainInstruction.model_validate_json(
            str(message.content.config_records[REC_CONFIG]["instruction"])
        )
        metrics = {WEIGHT_METRIC: 100.0, "shared-loss": 0.5}
        content = node_reply(hello_of(True), shared=shared, own_expert=own, metrics=metrics)
        return Message(content, reply_to=message)

    return app


def measure(
    n_nodes: int,
    profiles: list[HardwareProfile],
    rounds: int,
    config: ServerRunConfig | None = None,
) -> dict[str, Any]:
    """Run `rounds` rounds with `n_nodes` stand-in nodes; time and bytes per round.

    `config`: the strategy the deployment builds from it (`make_strategy`: with the
    defaults, the similarity fit on the shipped probe set's agreements every round);
    None: `SiMoEStrategy` as built directly (FedAvg, no fit)."""
    from server.aggregation import make_strategy
    from server.inprocess import InProcessGrid
    from server.registry import Registry
    from server.server_app import run_rounds
    from server.similarity import initial_shared_arrays, model_similarity
    from server.strategy import SiMoEStrategy

    down: dict[int, int] = {}
    up: dict[int, int] = {}

    class CountingGrid(InProcessGrid):
        def push_messages(self, messages: Any) -> Any:
            messages = list(messages)
            for m in messages:
                down[m.metadata.dst_node_id] = down.get(m.metadata.dst_node_id, 0) + payload_bytes(
                    m.content
                )
            return super().push_messages(messages)

    grid = CountingGrid()

    def on_reply(reply: Message) -> None:
        if reply.has_content():
            src = reply.metadata.src_node_id
            up[src] = up.get(src, 0) + payload_bytes(reply.content)

    grid.on_reply = on_reply
    for i in range(n_nodes):
        profile = profiles[i % len(profiles)]
        grid.add_node(1000 + i, stand_in_node(f"node-{i:03d}", profile, i), {})
    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="simoe-fed-bench-") as tmp:
        registry = Registry(Path(tmp) / "registry.sqlite")
        strategy = (
            SiMoEStrategy(registry, model_similarity, k_experts=3, epochs=2)
            if config is None
            else make_strategy(config, registry, model_similarity)
        )
        last = [time.perf_counter()]

        def on_round(_outcome: Any) -> None:
            now = time.perf_counter()
            times.append(now - last[0])
            last[0] = now

        started = time.perf_counter()
        last[0] = started
        run_rounds(
            grid,
            strategy,
            initial_shared_arrays(0),
            num_rounds=rounds,
            wait_nodes_s=0,
            on_round=on_round,
        )
        total = time.perf_counter() - started
        registry.close()
    per_round_down = sum(down.values()) / n_nodes / rounds
    per_round_up = sum(up.values()) / n_nodes / rounds
    return {
        "nodes": n_nodes,
        "rounds": rounds,
        "round_s": times,
        "median_round_s": float(np.median(times)) if times else None,
        "steady_round_s": float(np.median(times[1:])) if len(times) > 1 else None,
        "total_s": total,
        "bytes_down_per_node_per_round": per_round_down,
        "bytes_up_per_node_per_round": per_round_up,
    }


def run_section(node_counts: list[int], rounds: int, profiles: list[HardwareProfile]) -> dict:
    from simoe_model.model import SiMoE, parameter_count, shared_arrays

    model = SiMoE()
    shared = shared_arrays(model)
    return {
        "engine": "in-process Grid (server.inprocess) + real SiMoEStrategy/Registry/run_rounds",
        "shared_arrays_bytes": int(sum(a.nbytes for a in shared.values())),
        "model_parameters": parameter_count(model),
        "profiles_from": sorted({p.device for p in profiles}),
        "results": [measure(n, profiles, rounds) for n in node_counts],
        # what a server started with `simoe-server start`'s defaults adds per round
        "deployment_defaults": [measure(n, profiles, rounds, DEFAULTS) for n in node_counts],
    }


def main(argv: list[str] | None = None) -> None:
    import torch

    from bench.compile import compile_data, presets
    from bench.report.report_md import federation_md
    from bench.report.report_model import FederationSection

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="4,16,64", help="node counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: its default)")
    parser.add_argument("--work", type=Path, default=Path("runs/federation_overhead"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    gpus = presets.QUICK.train_gpus[:6]  # as bench.run's section
    profiles = list(compile_data.profile_vectors(gpus, args.work / "profiles").values())
    counts = [int(n) for n in args.nodes.split(",")]
    section = FederationSection.model_validate(run_section(counts, args.rounds, profiles))
    print(f"torch threads: {torch.get_num_threads()}")
    print("\n".join(federation_md(section)))


if __name__ == "__main__":
    from schemas.errors import run_cli

    run_cli(main, "federation_overhead")
