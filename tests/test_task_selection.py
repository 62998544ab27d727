"""`simoe-agent tune --largest-tasks N / --flops-share F`: a network's largest tasks only."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import one_line_error, run_main

from agent.cli import main
from agent.task_selection import TaskChoice, select_tasks
from schemas import BadInputError

NAMES = ["small", "big", "mid", "tiny"]
SIZES = [1.0, 50.0, 30.0, 19.0]  # weight x FLOPs, 100 in all


def test_largest_first_until_the_share_in_the_network_order() -> None:
    picked, selection = select_tasks(NAMES, SIZES, TaskChoice(flops_share=0.8))
    assert picked == [1, 2] and selection is not None
    assert selection.tuned == ["big", "mid"] and selection.flops_share == pytest.approx(0.8)
    assert selection.total_tasks == 4 and "80%" in selection.rule
    picked, _ = select_tasks(NAMES, SIZES, TaskChoice(flops_share=0.81))
    assert picked == [1, 2, 3]
    picked, selection = select_tasks(NAMES, SIZES, TaskChoice(largest=2, flops_share=0.99))
    assert picked == [1, 2] and selection.flops_share == pytest.approx(0.8)  # capped, said
    picked, selection = select_tasks(NAMES, SIZES, TaskChoice(largest=1))
    assert picked == [1] and selection.tuned == ["big"]
    assert select_tasks(NAMES, SIZES, TaskChoice()) == ([0, 1, 2, 3], None)


@pytest.mark.parametrize("choice", [TaskChoice(largest=0), TaskChoice(flops_share=0.0),
                                    TaskChoice(flops_share=1.5)])  # fmt: skip
def test_bad_choices_are_bad_input(choice: TaskChoice) -> None:
    with pytest.raises(BadInputError):
        select_tasks(NAMES, SIZES, choice)


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "tiny_mlp", "--flops-share", "1.5"],
        ["--model", "tiny_mlp", "--largest-tasks", "0"],
        ["--workload", "matmul:4,4,4", "--largest-tasks", "1"],
    ],
)
def test_cli_refuses_bad_selections_in_one_line(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    ran = run_main(main, "simoe-agent", ["tune", *args, "--state-dir", str(tmp_path)],
                   monkeypatch, capsys)  # fmt: skip
    line = one_line_error("simoe-agent", *ran)
    assert "--largest-tasks" in line or "--flops-share" in line


def test_submit_queues_the_selection_and_refuses_bad_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from agent.daemon import Queue
    from agent.node_state import NodeState

    state = ["--state-dir", str(tmp_path)]
    args = ["submit", "bert_layer", "--largest-tasks", "2", "--flops-share", "0.5", *state]
    ran = run_main(main, "simoe-agent", args, monkeypatch, capsys)
    assert ran[0] == 0, ran
    [job] = Queue(NodeState(tmp_path).queue_dir).jobs("pending")
    assert (job.largest_tasks, job.flops_share) == (2, 0.5)  # run_job tunes these (real loop test)
    for bad in (["tiny_mlp", "--flops-share", "0"], ["matmul:4,4,4", "--largest-tasks", "1"]):
        ran = run_main(main, "simoe-agent", ["submit", *bad, *state], monkeypatch, capsys)
        line = one_line_error("simoe-agent", *ran)
        assert "--largest-tasks" in line or "--flops-share" in line
    assert len(Queue(NodeState(tmp_path).queue_dir).jobs("pending")) == 1  # nothing queued
