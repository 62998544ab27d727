"""SiMoE without a federation (issue 13): a node with no server profiles its device when it
must, tunes with an imported or the shipped starter model, and says which model it used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import one_line_error, run_main, tune_json

import agent.model_choice as model_choice
from agent.cli import main
from agent.model_choice import choose_model
from agent.node_state import NodeState
from simoe_model.model import SiMoE, model_metadata, save_model


def _model_file(path: Path, label: str | None = None) -> Path:
    save_model(SiMoE(), path, metadata={"label": label} if label else None)
    return path


def _main(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys) -> tuple[int, str, str]:
    return run_main(main, "simoe-agent", args, monkeypatch, capsys)


def test_model_import_validates_and_keeps_the_last_good_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    state = tmp_path / "state"
    good = _model_file(tmp_path / "mine.pt", label="my lab's model")
    code, out, err = _main(
        ["model", "import", str(good), "--json", "--state-dir", str(state)], monkeypatch, capsys
    )
    assert code == 0, err
    used = json.loads(out)
    assert used["source"] == "imported" and used["path"] == str(
        NodeState(state).imported_model_path
    )
    assert used["label"].startswith("my lab's model")
    assert used["metadata"]["imported_from"] == str(good.resolve())
    before = NodeState(state).imported_model_path.read_bytes()

    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(good.read_bytes()[:200])  # a download cut short
    for bad in (corrupt, tmp_path / "missing.pt"):
        code, out, err = _main(
            ["model", "import", str(bad), "--state-dir", str(state)], monkeypatch, capsys
        )
        assert str(bad) in one_line_error("simoe-agent", code, out, err)
    assert (
        NodeState(state).imported_model_path.read_bytes() == before
    )  # the good one is still there

    code, out, err = _main(
        ["model", "show", "--json", "--state-dir", str(state)], monkeypatch, capsys
    )
    assert code == 0 and json.loads(out)["source"] == "imported"


def test_the_personal_model_comes_first_then_federation_imported_starter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    starter = _model_file(tmp_path / "starter.pt", label="starter for the test")
    monkeypatch.setattr(model_choice, "starter_model_path", lambda: starter)
    state = tmp_path / "state"
    assert choose_model(NodeState(state)).source == "starter"
    assert choose_model(NodeState(state)).label.startswith("starter for the test")
    _model_file(NodeState(state).imported_model_path)
    assert choose_model(NodeState(state)).source == "imported"
    _model_file(NodeState(state).model_path)
    assert choose_model(NodeState(state)).source == "federation"
    _model_file(NodeState(state).personal_model_path)  # its fine-tune of the federation's
    assert choose_model(NodeState(state)).source == "personal"
    monkeypatch.setattr(model_choice, "starter_model_path", lambda: tmp_path / "none.pt")
    assert choose_model(NodeState(tmp_path / "empty")).source == "untrained"


def test_the_shipped_starter_model_says_what_it_was_trained_on() -> None:
    path = model_choice.starter_model_path()  # tracked: a checkout without it is broken
    assert path.is_file(), (
        f"{path} is missing (git checkout it, or python -m bench.transfer.train_starter)"
    )
    metadata = model_metadata(path)
    assert metadata["simulated"] is True and metadata["records"] > 0
    assert metadata["trained_on"] and all(u.startswith("sim:") for u in metadata["trained_on"])
    # the shipped model was built before bench/ had sub-packages (issue 26), by the same
    # trainer under its old name; a rebuilt one records bench.transfer.train_starter
    trainer = metadata["built_by"].split()[:3]
    assert trainer in (
        ["python", "-m", "bench.transfer.train_starter"],
        ["python", "-m", "bench.train_starter"],
    )
    from bench.protocol import TRAIN_UNITS

    # training units only: never the demo's newcomer or the README's (a10, t4)
    assert {u.removeprefix("sim:") for u in metadata["trained_on"]} <= set(TRAIN_UNITS)
    assert not {"sim:a10", "sim:t4"} & set(metadata["trained_on"])


@pytest.mark.slow  # a real (simulated-GPU) search of 4 candidates, with profiling: ~30 s loaded
def test_tune_with_simoe_and_no_server_profiles_first_and_names_its_model(tmp_path: Path) -> None:
    state = tmp_path / "state"  # a fresh node: no profile, no federation, no server
    data = tune_json(
        state, "--workload", "matmul:64,64,64", "--device", "sim:t4", "--trials", "4",
        "--cost-model", "simoe", "--population", "16", "--no-baseline",
    )  # fmt: skip
    used = data["model_used"]
    expected = choose_model(NodeState(state))
    assert used["source"] == expected.source and used["path"] == expected.path
    assert used["source"] in ("starter", "untrained") and used["label"]
    with NodeState(state).open_store() as store:
        profile = store.latest_profile("sim:t4")
    assert profile is not None and profile.simulated  # taken because SiMoE needed it
