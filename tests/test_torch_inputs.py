"""PyTorch models straight into `simoe-agent tune --model`: a `torch.export` program (`.pt2`)
and `file.py:factory`; bad files are one line, exit 2 (issue 13)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import one_line_error, run_main, tune_json
from typer.testing import CliRunner

from agent.cli import app, main
from agent.devices import get_device
from agent.ms_database import ms_database
from agent.networks import load_network
from agent.store import Store
from agent.tuner import verify_network

runner = CliRunner()

BLOCK_SOURCE = textwrap.dedent(
    '''
    import torch
    from torch import nn


    class Block(nn.Module):
        """A pre-norm MLP block with a residual, as in a transformer layer."""

        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(16)
            self.up = nn.Linear(16, 32)
            self.down = nn.Linear(32, 16)

        def forward(self, x):
            return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


    def make_block():
        torch.manual_seed(0)
        return Block(), (torch.randn(4, 16),)


    def not_a_pair():
        return Block()
    '''
)


@pytest.fixture()
def block_file(tmp_path: Path) -> Path:
    path = tmp_path / "block.py"
    path.write_text(BLOCK_SOURCE)
    return path


@pytest.fixture()
def block_pt2(tmp_path: Path, block_file: Path) -> Path:
    """The same block saved with torch.export.save, as a PyTorch user would."""
    namespace: dict = {}
    exec(compile(BLOCK_SOURCE, str(block_file), "exec"), namespace)  # noqa: S102
    model, args = namespace["make_block"]()
    path = tmp_path / "block.pt2"
    torch.export.save(torch.export.export(model.eval(), args), str(path))
    return path


def test_both_forms_load_and_compile_to_pytorchs_output(block_file: Path, block_pt2: Path) -> None:
    """Fast: loading, task extraction and the compiled (untuned) network against PyTorch."""
    device = get_device("cpu")
    for ref in (str(block_pt2), f"{block_file}:make_block"):
        network = load_network(ref)
        assert [x.shape for x in network.inputs] == [(4, 16)]
        expected = network.reference(network.inputs)
        assert expected[0].shape == (4, 16) and np.all(np.isfinite(expected[0]))
        with Store(block_file.parent / f"{Path(ref).stem}.sqlite") as store:
            check = verify_network(network, ms_database(store, device="cpu"), device)
        assert check.compiled and check.matches, (ref, check)
        assert check.reference == "PyTorch"


def _tune(ref: str, state: Path, *extra: str) -> dict:
    return tune_json(
        state, "--model", ref, "--device", "cpu", "--trials", "1", "--population", "32",
        "--cost-model", "random", *extra,
    )  # fmt: skip


@pytest.mark.slow  # tunes a real network on the CPU (1 trial per task): ~1 min when loaded
def test_tune_a_pt2_program_and_match_pytorch(block_pt2: Path, tmp_path: Path) -> None:
    data = _tune(str(block_pt2), tmp_path / "state", "--no-baseline")
    assert data["kind"] == "network" and data["subject"] == "block.pt2"
    assert len(data["tasks"]) >= 2 and all(t["trials"] >= 1 for t in data["tasks"])
    check = data["network"]
    assert check["compiled"] and check["matches"] and check["reference"] == "PyTorch"


@pytest.mark.slow  # as above, and it measures each task's default schedule too
def test_tune_a_factory_and_match_pytorch(block_file: Path, tmp_path: Path) -> None:
    data = _tune(f"{block_file}:make_block", tmp_path / "state")
    assert data["subject"] == "block:make_block"
    assert all(t["kept"] in ("tuned", "default") for t in data["tasks"])
    assert all(t["best_latency_s"] <= t["untuned_latency_s"] for t in data["tasks"])
    assert data["network"]["compiled"] and data["network"]["matches"]


def _bad_files(tmp_path: Path, block_file: Path) -> dict[str, str]:
    garbage = tmp_path / "garbage.pt2"
    garbage.write_bytes(b"not a zip archive")
    zipped = tmp_path / "zipped.pt2"
    import zipfile

    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("hello.txt", "a zip, but not a program")
    broken = tmp_path / "broken.py"
    broken.write_text("def make(:\n")
    raises = tmp_path / "raises.py"
    raises.write_text("def make():\n    raise RuntimeError('boom')\n")
    unexportable = tmp_path / "unexportable.py"
    unexportable.write_text(
        "import torch\nclass M(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x.numpy()\n"
        "def make():\n    return M(), (torch.ones(2),)\n"
    )
    return {
        "garbage .pt2": str(garbage),
        "zip that is not a program": str(zipped),
        "syntax error": f"{broken}:make",
        "factory raises": f"{raises}:make",
        "no such function": f"{block_file}:nope",
        "wrong return": f"{block_file}:not_a_pair",
        "missing file": f"{tmp_path / 'missing.py'}:make",
        "not exportable": f"{unexportable}:make",
    }


CASES = [
    "garbage .pt2",
    "zip that is not a program",
    "syntax error",
    "factory raises",
    "no such function",
    "wrong return",
    "missing file",
    "not exportable",
]


@pytest.mark.parametrize("case", CASES)
def test_a_bad_model_file_is_one_line_exit_2(
    case: str,
    block_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    ref = _bad_files(tmp_path, block_file)[case]
    argv = ["tune", "--model", ref, "--device", "cpu", "--trials", "1",
            "--state-dir", str(tmp_path / "state")]  # fmt: skip
    one_line_error("simoe-agent", *run_main(main, "simoe-agent", argv, monkeypatch, capsys))


def test_the_factory_contract_is_in_the_help() -> None:
    result = runner.invoke(app, ["tune", "--help"], env={"COLUMNS": "200"})
    assert ".pt2" in result.output and "FILE.py:FUNCTION" in result.output
