"""`simoe-server demo`: a whole federation on one machine, then a zero-shot newcomer.

1. Node side (separate processes, `python -m agent.enroll ...`): simulated GPUs of
   different generations get local data (one fleet dataset, one store per GPU) and
   this machine's CPU is profiled as one more node (no data: served zero-shot).
2. Server side: a few federated rounds through the in-process Grid (the ServerApp's
   round loop and the agent's ClientApp, loaded by its component reference
   `agent.client_app:app` the way a SuperNode loads it) - the in-process Grid, not
   SuperLink processes, because a real round costs ~30 s of process starts here.
3. A GPU type none of them is enrolls: it gets the global model and the experts of
   the most similar hardware in its first round, then tunes a network of the suite
   with that zero-shot model (`simoe-agent tune --cost-model simoe`), next to
   MetaSchedule's default cost model at the same budget and at its full budget.

Everything on a simulated GPU is simulated: latencies come from the analytical model.
Compile time is the real search wall time plus the modelled time the measurements
would take on the real GPU (a CUDA compile and timed runs each), both also shown apart.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from schemas import RunFailure

Step = Callable[[str], None]


class DemoRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: str
    cost_model: str
    trials_per_task: int
    search_wall_s: float
    modelled_measure_s: float | None = None  # what the measurements would cost on the GPU
    network_latency_s: float | None
    simulated: bool

    @property
    def compile_s(self) -> float:
        """Search wall time plus the modelled measurement time: a real GPU's compile time."""
        return self.search_wall_s + (self.modelled_measure_s or 0.0)


class DemoReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    out_dir: str
    gpus: list[str]
    cpu_node: bool
    new_gpu: str
    network: str
    rounds: int
    experts_delivered: list[str]
    federation_wall_s: float
    rows: list[DemoRow]
    total_wall_s: float
    grid: str = "in-process Grid (ServerApp round loop + agent ClientApp in this process)"


def _agent(args: list[str], timeout: float = 900, program: str | None = None) -> Any:
    """Run a node-side step in its own process; its stdout is one JSON document."""
    command = [program or sys.executable, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise RunFailure(f"{' '.join(args[:3])}: {lines[-1] if lines else result.returncode}")
    return json.loads(result.stdout)


def _simoe_agent() -> str:
    candidate = Path(sys.executable).with_name("simoe-agent")
    return str(candidate) if candidate.exists() else "simoe-agent"


def _load_client_app(reference: str = "agent.client_app:app") -> Any:
    module, _, attr = reference.partition(":")
    return getattr(importlib.import_module(module), attr)


def _network_latency(result: dict[str, Any]) -> float | None:
    """Sum over the network's tasks of weight x best latency (the runtime of one inference)."""
    total = 0.0
    for task in result["tasks"]:
        if task.get("best_latency_s") is None:
            return None
        total += float(task["weight"]) * float(task["best_latency_s"])
    return total


def _tune(state_dir: Path, device: str, network: str, trials: int, cost_model: str) -> dict:
    return _agent(
        [
            "tune",
            "--model",
            network,
            "--device",
            device,
            "--trials",
            str(trials),
            "--cost-model",
            cost_model,
            "--no-baseline",
            "--json",
            "--state-dir",
            str(state_dir),
        ],
        timeout=3600,
        program=_simoe_agent(),
    )


def run_demo(
    out: Path,
    *,
    gpus: str = "k80,v100,t4,a100-40gb",
    cpu: bool = True,
    new_gpu: str = "a10",
    network: str = "tiny_mlp",
    workloads: str = "tiny",
    per_workload: int = 32,
    rounds: int = 3,
    budget: int = 8,
    full_budget: int = 32,
    k_experts: int = 3,
    step: Step | None = None,
) -> DemoReport:
    from server.inprocess import InProcessGrid
    from server.registry import Registry
    from server.server_app import run_rounds
    from server.similarity import initial_shared_arrays, model_similarity
    from server.strategy import SiMoEStrategy

    say = step or (lambda _text: None)
    started = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    enroll = ["-m", "agent.enroll"]

    say(f"node side: local data for simulated {gpus} ({workloads}, {per_workload}/workload)")
    nodes = _agent([*enroll, "demo-fleet", str(out), gpus, workloads, str(per_workload)])
    if cpu:
        say("node side: profiling this machine's CPU as one more node")
        nodes.append(_agent([*enroll, "local-node", str(out / "nodes" / "cpu"), "cpu", "cpu"]))

    client_app = _load_client_app()
    grid = InProcessGrid()
    for index, node in enumerate(nodes):
        grid.add_node(1000 + index, client_app, {"state-dir": node["state_dir"]})
    registry = Registry(out / "server" / "registry.sqlite")
    strategy = SiMoEStrategy(registry, model_similarity, k_experts=k_experts, epochs=2)
    fed_started = time.perf_counter()
    say(f"federation: {len(nodes)} nodes, {rounds} rounds")
    run_rounds(
        grid,
        strategy,
        initial_shared_arrays(0),
        num_rounds=rounds,
        wait_nodes_s=0,
        on_round=lambda o: say(
            f"round {o.round}: {len(o.accepted)} trained, {len(o.served)} served, "
            f"{len(o.rejected)} rejected, model v{o.global_version}"
        ),
    )

    say(f"newcomer: sim:{new_gpu} enrolls and gets the nearest experts")
    new_dir = out / "nodes" / f"new-{new_gpu}"
    newcomer = _agent([*enroll, "local-node", str(new_dir), f"new-{new_gpu}", f"sim:{new_gpu}"])
    grid.add_node(2000, client_app, {"state-dir": newcomer["state_dir"]})
    [outcome] = run_rounds(grid, strategy, {}, num_rounds=1, wait_nodes_s=0)
    delivered = outcome.delivered.get(str(newcomer["key_fingerprint"]), [])
    federation_wall = time.perf_counter() - fed_started
    registry.close()

    rows = []
    device = str(newcomer["device"])
    plans = [
        ("SiMoE zero-shot", "simoe", budget, new_dir),
        ("MetaSchedule default, same budget", "xgb", budget, out / "baseline-same"),
        ("MetaSchedule default, full budget", "xgb", full_budget, out / "baseline-full"),
    ]
    for label, cost_model, trials, state_dir in plans:
        if state_dir != new_dir:
            _agent([*enroll, "local-node", str(state_dir), f"base-{new_gpu}", device])
        say(f"tuning {network} on {device}: {label} ({trials} trials/task)")
        result = _tune(state_dir, device, network, trials, cost_model)
        rows.append(
            DemoRow(
                method=label,
                cost_model=cost_model,
                trials_per_task=trials,
                search_wall_s=float(result["search_wall_s"]),
                modelled_measure_s=result.get("modelled_measure_s"),
                network_latency_s=_network_latency(result),
                simulated=bool(result["simulated"]),
            )
        )
    report = DemoReport(
        out_dir=str(out),
        gpus=gpus.split(","),
        cpu_node=cpu,
        new_gpu=new_gpu,
        network=network,
        rounds=rounds,
        experts_delivered=delivered,
        federation_wall_s=federation_wall,
        rows=rows,
        total_wall_s=time.perf_counter() - started,
    )
    (out / "demo.json").write_text(report.model_dump_json(indent=2))
    return report
