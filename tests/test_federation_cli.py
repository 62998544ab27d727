"""`simoe-server` monitoring commands over a registry filled by a toy federation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from federation_helpers import ToyNode, initial_arrays, toy_similarity
from typer.testing import CliRunner

from server.cli import app
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.server_app import run_rounds
from server.similarity import initial_shared_arrays
from server.strategy import SiMoEStrategy

runner = CliRunner()


@pytest.fixture()
def state_dir(tmp_path: Path) -> Path:
    nodes = [ToyNode("k80", 4000), ToyNode("t4", 8000), ToyNode("a100", 19500, value=2.0)]
    with Registry(tmp_path / "registry.sqlite") as registry:
        strategy = SiMoEStrategy(registry, toy_similarity, k_experts=1)
        grid = InProcessGrid()
        for i, node in enumerate(nodes):
            grid.add_node(i + 1, node.app(), {})
        run_rounds(grid, strategy, initial_arrays(), num_rounds=2, wait_nodes_s=0)
    return tmp_path


def invoke(*args: str) -> dict | list:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_status_nodes_rounds_experts(state_dir: Path) -> None:
    status = invoke("status", "--state-dir", str(state_dir))
    assert status["nodes"] == 3 and status["experts"] == 3 and status["rounds"] == 2
    assert status["last_round_bytes_per_node"] > 0
    nodes = invoke("nodes", "--state-dir", str(state_dir))
    assert {n["name"] for n in nodes} == {"k80", "t4", "a100"}
    assert all(isinstance(n["flower_node_id"], str) for n in nodes)  # 64-bit ids as TEXT
    rounds = invoke("rounds", "--state-dir", str(state_dir))
    assert [r["round"] for r in rounds] == [1, 2] and rounds[1]["bytes_up"] > 0
    experts = invoke("experts", "--state-dir", str(state_dir))
    assert [e["version"] for e in experts] == [2, 2, 2]
    table = runner.invoke(app, ["rounds", "--state-dir", str(state_dir)])
    assert table.exit_code == 0 and "done" in table.output


def test_rounds_show_what_the_similarity_fit_did(state_dir: Path) -> None:
    from schemas.messages import SimilarityFitInfo

    fit = SimilarityFitInfo(round=2, pairs=6, nodes=3, steps=10, loss_before=0.41, loss_after=0.12)
    with Registry(state_dir / "registry.sqlite") as registry:
        registry.add_similarity_fit(fit)  # as the recorder writes it
    rounds = invoke("rounds", "--state-dir", str(state_dir))
    assert rounds[0]["similarity_fit"] is None and rounds[1]["similarity_fit"] == fit.model_dump()
    table = runner.invoke(app, ["rounds", "--state-dir", str(state_dir)], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "6 pairs 0.410->0.120" in table.output


def test_similarity_json_and_plot(tmp_path: Path) -> None:
    # the real encoder needs real-size shared arrays: a registry with the initial model
    from federation_helpers import toy_profile

    from schemas.messages import NodeHello

    with Registry(tmp_path / "registry.sqlite") as registry:
        registry.save_global(initial_shared_arrays(0), round_=0)
        for i, (name, gflops) in enumerate([("k80", 4000), ("t4", 8000), ("a100", 19500)]):
            hello = NodeHello(
                name=name, key_fingerprint=f"fp-{name}-000000", profile=toy_profile(name, gflops)
            )
            registry.upsert_node(hello, 2**63 + i)
    data = invoke("similarity", "--state-dir", str(tmp_path), "--plot", str(tmp_path / "sim.png"))
    assert data["names"] == ["a100", "k80", "t4"]
    assert all(abs(data["matrix"][i][i] - 1) < 1e-3 for i in range(3))
    assert (tmp_path / "sim.png").stat().st_size > 1000
    nodes = invoke("nodes", "--state-dir", str(tmp_path))
    assert str(2**63) in {n["flower_node_id"] for n in nodes}


def test_missing_registry_is_one_line_bad_input(tmp_path: Path) -> None:
    result = runner.invoke(app, ["status", "--state-dir", str(tmp_path / "nope")])
    assert result.exit_code != 0
    assert "no registry" in str(result.exception)
