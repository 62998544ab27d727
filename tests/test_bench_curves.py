"""bench.curves: performance relative to the best MetaSchedule (XGB) run, one figure."""

from __future__ import annotations

from pathlib import Path

from bench.curves import panels, plot


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
