"""The strategy decides and persists nothing; the recorder writes; the loop keeps the roster."""

from __future__ import annotations

import copy
from pathlib import Path

from federation_helpers import ToyNode, initial_arrays, toy_similarity

from server.inprocess import InProcessGrid
from server.registry import Registry
from server.roster import Roster
from server.round_recorder import RoundRecorder
from server.server_app import run_rounds
from server.strategy import RoundInputs, SiMoEStrategy


def dump(registry: Registry) -> list[str]:
    """Every row of every table (SQL text), to see that nothing was written."""
    return list(registry.db.conn.iterdump())


class OtherKey(ToyNode):
    """A second node claiming the same name under its own key."""

    @property
    def key(self) -> str:
        return f"key-other-{self.name}-0123456789"


def test_a_round_flows_from_the_strategy_through_the_recorder_to_the_registry(
    tmp_path: Path,
) -> None:
    nodes = [
        ToyNode("a", 1000, weight=1, value=1.0, agreement={"b": 0.7}),
        ToyNode("b", 2000, weight=3, value=5.0, agreement={"a": -0.25}),
    ]
    grid = InProcessGrid()
    for i, node in enumerate(nodes):
        grid.add_node(10 + i, node.app(), {})
    with Registry(tmp_path / "registry.sqlite") as registry:
        strategy = SiMoEStrategy(registry, toy_similarity, k_experts=1)
        roster = Roster()  # the loop's: the strategy only reads it
        [first] = run_rounds(
            grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0, roster=roster
        )
        assert sorted(first.accepted) == sorted(n.key for n in nodes)

        # the strategy alone: hellos read and a round aggregated, nothing written anywhere
        before, roster_before = dump(registry), copy.deepcopy(roster)
        _, arrays = registry.latest_global()
        number = registry.last_round() + 1
        inputs = RoundInputs(number, arrays, [10, 11], {}, roster)
        hellos = strategy.hello_messages([10, 11], arrays)
        greeted = strategy.read_hellos(grid.send_and_receive(hellos), {}, roster)
        plan = strategy.configure_train(inputs)
        outcome = strategy.aggregate_train(inputs, plan, grid.send_and_receive(plan.messages))
        assert dump(registry) == before and roster == roster_before
        assert [n.node_key for n in greeted.identified] == [n.key for n in nodes]
        assert sorted(outcome.accepted) == sorted(n.key for n in nodes)
        assert outcome.replied == 2 and outcome.aggregated is not None
        assert {r.name for r in outcome.replies} == {"a", "b"}
        assert all(r.expert is not None and r.bytes_up > 0 for r in outcome.replies)
        assert {r.node_key: r.checked for r in outcome.replies} == {
            nodes[0].key: ["b"],
            nodes[1].key: ["a"],
        }
        assert {r.name: r.agreement for r in outcome.replies} == {
            "a": {"b": 0.7},
            "b": {"a": -0.25},
        }

        # the recorder writes it: the round's row, metrics, traffic, experts, new global
        recorder = RoundRecorder(registry)
        assert recorder.start_round(0, 2) == number
        recorded = recorder.record_round(outcome)
        assert recorded.global_version == registry.global_version() == 3
        [row] = [r for r in registry.rounds() if r.round == number]
        assert (row.status, row.replied, row.rejected, row.failed) == ("done", 2, 0, 0)
        assert {m["node_key"] for m in registry.metrics(number)} == {n.key for n in nodes}
        assert len(registry.traffic(number)) == 2
        assert {e.name: e.version for e in registry.experts()} == {"a": 2, "b": 2}
        assert {n["name"]: n["rounds"] for n in registry.nodes()} == {"a": 2, "b": 2}
        assert registry.expert_agreements() == sorted(
            [(nodes[0].key, nodes[1].key, 0.7), (nodes[1].key, nodes[0].key, -0.25)]
        )


def test_a_name_claimed_twice_in_one_batch_of_hellos_goes_to_the_first(tmp_path: Path) -> None:
    """The registry learns of a node only from the recorder, after the strategy has read
    every hello: the strategy's own book of names must still refuse the second claim."""
    first, second = ToyNode("gpu", 1000), OtherKey("gpu", 2000)
    grid = InProcessGrid()
    grid.add_node(1, first.app(), {})
    grid.add_node(2, second.app(), {})
    with Registry(tmp_path / "registry.sqlite") as registry:
        strategy = SiMoEStrategy(registry, toy_similarity)
        roster = Roster()
        [outcome] = run_rounds(
            grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0, roster=roster
        )
        assert outcome.accepted == [first.key] and outcome.sampled == [1]
        assert [r["reason"] for r in registry.refusals()] == [
            "node name 'gpu' is already taken by another key"
        ]
        assert roster.refused == {2: "node name 'gpu' is already taken by another key"}
    assert second.refused == ["node name 'gpu' is already taken by another key"]
