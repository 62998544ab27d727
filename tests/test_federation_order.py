"""The server's sums do not depend on the order replies arrive in, nor on the nodes' keys.

Over gRPC a round's replies arrive in any order, and a node's key is drawn afresh when it
enrols: float sums taken in either order give different bits (the federation benchmark sent
three validation newcomers different experts on a rerun of one seed). The strategy combines
the accepted updates in the order of the nodes' names and fits the similarity on units and
pairs named and ordered by node name."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from federation_helpers import SHARED_SHAPES, ToyNode, initial_arrays, toy_similarity
from flwr.app import Message
from hypothesis import example, given, settings
from hypothesis import strategies as st

from server.inprocess import InProcessGrid
from server.registry import Registry
from server.roster import Roster
from server.round_outcome import RoundInputs, RoundOutcome, RoundPlan
from server.server_app import run_rounds
from server.strategy import SiMoEStrategy


@dataclass
class KeyedToyNode(ToyNode):
    """A toy node whose key starts with `salt`: the same fleet enrolled under other keys."""

    salt: str = ""

    @property
    def key(self) -> str:
        return f"key-{self.salt}-{self.name}-0123456789"


class CapturingStrategy(SiMoEStrategy):
    """Keeps the last round's inputs, plan and replies, to aggregate them again."""

    captured: tuple[RoundInputs, RoundPlan, list[Message]]

    def aggregate_train(
        self, inputs: RoundInputs, plan: RoundPlan, replies: object
    ) -> RoundOutcome:
        listed = list(replies)  # type: ignore[call-overload]
        self.captured = (inputs, plan, listed)
        return super().aggregate_train(inputs, plan, listed)


def _sending(values: np.ndarray):  # noqa: ANN202
    """A toy node's shared arrays: `values` tiled over each shape."""
    return lambda shared: {
        k: np.resize(values, v.shape).astype(np.float32) for k, v in shared.items()
    }


# float32 values that cancel (2**100 - 2**100) beside small ones: a sum's order shows in the bits
# (the average is taken in float64, so only a large cancellation reaches float32's bits)
finite = st.floats(-(2.0**100), 2.0**100, allow_nan=False, width=32)


@settings(max_examples=30, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.lists(finite, min_size=3, max_size=3), st.integers(1, 50)),
        min_size=3,
        max_size=5,
    ),
    permutation=st.randoms(use_true_random=False),
)
@example(
    data=[
        ([2.0**100, 0.1, 3.0], 1),
        ([-(2.0**100), 0.3, -7.0], 1),
        ([1e-3, 0.7, 2.0**100], 1),
        ([0.7, 5.0, -(2.0**100)], 3),
    ],
    permutation=None,
)
def test_the_average_is_the_same_bits_whatever_order_the_replies_arrive_in(
    data: list[tuple[list[float], int]], permutation: random.Random | None
) -> None:
    nodes = [
        ToyNode(f"n{i}", 1000 * (i + 1), weight=w, corrupt=_sending(np.array(v, np.float32)),
                extra_metrics={"queued-jobs": float(v[0])})
        for i, (v, w) in enumerate(data)
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as work, Registry(Path(work) / "r.sqlite") as registry:
        strategy = CapturingStrategy(registry, toy_similarity)
        grid = InProcessGrid()
        for i, node in enumerate(nodes):
            grid.add_node(1000 + i, node.app(), {"state-dir": str(Path(work) / node.name)})
        [first] = run_rounds(grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0)
        inputs, plan, replies = strategy.captured
        orders = [replies[::-1], replies[1:] + replies[:1]]
        if permutation is not None:
            shuffled = list(replies)
            permutation.shuffle(shuffled)
            orders.append(shuffled)
        for order in orders:
            again = strategy.aggregate_train(inputs, plan, order)
            assert first.aggregated is not None and again.aggregated is not None
            for key in SHARED_SHAPES:
                assert first.aggregated[key].tobytes() == again.aggregated[key].tobytes()
            assert again.metrics == first.metrics
            assert again.accepted == first.accepted  # in the order of the names


def _fit_inputs(tmp_path: Path, salts: list[str]) -> list[tuple[list[str], list[tuple]]]:
    """The similarity fit's units (in order) and pairs in each round of one fleet enrolled
    with keys starting with `salts` (node by node)."""
    calls: list[tuple[list[str], list[tuple]]] = []

    def recording(arrays, profiles, agreements, **_kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append((list(profiles), list(agreements)))
        return dict(arrays), 0.0, 0.0

    agreement = {"a": 0.25, "b": -0.5, "c": 0.75}
    nodes = [
        KeyedToyNode(name, 1000 * (i + 1), salt=salt, agreement=agreement)
        for i, (name, salt) in enumerate(zip("abc", salts, strict=True))
    ]
    with Registry(tmp_path / "registry.sqlite") as registry:
        strategy = SiMoEStrategy(
            registry, toy_similarity, k_experts=2, similarity_fit=recording, similarity_steps=5
        )
        grid = InProcessGrid()
        for i, node in enumerate(nodes):
            grid.add_node(1000 + i, node.app(), {"state-dir": str(tmp_path / node.name)})
        run_rounds(grid, strategy, initial_arrays(), num_rounds=3, wait_nodes_s=0, roster=Roster())
    return calls


def test_the_similarity_fit_sees_the_same_units_and_pairs_whatever_the_nodes_keys(
    tmp_path: Path,
) -> None:
    """Keys sorting as the names do, and the other way round: the fit's inputs are the same
    (its sums run over units and pairs in their order)."""
    ascending = _fit_inputs(tmp_path / "one", ["0", "1", "2"])
    descending = _fit_inputs(tmp_path / "two", ["9", "8", "7"])
    assert ascending and ascending == descending
    units, pairs = ascending[-1]
    assert units == ["a", "b", "c"] and len(pairs) == 6
    assert pairs == sorted(pairs) and ("a", "b", 0.25) not in pairs  # a's view of b is b's value
    assert ("a", "b", -0.5) in pairs
