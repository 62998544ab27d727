"""Every bench module imports, and every bench entry point answers `python -m bench.NAME
--help` (exit 0, a usage text) without running anything.

One child process runs them all the way `python -m` does (runpy, as `__main__`), so TVM,
torch and Flower are imported once; a module that ignored --help would start its benchmark
and the child's timeout would fail the test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = sorted(
    ".".join(p.relative_to(ROOT / "bench").with_suffix("").parts)
    for p in [*(ROOT / "bench").glob("*.py"), *(ROOT / "bench").glob("*/*.py")]
    if p.stem != "__init__"
)
ENTRY_POINTS = [
    name
    for name in BENCH
    if 'if __name__ == "__main__":' in (ROOT / "bench" / f"{name.replace('.', '/')}.py").read_text()
]

CHILD = """
import contextlib, importlib, io, json, runpy, sys
modules, entry_points = sys.argv[1].split(","), sys.argv[2].split(",")
out = {}
for name in modules:
    importlib.import_module(f"bench.{name}")
for name in entry_points:
    sys.argv = [f"bench.{name}", "--help"]
    text = io.StringIO()
    code = "returned without exiting"
    try:
        with contextlib.redirect_stdout(text):
            runpy.run_module(f"bench.{name}", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code or 0
    out[name] = [code, text.getvalue()]
print(json.dumps(out))
"""


@pytest.mark.slow  # one child importing TVM, torch and Flower: ~30 s on a loaded 2-core machine
def test_every_bench_module_imports_and_every_entry_point_has_help() -> None:
    assert len(ENTRY_POINTS) >= 15  # the scan found the benchmarks
    done = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(BENCH), ",".join(ENTRY_POINTS)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ENTRY_POINTS:
        code, text = got[name]
        assert code == 0, f"bench.{name} --help exited {code}"
        assert "usage" in text.lower(), f"bench.{name} --help printed no usage: {text[:200]}"


def test_the_readmes_run_benchmarks_as_modules() -> None:
    """`python -m bench.NAME` from the repo root, never `python bench/NAME.py`."""
    docs = [ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")]
    offenders = [str(p.relative_to(ROOT)) for p in docs if "python bench/" in p.read_text()]
    assert offenders == []
