"""`simoe-server start`: every run setting has its option, and a second start on the same
state directory reports its own rounds only. Through the real command (typer's CliRunner
in-process, or a subprocess for the one-line errors), with the SuperLink replaced: starting
a real one is `tests/test_server_start.py`'s."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import free_port
from typer.testing import CliRunner

from server.cli import app
from server.registry import Registry
from server.run_config import DEFAULTS, ServerRunConfig
from simoe_model.features import FEATURE_DIM
from simoe_model.probe_file import save_probes

runner = CliRunner()
SERVER = str(Path(sys.executable).with_name("simoe-server"))


def off_default(name: str) -> Any:
    """A valid value of the field `name` other than its default."""
    default = getattr(DEFAULTS, name)
    annotation = ServerRunConfig.model_fields[name].annotation
    if isinstance(default, bool):
        return not default
    if typing.get_origin(annotation) is typing.Literal:
        return next(v for v in typing.get_args(annotation) if v != default)
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default + 0.125
    raise AssertionError(f"{name}: add a value of type {type(default).__name__} here")


class FakeSuperLink:
    """Stands in for `server.superlink.SuperLink`: nothing listens; `record` (called once per
    poll of `start`'s loop) runs `on_record`, as a ServerApp would record its rounds."""

    on_record: Any = None

    def __init__(self, directory: Path, **_: object) -> None:
        self.address = "127.0.0.1:1"
        self.process = None

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def record(self) -> None:
        if FakeSuperLink.on_record is not None:
            FakeSuperLink.on_record()

    def serverapp_running(self) -> bool:
        return True


@pytest.fixture()
def fake_link(monkeypatch: pytest.MonkeyPatch) -> list[ServerRunConfig]:
    """The run configs `start` submits; its SuperLink a fake, its signal handlers left as
    they are (they would outlive the test in this process)."""
    import signal

    import server.superlink

    submitted: list[ServerRunConfig] = []

    def submit_run(directory: Path, address: str, ca: Path, config: ServerRunConfig) -> str:
        submitted.append(config)
        return "222"

    FakeSuperLink.on_record = None
    monkeypatch.setattr(server.superlink, "SuperLink", FakeSuperLink)
    monkeypatch.setattr(server.superlink, "submit_run", submit_run)
    monkeypatch.setattr(signal, "signal", lambda *_: None)
    return submitted


def test_every_run_setting_reaches_the_run_through_its_start_option(
    tmp_path: Path, fake_link: list[ServerRunConfig]
) -> None:
    """Each ServerRunConfig field off its default, given as the option `start_options` names
    (what the demo passes to `start`), arrives in the run config `start` submits."""
    fields = [name for name in ServerRunConfig.model_fields if name != "registry"]
    state = tmp_path / "server"
    probes = tmp_path / "probes.npz"  # the probe file --probes names must load
    save_probes(probes, [(np.zeros((4, FEATURE_DIM)), np.array([0, 2, 4]))])
    values = {name: off_default(name) for name in fields if name != "probes"}
    wanted = ServerRunConfig(
        registry=str(state.resolve() / "registry.sqlite"), probes=str(probes), **values
    )
    options = wanted.start_options()

    def stop() -> None:  # Ctrl-C at the first poll: `start` stops as it does for a user
        raise KeyboardInterrupt

    FakeSuperLink.on_record = stop
    assert len([o for o in options if o.startswith("--")]) == len(fields)  # none at a default
    result = runner.invoke(app, ["start", "--port", "1", "--state-dir", str(state), *options])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert fake_link == [wanted]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--local-batch", "0"], "--local-batch must be at least 1"),
        (["--prox-mu", "-0.1"], "--prox-mu must be at least 0"),
        (["--personal-epochs", "-1"], "--personal-epochs must be at least 0"),
        (["--personal-epochs", "1001"], "--personal-epochs must be at most 1000"),
        (["--wait-nodes", "-5"], "--wait-nodes must be at least 0"),
        (["--seed", "-1"], "--seed must be at least 0"),
        (["--distill-steps", "5", "--probes", "none"], "need probes: --probes suite or FILE"),
        (["--probes", "none"], "need probes: --probes suite or FILE"),
        (["--teacher-distill-steps", "5"], "--teacher-distill-steps needs --teacher-epochs"),
        (
            ["--teacher-epochs", "1", "--teacher-balance"],
            "--teacher-balance needs --teacher-distill-steps",
        ),
        (["--probes", "no-such-probes.npz"], "does not exist"),
    ],
)
def test_bad_run_settings_are_one_line_exit_2(
    tmp_path: Path, options: list[str], named: str
) -> None:
    result = subprocess.run(
        [SERVER, "start", "--port", str(free_port()), *options,
         "--state-dir", str(tmp_path / "server")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "server").exists()  # refused before anything was created


NEED_PROBES = (
    "--similarity-source probes (the default), --distill-steps and --teacher-epochs need "
    "probes: --probes suite or FILE, or --similarity-source reported"
)
BAD_COMBINATIONS = [  # (Flower run config, the one line `simoe-server start` shows for it)
    ({"teacher-distill-steps": 5}, "--teacher-distill-steps needs --teacher-epochs"),
    (
        {"teacher-epochs": 1, "teacher-balance": True},
        "--teacher-balance needs --teacher-distill-steps",
    ),
    ({"newcomer-distill-steps": 600}, "--newcomer-distill-steps needs --teacher-epochs"),
    ({"probes": "none"}, NEED_PROBES),
    ({"probes": "none", "similarity-source": "reported", "teacher-epochs": 2}, NEED_PROBES),
]


@pytest.mark.parametrize(("run_config", "line"), BAD_COMBINATIONS)
def test_a_bad_combination_is_refused_however_the_settings_arrive(
    tmp_path: Path, run_config: dict[str, Any], line: str
) -> None:
    """The rules across settings live on ServerRunConfig: a run config the ServerApp reads
    (`from_run_config`), `start`'s options and a strategy built directly are refused with
    the same one line."""
    from schemas import BadInputError
    from server.similarity import model_similarity
    from server.strategy import SiMoEStrategy
    from simoe_model.probe_file import SUITE_PROBES, load_probes

    with pytest.raises(BadInputError) as caught:
        ServerRunConfig.from_run_config(run_config)
    assert str(caught.value) == line
    with pytest.raises(BadInputError) as caught:
        ServerRunConfig.from_options(**{k.replace("-", "_"): v for k, v in run_config.items()})
    assert str(caught.value) == line
    settings = {k.replace("-", "_"): v for k, v in run_config.items() if k != "probes"}
    probes = [] if "probes" in run_config else load_probes(str(SUITE_PROBES))
    with Registry(tmp_path / "registry.sqlite") as registry, pytest.raises(ValueError) as raised:
        SiMoEStrategy(
            registry,
            model_similarity,
            probes=probes,
            **{"similarity_source": "probes"} | settings,  # the run config's default
        )
    assert str(raised.value) == line


def test_a_second_start_reports_and_counts_its_own_rounds_only(
    tmp_path: Path, fake_link: list[ServerRunConfig]
) -> None:
    """Round numbers continue across runs on one state directory. A second `start` with
    `--rounds 1` prints its round 3 (not the first start's 1 and 2 again) and stops after
    it; `status` and `rounds` say which run each round belongs to."""
    state = tmp_path / "server"
    state.mkdir()
    registry_file = state / "registry.sqlite"
    with Registry(registry_file) as registry:
        for _ in range(2):  # the first start's run, 111
            number = registry.start_round(111, sampled=2)
            registry.finish_round(
                number, replied=2, rejected=0, failed=0, global_version=1, updated=True
            )

    def new_round() -> None:  # the second start's ServerApp (run 222) records one round
        with Registry(registry_file) as registry:
            if registry.last_round() < 3:
                number = registry.start_round(222, sampled=2)
                registry.finish_round(
                    number, replied=2, rejected=0, failed=0, global_version=2, updated=True
                )

    FakeSuperLink.on_record = new_round
    result = runner.invoke(
        app, ["start", "--port", "1", "--state-dir", str(state), "--rounds", "1"]
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    printed = [line for line in result.output.splitlines() if line.startswith("round ")]
    assert printed == ["round 3: done, 2 replied, 0 rejected, 0 failed, model v2"]

    status = runner.invoke(app, ["status", "--state-dir", str(state), "--json"])
    assert '"runs": 2' in status.output and '"done": 3' in status.output
    table = runner.invoke(app, ["status", "--state-dir", str(state)])
    assert "3 (3 done) in 2 runs" in table.output
    rounds = runner.invoke(app, ["rounds", "--state-dir", str(state), "--json"])
    assert [r["run"] for r in json.loads(rounds.output)] == [1, 1, 2]
