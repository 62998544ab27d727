"""A node's rank agreement with each expert it checked: the reply's field, the registry's
column and query, and the server's fit of the hardware similarity on it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
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
