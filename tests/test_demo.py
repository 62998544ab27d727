"""`simoe-server demo`'s checks and its process helpers (the demo itself: test_real_loop)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas import BadInputError, RunFailure
from schemas.messages import RoundInfo
from server.cli import app
from server.demo import DemoPlan, daemon_job_ended, fleet_ready
from server.demo_report import DemoReport, DemoRow, failed_tasks, network_latency
from server.processes import Background, cli

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpus", "t4,a10", "--new-gpu", "a10"], "none of them is"),
        (["--budget", "0"], "--budget"),
        (["--budget", "8", "--full-budget", "8"], "larger than --budget"),
        (["--gpus", "", "--no-cpu"], "fleet is empty"),
        (["--fleet-largest-tasks", "-1"], "--fleet-largest-tasks"),
        (["--cpu-largest-tasks", "-2"], "--cpu-largest-tasks"),
        (["--fleet-seed", "-1"], "--fleet-seed must be at least 0"),
        (["--fleet-seed", str(2**31)], "--fleet-seed must be at most"),
        (["--share-top-k", "3"], "needs --share-schedules"),
        (["--share-schedules", "--share-top-k", "9"], "--share-top-k must be in 1..8"),
    ],
)
def test_bad_plans_are_refused_before_anything_starts(
    tmp_path: Path, args: list[str], words: str
) -> None:
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "d"), *args])
    assert result.exit_code != 0 and words in str(result.exception)
    assert not (tmp_path / "d").exists()  # nothing started, nothing written


def test_an_unknown_gpu_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    started = time.monotonic()
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "d"), "--gpus", "k80,nosuch"])
    assert result.exit_code != 0 and "unknown GPU 'nosuch'" in str(result.exception)
    assert not (tmp_path / "d").exists()  # nothing started, nothing written
    assert time.monotonic() - started < 60  # one `simoe-agent dataset gpus --check`


def test_an_unrelated_out_dir_is_never_deleted(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    result = runner.invoke(app, ["demo", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "not an earlier demo" in str(result.exception)
    assert (tmp_path / "mine.txt").read_text() == "keep"


def test_plan_defaults_are_a_valid_demo() -> None:
    plan = DemoPlan(gpus=["k80", "v100", "t4", "a100-40gb"])
    plan.check()
    # the CPU node (real builds and runs) tunes fewer tasks than the simulated GPUs
    assert plan.largest_tasks("cpu") == 1 and plan.largest_tasks("sim:k80") == 2


def _enroll_commands(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plan: DemoPlan
) -> dict[str, list[str]]:
    """The `simoe-agent enroll` command lines the demo runs for a fleet node and for the
    newcomer, and the fleet node's `submit` (the agent calls recorded, no process started)."""
    import server.demo as demo_module

    calls: list[list[str]] = []

    def agent(self: demo_module.Demo, args: list[str], node: str, **kw: object) -> dict:
        calls.append(args)
        return {"key_fingerprint": "0" * 16, "registration": "registered", "global_version": 1}

    class NoProcess:
        def __init__(self, *args: object, **kw: object) -> None:
            pass

    class SilentUI:
        def event(self, text: str) -> None:
            pass

        status = show = event

    monkeypatch.setattr(demo_module.Demo, "agent", agent)
    monkeypatch.setattr(demo_module, "Background", NoProcess)
    demo = demo_module.Demo(tmp_path, plan, SilentUI())
    demo.bring_up_fleet()
    fleet = [c for c in calls if c[0] == "enroll"]
    [submit] = [c for c in calls if c[0] == "submit"]
    calls.clear()
    demo.newcomer()
    newcomer = [c for c in calls if c[0] == "enroll"]
    assert len(fleet) == 1 and len(newcomer) == 1
    return {"fleet": fleet[0], "newcomer": newcomer[0], "submit": submit}


def test_the_demo_enrolls_every_node_and_the_newcomer_with_sharing_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    off = _enroll_commands(monkeypatch, tmp_path / "off", DemoPlan(gpus=["t4"], cpu=False))
    assert not any("--share" in arg for cmd in off.values() for arg in cmd)  # opt-in
    on = DemoPlan(gpus=["t4"], cpu=False, share_schedules=True, share_top_k=2)
    commands = _enroll_commands(monkeypatch, tmp_path / "on", on)
    for command in (commands["fleet"], commands["newcomer"]):
        assert command[-3:] == ["--share-schedules", "--share-top-k", "2"]


def _option(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def test_the_fleet_searches_at_the_plans_seed_and_population(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One fleet seed is one draw of the fleet's records (`--fleet-seed`: another draw)."""
    default = _enroll_commands(monkeypatch, tmp_path / "a", DemoPlan(gpus=["t4"], cpu=False))
    assert _option(default["submit"], "--seed") == "0"
    assert _option(default["submit"], "--population") is None  # the product's default
    plan = DemoPlan(gpus=["t4"], cpu=False, fleet_seed=3, fleet_population=16)
    drawn = _enroll_commands(monkeypatch, tmp_path / "b", plan)["submit"]
    assert (_option(drawn, "--seed"), _option(drawn, "--population")) == ("3", "16")


def test_the_demo_option_turns_sharing_on_in_its_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    import server.demo as demo_module

    plans: list[DemoPlan] = []

    def run(out: Path, plan: DemoPlan, *args: object, **kw: object) -> None:
        plans.append(plan)
        raise SystemExit(0)

    monkeypatch.setattr(demo_module, "run_demo_with_progress", run)
    runner.invoke(app, ["demo", "--share-schedules", "--share-top-k", "4", "--fleet-seed", "2"])
    runner.invoke(app, ["demo"])
    assert [(p.share_schedules, p.share_top_k) for p in plans] == [(True, 4), (False, None)]
    assert [p.fleet_seed for p in plans] == [2, 0]


def test_network_latency_is_the_weighted_sum() -> None:
    tasks = [{"weight": 2, "best_latency_s": 1e-6}, {"weight": 1, "best_latency_s": 3e-6}]
    assert network_latency({"tasks": tasks}) == pytest.approx(5e-6)
    assert network_latency({"tasks": [*tasks, {"weight": 1, "best_latency_s": None}]}) is None


def test_a_row_without_latency_names_the_tasks_that_had_no_candidate() -> None:
    tasks = [
        {"task_name": "fused_matmul_add", "weight": 4, "best_latency_s": 2e-6},
        {"task_name": "fused_matmul3_add2", "weight": 1, "best_latency_s": None},
    ]
    row = DemoRow(
        method="MetaSchedule, same budget", cost_model="xgb", trials_per_task=8,
        search_wall_s=1.0, network_latency_s=network_latency({"tasks": tasks}),
        failed_tasks=failed_tasks({"tasks": tasks}), simulated=True,
    )  # fmt: skip
    assert row.latency_text() == "no latency: no successful candidate for fused_matmul3_add2"
    ok = row.model_copy(update={"network_latency_s": 8e-6, "failed_tasks": []})
    assert ok.latency_text() == "8.00 us"


def test_cli_failure_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunFailure, match="simoe-agent status: error: .*not a valid agent config"):
        (tmp_path / "agent.json").write_text("{")
        cli("simoe-agent", ["status", "--state-dir", str(tmp_path)])


def test_background_process_group_is_stopped(tmp_path: Path) -> None:
    script = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)']); print('up', flush=True); time.sleep(60)"
    )
    process = Background("sleeper", sys.executable, ["-c", script], tmp_path / "log")
    process.check()
    process.stop(timeout=5)
    assert not process.alive()
    with pytest.raises(RunFailure, match="sleeper exited"):
        process.check()


def _row(method: str, latency: float | None) -> DemoRow:
    return DemoRow(
        method=method, cost_model="xgb", trials_per_task=8, search_wall_s=1.0,
        network_latency_s=latency, failed_tasks=[] if latency else ["fused_dense"],
        simulated=True,
    )  # fmt: skip


def test_the_newcomer_bench_reports_each_seed_and_the_geometric_mean() -> None:
    from bench.federation.demo_newcomer import (
        NewcomerReport,
        SeedRun,
        geomean_interval,
        markdown,
        ratios,
    )

    runs = [
        SeedRun(
            seed=s,
            rows=[_row("s", a), _row("m8", b), _row("m32", c)],
            model_used="fed",
            cpu_s=1.0,
            wall_s=1.0,
        )  # fmt: skip
        for s, (a, b, c) in enumerate([(1e-4, 2e-4, 1e-4), (2e-4, 1e-4, 1e-4), (1e-4, None, 5e-5)])
    ]
    report = NewcomerReport(
        command="c", demo={}, network="bert_layer", tuned_tasks=["t"], new_gpu="a10",
        budget=8, full_budget=32, seeds=[0, 1, 2], runs=runs, total_wall_s=1.0,
        load_average_start=[1.0], load_average_end=[1.0],
    )  # fmt: skip
    assert ratios(report, 1) == [2.0, 0.5]  # the seed without a latency is left out
    mean, low, high = geomean_interval([2.0, 0.5])
    assert mean == pytest.approx(1.0) and low < 1.0 < high
    text = markdown(report)
    assert "SiMoE faster in 1 of 2 seeds" in text
    assert "seed 2, m8: no latency: no successful candidate for fused_dense" in text


@pytest.mark.parametrize("args", [["--seeds", "0,1,2"], ["--data", ".", "--seeds", "0,1,2"]])
def test_the_newcomer_bench_refuses_a_directory_that_is_no_demo(args: list[str]) -> None:
    from bench.federation.demo_newcomer import main
    from schemas import BadInputError

    with pytest.raises(BadInputError, match="--data"):
        main(args)


def test_the_shared_ranking_bench_needs_a_demo_whose_newcomer_was_offered_schedules(
    tmp_path: Path,
) -> None:
    from bench.federation.demo_shared_ranking import main
    from schemas import BadInputError

    with pytest.raises(BadInputError, match="--data"):
        main(["--data", str(tmp_path)])
    report = DemoReport(
        out_dir=str(tmp_path), server_dir="", nodes=[], network="bert_layer", fleet_trials=16,
        new_gpu="a10", experts_delivered=[], rounds=1, federation_wall_s=1.0, rows=[],
        total_wall_s=1.0, cpu_s=1.0, load_average=(0.0, 0.0), report="", plot=None,
    )  # fmt: skip
    (tmp_path / "demo.json").write_text(report.model_dump_json())
    with pytest.raises(BadInputError, match="no offered schedules"):  # a demo without sharing
        main(["--data", str(tmp_path)])
    with pytest.raises(BadInputError, match="--data DIR"):  # neither input
        main([])
    with pytest.raises(BadInputError, match="no seed-"):  # not a demo_newcomer --work dir
        main(["--seeds", str(tmp_path)])


def test_the_demo_runs_on_the_deployments_defaults_but_for_its_named_overrides() -> None:
    from server.run_config import DEFAULTS

    plan = DemoPlan(gpus=["k80", "v100"])
    # the fleet has tuned longer than the newcomer's 4x baseline, as a deployment's would
    assert plan.fleet_trials > plan.full_budget
    config = plan.server_config()
    changed = {name for name, value in config if value != getattr(DEFAULTS, name)}
    assert changed == {"min_nodes", "round_interval"}  # FedAdam, its lr, its epochs: defaults
    overrides = plan.server_overrides()
    assert [line.split()[0] for line in overrides] == ["--min-nodes", "--round-interval"]
    assert all("(default " in line for line in overrides)

    # the newcomers' distilled copy, opt-in as in the product: named with why, checked
    copy = DemoPlan(gpus=["k80", "v100"], teacher_epochs=2, newcomer_distill_steps=600)
    assert [line.split()[:2] for line in copy.server_overrides()][2:] == [
        ["--teacher-epochs", "2"],
        ["--newcomer-distill-steps", "600"],
    ]
    with pytest.raises(BadInputError, match="--newcomer-distill-steps needs --teacher-epochs"):
        DemoPlan(gpus=["k80"], newcomer_distill_steps=600).check()


def _round(number: int, started_at: str, status: str = "done") -> RoundInfo:
    return RoundInfo(
        round=number, run_id="1", started_at=started_at, finished_at=None, sampled=2,
        replied=2, rejected=0, failed=0, global_version=number, status=status,
    )  # fmt: skip


def test_the_newcomer_waits_for_each_expert_trained_after_its_tuning_not_for_a_round_count() -> (
    None
):
    rounds = [_round(n, f"2026-01-01T00:0{n}:00+00:00") for n in range(1, 9)]
    tuned = {"k80": "2026-01-01T00:01:30+00:00", "cpu": "2026-01-01T00:06:30+00:00"}
    # eight rounds, but the CPU's expert was last trained before its job ended: not yet
    assert fleet_ready(tuned, {"k80": 2, "cpu": 6}, rounds) is None
    # ... its expert from round 7 (started after its job ended): ready, at round 7
    assert fleet_ready(tuned, {"k80": 2, "cpu": 7}, rounds) == 7
    # early events: ready at round 2, however few rounds that is
    early = {"k80": "2026-01-01T00:01:00+00:00", "cpu": "2026-01-01T00:01:00+00:00"}
    assert fleet_ready(early, {"k80": 2, "cpu": 2}, rounds[:2]) == 2
    # an expert recorded in a round that still runs does not count yet
    assert fleet_ready(early, {"k80": 2, "cpu": 3}, rounds[:2]) is None
    assert fleet_ready(tuned, {"k80": 8}, rounds) is None  # no expert of the CPU at all


FAKE_JOB = "import sys\nsys.exit(int(sys.argv[-2].endswith('bad')))\n"


@pytest.mark.parametrize(("state", "code", "ended"), [("ok", 0, "done"), ("bad", 1, "failed")])
def test_a_job_end_is_read_from_what_the_daemon_writes(
    tmp_path: Path, state: str, code: int, ended: str
) -> None:
    from agent.daemon import AgentDaemon, Job, Queue
    from agent.node_state import NodeState

    node = tmp_path / state
    log = NodeState(node).logs_dir / "jobs.log"
    assert daemon_job_ended(log) is None  # no log yet
    Queue(NodeState(node).queue_dir).put(
        Job(kind="network", subject="bert_layer", trials=2, cost_model="xgb")
    )
    daemon = AgentDaemon(
        node, supernode=False, poll_s=0.1, job_command=[sys.executable, "-c", FAKE_JOB]
    )
    daemon.job_log("job 0123: network bert_layer: started (2 trials per task, attempt 1)")
    assert daemon_job_ended(log) is None  # started, not ended
    assert daemon.run_next_job()
    assert daemon_job_ended(log) == ended


def test_a_background_process_can_yield_the_cpu(tmp_path: Path) -> None:
    """The demo's simulated nodes run niced, so the CPU node's real measurements come first."""
    import os

    script = "import time; time.sleep(60)"
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    process = Background("niced", sys.executable, ["-c", script], tmp_path / "log", nice=5)
    try:
        assert os.getpriority(os.PRIO_PROCESS, process.pid) == min(19, mine + 5)
        plain = Background("plain", sys.executable, ["-c", script], tmp_path / "log2")
        assert os.getpriority(os.PRIO_PROCESS, plain.pid) == mine
        plain.stop(timeout=5)
    finally:
        process.stop(timeout=5)
    assert DemoPlan(gpus=["k80"]).sim_nice > 0  # the demo's default


def test_the_paired_replay_serves_the_plain_global_of_the_version_received(
    tmp_path: Path,
) -> None:
    """`demo_newcomer --served global`: the newcomer's shared parts become the registry's
    global of the version it received; a copy that moved the program encoder is undone, and
    only its arrays are named."""
    import numpy as np
    import torch

    from agent.node_state import NodeState
    from bench.federation.demo_newcomer import serve_plain_global
    from schemas import NodeFederationState
    from server.registry import Registry
    from simoe_model.model import SiMoE, shared_arrays

    plain = SiMoE()
    registry_path = tmp_path / "registry.sqlite"
    with Registry(registry_path) as registry:
        registry.save_global(shared_arrays(SiMoE()), round_=1)  # version 1: another model
        registry.save_global(shared_arrays(plain), round_=2)  # version 2: the one it received
    copy = SiMoE()
    copy.load_state_dict(plain.state_dict())
    with torch.no_grad():  # the newcomer copy: the program encoder distilled, the rest as sent
        for value in copy.program_encoder.parameters():
            value.add_(0.1)
    node = NodeState(tmp_path / "newcomer")
    node.save_model(copy)
    node.save_federation_state(NodeFederationState(global_version=2))

    replaced = serve_plain_global(node.dir, registry_path)
    assert replaced and all(k.startswith("program_encoder.") for k in replaced)
    served = shared_arrays(node.load_model())
    expected = shared_arrays(plain)
    assert all(np.array_equal(served[k], expected[k]) for k in expected)
    assert serve_plain_global(node.dir, registry_path) == []  # the plain global: nothing moves

    node.save_federation_state(NodeFederationState(global_version=3))
    with pytest.raises(BadInputError, match="no global model version 3"):
        serve_plain_global(node.dir, registry_path)
    with pytest.raises(BadInputError, match="no registry"):
        serve_plain_global(node.dir, tmp_path / "missing.sqlite")


def test_two_replays_of_one_demo_state_pair_simoe_seed_for_seed() -> None:
    from bench.federation.demo_newcomer import NewcomerReport, SeedRun, paired_lines

    def replay(served: str, simoe: list[float], demo: dict | None = None) -> NewcomerReport:
        runs = [
            SeedRun(
                seed=s,
                rows=[_row("s", v), _row("m8", 3e-4), _row("m32", 1e-4)],
                model_used="fed",
                cpu_s=1.0,
                wall_s=1.0,
            )  # fmt: skip
            for s, v in enumerate(simoe)
        ]
        return NewcomerReport(
            command="c", demo=demo or {"rounds": 4}, network="bert_layer", tuned_tasks=["t"],
            new_gpu="a10", budget=8, full_budget=32, seeds=[0, 1, 2], runs=runs,
            served=served, total_wall_s=1.0, load_average_start=[1.0], load_average_end=[1.0],
        )  # fmt: skip

    received = replay("received", [1e-4, 2e-4, 2e-4])
    plain = replay("global", [2e-4, 2e-4, 2e-4])
    lines = paired_lines(received, plain)
    assert "seed 0: 100.00 and 200.00" in lines[1]
    assert "received faster in 1, equal in 2 of 3 seeds" in lines[4]
    assert lines[4].startswith(f"global / received: geometric mean {2 ** (1 / 3):.3f}")
    with pytest.raises(BadInputError, match="not replays of one demo"):
        paired_lines(received, replay("global", [2e-4] * 3, {"rounds": 5}))
