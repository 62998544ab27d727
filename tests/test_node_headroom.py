"""bench/federation/node_headroom.py's report: the budget best in hindsight, the federated rows
joined only from a report of the same split, and the per-node footing of federation_helps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import reporting
from bench.federation import federation_helps as fh
from bench.federation.federation_report import FederationHelpsSeeds
from bench.federation.node_headroom import add_federation, summary
from schemas import BadInputError


def runs_of(scores: dict[str, dict[str, list[float]]]) -> list[dict]:
    """Runs as headroom() returns them, from {measure: {unit: [seed 0, seed 1]}}."""
    units = next(iter(scores.values()))
    return [
        {
            "seed": seed,
            "split": "per-node",
            "nodes": {u: {k: scores[k][u][seed] for k in scores} for u in units},
        }
        for seed in (0, 1)
    ]


def test_summary_compares_with_own_only_and_with_its_best_budget_in_hindsight() -> None:
    units = ("a100-sxm4-400w", "4090-ref")
    scores = {
        "own_only": {u: [0.70, 0.70] for u in units},
        "own_only_12": {u: [0.80, 0.80] for u in units},  # the best budget, in hindsight
        "own_only_24": {u: [0.70, 0.70] for u in units},
        "own_only_48": {u: [0.80, 0.80] for u in units},  # as good: the smaller budget wins
        "fed_x": {u: [0.90, 0.80] for u in units},
    }
    lines = summary(runs_of(scores))
    assert "split per-node, 2 nodes" in lines[0]
    assert "best in hindsight: own_only_12" in lines[0]
    fed = next(line for line in lines if line.startswith("fed_x"))
    assert "minus own-only +0.150 [+0.150, +0.150], better on 2" in fed
    assert "minus own_only_12 +0.050 [+0.050, +0.050], better on 2" in fed
    # a grid point is compared with the validated budget only
    grid = next(line for line in lines if line.startswith("own_only_48"))
    assert "minus own-only +0.100" in grid and "minus own_only_12" not in grid


@pytest.fixture(scope="module")
def federation_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny, synthetic) federation_helps report over seeds 0 and 1."""
    fleet = fh.synthetic_gpus(4, 6, 16)
    names = list(fleet)
    settings = fh.FederationHelpsSettings(rounds=2, epochs=1, k_experts=2, command="t", data="t")
    work = tmp_path_factory.mktemp("headroom")
    runs = [
        fh.run_federation_helps([fleet[n] for n in names[:3]], [], work / f"s{s}", settings, seed=s)
        for s in (0, 1)
    ]
    path = work / "federation_helps_validation_nodesplit_x.json"
    path.write_text(FederationHelpsSeeds(command="t", runs=runs).model_dump_json())
    return path


def test_federated_rows_join_only_where_own_only_agrees(federation_report: Path) -> None:
    report = reporting.read_report(federation_report, FederationHelpsSeeds)
    runs = [
        {"seed": r.seed, "nodes": {n.gpu: {"own_only": n.own_only_top1} for n in r.nodes}}
        for r in report.runs
    ]
    add_federation(runs, federation_report)
    for run, fed in zip(runs, report.runs, strict=True):
        for row in fed.nodes:
            assert runs[run["seed"]]["nodes"][row.gpu]["fed_nodesplit_x"] == row.federated_top1
            assert "fed_nodesplit_x_global" not in run["nodes"][row.gpu]  # no personal model

    changed = json.loads(json.dumps(runs))
    first = next(iter(changed[1]["nodes"].values()))
    first["own_only"] += 0.01  # another split or budget: refused, nothing joined
    with pytest.raises(BadInputError, match="own-only score differs"):
        add_federation(changed, federation_report)
    with pytest.raises(BadInputError, match="no run of seed 7"):
        add_federation([{"seed": 7, "nodes": {}}], federation_report)


def test_the_per_node_footing_is_one_of_the_protocol(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_code:
        fh.main(["--synthetic", "--node-split", "per-node"])
    assert exit_code.value.code == 2
    assert "--node-split per-node is a footing of --protocol" in capsys.readouterr().err


def test_join_scores_a_saved_run_again_with_the_federation(
    federation_report: Path, tmp_path: Path
) -> None:
    """`--join`: a saved node_headroom file's runs with a federation report's rows, its own
    command kept; rows an earlier join added are replaced, not doubled."""
    from bench.federation.node_headroom import main

    report = reporting.read_report(federation_report, FederationHelpsSeeds)
    runs = [
        {
            "seed": r.seed,
            "split": "per-node",
            "nodes": {
                n.gpu: {"own_only": n.own_only_top1, "own_only_3": 0.5, "fed_stale": 0.0}
                for n in r.nodes
            },
        }
        for r in report.runs
    ]
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps({"command": "first", "fleet": "f", "runs": runs}))
    main(["--join", str(saved), "--federation", str(federation_report), "--out", str(tmp_path)])
    joined = json.loads((tmp_path / "node_headroom_per-node.json").read_text())
    assert joined["command"].startswith("first; then python -m bench.federation.node_headroom")
    assert joined["fleet"] == "f"
    row = joined["runs"][0]["nodes"][report.runs[0].nodes[0].gpu]
    assert set(row) == {"own_only", "own_only_3", "fed_nodesplit_x"}
    assert any(line.startswith("fed_nodesplit_x") for line in joined["summary"])


def test_the_model_choice_diagnosis_ranks_two_models_on_one_scale() -> None:
    """The ensemble standardises each model's scores per task, so a model with scores 100x
    larger does not decide alone; the summary pairs nodes over seeds."""
    import numpy as np

    from bench.federation.model_choice_diagnose import standardised, summary

    small, large = np.array([0.1, 0.3, 0.2]), np.array([300.0, 100.0, 250.0])
    both = standardised(small) + standardised(large)
    # each model's favourite is the other's worst or middling: the compromise wins
    assert (np.argmax(small), np.argmax(large), np.argmax(both)) == (1, 0, 2)
    assert np.array_equal(standardised(np.ones(3)), np.zeros(3))  # nothing to rank: no NaN

    runs = [
        {
            "seed": s,
            "split": "per-node",
            "nodes": {
                u: {"own_only": 0.7, "personal": 0.8, "averaged": 0.75, "ensemble": 0.9}
                for u in ("a100-sxm4-400w", "4090-ref")
            },
        }  # fmt: skip
        for s in (0, 1)
    ]
    lines = summary(runs)
    assert lines[0].startswith("seeds [0, 1], split per-node, 2 nodes")
    assert lines[4] == (
        "ensemble: 0.900, minus personal +0.100 [+0.100, +0.100], "
        "minus own_only +0.200 [+0.200, +0.200]"
    )
