"""bench.compile.reference: a MetaSchedule reference run stops, is snapshotted, and resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.compile.reference import main
from bench.report.report_refs import load_references, references_md

TINY = ["--population", "16", "--genetic-iters", "1", "--per-iter", "8"]


def _run(tmp: Path, trials: int) -> dict:
    argv = ["--network", "tiny_mlp", "--unit", "a30-u1", "--trials", str(trials),
            "--budget-s", "600", "--work", str(tmp / "work"), "--reports", str(tmp / "rep"),
            *TINY]  # fmt: skip
    assert main(argv) == 0
    return json.loads((tmp / "rep" / "tiny_mlp__a30-u1" / "summary.json").read_text())


@pytest.mark.slow
def test_a_reference_resumes_from_its_committed_snapshot(tmp_path: Path) -> None:
    first = _run(tmp_path, 8)
    assert first["trials"] >= 8 and first["in_database"] > 0
    assert not first["settings"]["metaschedule_defaults"]  # a test's search, labelled so
    snap = tmp_path / "rep" / "tiny_mlp__a30-u1"
    assert (snap / "database_tuning_record.json.gz").stat().st_size > 0
    shutil.rmtree(tmp_path / "work")  # a fresh clone: only the committed snapshot is left
    second = _run(tmp_path, first["trials"] + 2)
    assert second["in_database"] > first["in_database"]  # the snapshot's records came back
    assert [r["trials_before"] for r in second["runs"]] == [0, first["trials"]]
    assert second["runs"][1]["retrained_on"] == first["in_database"]
    assert second["cpu_s_total"] > first["cpu_s_total"]
    # a tiny search may find no valid schedule of a task (its default stands in for it)
    assert second["finished"] and second["network_latency_with_default_s"] is not None
    # the best record per task can only improve on the records it resumed from
    assert second["network_latency_with_default_s"] <= first["network_latency_with_default_s"]
    # BENCHMARKS.md's section 6 reads the committed summaries
    [ref] = load_references(tmp_path / "rep")
    assert (ref.trials, ref.pieces, ref.metaschedule_defaults) == (second["trials"], 2, False)
    table = "\n".join(references_md([ref]))
    assert f"| tiny_mlp | a30-u1 | {ref.trials} / {ref.target_trials} |" in table
    assert "CPU hours" not in table  # no projection from a search that is not the protocol's


def test_a_unit_outside_the_protocol_is_a_one_line_error(capsys: pytest.CaptureFixture) -> None:
    assert main(["--network", "tiny_mlp", "--unit", "no-such-gpu"]) == 2
    assert "not a protocol unit" in capsys.readouterr().err
