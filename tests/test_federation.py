"""The strategy and the registry, run through an in-process Grid with toy nodes."""

from __future__ import annotations

from pathlib import Path
from weakref import WeakKeyDictionary

import numpy as np
import pytest
from federation_helpers import ToyNode, initial_arrays, toy_similarity

from server.aggregation import make_strategy
from server.averaging import clip_delta, weighted_average
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.roster import Roster
from server.run_config import ServerRunConfig
from server.server_app import run_rounds
from server.strategy import SiMoEStrategy


def make_fleet(
    tmp_path: Path, nodes: list[ToyNode], **strategy_kwargs: object
) -> tuple[InProcessGrid, SiMoEStrategy, Registry]:
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, toy_similarity, **strategy_kwargs)  # type: ignore[arg-type]
    grid = InProcessGrid()
    for i, node in enumerate(nodes):
        grid.add_node(1000 + i, node.app(), {"state-dir": str(tmp_path / node.name)})
    return grid, strategy, registry


# one run per strategy, as a server process has: a later `run` with it continues the run
RUNS: WeakKeyDictionary[SiMoEStrategy, Roster] = WeakKeyDictionary()


def run(grid: InProcessGrid, strategy: SiMoEStrategy, rounds: int = 1) -> list:
    roster = RUNS.setdefault(strategy, Roster())
    return run_rounds(
        grid, strategy, initial_arrays(), num_rounds=rounds, wait_nodes_s=0, roster=roster
    )


def test_average_is_exactly_weighted_fedavg_over_shared_keys(tmp_path: Path) -> None:
    nodes = [
        ToyNode("a", 1000, weight=1, value=1.0),
        ToyNode("b", 2000, weight=2, value=4.0),
        ToyNode("c", 4000, weight=5, value=-2.0),
    ]
    grid, strategy, registry = make_fleet(tmp_path, nodes)
    [outcome] = run(grid, strategy)
    assert sorted(outcome.accepted) == sorted(n.key for n in nodes)
    version, arrays = registry.latest_global()
    expected = (1 * 1.0 + 2 * 4.0 + 5 * -2.0) / 8
    assert set(arrays) == {"encoder.w", "gate.b"}  # experts are never averaged in
    for value in arrays.values():
        np.testing.assert_allclose(value, expected, rtol=0, atol=1e-7)
    assert version == outcome.global_version == 2  # v1 = the initial model
    assert {e.name for e in registry.experts()} == {"a", "b", "c"}
    assert registry.expert("c")["head.w"][0, 0] == 4000  # each expert kept as sent


def test_weighted_average_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    updates = [{"x": rng.normal(size=(4, 3)).astype(np.float32)} for _ in range(3)]
    weights = [3.0, 1.0, 6.0]
    expected = np.average(np.stack([u["x"] for u in updates]), axis=0, weights=weights)
    np.testing.assert_allclose(weighted_average(updates, weights)["x"], expected, rtol=1e-6)


def test_experts_delivered_by_similarity(tmp_path: Path) -> None:
    nodes = [
        ToyNode("k80", 4000),
        ToyNode("t4", 8000),
        ToyNode("v100", 14000),
        ToyNode("a100", 19500),
    ]
    grid, strategy, registry = make_fleet(tmp_path, nodes, k_experts=2)
    first, second = run(grid, strategy, rounds=2)
    assert first.delivered == {n.key: [] for n in nodes}  # no experts registered yet
    by_name = {n.name: n for n in nodes}
    assert by_name["k80"].received_experts[-1] == ["t4", "v100"]
    assert by_name["a100"].received_experts[-1] == ["v100", "t4"]
    assert by_name["v100"].received_experts[-1] == ["a100", "t4"]
    assert second.delivered[by_name["t4"].key] == ["v100", "k80"]  # log-ratio 0.56 < 0.69


def test_a_gpu_node_is_never_sent_a_cpu_expert_however_similar(tmp_path: Path) -> None:
    # toy_similarity ranks by FLOPs alone: the CPU is the GPUs' nearest neighbour here
    nodes = [
        ToyNode("cpu", 8100, device_kind="cpu"),
        ToyNode("t4", 8000),
        ToyNode("v100", 14000),
        ToyNode("other-cpu", 3000, device_kind="cpu"),
    ]
    grid, strategy, registry = make_fleet(tmp_path, nodes, k_experts=2)
    run(grid, strategy, rounds=2)
    got = {n.name: n.received_experts[-1] for n in nodes}
    assert got["t4"] == ["v100"] and got["v100"] == ["t4"]  # not "cpu", though nearer
    assert got["cpu"] == ["other-cpu"] and got["other-cpu"] == ["cpu"]


def test_late_joiner_is_served_at_its_first_round(tmp_path: Path) -> None:
    nodes = [ToyNode("a", 1000), ToyNode("b", 2000), ToyNode("c", 4000)]
    grid, strategy, registry = make_fleet(tmp_path, nodes, k_experts=2)
    run(grid, strategy, rounds=1)
    late = ToyNode("late", 3500)
    grid.add_node(2000, late.app(), {"state-dir": str(tmp_path / "late")})
    [outcome] = run(grid, strategy, rounds=1)
    assert late.hellos == 1 and late.got_global  # got the global model on first contact
    assert late.received_experts == [["c", "b"]]  # and its nearest experts in that round
    assert late.key in outcome.accepted
    assert "late" in {e.name for e in registry.experts()}
    assert registry.last_round() == 2


def test_dead_node_does_not_stop_the_round(tmp_path: Path) -> None:
    nodes = [ToyNode("a", 1000, value=1.0), ToyNode("b", 2000, value=3.0), ToyNode("dead", 4000)]
    grid, strategy, registry = make_fleet(tmp_path, nodes)
    run(grid, strategy, rounds=1)
    grid.kill_node(1002)
    [outcome] = run(grid, strategy, rounds=1)
    assert outcome.failed == 1
    assert sorted(outcome.accepted) == sorted([nodes[0].key, nodes[1].key])
    _, arrays = registry.latest_global()
    np.testing.assert_allclose(arrays["gate.b"], 2.0)
    assert registry.rounds()[-1].status == "done"


def test_crashing_client_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    def boom(_shared: dict) -> dict:
        raise RuntimeError("disk full")

    nodes = [ToyNode("a", 1000, value=1.0), ToyNode("b", 2000, corrupt=boom)]
    grid, strategy, registry = make_fleet(tmp_path, nodes)
    [outcome] = run(grid, strategy)
    assert outcome.failed == 1 and outcome.accepted == [nodes[0].key]


@pytest.mark.parametrize(
    "corrupt, reason",
    [
        (lambda s: {**s, "gate.b": np.full(4, np.nan, np.float32)}, "NaN or Inf"),
        (lambda s: {**s, "gate.b": np.full(4, np.inf, np.float32)}, "NaN or Inf"),
        (lambda s: {**s, "gate.b": np.zeros(5, np.float32)}, "shape"),
        (lambda s: {"encoder.w": s["encoder.w"]}, "keys differ"),
        (lambda s: {**s, "extra": np.zeros(1, np.float32)}, "keys differ"),
    ],
)
def test_bad_update_is_rejected_and_logged(tmp_path: Path, corrupt, reason: str) -> None:
    bad = ToyNode("bad", 2000, value=100.0, corrupt=corrupt)
    nodes = [ToyNode("good", 1000, value=1.0), bad]
    grid, strategy, registry = make_fleet(tmp_path, nodes)
    [outcome] = run(grid, strategy)
    assert outcome.accepted == [nodes[0].key]
    assert reason in outcome.rejected[bad.key]
    _, arrays = registry.latest_global()
    for value in arrays.values():
        np.testing.assert_allclose(value, 1.0)  # the bad update never got averaged
    assert [r["node_key"] for r in registry.rejections()] == [bad.key]
    assert "bad" not in registry.expert_names()  # nor its expert stored


@pytest.mark.parametrize("aggregation", ["trimmed", "median", "krum"])
def test_robust_strategies_ignore_two_outliers(tmp_path: Path, aggregation: str) -> None:
    nodes = [ToyNode(f"n{i}", 1000 * (i + 1), value=1.0 + 0.01 * i) for i in range(6)]
    nodes.append(ToyNode("evil", 9000, value=1e6, weight=100))
    nodes.append(ToyNode("flip", 9500, value=-50.0, weight=100))
    config = ServerRunConfig(  # toy arrays: no model to fit a similarity or rank probes on
        aggregation=aggregation, trim=0.25, krum_f=2, server_optimizer="sgd", server_lr=1.0,
        similarity_steps=0, similarity_source="reported", probes="none",
    )  # fmt: skip
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = make_strategy(config, registry, toy_similarity)  # type: ignore[arg-type]
    assert type(strategy).aggregation == aggregation
    grid = InProcessGrid()
    for i, node in enumerate(nodes):
        grid.add_node(1000 + i, node.app(), {"state-dir": str(tmp_path / node.name)})
    [outcome] = run(grid, strategy)
    _, arrays = registry.latest_global()
    for value in arrays.values():  # within the honest nodes' values, whatever the two sent
        assert np.all((value >= 1.0 - 1e-6) & (value <= 1.05 + 1e-6)), value
    if aggregation == "krum":
        assert sorted(outcome.set_aside) == sorted([nodes[-1].key, nodes[-2].key])


def test_fedavg_follows_the_outliers(tmp_path: Path) -> None:
    """The same fleet under FedAvg: the two liars drag the average (why the rules exist)."""
    nodes = [ToyNode(f"n{i}", 1000 * (i + 1), value=1.0) for i in range(6)]
    nodes.append(ToyNode("evil", 9000, value=1e6, weight=100))
    grid, strategy, registry = make_fleet(tmp_path, nodes)
    run(grid, strategy)
    _, arrays = registry.latest_global()
    assert all(np.all(value > 1e5) for value in arrays.values())


def test_clip_applies_to_every_rule(tmp_path: Path) -> None:
    nodes = [ToyNode("a", 1000, value=100.0), ToyNode("b", 2000, value=100.0)]
    grid, strategy, registry = make_fleet(tmp_path, nodes, clip_norm=1.0)
    before = initial_arrays()
    run(grid, strategy)
    _, after = registry.latest_global()
    change = np.sqrt(sum(float(np.sum((after[k] - before[k]) ** 2)) for k in before))
    assert change == pytest.approx(1.0, rel=1e-5)


def test_clipping_bounds_the_update_norm() -> None:
    out = clip_delta({"x": np.full(4, 100.0), "y": np.full(2, 100.0)}, 1.0)
    norm = np.sqrt(sum(float(np.sum(v**2)) for v in out.values()))
    assert norm == pytest.approx(1.0, rel=1e-9)
    small = {"x": np.full(4, 0.1)}
    assert clip_delta(small, 1.0) is small  # short changes pass unchanged


@pytest.mark.parametrize(
    "fields",
    [{"aggregation": "mean"}, {"trim": 0.5}, {"clip": -1.0}, {"krum_f": -1}],
)
def test_bad_aggregation_config_is_refused(fields: dict) -> None:
    with pytest.raises(ValueError):
        ServerRunConfig(**fields)


def test_registry_survives_restart_and_rounds_continue(tmp_path: Path) -> None:
    nodes = [ToyNode("a", 1000, value=2.0), ToyNode("b", 2000, value=2.0)]
    grid, strategy, registry = make_fleet(tmp_path, nodes)
    run(grid, strategy, rounds=2)
    registry.close()
    grid2, strategy2, registry2 = make_fleet(tmp_path, nodes)
    [outcome] = run(grid2, strategy2, rounds=1)
    assert outcome.round == 3
    assert [r.round for r in registry2.rounds()] == [1, 2, 3]
    assert {n["name"] for n in registry2.nodes()} == {"a", "b"}
    assert registry2.experts()[0].version == 3
    traffic = registry2.traffic(3)
    assert len(traffic) == 2 and all(t["bytes_up"] > 0 and t["bytes_down"] > 0 for t in traffic)


def test_name_taken_by_another_key_is_refused(tmp_path: Path) -> None:
    first = ToyNode("gpu", 1000)
    grid, strategy, registry = make_fleet(tmp_path, [first])
    run(grid, strategy)
    impostor = ToyNode("gpu", 5000)
    impostor_key = "another-key-abcdef"
    impostor.__class__ = type("Impostor", (ToyNode,), {"key": property(lambda s: impostor_key)})
    grid.add_node(3000, impostor.app(), {})
    [outcome] = run(grid, strategy)
    assert impostor.refused and "already taken" in impostor.refused[0]
    assert outcome.accepted == [first.key]
    assert registry.node_by_name("gpu")["node_key"] == first.key


def test_not_sqlite_is_bad_input(tmp_path: Path) -> None:
    from schemas import BadInputError

    path = tmp_path / "x.sqlite"
    path.write_text("not a database at all" * 100)
    with pytest.raises(BadInputError, match="not a SQLite database"):
        Registry(path)


def test_a_newer_registry_schema_is_refused_untouched(tmp_path: Path) -> None:
    import sqlite3

    from schemas import BadInputError
    from server.registry import SCHEMA_VERSION

    path = tmp_path / "registry.sqlite"
    Registry(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [SCHEMA_VERSION + 1])
    with pytest.raises(BadInputError, match=f"schema version {SCHEMA_VERSION + 1} is newer"):
        Registry(path)
    with sqlite3.connect(path) as db:  # still the newer version: nothing was rewritten
        [(value,)] = db.execute("SELECT value FROM meta WHERE key = 'schema_version'")
    assert int(value) == SCHEMA_VERSION + 1
    Registry(tmp_path / "fresh.sqlite").close()  # a new registry gets this version


def test_experts_refuted_by_most_testers_are_not_sent_to_newcomers(tmp_path: Path) -> None:
    """Nodes with records report the experts that rank them backwards; a newcomer, which
    cannot test anything yet, is not sent an expert that most of its testers refuted."""
    liar = ToyNode("liar", 1000.0)  # the most similar hardware to everyone below
    testers = [ToyNode(f"t{g:.0f}", g, refutes=["liar"]) for g in (700.0, 1400.0, 2000.0)]
    honest = ToyNode("honest", 50000.0)
    nodes = [liar, honest, *testers]
    grid, strategy, registry = make_fleet(tmp_path, nodes, k_experts=2)
    run(grid, strategy, rounds=3)
    assert all("liar" in got for t in testers for got in t.received_experts[1:])
    assert registry.distrusted_experts() == {"liar"}
    newcomer = ToyNode("newcomer", 1005.0)
    grid.add_node(9000, newcomer.app(), {"state-dir": str(tmp_path / "newcomer")})
    run(grid, strategy, rounds=2)
    assert "liar" not in newcomer.received_experts[0]  # untested: not sent to it
    assert "liar" in newcomer.received_experts[1]  # it has trained: it may judge itself
    assert all("liar" in t.received_experts[-1] for t in testers[:2])  # still tested


def test_one_refuting_node_is_not_enough(tmp_path: Path) -> None:
    liar = ToyNode("maybe", 1000.0)
    testers = [ToyNode("t0", 700.0, refutes=["maybe"]), ToyNode("t1", 1400.0)]
    grid, strategy, registry = make_fleet(tmp_path, [liar, *testers], k_experts=2)
    run(grid, strategy, rounds=3)
    assert registry.distrusted_experts() == set()


def test_a_round_left_open_by_a_killed_server_is_marked_interrupted(tmp_path: Path) -> None:
    nodes = [ToyNode("a", 1000, value=2.0), ToyNode("b", 2000, value=2.0)]
    grid, strategy, registry = make_fleet(tmp_path, nodes)
    run(grid, strategy, rounds=1)
    registry.start_round(run_id=7, sampled=2)  # the server dies here, mid-round 2
    registry.close()
    grid2, strategy2, registry2 = make_fleet(tmp_path, nodes)
    [outcome] = run(grid2, strategy2, rounds=1)
    assert outcome.round == 3
    assert [(r.round, r.status) for r in registry2.rounds()] == [
        (1, "done"),
        (2, "interrupted"),
        (3, "done"),
    ]


def test_server_learning_rate_steps_params_but_not_normalizer_statistics(tmp_path: Path) -> None:
    """server_lr scales the average change of learned arrays; fitted statistics are averaged."""
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, toy_similarity, server_lr=3.0)
    current = {"enc.w": np.ones(2, np.float32), "enc.norm.mean": np.ones(2, np.float32)}
    updates = [{k: v + 1 for k, v in current.items()}, {k: v + 3 for k, v in current.items()}]
    new, left_out = strategy.aggregate_shared(updates, [1.0, 1.0], current)
    assert left_out == []
    np.testing.assert_allclose(new["enc.w"], 1 + 3.0 * 2)  # current + 3 x the mean change
    np.testing.assert_allclose(new["enc.norm.mean"], 1 + 2)  # the plain average
    with pytest.raises(ValueError, match="server_lr"):
        SiMoEStrategy(registry, toy_similarity, server_lr=0.0)


def test_local_training_settings_travel_in_the_instruction(tmp_path: Path) -> None:
    node = ToyNode("a", 1000)
    grid, strategy, _ = make_fleet(
        tmp_path, [node], local_batch=2, prox_mu=0.5, epochs=3, transfer_weight=0.25
    )
    run(grid, strategy)
    [instruction] = node.instructions
    assert (instruction.local_batch, instruction.prox_mu, instruction.epochs) == (2, 0.5, 3)
    assert instruction.transfer_weight == 0.25


def test_server_adam_first_step_is_a_sign_step_and_statistics_pass() -> None:
    """FedAdam with bias correction: the first round moves each learned value by lr in the
    direction of the average change, however small that change is; statistics pass as is."""
    from server.averaging import ServerAdam

    adam = ServerAdam(lr=0.05)
    change = {"enc.w": np.array([1e-4, -3.0, 0.0]), "enc.norm.std": np.array([0.5, -0.5, 0.0])}
    first = adam.step(change)
    np.testing.assert_allclose(first["enc.w"], [0.05, -0.05, 0.0], atol=1e-6)
    np.testing.assert_array_equal(first["enc.norm.std"], change["enc.norm.std"])
    second = adam.step({k: -v for k, v in change.items()})  # the momentum damps a reversal
    assert abs(second["enc.w"][1]) < 0.05


def test_strategy_with_server_adam_steps_through_it(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, toy_similarity, server_optimizer="adam", server_lr=0.1)
    current = {"enc.w": np.zeros(2, np.float32)}
    new, _ = strategy.aggregate_shared([{"enc.w": np.full(2, 1e-3, np.float32)}], [1.0], current)
    np.testing.assert_allclose(new["enc.w"], 0.1, rtol=1e-5)
    with pytest.raises(ValueError, match="server_optimizer"):
        SiMoEStrategy(registry, toy_similarity, server_optimizer="yogi")


def test_a_newcomer_gets_the_global_its_experts_were_trained_on(tmp_path: Path) -> None:
    """matched_global: experts of round 2 were trained on v2, the global is v3 by then; a
    node with no expert of its own is sent v2, and a change it sends is applied to v3."""
    a, b = ToyNode("a", 1000, value=1.0), ToyNode("b", 2000, value=3.0)
    grid, strategy, registry = make_fleet(tmp_path, [a, b], k_experts=2, matched_global=True)
    run(grid, strategy)  # v2 = 2
    a.value = 5.0
    run(grid, strategy)  # trained on v2; v3 = 4
    newcomer = ToyNode("n", 1500, value=7.0)
    grid.add_node(1009, newcomer.app(), {"state-dir": str(tmp_path / "n")})
    [outcome] = run(grid, strategy)
    [instruction] = newcomer.instructions
    assert instruction.global_version == 2 and sorted(instruction.experts) == ["a", "b"]
    assert all(np.all(v == 2.0) for v in newcomer.trained_from[0].values())
    assert all(np.all(v == 4.0) for v in a.trained_from[-1].values())  # members: the latest
    version, arrays = registry.latest_global()
    expected = 4.0 + ((5 - 4) + (3 - 4) + (7 - 2)) / 3  # its change rebased onto v3
    assert version == outcome.global_version == 4
    for value in arrays.values():
        np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_server_step_settings_survive_the_run_config_and_reach_the_strategy(
    tmp_path: Path,
) -> None:
    config = ServerRunConfig(
        aggregation="median", server_optimizer="adam", server_lr=0.01, matched_global=True,
        k_experts=5, epochs=3, min_nodes=2, personal_epochs=4,
    )  # fmt: skip
    run_config = config.to_run_config()
    assert run_config["personal-epochs"] == 4
    assert run_config["matched-global"] is True  # Flower's own bool, not the string "true"
    again = ServerRunConfig.from_run_config(run_config)
    assert again == config and "FedAdam" in again.describe()
    with Registry(tmp_path / "registry.sqlite") as registry:
        strategy = make_strategy(again, registry, toy_similarity)
    assert strategy.aggregation == "median" and strategy.matched_global
    assert strategy.server_adam is not None and strategy.server_adam.lr == 0.01
    assert (strategy.k_experts, strategy.epochs, strategy.min_available_nodes) == (5, 3, 2)
    assert strategy.personal_epochs == 4 and ServerRunConfig().personal_epochs == 24  # the pick
    deployed = ServerRunConfig.from_run_config({})  # the defaults come from one place
    assert deployed == ServerRunConfig() and deployed.server_optimizer == "adam"
    assert ServerRunConfig.from_run_config({"matched-global": "true"}).matched_global  # old runs


def test_the_similarity_fit_is_on_by_default_and_the_option_turns_it_off(
    tmp_path: Path,
) -> None:
    from server.similarity import fit_shared_similarity

    with Registry(tmp_path / "registry.sqlite") as registry:
        default = make_strategy(ServerRunConfig(), registry, toy_similarity)
        off = make_strategy(ServerRunConfig(similarity_steps=0), registry, toy_similarity)
        five = ServerRunConfig.from_run_config(ServerRunConfig(similarity_steps=5).to_run_config())
        more = make_strategy(five, registry, toy_similarity)
    assert default.similarity_fit is fit_shared_similarity and default.similarity_steps == 50
    assert off.similarity_fit is None and off.similarity_steps == 0
    assert more.similarity_fit is fit_shared_similarity and more.similarity_steps == 5
    assert five.start_options() == ["--similarity-steps", "5"]


def test_too_few_agreement_pairs_leave_the_average_as_it_is(tmp_path: Path) -> None:
    """Two nodes report one agreement each: fewer than 3 pairs, so no fit is run."""
    calls: list[int] = []

    def never(arrays, profiles, agreements, **kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append(len(agreements))
        return dict(arrays), 0.0, 0.0

    nodes = [ToyNode("a", 1000, agreement={"b": 0.5}), ToyNode("b", 2000, agreement={"a": 0.4})]
    grid, strategy, registry = make_fleet(tmp_path, nodes, k_experts=1, similarity_fit=never)
    outcomes = run(grid, strategy, rounds=3)
    assert calls == [] and all(o.similarity_fit is None for o in outcomes)
    assert len(registry.expert_agreements()) == 2
    third = ToyNode("c", 1500, agreement={"a": 0.9, "b": 0.8})
    grid.add_node(1009, third.app(), {"state-dir": str(tmp_path / "c")})
    outcomes = run(grid, strategy, rounds=2)
    assert calls and calls[-1] >= 3 and outcomes[-1].similarity_fit is not None


def test_server_run_config_goes_through_flowers_own_run_config_parsing(tmp_path: Path) -> None:
    """The generated app's defaults fused with `flwr run --run-config` overrides, by Flower's
    own functions, give back the same settings: bools stay bools, defaults come from one
    place (ServerRunConfig), and the ServerApp reads them back unchanged."""
    from flwr.common.config import get_fused_config_from_dir, parse_config_args

    from server.superlink import run_config_argument, write_app

    app_dir = write_app(tmp_path / "app")
    config = ServerRunConfig(matched_global=True, k_experts=4, clip=0.5, num_rounds=2)
    fused = get_fused_config_from_dir(app_dir, parse_config_args([run_config_argument(config)]))
    assert fused["matched-global"] is True and fused["k-experts"] == 4
    assert ServerRunConfig.from_run_config(fused) == config
    defaults = get_fused_config_from_dir(app_dir, {})
    assert defaults["matched-global"] is False
    assert ServerRunConfig.from_run_config(defaults) == ServerRunConfig()
    assert ServerRunConfig().start_options() == []
    assert config.start_options() == [
        "--rounds", "2", "--k-experts", "4", "--clip", "0.5", "--matched-global"
    ]  # fmt: skip


def test_the_loop_holds_the_roster_a_run_continues_with_it(tmp_path: Path) -> None:
    """The strategy keeps no roster: a second run_rounds given the first's roster continues
    the run (the node is not asked again); without one it is a new run, which asks."""
    node = ToyNode("a", 1000)
    grid, strategy, _ = make_fleet(tmp_path, [node])
    roster = Roster()
    for _ in range(2):
        run_rounds(grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0, roster=roster)
    assert node.hellos == 1 and roster.identity == {1000: node.key}
    assert not hasattr(strategy, "roster")
    run_rounds(grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0)
    assert node.hellos == 2


@pytest.mark.parametrize(
    "agreement, reason",
    [
        ('{"good": NaN}', "bad node identity"),
        ('{"good": 0.123}', "more than 2 decimals"),
        ('{"good": 2.0}', "less than or equal to 1"),
        ('{"stranger": 0.5}', "did not check"),
    ],
)
def test_a_malformed_agreement_rejects_that_reply_in_one_line(
    tmp_path: Path, agreement: str, reason: str
) -> None:
    """A node (not ours) that sends a bad agreement: its reply is rejected with the reason,
    its update and expert are not kept, and the round goes on."""
    from schemas.messages import REC_NODE

    liar = ToyNode("liar", 2000, value=100.0)
    toy_app = liar.app()

    def app(message, context):  # noqa: ANN001, ANN202
        reply = toy_app(message, context)
        if message.metadata.message_type == "train" and liar.received_experts[-1]:
            hello = str(reply.content[REC_NODE]["hello"])
            reply.content[REC_NODE]["hello"] = hello.replace(
                '"expert_agreement":{}', f'"expert_agreement":{agreement}'
            )
        return reply

    good = ToyNode("good", 1000, value=1.0)
    grid, strategy, registry = make_fleet(tmp_path, [good], k_experts=1)
    grid.add_node(1001, app, {})
    first, second = run(grid, strategy, rounds=2)
    assert liar.key in first.accepted and liar.key in second.rejected
    assert reason in second.rejected[liar.key] and "\n" not in second.rejected[liar.key]
    assert second.accepted == [good.key] and registry.expert_agreements() == []
