"""bench.report.curves: performance relative to the best MetaSchedule (XGB) run, one figure."""

from __future__ import annotations

from pathlib import Path

from bench.report.curves import panels, plot


def _row(method: str, latency: float, curve: list[list[float]]) -> dict:
    return {"network": "net", "gpu": "a10", "method": method, "network_latency_s": latency,
            "curve": curve}  # fmt: skip


def test_reference_is_the_best_xgb_run_including_repeats_and_the_plot_is_written(
    tmp_path: Path,
) -> None:
    report = {
        "sections": {
            "compile": {
                "rows": [
                    _row("ms-xgb-full", 2.0, [[1.0, 8.0], [100.0, 2.0]]),
                    _row("ms-mlp-pretrained-32", 0.5, [[2.0, 0.5]]),  # not the reference
                    _row("simoe-fast", 1.0, [[30.0, 1.5], [40.0, 1.0]]),
                ]
            }
        },
        "compile_repeats": [{"rows": [_row("ms-xgb-full", 1.6, [[1.0, 1.6]])]}],
    }
    [panel] = panels(report)
    assert panel["reference_s"] == 1.6 and "a repeat" in panel["reference"]
    assert {r["method"] for r in panel["rows"]} == {"ms-xgb-full", "ms-mlp-pretrained-32",
                                                    "simoe-fast"}  # fmt: skip
    path = plot(report, tmp_path / "curves.png")
    assert path is not None and path.stat().st_size > 10_000
    assert plot({"sections": {}}, tmp_path / "none.png") is None


def test_the_20k_reference_so_far_and_the_10g_point() -> None:
    """A MetaSchedule-20K reference that has measured the panel's task is its reference when
    it is the best; a one-task run's point after 10 measurements is read off its curve."""
    from bench.report.report_refs import at_measurements

    fast = _row("simoe-fast", 1.0, [[1.0, 4.0]] + [[1.0 + i, 3.0 - i / 16] for i in range(1, 33)])
    fast.update(measured=32, task_best_s={"t": 0.5})
    report = {
        "sections": {
            "compile": {
                "rows": [_row("ms-xgb-32", 2.0, [[1.0, 2.0]]), fast],
                "networks": {"net": {"tasks_tuned": [{"name": "t", "weight": 2.0}],
                                     "flops_share_tuned": 0.3}},
            }
        },
        "references": [{"network": "net", "unit": "a10", "trials": 900, "target_trials": 20000,
                        "task_best_s": {"t": 0.6, "other": 1.0}}],
    }  # fmt: skip
    [panel] = panels(report)
    assert panel["reference_s"] == 1.2  # 2.0 x 0.6, better than ms-xgb-32's 2.0
    assert "MetaSchedule-20K so far (900 of 20000 trials)" in panel["reference"]
    assert "30% of its FLOPs" in panel["title"]
    assert at_measurements(fast, 10) == (11.0, 3.0 - 10 / 16)  # the default's point leads
    assert at_measurements({**fast, "measured": 8}, 10) is None
    report["references"][0]["task_best_s"] = {"other": 1.0}  # has not measured the task
    assert panels(report)[0]["reference_s"] == 2.0
