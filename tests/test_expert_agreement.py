"""A node's rank agreement with each expert it checked: the reply's field, the registry's
column and query, and the server's fit of the hardware similarity on it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch
from federation_helpers import toy_profile
from pydantic import ValidationError

from schemas.messages import MAX_CHECKED, NodeHello, SimilarityFitInfo
from server.registry import SCHEMA_VERSION, Registry


def hello(**fields: object) -> NodeHello:
    return NodeHello(
        name="a",
        key_fingerprint="key-a-0123456789",
        profile=toy_profile("a", 1000.0),
        **fields,  # type: ignore[arg-type]
    )


def test_a_hello_carries_one_agreement_per_checked_expert() -> None:
    sent = hello(checked_experts=["b", "c"], expert_agreement={"b": 0.91, "c": -0.5})
    back = NodeHello.model_validate_json(sent.model_dump_json())
    assert back.expert_agreement == {"b": 0.91, "c": -0.5}


@pytest.mark.parametrize(
    ("agreement", "fragment"),
    [
        ({"b": 1.5}, "less than or equal to 1"),
        ({"b": -1.01}, "greater than or equal to -1"),
        ({"b": 0.123}, "more than 2 decimals"),
        ({"z": 0.5}, "did not check: ['z']"),
        ({"b": "high"}, "valid number"),
    ],
)
def test_a_bad_agreement_is_refused_in_one_line(agreement: dict, fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        hello(checked_experts=["b"], expert_agreement=agreement)
    message = info.value.errors()[0]["msg"]
    assert fragment in message and "\n" not in message


def test_nan_inf_too_many_and_extra_fields_are_refused() -> None:
    text = hello(checked_experts=["b"]).model_dump_json()
    for value in ("NaN", "Infinity"):
        with pytest.raises(ValidationError):  # JSON from a node that is not ours
            NodeHello.model_validate_json(
                text.replace('"expert_agreement":{}', f'"expert_agreement":{{"b":{value}}}')
            )
        with pytest.raises(ValidationError):
            hello(checked_experts=["b"], expert_agreement={"b": float(value.lower()[:3])})
    names = [f"e{i}" for i in range(MAX_CHECKED + 1)]
    with pytest.raises(ValidationError):
        hello(checked_experts=names[:MAX_CHECKED], expert_agreement=dict.fromkeys(names, 0.1))
    data = json.loads(text)
    data["expert_agreement_detail"] = {"b": [0.1, 0.2]}
    with pytest.raises(ValidationError, match="Extra inputs"):
        NodeHello.model_validate(data)


def registry_with_experts(tmp_path: Path, names: list[str]) -> Registry:
    """A registry that knows nodes `names`, each with its expert (named as the node)."""
    registry = Registry(tmp_path / "registry.sqlite")
    for i, name in enumerate(names):
        node = NodeHello(
            name=name,
            key_fingerprint=f"key-{name}-0123456789",
            profile=toy_profile(name, 1000.0 * (i + 1)),
        )
        registry.upsert_node(node, 100 + i)
        registry.put_expert(name, node.key_fingerprint, {"w": np.ones(2)}, round_=1, num_examples=3)
    return registry


def test_the_registry_keeps_each_nodes_latest_agreement_per_expert(tmp_path: Path) -> None:
    registry = registry_with_experts(tmp_path, ["a", "b", "c"])
    key = {n: f"key-{n}-0123456789" for n in "abc"}
    registry.record_checks(2, key["a"], ["b", "c"], ["c"], {"b": 0.8, "c": -0.3})
    registry.record_checks(2, key["b"], ["a"], [], {})  # checked, but could not tell
    registry.record_checks(3, key["a"], ["b"], [], {"b": 0.6})  # a newer verdict on b
    assert registry.expert_agreements() == [(key["a"], key["b"], 0.6), (key["a"], key["c"], -0.3)]
    assert registry.distrusted_experts() == set()  # the verdicts work as before


def test_a_registry_written_before_agreements_opens_and_gains_them(tmp_path: Path) -> None:
    """A version-1 file (no agreement column, no similarity_fits table) is migrated on
    open: its verdicts stay, new ones carry agreements."""
    registry = registry_with_experts(tmp_path, ["a", "b"])
    path = registry.path
    registry.close()
    with sqlite3.connect(path) as db:  # as the previous simoe-server wrote it
        db.execute("alter table expert_checks drop column agreement")
        db.execute("drop table similarity_fits")
        db.execute("update meta set value = '1' where key = 'schema_version'")
        db.execute("insert into expert_checks values ('b', 'key-a-0123456789', 1, 1)")
    registry = Registry(path)
    assert registry.distrusted_experts() == set() and registry.expert_agreements() == []
    registry.record_checks(2, "key-b-0123456789", ["a"], [], {"a": 0.4})
    assert registry.expert_agreements() == [("key-b-0123456789", "key-a-0123456789", 0.4)]
    fit = SimilarityFitInfo(round=2, pairs=3, nodes=2, steps=5, loss_before=0.5, loss_after=0.2)
    registry.add_similarity_fit(fit)
    assert registry.similarity_fits() == {2: fit}
    with sqlite3.connect(path) as db:
        [(version,)] = db.execute("select value from meta where key = 'schema_version'")
    assert int(version) == SCHEMA_VERSION == 2


def units(model: object, n: int = 3) -> np.ndarray:
    """n units' hardware vectors, the model's hardware normalizer fitted on them (as the
    federation's global is, by the nodes' rounds)."""
    from simoe_model.hardware import hardware_vector
    from simoe_model.synthetic import make_devices
    from simoe_model.train import fit_hardware_normalizer

    h = np.stack([hardware_vector(d.profile()) for d in make_devices(n, seed=2)])
    assert fit_hardware_normalizer(model, list(h))  # type: ignore[arg-type]
    return h


def test_the_fit_moves_cos_toward_the_agreements_and_only_the_hardware_encoder() -> None:
    from simoe_model.model import SiMoE, shared_arrays
    from simoe_model.train import fit_similarity

    torch.manual_seed(0)
    model = SiMoE()
    h = units(model)
    pairs, agreement = np.array([[0, 1], [0, 2]]), np.array([-0.5, 0.9])

    def cos() -> list[float]:
        with torch.no_grad():
            z = model.encode_hardware(torch.as_tensor(h))
            return [float(torch.cosine_similarity(z[i], z[j], dim=0)) for i, j in pairs]

    start, before_arrays = cos(), shared_arrays(model)
    assert start[0] > start[1]  # the untrained encoder orders them the wrong way
    before, after = fit_similarity(model, h, pairs, agreement, steps=20, lr=1e-2, seed=0)
    end = cos()
    assert after < before / 4 and end[0] < end[1]  # ordered as the agreements: -0.5 < 0.9
    assert end == pytest.approx(agreement.tolist(), abs=0.2)
    moved = {k for k, v in shared_arrays(model).items() if not np.array_equal(v, before_arrays[k])}
    assert moved and all(k.startswith("hardware_encoder.mlp.") for k in moved)


def test_each_reporter_weighs_the_same_and_no_pairs_change_nothing() -> None:
    from simoe_model.losses import alignment_loss
    from simoe_model.model import SiMoE, shared_arrays
    from simoe_model.train import fit_similarity

    torch.manual_seed(1)
    model = SiMoE()
    h = units(model, 4)
    pairs = np.array([[0, 1], [0, 2], [0, 3], [1, 2]])
    agreement = np.array([0.9, 0.8, 0.7, 3.0])  # 3.0: clipped to 1
    groups = [0, 0, 0, 1]  # node 0 reports three pairs, node 1 one
    with torch.no_grad():
        z = model.encode_hardware(torch.as_tensor(h))
        target = torch.as_tensor(agreement, dtype=torch.float32).clamp(-1, 1)
        p = torch.as_tensor(pairs)
        expected = (alignment_loss(z, p[:3], target[:3]) + alignment_loss(z, p[3:], target[3:])) / 2
    before, _ = fit_similarity(
        model, h, pairs, agreement, groups=groups, steps=1, loss=alignment_loss
    )
    assert before == pytest.approx(float(expected), rel=1e-5)

    arrays = shared_arrays(model)
    empty = fit_similarity(model, h, np.zeros((0, 2)), np.zeros(0), steps=10)
    assert all(np.isnan(v) for v in empty)
    assert all(np.array_equal(v, arrays[k]) for k, v in shared_arrays(model).items())
