"""Measurements move the gate (simoe_model.online_gate) for TVM tensor programs: the cost
model, its update path, fast mode's re-ranking, and the kernel search sharing the code."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from simoe_model import cost_model as cm
from simoe_model import kernel_model, online_gate
from simoe_model.cost_model import SiMoECostModel
from simoe_model.features import FEATURE_DIM
from simoe_model.model import SiMoE, SiMoEConfig
from simoe_model.train import predict

torch.set_num_threads(1)
N = 40


def _opposite_experts() -> tuple[SiMoE, np.ndarray, list[np.ndarray]]:
    """A tiny model with two experts that rank every candidate oppositely ("near": the
    target's own hardware, so the gate favours it; "far": its exact negation), the target's
    hardware vector and N candidates' features (one 164-wide row each)."""
    torch.manual_seed(0)
    cfg = SiMoEConfig(store_hidden=16, program_dim=16, expert_hidden=16)
    model = SiMoE(cfg)
    rng = np.random.default_rng(0)
    h_near = rng.normal(size=cfg.hardware_dim).astype(np.float32)
    h_far = (h_near + 0.5 * rng.normal(size=cfg.hardware_dim)).astype(np.float32)  # alike
    near = model.ensure_expert("near", h_near)
    far = model.ensure_expert("far", h_far)
    far.head.load_state_dict(near.head.state_dict())
    with torch.no_grad():
        far.head[2].weight.mul_(-1)
        far.head[2].bias.mul_(-1)
    features = [rng.normal(size=(1, FEATURE_DIM)).astype(np.float32) for _ in range(N)]
    return model, h_near, features


def _expert_scores(
    model: SiMoE, h: np.ndarray, features: list[np.ndarray]
) -> dict[str, np.ndarray]:
    names, scores, _ = online_gate.expert_table(model, features, h)
    return {n: scores[:, i] for i, n in enumerate(names)}


def test_the_two_experts_disagree_and_the_gate_follows_the_near_one() -> None:
    model, h, features = _opposite_experts()
    s = _expert_scores(model, h, features)
    assert np.allclose(s["near"], -s["far"], atol=1e-5)  # opposite rankings
    names, _, prior = online_gate.expert_table(model, features, h)
    assert (prior[:, names.index("near")] > prior[:, names.index("far")]).all()
    zero = predict(model, features, h)
    assert int(np.argmax(zero)) == int(np.argmax(s["near"]))


@pytest.mark.parametrize("sharpness", [1.0, 2.0])
def test_a_newcomer_whose_measurements_contradict_its_nearest_expert_stops_following_it(
    sharpness: float,
) -> None:
    model, h, features = _opposite_experts()
    s = _expert_scores(model, h, features)
    latencies = np.exp(-s["far"])  # the target ranks as the FAR expert does
    picks = []
    for m in range(0, 7):
        evidence = (
            online_gate.task_evidence(model, features[:m], latencies[:m], h, sharpness)
            if m >= 2
            else None
        )
        mix = online_gate.online_predict(model, features, h, evidence)
        picks.append(int(np.argmax(mix[m:])) + m)  # the best candidate not yet measured
    best_far = [int(np.argmax(s["far"][m:])) + m for m in range(7)]
    best_near = [int(np.argmax(s["near"][m:])) + m for m in range(7)]
    assert picks[:2] == best_near[:2]  # nothing (or one) measured: the gate's prior
    assert picks[4:] == best_far[4:]  # after 4 measurements it follows the far expert


def test_sharpness_0_reproduces_todays_scores_exactly() -> None:
    model, h, features = _opposite_experts()
    latencies = np.exp(-_expert_scores(model, h, features)["far"])
    names, ev = online_gate.task_evidence(model, features[:8], latencies[:8], h, 0.0)
    assert np.array_equal(ev, np.ones(len(names)))
    prior = np.random.default_rng(1).dirichlet(np.ones(3), size=5)
    assert online_gate.reweight(prior, np.array([-0.1, -2.0, -0.5]), 8, 0.0) is prior
    # the cost model with the gate off predicts exactly as train.predict, measured or not
    cost = _cost_model(model, h, features, sharpness=0.0)
    before = cost.predict(_context(), features)
    cost.update(_context(), features[:8], _results(latencies[:8]))
    after = cost.predict(_context(), features)
    assert np.array_equal(before, predict(model, features, h))
    assert np.array_equal(after, before)
    # ... and with fine-tuning: the fine-tuned model's own mixture, as before the gate
    tuned = _cost_model(model, h, features, sharpness=0.0, online=True)
    tuned.update(_context(), features[:8], _results(latencies[:8]))
    assert tuned.updates == 1 and tuned.task_evidence("task") is None
    got = tuned.predict(_context(), features)
    assert np.array_equal(got, predict(tuned.model, features, h))


def _context() -> SimpleNamespace:
    return SimpleNamespace(mod="task")


def _results(latencies: np.ndarray) -> list[SimpleNamespace]:
    return [SimpleNamespace(run_secs=[float(x)], error_msg=None) for x in latencies]


def _cost_model(
    model: SiMoE, h: np.ndarray, features: list[np.ndarray], *, sharpness: float, online=False
) -> SiMoECostModel:
    """The cost model, called with feature arrays as its candidates (feature extraction and
    the task key stubbed: MetaSchedule's parts are tested in test_model_cost_model)."""
    cost = SiMoECostModel(model, h, online=online, sharpness=sharpness, update_epochs=2)
    return cost._inst  # noqa: SLF001 - the Python object (its FFI wrapper wants TVM objects)


@pytest.fixture(autouse=True)
def _stub_tvm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cm, "extract_features", lambda _ctx, cands, _ex: list(cands))
    monkeypatch.setattr(cm, "shash2hex", lambda mod: str(mod))


def test_the_cost_models_update_path_moves_its_predictions() -> None:
    model, h, features = _opposite_experts()
    s = _expert_scores(model, h, features)
    latencies = np.exp(-s["far"])
    cost = _cost_model(model, h, features, sharpness=2.0)
    zero = cost.predict(_context(), features)
    assert int(np.argmax(zero)) == int(np.argmax(s["near"]))
    cost.update(_context(), features[:4], _results(latencies[:4]))  # what MetaSchedule calls
    moved = cost.predict(_context(), features)
    assert int(np.argmax(moved[4:])) == int(np.argmax(s["far"][4:]))  # of the unmeasured
    names, ev = cost.task_evidence("task")
    assert ev[names.index("far")] == 1.0 and ev[names.index("near")] < 0.05
    # another task's predictions are untouched by this task's measurements
    other = cost.predict(SimpleNamespace(mod="other"), features)
    assert np.array_equal(other, zero)


def test_the_own_expert_trained_on_the_measurements_is_exempt() -> None:
    model, h, features = _opposite_experts()
    latencies = np.exp(-_expert_scores(model, h, features)["far"])
    cost = _cost_model(model, h, features, sharpness=2.0, online=True)
    cost.update(_context(), features[:6], _results(latencies[:6]))
    assert cost.updates == 1 and "target" in cost.model.expert_names  # fine-tuned too
    names, ev = cost.task_evidence("task")
    assert ev[names.index("target")] == 1.0
    assert ev[names.index("near")] < ev[names.index("far")] == 1.0


def test_fast_mode_reranks_only_with_the_gate_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent import tune_harness

    found = [SimpleNamespace(score=float(i)) for i in range(200)]
    monkeypatch.setattr("simoe_model.model_search.model_only_search", lambda *a, **k: list(found))
    task = SimpleNamespace(mod=None, name="t")
    model, h, features = _opposite_experts()
    on = tune_harness.model_picks(
        task, None, _cost_model(model, h, features, sharpness=2.0), 32, rounds=1, population=8
    )
    assert on.rerank is not None and on.first == tune_harness.GATE_BATCH
    assert len(on.candidates) == 4 * 32
    off = tune_harness.model_picks(
        task, None, _cost_model(model, h, features, sharpness=0.0), 32, rounds=1, population=8
    )
    assert off.rerank is None and len(off.candidates) == 32


def test_the_kernel_search_uses_the_same_mechanism() -> None:
    assert kernel_model.order_log_likelihood is online_gate.order_log_likelihood
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(30, 2))
    scores[:, 1] = -scores[:, 0]
    prior = np.tile([0.8, 0.2], (30, 1))
    search = kernel_model.RankedSearch(scores, prior, sharpness=2.0)
    for i in range(4):
        search.observe(i, float(np.exp(scores[i, 0])))  # measured as expert 1 ranks
    search.mixture()
    assert search.expert_weights[1] > 0.9


def test_proposed_candidates_rerank_the_rest_by_what_was_measured() -> None:
    import tvm
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    from agent.devices import get_device
    from agent.workloads import parse_workload, prim_func
    from simoe_model.model_search import ProposedCandidates, ScoreCostModel, model_only_search

    device = get_device("sim:a100-40gb")
    mod = tvm.IRModule({"main": prim_func(parse_workload("matmul:64,64,64"))})
    target = device.target()

    def score(_task: object, mods: list) -> np.ndarray:
        return np.array([o if isinstance(o, str) else o[0] for o in device.simulate_batch(
            list(mods), repeat=1)], dtype=object).astype(float)  # fmt: skip

    found = model_only_search(
        mod, target, score, cost_model=ScoreCostModel(score), rounds=1, per_round=8,
        population=16, init_min_unmeasured=4, seed=0,
    )  # fmt: skip
    assert len(found) >= 6

    class Reverse:  # a model that, once measured, ranks the given order backwards
        def predict(self, _ctx: object, cands: list) -> np.ndarray:
            return np.array([float(order[ms_key(c)]) for c in cands])

    def ms_key(cand: object) -> int:
        return int(tvm_ffi.structural_hash(cand.sch.mod))  # type: ignore[attr-defined]

    order = {int(tvm_ffi.structural_hash(f.mod)): i for i, f in enumerate(found)}
    strategy = ProposedCandidates(found[:6], rerank=Reverse(), first=2)._inst  # noqa: SLF001
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply")
    strategy._initialize_with_tune_context(context)  # noqa: SLF001
    strategy.pre_tuning(6, 64, None)
    first = [order[ms_key(c)] for c in strategy.generate_measure_candidates()]
    second = [order[ms_key(c)] for c in strategy.generate_measure_candidates()]
    assert first == [0, 1]  # as the search ranked them
    assert second == [5, 4]  # the rest, ranked again by the (measured) model
    assert len(strategy.generate_measure_candidates()) == 2
    assert strategy.generate_measure_candidates() is None


def test_the_nodes_tuner_builds_simoe_with_the_gate(tmp_path: object) -> None:
    from agent.cost_models import make_cost_model
    from agent.devices import get_device
    from agent.node_state import NodeState
    from schemas.config import AgentConfig

    node = NodeState(tmp_path)  # type: ignore[arg-type]
    device = get_device("sim:t4")
    default = make_cost_model("simoe", device, node)
    assert default.sharpness == online_gate.DEFAULT_SHARPNESS
    node.save_config(AgentConfig(device="sim:t4", gate_sharpness=1.5))
    assert make_cost_model("simoe", device, node).sharpness == 1.5
    node.save_config(AgentConfig(device="sim:t4", gate_sharpness=0.0))
    assert make_cost_model("simoe", device, node).sharpness == 0.0


def test_the_tuner_hands_the_nodes_earlier_measurements_to_the_gate(tmp_path: object) -> None:
    from pathlib import Path

    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from agent.devices import get_device
    from agent.search_start import observe_stored
    from agent.store import Store
    from agent.tune_harness import TuneTask
    from agent.tuner import tune_workload
    from agent.workloads import parse_workload, prim_func

    device = get_device("sim:t4")
    workload = parse_workload("matmul:32,32,32")
    with Store(Path(str(tmp_path)) / "store.sqlite") as store:
        tune_workload(workload, device, store, trials=4, cost_model="random", baseline=False)
        measured = [c for c in store.labelled_candidates(device=device.name) if c.latency_s]
        assert len(measured) >= 2
        task = TuneTask(name="m", mod=_normalize_mod(prim_func(workload)), weight=1.0, flops=1)
        model, h, features = _opposite_experts()
        off = SiMoECostModel(model, h, sharpness=0.0)
        assert observe_stored(off, [task], store, device.name) == 0  # the gate off: nothing
        on = SiMoECostModel(model, h, sharpness=2.0)
        assert observe_stored(on, [task], store, device.name) == len(measured)
        (kept,) = on.measured.values()
        assert sorted(kept.latencies) == sorted(c.latency_s for c in measured)
