"""Opt-in schedule sharing: what leaves a node, what the server keeps and offers, and how
the tuner ranks what it received.

- off (the default): a node's replies carry nothing new; on: exactly the promised fields
  (workload key, rank, trace), no latencies, and the audit copy holds every shared item;
- the registry keeps a node's share, replaces it when it shares again, drops it when the
  node stops sharing or is dropped;
- an opted-in node gets the most similar units' traces for the workloads it asked about,
  labelled by similarity rank only; a malformed share is rejected in one line and the
  round goes on;
- the tuner puts the received traces into its first batch: a quarter of it (SHARED_RESERVE,
  chosen on validation; `shared_reserve` sets it) in offer order, even when the cost model
  ranks them below all its own candidates, the rest ranked by the model (fast mode: the
  model ranks them all, so at budget 1 the shared trace is measured when it ranks first);
  a trace that does not apply is counted, skipped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from federation_helpers import (
    ToyNode,
    add_shareable_records,
    fake_trace,
    initial_arrays,
    seed_node,
    toy_similarity,
)
from flwr.app import ConfigRecord, RecordDict
from privacy_audit import PrivacyViolation, audit_content, audit_share, node_secrets

from agent.audit import read_audit
from agent.client_app import app as client_app
from agent.node_state import NodeState
from agent.search_start import node_shared_seeds
from agent.sharing import keep_offer, offer_path, received_schedules, schedule_share
from schemas.sharing import (
    REC_SCHEDULES,
    SHARE_FIELD,
    OfferedTrace,
    ScheduleOffer,
    ScheduleShare,
    SharedTrace,
)
from server.inprocess import InProcessGrid
from server.registry import Registry
from server.reply_checks import UpdateRejected, read_share
from server.server_app import run_rounds
from server.similarity import initial_shared_arrays, model_similarity
from server.strategy import SiMoEStrategy
from simoe_model.synthetic import make_devices, make_tasks

KEY_A, KEY_B = "1234567890123", "98765"


def _share(key: str, *factors: int, wanted: tuple[str, ...] = ()) -> ScheduleShare:
    return ScheduleShare(
        top_k=3,
        schedules=[
            SharedTrace(workload_key=key, rank=i, trace=fake_trace(f))
            for i, f in enumerate(factors, start=1)
        ],
        wanted=list(wanted),
    )


# -- the node: what it sends ---------------------------------------------------------------


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Three real ClientApps in process, one round: `off` never opted in, `on1` and `on2`
    did; `on1` measured workload KEY_A (its fastest: split 8, then 4, then 2, 16 failed)."""
    tmp_path = tmp_path_factory.mktemp("sharing")
    devices, tasks = make_devices(3, seed=5), make_tasks(1, 8, seed=9)
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, model_similarity, k_experts=1, epochs=1)
    grid = InProcessGrid()
    dirs = {}
    for i, (label, device) in enumerate(zip(["off", "on1", "on2"], devices, strict=True)):
        state_dir = tmp_path / label
        seed_node(state_dir, device.name, device, tasks)
        node = NodeState(state_dir)
        if label != "off":
            node.save_config(node.config().model_copy(update={"share_schedules": True}))
        node.audit_dir.mkdir()
        grid.add_node(10 + i, client_app, {"state-dir": str(state_dir)})
        dirs[label] = state_dir
    add_shareable_records(dirs["on1"], KEY_A, {2: 3e-3, 4: 2e-3, 8: 1e-3, 16: 1e10, 32: 4e-3})
    run_rounds(grid, strategy, initial_shared_arrays(0), num_rounds=1, wait_nodes_s=0)
    return {"grid": grid, "dirs": dirs, "registry": registry, "tasks": tasks}


def _sent(state_dir: Path) -> list[RecordDict]:
    return [content for _, content in read_audit(NodeState(state_dir).audit_dir)]


def test_a_node_that_did_not_opt_in_sends_nothing_new(federation) -> None:
    sent = _sent(federation["dirs"]["off"])
    assert len(sent) == 2  # its hello and its train reply, each copied by the audit
    secrets, rows = node_secrets(federation["tasks"])
    for content in sent:
        assert REC_SCHEDULES not in content
        audit_content(content, secrets, rows)  # sharing=False: a share would be a violation
    with Registry(federation["registry"].path) as registry:
        key = NodeState(federation["dirs"]["off"]).fingerprint()
        assert registry.sharing(key) is None and not registry.shared_schedules(key)


def test_an_opted_in_node_sends_exactly_the_promised_fields(federation) -> None:
    sent = _sent(federation["dirs"]["on1"])
    assert len(sent) == 2 and all(REC_SCHEDULES in c for c in sent)  # hello and train
    secrets, rows = node_secrets(federation["tasks"])
    for content in sent:
        audit_content(content, secrets, rows, sharing=True)
        items = audit_share(content.config_records[REC_SCHEDULES])
        # its 3 fastest successful records of KEY_A, rank order; the failed one never
        assert [(i["workload_key"], i["rank"]) for i in items] == [
            (KEY_A, 1),
            (KEY_A, 2),
            (KEY_A, 3),
        ]
        assert [i["trace"] for i in items] == [fake_trace(8), fake_trace(4), fake_trace(2)]
        text = str(dict(content.config_records[REC_SCHEDULES]))
        for number in ("0.001", "0.002", "0.003", "1e-03", "shareable"):
            assert number not in text  # no latency, no task name
    with pytest.raises(PrivacyViolation, match="did not opt in"):
        audit_content(sent[0], secrets, rows)


def test_the_audit_catches_an_extra_field_in_a_share(federation) -> None:
    content = _sent(federation["dirs"]["on1"])[0]
    share = json.loads(str(content.config_records[REC_SCHEDULES][SHARE_FIELD]))
    share["schedules"][0]["latency_s"] = 1e-3
    with pytest.raises((PrivacyViolation, ValueError)):
        audit_share(ConfigRecord({SHARE_FIELD: json.dumps(share)}))


def test_the_server_offers_a_sharing_node_the_other_units_schedules(federation) -> None:
    """on2 asked nothing yet: it gets what the similar units shared (here on1's KEY_A), in
    its first round, and keeps it for its tuner; `off` gets and keeps nothing."""
    dirs = federation["dirs"]
    received = received_schedules(NodeState(dirs["on2"]))
    assert received == {KEY_A: [fake_trace(8), fake_trace(4), fake_trace(2)]}
    offer = json.loads(
        (NodeState(dirs["on2"]).federation_dir / "shared_schedules.json").read_text()
    )
    assert {item["source"] for item in offer["schedules"]} == {"similar-1"}
    assert NodeState(dirs["on1"]).config().name not in json.dumps(offer)  # no node names
    assert received_schedules(NodeState(dirs["off"])) == {}
    assert not offer_path(NodeState(dirs["off"])).exists()


def test_the_share_is_built_from_the_store_and_off_means_none(tmp_path: Path) -> None:
    devices, tasks = make_devices(1, seed=1), make_tasks(1, 4, seed=1)
    seed_node(tmp_path, devices[0].name, devices[0], tasks)  # its keys are not digits: not shared
    node = NodeState(tmp_path)
    add_shareable_records(tmp_path, KEY_B, {2: 2e-3, 4: 1e-3})
    assert schedule_share(node) is None  # off by default
    node.save_config(node.config().model_copy(update={"share_schedules": True, "share_top_k": 1}))
    share = schedule_share(node)
    assert share is not None and share.top_k == 1
    assert [(s.workload_key, s.rank, s.trace) for s in share.schedules] == [
        (KEY_B, 1, fake_trace(4))
    ]


# -- the server: what it keeps and offers -----------------------------------------------------


def test_the_registry_stores_replaces_and_drops_a_share(tmp_path: Path) -> None:
    node = ToyNode("a", 1000.0)
    with Registry(tmp_path / "registry.sqlite") as registry:
        registry.upsert_node(node.hello(), 1)
        registry.put_share(node.key, _share(KEY_A, 2, 4, wanted=(KEY_B,)), round_=1)
        assert registry.shared_schedules(node.key) == {KEY_A: [fake_trace(2), fake_trace(4)]}
        assert registry.sharing(node.key) == [KEY_B]
        registry.put_share(node.key, _share(KEY_B, 8), round_=2)  # shares again: replaced
        assert registry.shared_schedules(node.key) == {KEY_B: [fake_trace(8)]}
        assert registry.sharing(node.key) == []
        registry.drop_share(node.key)  # it turned sharing off
        assert registry.shared_schedules(node.key) == {} and registry.sharing(node.key) is None
        registry.put_share(node.key, _share(KEY_A, 2), round_=3)
        registry.drop_node(node.key)  # the node goes, and its schedules with it
        assert registry.shared_schedules(node.key) == {} and registry.node(node.key) is None
        assert registry.schedule_sharers() == []


def test_a_newcomer_gets_the_most_similar_units_traces_for_what_it_asks(tmp_path: Path) -> None:
    """Units by FP32 rate (toy similarity): the newcomer (1100) is nearest to `near` (1000),
    then `far` (8000). A unit of another target kind (CPU) is never a source. A malformed
    share is rejected in one line; the other replies of the round are accepted."""
    near = ToyNode("near", 1000.0, share=_share(KEY_A, 2, 4))
    far = ToyNode("far", 8000.0, share=_share(KEY_A, 8))
    cpu = ToyNode("cpu", 1050.0, device_kind="cpu", share=_share(KEY_A, 32))
    newcomer = ToyNode("newcomer", 1100.0, share=_share(KEY_B, 16))
    asker = ToyNode("asker", 1100.0, share=ScheduleShare(top_k=3, wanted=[KEY_B]))
    silent = ToyNode("silent", 1100.0)  # did not opt in
    broken = ToyNode("broken", 900.0, raw_share='{"top_k": 3, "schedules": [{"rank": 1}]}')
    nodes = [near, far, cpu, newcomer, asker, silent, broken]
    registry = Registry(tmp_path / "registry.sqlite")
    strategy = SiMoEStrategy(registry, toy_similarity, k_experts=1, share_units=2)
    grid = InProcessGrid()
    for i, node in enumerate(nodes):
        grid.add_node(i + 1, node.app(), {})
    [outcome] = run_rounds(grid, strategy, initial_arrays(), num_rounds=1, wait_nodes_s=0)

    [offer] = newcomer.offers
    assert [(o.workload_key, o.trace, o.source, o.rank) for o in offer.schedules] == [
        (KEY_A, fake_trace(2), "similar-1", 1),  # rank 1 of each unit, nearest first
        (KEY_A, fake_trace(8), "similar-2", 1),
        (KEY_A, fake_trace(4), "similar-1", 2),
    ]
    [asked] = asker.offers  # it asked about KEY_B only: the newcomer's (its nearest sharer)
    assert [(o.workload_key, o.trace) for o in asked.schedules] == [(KEY_B, fake_trace(16))]
    assert silent.offers == []  # no opt-in: no offer
    assert "near" not in offer.model_dump_json() and "far" not in offer.model_dump_json()

    why = outcome.rejected[broken.key]
    assert why.startswith("schedule share refused") and "\n" not in why and len(why) < 200
    assert set(outcome.accepted) == {n.key for n in nodes if n is not broken}
    assert registry.sharing(broken.key) is None  # nothing of a rejected reply is kept


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "share refused"),
        ('{"top_k": 3, "schedules": [], "wanted": ["abc"]}', "wanted"),
        (_share(KEY_A, 2).model_dump_json().replace('"rank":1', '"rank":0'), "rank"),
        (_share(KEY_A, 2).model_dump_json().replace("GetSBlock", "x").replace("[[[", "[[7,["), ""),
        (_share(KEY_A, 2).model_dump_json()[:-1] + ', "latency_s": 0.001}', "latency_s"),
        (json.dumps({"top_k": 3, "schedules": [
            {"workload_key": KEY_A, "rank": 1, "trace": fake_trace(2)},
            {"workload_key": KEY_A, "rank": 1, "trace": fake_trace(4)}]}), "rank 1 twice"),
        (json.dumps({"top_k": 3, "schedules": [
            {"workload_key": KEY_A, "rank": 1, "trace": "[[], []]"}]}), "instructions"),
    ],
)  # fmt: skip
def test_a_malformed_share_is_one_line(text: str, problem: str) -> None:
    content = RecordDict({REC_SCHEDULES: ConfigRecord({SHARE_FIELD: text})})
    with pytest.raises(UpdateRejected, match="schedule share refused") as caught:
        read_share(content)
    message = str(caught.value)
    assert problem in message and "\n" not in message and len(message) < 200
    assert read_share(RecordDict()) is None  # no share: a node that does not share


def test_a_malformed_offer_is_refused_and_the_round_goes_on() -> None:
    from agent.payload import PayloadRefused, decode_offer

    good = ScheduleOffer(
        round=1,
        schedules=[
            OfferedTrace(workload_key=KEY_A, trace=fake_trace(2), source="similar-1", rank=1)
        ],
    )
    assert decode_offer(ConfigRecord({"offer": good.model_dump_json()})) == good
    for bad in ("{", good.model_dump_json().replace("similar-1", "node-a")):
        with pytest.raises(PayloadRefused, match="schedule offer refused") as caught:
            decode_offer(ConfigRecord({"offer": bad}))
        assert "\n" not in str(caught.value)


# -- the tuner: what it does with it ---------------------------------------------------------


def test_the_tuner_uses_received_schedules_only_when_sharing_is_on(tmp_path: Path) -> None:
    node = NodeState(tmp_path)
    keep_offer(
        node,
        ScheduleOffer(
            round=1,
            schedules=[
                OfferedTrace(workload_key=KEY_A, trace=fake_trace(2), source="similar-1", rank=1)
            ],
        ),
    )
    assert node_shared_seeds(node) is None  # off: what it holds is not used
    node.save_config(node.config().model_copy(update={"share_schedules": True}))
    seeds = node_shared_seeds(node)
    assert seeds is not None and seeds.traces == {KEY_A: [fake_trace(2)]}


def _donor_best(
    tmp_path_factory: pytest.TempPathFactory, trials: int, seed: int, top: int
) -> tuple[str, list[str]]:
    """A similar unit's `top` fastest schedules of a tiny matmul tuned on a simulated T4
    (its key; traces fastest first: the offer order of that unit's top `top`)."""
    from agent.devices import get_device
    from agent.store import Store, canonical_json
    from agent.tuner import tune_workload
    from agent.workloads import parse_workload

    path = tmp_path_factory.mktemp("donor") / "store.sqlite"
    with Store(path) as store:
        result = tune_workload(
            parse_workload("matmul:64,64,64"), get_device("sim:t4"), store, trials=trials,
            cost_model="random", population=16, baseline=False, seed=seed,
        )  # fmt: skip
        key = result.tasks[0].workload_key
        return key, [canonical_json(r.trace) for r in store.fastest_records(key, "sim:t4", top)]


@pytest.fixture(scope="module")
def fleet_best(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A similar unit's best schedule of a tiny matmul on a simulated T4 (its key, trace)."""
    key, [best] = _donor_best(tmp_path_factory, trials=2, seed=7, top=1)
    return key, best


def _trace_scorer(score: object) -> object:
    """A cost model that scores each candidate by `score(its trace as JSON)`."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from agent.ms_database import trace_json

    @derived_object
    class _TraceScorer(ms.cost_model.PyCostModel):
        def load(self, path: str) -> None:
            pass

        def save(self, path: str) -> None:
            pass

        def update(self, context: object, candidates: object, results: object) -> None:
            pass

        def predict(self, context: object, candidates: list) -> np.ndarray:
            return np.asarray([score(trace_json(c.sch.trace)) for c in candidates], dtype=float)

    return _TraceScorer()


def _ranking(prefer: bool, seed: str) -> object:
    """A cost model that ranks the candidate whose trace is `seed` first (or last)."""
    return _trace_scorer(lambda trace: (1.0 if trace == seed else 0.0) * (1 if prefer else -1))


@pytest.mark.parametrize(
    ("prefer", "share", "rounds"),
    [(True, True, 0), (False, True, 0), (True, False, 0), (True, True, 1), (True, False, 1)],
)
def test_shared_traces_are_ranked_with_the_search_before_the_first_measurement(
    tmp_path: Path, fleet_best: tuple[str, str], prefer: bool, share: bool, rounds: int
) -> None:
    """Budget 1: the shared trace is the one measured, however the cost model ranks it (the
    batch of 1 is all reserve), and not without sharing (the search does not find it by
    itself: the control); a trace that does not apply to this task is skipped and counted.
    In fast mode (`rounds` chained model-only searches: the shared traces seed them) it is
    measured when the model ranks it first."""
    from agent.cost_models import COST_MODELS
    from agent.devices import get_device
    from agent.search_start import SharedSeeds
    from agent.store import Store, canonical_json
    from agent.tuner import tune_workload
    from agent.workloads import parse_workload

    key, seed = fleet_best
    name = f"test-ranking-{prefer}"
    COST_MODELS[name] = lambda device, node: _ranking(prefer, seed)
    wrong = json.dumps([[["GetSBlock", [], ["no_such_block", "main"], ["b0"]]], []])
    try:
        with Store(tmp_path / "store.sqlite") as store:
            result = tune_workload(
                parse_workload("matmul:64,64,64"), get_device("sim:t4"), store, trials=1,
                cost_model=name, population=16, baseline=False, model_rounds=rounds,
                shared=SharedSeeds({key: [seed, wrong]}) if share else None,
            )  # fmt: skip
            measured = [canonical_json(r.trace) for r in store.records(device="sim:t4")]
    finally:
        COST_MODELS.pop(name)
    assert (result.shared_schedules, result.shared_skipped) == ((1, 1) if share else (0, 0))
    assert len(measured) == 1
    assert (measured[0] == seed) is (share and (prefer or rounds == 0))


@pytest.fixture(scope="module")
def fleet_traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """Four schedules of the same tiny matmul measured on a simulated T4, fastest first
    (the offer order of a unit's top 4)."""
    key, traces = _donor_best(tmp_path_factory, trials=8, seed=3, top=4)
    assert len(set(traces)) == 4
    return key, traces


def _seeds_last(seeds: list[str]) -> object:
    """A cost model that scores every candidate whose trace is one of `seeds` below all
    the search's own."""
    return _trace_scorer(lambda trace: -1.0 if trace in seeds else 0.0)


def test_a_quarter_of_the_first_batch_is_the_offered_traces_in_offer_order(
    tmp_path: Path, fleet_traces: tuple[str, list[str]]
) -> None:
    """Budget 4 (one batch of 4), 4 offered traces the cost model scores below all the
    search's own: the first ceil(4 x 0.25) = 1 offered is measured, and the other 3 are not
    (the rest of the batch is the model's best)."""
    from agent.cost_models import COST_MODELS
    from agent.devices import get_device
    from agent.search_start import SharedSeeds
    from agent.store import Store, canonical_json
    from agent.tune_harness import SHARED_RESERVE, shared_reserve
    from agent.tuner import tune_workload
    from agent.workloads import parse_workload

    assert SHARED_RESERVE == 0.25 and shared_reserve(4, 4) == 1 and shared_reserve(1, 8) == 1
    assert shared_reserve(9, 8) == 2 and shared_reserve(9, 8, 0.5) == 4
    key, offered = fleet_traces
    COST_MODELS["test-seeds-last"] = lambda device, node: _seeds_last(offered)
    try:
        with Store(tmp_path / "store.sqlite") as store:
            result = tune_workload(
                parse_workload("matmul:64,64,64"), get_device("sim:t4"), store, trials=4,
                cost_model="test-seeds-last", population=16, baseline=False, seed=11,
                shared=SharedSeeds({key: offered}),
            )  # fmt: skip
            measured = [canonical_json(r.trace) for r in store.records(device="sim:t4")]
    finally:
        COST_MODELS.pop("test-seeds-last")
    assert result.shared_schedules == 4
    assert len(measured) == 4
    assert measured[:1] == offered[:1]
    assert not set(offered[1:]) & set(measured)


@pytest.mark.parametrize("reserve", [0.5, 1.0])
def test_the_reserve_is_the_product_paths_to_set(
    tmp_path: Path, fleet_traces: tuple[str, list[str]], reserve: float
) -> None:
    """The same tune as above with `tune_workload(shared_reserve=...)`: at 0.5 only the
    first two offered traces are measured (ceil(4 x 0.5) = 2), at 1.0 all four, in offer
    order."""
    from agent.cost_models import COST_MODELS
    from agent.devices import get_device
    from agent.search_start import SharedSeeds
    from agent.store import Store, canonical_json
    from agent.tuner import tune_workload
    from agent.workloads import parse_workload

    key, offered = fleet_traces
    kept = math.ceil(4 * reserve)
    COST_MODELS["test-seeds-last"] = lambda device, node: _seeds_last(offered)
    try:
        with Store(tmp_path / "store.sqlite") as store:
            tune_workload(
                parse_workload("matmul:64,64,64"), get_device("sim:t4"), store, trials=4,
                cost_model="test-seeds-last", population=16, baseline=False, seed=11,
                shared=SharedSeeds({key: offered}), shared_reserve=reserve,
            )  # fmt: skip
            measured = [canonical_json(r.trace) for r in store.records(device="sim:t4")]
    finally:
        COST_MODELS.pop("test-seeds-last")
    assert len(measured) == 4
    assert measured[:kept] == offered[:kept]
    assert not set(offered[kept:]) & set(measured)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_a_reserve_outside_0_1_is_refused(tmp_path: Path, bad: float) -> None:
    from agent.devices import get_device
    from agent.search_start import SharedSeeds
    from agent.store import Store
    from agent.tuner import tune_workload
    from agent.workloads import parse_workload
    from schemas import BadInputError

    with Store(tmp_path / "store.sqlite") as store:
        with pytest.raises(BadInputError, match=r"\[0, 1\]"):
            tune_workload(
                parse_workload("matmul:64,64,64"), get_device("sim:t4"), store, trials=4,
                shared=SharedSeeds({}), shared_reserve=bad,
            )  # fmt: skip
        assert not store.count_records()  # refused before anything was measured


@pytest.mark.parametrize("bad", ["1.5", "-1", "half", "0.5,0.5"])
def test_the_sharing_bench_refuses_a_bad_reserve_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, bad: str
) -> None:
    from cli_helpers import one_line_error, run_main

    from bench.federation.sharing_onoff import main

    result = run_main(main, "sharing_onoff", ["--reserve", bad], monkeypatch, capsys)
    assert "--reserve" in one_line_error("sharing_onoff", *result)


def _breadth_run(population: int, bests: dict[str, tuple[float, float]]) -> dict:
    """A sharing_onoff run's JSON: unit -> (best off, best on at reserve 0.25), seed 0."""
    rows = [
        {"unit": u, "workload": "w", "budget": 8, "seed": 0,
         "off": {"best_s": off}, "on": {"0.25": {"best_s": on}}}
        for u, (off, on) in bests.items()
    ]  # fmt: skip
    return {
        "rows": rows, "command": f"run {population}", "wall_s": 1.0, "cpu_s": 1.0,
        "args": {"population": population, "reserve": [0.25], "budgets": [8], "work": "x"},
    }  # fmt: skip


def test_the_breadth_rule_pairs_cases_and_needs_its_interval_above_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from cli_helpers import one_line_error, run_main

    from bench.federation.sharing_onoff import main, write_breadth
    from schemas.errors import run_cli

    units = ["t4-a", "l4-a", "a10-a", "v100-a"]
    small = _breadth_run(64, {u: (2.0, 3.0) for u in units})
    faster = _breadth_run(512, {u: (1.0, 1.0) for u in units})
    mixed = _breadth_run(512, {**{u: (1.0, 1.0) for u in units[:2]}, "a10-a": (4.0, 6.0),
                               "v100-a": (4.0, 6.0)})  # fmt: skip
    paths = {}
    for name, run in {"small": small, "faster": faster, "mixed": mixed}.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(run))
    text = write_breadth(paths["small"], paths["faster"], tmp_path / "a")
    result = json.loads((tmp_path / "a" / "search_breadth.json").read_text())
    assert result["pooled"]["cases"] == 8 and result["rule_met"] and "Rule: MET" in text
    assert result["off"]["geomean_small_over_large"] == pytest.approx(2.0)
    assert result["on"]["geomean_small_over_large"] == pytest.approx(3.0)
    write_breadth(paths["small"], paths["mixed"], tmp_path / "b")  # two models faster, two slower
    result = json.loads((tmp_path / "b" / "search_breadth.json").read_text())
    assert not result["rule_met"] and result["pooled"]["interval_95"][0] < 1.0
    other = dict(small, args={**small["args"], "budgets": [4]})  # not a population-only pair
    paths["other"] = tmp_path / "other.json"
    paths["other"].write_text(json.dumps(other))
    args = ["--breadth", str(paths["other"]), str(paths["faster"]), "--out", str(tmp_path)]
    entry = lambda: run_cli(main, "sharing_onoff")  # noqa: E731 - as `python -m` runs it
    result = run_main(entry, "sharing_onoff", args, monkeypatch, capsys)
    assert "--population only" in one_line_error("sharing_onoff", *result)


def test_the_sharing_bench_tunes_each_donor_workload_once_and_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rerun on the same `--work` reuses each workload's donor tune; one workload's tune
    never stands in for another's (the record count did, whatever workload wrote it)."""
    from bench.federation import sharing_onoff

    tuned: list[str] = []

    def fake_tune(node, device, workload, trials, cost_model, seed):  # noqa: ANN001, ANN202
        tuned.append(workload)
        return {"best_s": len(tuned) * 1e-3}

    monkeypatch.setattr(sharing_onoff, "_tune", fake_tune)
    node = NodeState(tmp_path / "donor")
    node.dir.mkdir(parents=True)
    first = [sharing_onoff._donor_tune(node, None, w, 8) for w in sharing_onoff.WORKLOADS]
    again = [sharing_onoff._donor_tune(node, None, w, 8) for w in sharing_onoff.WORKLOADS]
    assert tuned == list(sharing_onoff.WORKLOADS)
    assert again == first == [{"best_s": 1e-3}, {"best_s": 2e-3}]
    sharing_onoff._donor_tune(node, None, sharing_onoff.WORKLOADS[0], 16)  # other trials
    assert tuned[-1] == sharing_onoff.WORKLOADS[0] and len(tuned) == 3


def test_the_offered_schedules_a_node_measured_are_counted(
    tmp_path: Path, fleet_best: tuple[str, str]
) -> None:
    """What the demo's newcomer bench reports: of the candidates measured for an offered
    workload, those that are offered ones (the same scheduled module), here 1 of 2."""
    from agent.cost_models import COST_MODELS
    from agent.devices import get_device
    from agent.sharing import measured_shared
    from agent.store import Store
    from agent.tuner import tune_workload
    from agent.workloads import parse_workload

    key, seed = fleet_best
    node = NodeState(tmp_path)
    node.save_config(node.config().model_copy(update={"share_schedules": True, "device": "sim:t4"}))
    offer = OfferedTrace(workload_key=key, trace=seed, source="similar-1", rank=1)
    keep_offer(node, ScheduleOffer(round=1, schedules=[offer]))
    assert measured_shared(node) == (1, 0, 0)  # nothing measured yet
    COST_MODELS["test-prefer-shared"] = lambda device, node: _ranking(True, seed)
    try:
        with Store(node.store_path) as store:
            tune_workload(
                parse_workload("matmul:64,64,64"), get_device("sim:t4"), store, trials=2,
                cost_model="test-prefer-shared", population=16, baseline=False,
                shared=node_shared_seeds(node),
            )  # fmt: skip
    finally:
        COST_MODELS.pop("test-prefer-shared")
    assert measured_shared(node) == (1, 2, 1)

    # the demo bench's sharing ceiling: the offered trace modelled once, beside the best run
    from bench.federation.demo_shared_ranking import best_recorded, offer_ceiling

    best, offered_best, count, place = offer_ceiling(node)
    assert (count, place) == (1, 1) and best == best_recorded(node)
    from agent.store import canonical_json

    with Store(node.store_path) as store:
        runs = {canonical_json(r.trace): float(np.mean(r.run_secs)) for r in store.records()}
    assert offered_best == pytest.approx(runs[seed], rel=0.2)
    assert best == min(runs.values())


# -- the command line -----------------------------------------------------------------------


def test_sharing_is_switched_and_checked_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from cli_helpers import one_line_error, run_main

    from agent.cli import main

    state = ["--state-dir", str(tmp_path)]
    code, out, _ = run_main(main, "simoe-agent", ["sharing", "--json", *state], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["share_schedules"] is False
    args = ["sharing", "on", "--top-k", "2", "--json", *state]
    code, out, err = run_main(main, "simoe-agent", args, monkeypatch, capsys)
    assert code == 0, err
    config = NodeState(tmp_path).config()
    assert config.share_schedules and config.share_top_k == 2
    for bad in (["sharing", "maybe"], ["sharing", "--top-k", "9"]):
        result = run_main(main, "simoe-agent", [*bad, *state], monkeypatch, capsys)
        one_line_error("simoe-agent", *result)
    code, _, _ = run_main(main, "simoe-agent", ["sharing", "off", *state], monkeypatch, capsys)
    assert code == 0 and not NodeState(tmp_path).config().share_schedules


def test_enroll_refuses_a_bad_share_top_k_before_anything(tmp_path: Path) -> None:
    from agent.enroll import enroll
    from schemas import BadInputError

    with pytest.raises(BadInputError, match="--share-top-k must be 1 to 8"):
        enroll(
            state_dir=tmp_path / "node", server="127.0.0.1:1", ca=tmp_path / "missing.pem",
            name="n1", device="cpu", share_schedules=True, share_top_k=0,
        )  # fmt: skip
    assert not (tmp_path / "node").exists()  # nothing written
