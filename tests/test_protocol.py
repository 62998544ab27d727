"""The evaluation protocol (bench/protocol.py) and its leakage test.

The leakage test runs the training and selection entry points of the protocol's
transfer benchmark on a tiny fleet and fails if any of them read a test unit's labels:
every label read is recorded at the lowest level (`Store.labelled_candidates`), not
only by the protocol's own guard.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agent.store import Store
from bench import protocol


def test_the_protocol_keeps_its_own_rules() -> None:
    summary = protocol.check()
    assert summary["test"]["units"] >= 8 and len(summary["test"]["architectures"]) >= 4
    assert len(summary["test"]["user_specs"]) == 3  # rtx3060, its 8 GB board, orin-nano
    assert len(protocol.SEEDS) >= 3
    # every unit is resolvable and none is in two splits
    names = [u for s in ("train", "validation", "test") for u in protocol.units(s)]
    assert len(names) == len(set(names))
    for unit in names:
        assert protocol.device_of(unit).startswith("sim:")


def test_a_broken_split_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "VALIDATION_UNITS", (*protocol.VALIDATION_UNITS, "4090-ref"))
    with pytest.raises(ValueError, match="test models also in training/validation"):
        protocol.check()


def test_units_with_their_own_hardware_sit_in_their_models_split(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A MIG slice, a power mode or a board variant is a unit of its model: a unit of a test
    model is a test unit, never a training one."""
    assert {"a100-mig-1g5gb", "h100-sxm-mig-1g10gb", "3060ti-gddr6x"} <= set(protocol.TRAIN_UNITS)
    assert {"orin-15w", "orin-30w"} <= set(protocol.VALIDATION_UNITS)
    assert {"a30-mig-1g6gb", "h100-pcie-mig-1g10gb", "rtx3060-8gb"} <= set(protocol.units("test"))
    monkeypatch.setattr(protocol, "TRAIN_UNITS", (*protocol.TRAIN_UNITS, "a30-mig-2g12gb"))
    with pytest.raises(ValueError, match="a30"):
        protocol.check()


def test_the_guard_refuses_test_labels_to_training_and_selection(tmp_path: Path) -> None:
    labels = protocol.UnitLabels(tmp_path)
    for purpose in ("train", "select"):
        with pytest.raises(protocol.LeakageError, match="test unit"):
            labels.load("4090-ref", purpose)  # type: ignore[arg-type]
    assert labels.reads == []


TINY = {
    "TRAIN_UNITS": ("a100-sxm4-400w", "a100-pcie-250w", "tx2-maxn"),
    "VALIDATION_UNITS": ("t4-cool", "t4-hot"),
    "TEST_UNITS": ("4090-ref", "xavier-15w"),
    "TEST_USER_SPECS": ("rtx3060.json",),
}


@pytest.fixture(scope="module")
def tiny_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent.fleet_dataset import TINY_SUITE, build_fleet_dataset, resolve_gpus

    out = tmp_path_factory.mktemp("protocol_fleet")
    names = [*TINY["TRAIN_UNITS"], *TINY["VALIDATION_UNITS"], *TINY["TEST_UNITS"]]
    specs = resolve_gpus(",".join([*names, str(protocol.SPECS / "rtx3060.json")]))
    build_fleet_dataset(TINY_SUITE, specs, 24, out, seed=0)
    return out


@pytest.mark.slow
def test_training_and_selection_never_read_test_labels(
    tiny_fleet: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.transfer import protocol_transfer as pt
    from bench.transfer.online_gate_report import online_gate_markdown
    from bench.transfer.protocol_methods import ABLATIONS
    from bench.transfer.protocol_report import grid_table, per_unit

    for name, value in TINY.items():
        monkeypatch.setattr(protocol, name, value)
    monkeypatch.setattr(
        pt,
        "GRID",
        {
            "simoe": [{"expert_epochs": 1, "shared_epochs": 1, "adapt_epochs": 1}],
            "pooled": [{"expert_epochs": 1, "adapt_epochs": 1}],
            "mlp-finetune": [{"mlp_epochs": 1}],
            "schedule-transfer": [{"k": 1}, {"k": 2}],
        },
    )
    monkeypatch.setattr(pt, "CHOICES", tiny_fleet / "choices.json")
    read: list[str | None] = []
    original = Store.labelled_candidates

    def recording(self: Store, *args: object, **kwargs: object):  # noqa: ANN202
        read.append(kwargs.get("device"))  # type: ignore[arg-type]
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Store, "labelled_candidates", recording)
    test_devices = {f"sim:{u}" for u in protocol.units("test")}
    labels = protocol.UnitLabels(tiny_fleet)

    # selection: every method's grid on validation, and its validation report
    validation = pt.select(labels, seeds=[0])
    chosen = json.loads((tiny_fleet / "choices.json").read_text())["chosen"]
    assert set(chosen) >= {"simoe", "nearest-expert", "pooled", "mlp-finetune"}
    assert validation is not None and set(validation.per_task_top1[0]) >= set(pt.METHODS)
    grid = "\n".join(grid_table(validation.grid_scores))
    rows = [r for r in grid.splitlines() if r.startswith("| schedule-transfer |")]
    assert len(rows) == 2 and sum("**" in r for r in rows) == 1  # both points, one chosen
    # the validation report: every method and the ablations
    result = pt.evaluate("validation", chosen, [0], list(pt.METHODS), True, labels)
    assert set(result.per_task_top1[0]) >= {*pt.METHODS, *ABLATIONS}
    rows = [r for r in per_unit(result) if r.startswith("| ") and not r.startswith("| unit")]
    assert [r.split(" | ")[0][2:] for r in rows] == [u[4:] for u in result.units]
    # the online gate's sharpness (issue 23), on validation; sharpness 0 is simoe exactly
    monkeypatch.setattr(protocol, "ONLINE_GATE_SHARPNESS", (0.0, 2.0))
    gate = pt.select_sharpness(labels, [0], None)
    assert gate.chosen in (0.0, 2.0) and gate.split == "validation"
    for unit, by_budget in gate.runs[0].items():
        got = by_budget[16].top1[0.0]
        assert got == result.per_task_top1[0]["simoe"][16][unit]
    assert "| 16 | simoe (gate off" in online_gate_markdown(gate)
    # the hardware similarity's alignment loss (issue 23 item 3), on validation
    from bench.transfer import protocol_similarity as ps

    monkeypatch.setattr(ps, "CHOICES", tiny_fleet / "choices.json")
    similarity = ps.run("validation", [0], ["mse", "mse+pairwise"], labels, None, "tiny")
    assert {r.unit for r in similarity.rows} == {f"sim:{u}" for u in TINY["VALIDATION_UNITS"]}
    assert "mse+pairwise" in ps.markdown(similarity)
    # schedule sharing (issue 23 Must-show 1), on validation: its simoe is `simoe` exactly, its
    # schedule transfer the protocol's, and its shares come from training units only
    from bench.transfer import protocol_sharing as psh

    sharing = psh.run("validation", [0], labels, [(1.0, 0.0), (1.0, 8.0)])
    for unit in sharing.units:
        for b in (0, 16):
            for method in ("simoe", "schedule-transfer"):
                got = sharing.per_task_top1[0][method][b][unit]
                assert got == result.per_task_top1[0][method][b][unit]
    assert {psh.point_label(1.0, 8.0), "simoe"} <= set(sharing.per_task_top1[0])
    shown = psh.markdown(sharing.model_copy(update={"chosen": (1.0, 0.0)}))
    assert "| simoe-sharing[w=1,s=0] - schedule-transfer | 4 |" in shown
    assert read, "the instrument saw no label read at all"
    assert not test_devices & set(read), "a training or selection path read test labels"
    assert all(p in ("train", "select") for _, p in labels.reads)

    # the instrument does catch a read of test labels (the test can fail)
    pt.evaluate("test", chosen, [0], ["random"], False, labels)
    assert test_devices <= set(read)


@pytest.mark.slow
def test_the_fleet_hash_says_what_was_built(tiny_fleet: Path, tmp_path: Path) -> None:
    """A fresh build of the first workload hashes alike (one-thread sampling: a function of
    the seed); one changed label changes its unit's hash and no other."""
    from agent.fleet_dataset import TINY_SUITE, build_fleet_dataset, resolve_gpus

    names = [*TINY["TRAIN_UNITS"], *TINY["VALIDATION_UNITS"], *TINY["TEST_UNITS"]]
    specs = resolve_gpus(",".join([*names, str(protocol.SPECS / "rtx3060.json")]))
    again = tmp_path / "again"
    build_fleet_dataset(TINY_SUITE[:1], specs, 24, again, seed=0)
    built = {u: protocol.unit_task_hashes(tiny_fleet, u) for u in names}
    fresh = {u: protocol.unit_task_hashes(again, u) for u in names}
    task = next(iter(fresh[names[0]]))
    assert all(fresh[u] == {task: built[u][task]} for u in names)

    with sqlite3.connect(again / f"{names[0]}.sqlite") as db:
        db.execute(
            "UPDATE records SET latency_s = latency_s * 2 WHERE rowid = "
            "(SELECT MIN(rowid) FROM records WHERE latency_s IS NOT NULL)"
        )
    assert protocol.unit_task_hashes(again, names[0])[task] != built[names[0]][task]
    assert protocol.unit_task_hashes(again, names[1]) == fresh[names[1]]


@pytest.mark.slow
def test_unit_pairs_report_how_alike_two_units_of_one_model_rank(
    tiny_fleet: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.transfer import protocol_pairs

    for name, value in TINY.items():
        monkeypatch.setattr(protocol, name, value)
    labels = protocol.UnitLabels(tiny_fleet)
    rows = {(r["a"], r["b"]): r for r in protocol_pairs.pair_rows(labels)}
    assert ("t4-cool", "t4-hot") in rows and ("a100-sxm4-400w", "a100-pcie-250w") in rows
    t4 = rows[("t4-cool", "t4-hot")]
    assert 0.5 < t4["agreement"] <= 1.0 and t4["latency_ratio"] > 1.0  # the hot T4 is slower
    assert ("t4-cool", "select") in labels.reads  # validation labels read for selection only
