"""The agent's real ClientApp with the real SiMoE model, through an in-process Grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from federation_helpers import seed_node

from agent.client_app import app as client_app
from agent.node_state import NodeState
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.roster import Roster
from server.server_app import run_rounds
from server.similarity import initial_shared_arrays, model_similarity, similarity_matrix
from server.strategy import SiMoEStrategy
from simoe_model.model import expert_arrays
from simoe_model.synthetic import make_devices, make_tasks


@pytest.fixture(scope="module")
def fleet_data() -> tuple[list, list]:
    return make_devices(5, seed=3), make_tasks(3, 12, seed=1)


def build(
    tmp_path: Path, devices: list, tasks: list, count: int
) -> tuple[InProcessGrid, SiMoEStrategy, Registry]:
    registry = Registry(tmp_path / "server" / "registry.sqlite")
    strategy = SiMoEStrategy(registry, model_similarity, k_experts=2, epochs=1)
    grid = InProcessGrid()
    for i, device in enumerate(devices[:count]):
        state_dir = tmp_path / device.name
        seed_node(state_dir, device.name, device, tasks)
        grid.add_node(100 + i, client_app, {"state-dir": str(state_dir)})
    return grid, strategy, registry


def test_rounds_with_real_model_and_late_joiner(tmp_path: Path, fleet_data) -> None:
    devices, tasks = fleet_data
    grid, strategy, registry = build(tmp_path, devices, tasks, 3)
    roster = Roster()  # the run's: the late joiner's round continues it
    outcomes = run_rounds(
        grid, strategy, initial_shared_arrays(0), num_rounds=2, wait_nodes_s=0, roster=roster
    )
    assert [len(o.accepted) for o in outcomes] == [3, 3]
    assert not any(o.rejected for o in outcomes)
    assert sorted(registry.expert_names()) == sorted(d.name for d in devices[:3])
    # round 2: each node got the 2 other experts, as ranked by the shared encoder
    for device in devices[:3]:
        state = NodeState(tmp_path / device.name).federation_state()
        assert len(state.experts) == 2 and device.name not in state.experts
        assert state.last_round == 2 and state.rounds_trained == 2
        model = NodeState(tmp_path / device.name).load_model()
        assert set(model.expert_names) == set(state.experts) | {device.name}

    late = devices[3]
    seed_node(tmp_path / late.name, late.name, late, tasks[:1])
    grid.add_node(200, client_app, {"state-dir": str(tmp_path / late.name)})
    _, current = registry.latest_global()  # what the round ranks the experts with
    [outcome] = run_rounds(grid, strategy, {}, num_rounds=1, wait_nodes_s=0, roster=roster)
    late_key = NodeState(tmp_path / late.name).fingerprint()
    assert late_key in outcome.accepted
    expected = sorted(
        (n for n in registry.expert_names() if n != late.name),
        key=lambda n: (
            -model_similarity(
                current,
                registry.profiles()[late.name],
                {n: registry.profiles()[n]},
            )[n]
        ),
    )[:2]
    assert outcome.delivered[late_key] == expected
    names, matrix = similarity_matrix(current, registry.profiles())
    assert len(names) == 4 and np.allclose(np.diag(matrix), 1.0, atol=1e-5)


def test_node_without_data_is_served_zero_shot(tmp_path: Path, fleet_data) -> None:
    devices, tasks = fleet_data
    grid, strategy, registry = build(tmp_path, devices, tasks, 2)
    roster = Roster()
    run_rounds(
        grid, strategy, initial_shared_arrays(0), num_rounds=1, wait_nodes_s=0, roster=roster
    )
    newcomer = devices[4]
    seed_node(tmp_path / newcomer.name, newcomer.name, newcomer, [])  # enrolled, no records
    grid.add_node(300, client_app, {"state-dir": str(tmp_path / newcomer.name)})
    [outcome] = run_rounds(grid, strategy, {}, num_rounds=1, wait_nodes_s=0, roster=roster)
    key = NodeState(tmp_path / newcomer.name).fingerprint()
    assert key in outcome.served and key not in outcome.accepted
    model = NodeState(tmp_path / newcomer.name).load_model()
    assert sorted(model.expert_names) == sorted(d.name for d in devices[:2])  # a bank to use
    state = NodeState(tmp_path / newcomer.name).federation_state()
    assert state.global_version == outcome.global_version - 1  # the version the round sent
    assert state.experts == sorted(d.name for d in devices[:2])
    assert newcomer.name not in registry.expert_names()
    assert expert_arrays(model, devices[0].name)


def test_the_server_fits_the_similarity_on_the_agreements_nodes_report(
    tmp_path: Path, fleet_data
) -> None:
    """Real ClientApps check the experts they are sent and report their rank agreement;
    the registry keeps it and the server fits the global hardware encoder on it."""
    from server.similarity import fit_shared_similarity
    from simoe_model.hardware import hardware_vector as hv
    from simoe_model.model import SiMoE, load_shared_arrays

    devices, tasks = fleet_data
    grid, strategy, registry = build(tmp_path, devices, tasks, 3)
    fits: list[tuple[dict, dict, list]] = []

    def recording_fit(arrays, profiles, agreements, **kwargs):  # noqa: ANN001, ANN003, ANN202
        fitted, before, after = fit_shared_similarity(arrays, profiles, agreements, **kwargs)
        fits.append((dict(arrays), fitted, list(agreements)))
        return fitted, before, after

    strategy.similarity_fit, strategy.similarity_steps = recording_fit, 20
    outcomes = run_rounds(grid, strategy, initial_shared_arrays(0), num_rounds=2, wait_nodes_s=0)
    assert outcomes[0].similarity_fit is None  # round 1: no experts sent, nothing checked
    fit = outcomes[1].similarity_fit
    assert fit is not None and (fit.pairs, fit.nodes, fit.steps) == (6, 3, 20)
    assert fit.loss_after < fit.loss_before
    assert registry.similarity_fits() == {2: fit}

    keys = {NodeState(tmp_path / d.name).fingerprint(): d.name for d in devices[:3]}
    stored = registry.expert_agreements()
    assert len(stored) == 6 and all(-1 <= v <= 1 and round(v, 2) == v for *_, v in stored)
    for checker, owner, value in stored:  # what each node kept is what the server has
        state = NodeState(tmp_path / keys[checker]).federation_state()
        assert state.expert_agreement[keys[owner]] == value

    [(averaged, fitted, agreements)] = fits
    # the fit names the nodes by name (keys are drawn afresh at each enrolment)
    assert agreements == sorted((keys[a], keys[b], v) for a, b, v in stored)
    _, latest = registry.latest_global()
    moved = {k for k in averaged if not np.array_equal(averaged[k], latest[k])}
    assert moved and all(k.startswith("hardware_encoder.mlp.") for k in moved)
    assert all(np.array_equal(fitted[k], latest[k]) for k in latest)  # what the nodes get next

    def cos_error(arrays: dict) -> float:
        model = SiMoE()
        load_shared_arrays(model, arrays)
        profiles = registry.profiles()
        return float(
            np.mean(
                [
                    (model.similarity(*(hv(profiles[keys[k]]) for k in (a, b))) - v) ** 2
                    for a, b, v in stored
                ]
            )
        )

    assert cos_error(latest) < cos_error(averaged)  # cos moved toward the agreements
