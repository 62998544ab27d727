"""The package layering, read from the source: every import, lazy ones and strings too.

schemas imports nothing of ours; simoe_model only schemas; agent and server import
schemas and simoe_model and never each other; nothing but bench (and the tests)
imports bench. An import inside a function, under `if TYPE_CHECKING`, through
`importlib.import_module("...")` or a component reference such as
`"agent.client_app:app"` counts the same as one at the top of a module.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("schemas", "simoe_model", "agent", "server", "bench")
MAY_IMPORT: dict[str, set[str]] = {
    "schemas": set(),
    "simoe_model": {"schemas"},
    "agent": {"schemas", "simoe_model"},
    "server": {"schemas", "simoe_model"},
    "bench": set(OURS),
}
# "pkg.mod:attr" or "pkg.mod" naming one of our packages, anywhere inside a string.
_REFERENCE = re.compile(r"\b(" + "|".join(OURS) + r")((?:\.\w+)+)?:\w+")
_LOADERS = {"import_module", "__import__", "resolve_name", "find_spec"}

# Strings that name the other side without the process loading it, each with why.
ALLOWED_REFERENCES: dict[tuple[str, str], str] = {
    # The Flower app manifest `flwr run` submits: the SuperLink hands `serverapp` to the
    # server's process and `clientapp` to each SuperNode; the server never imports it.
    ("server/superlink.py", "agent"): "Flower app manifest names both components",
}


@dataclass(frozen=True)
class Reach:
    path: str  # relative to the repository root
    line: int
    target: str  # the top-level package reached
    how: str  # import, lazy import, importlib, reference


def _package_of(module: str) -> str | None:
    top = module.split(".", 1)[0]
    return top if top in OURS else None


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def reaches(source: str, path: str, package: str) -> list[Reach]:
    """Every place in `source` (a module of `package`) that reaches one of our packages."""
    tree = ast.parse(source, filename=path)
    found: list[Reach] = []
    top_level = {id(node) for node in tree.body}
    docstrings = _docstring_nodes(tree)

    def add(module: str, node: ast.AST, how: str) -> None:
        target = _package_of(module)
        if target is not None and target != package:
            found.append(Reach(path, getattr(node, "lineno", 0), target, how))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            how = "import" if id(node) in top_level else "lazy import"
            for alias in node.names:
                add(alias.name, node, how)
        elif isinstance(node, ast.ImportFrom):
            how = "import" if id(node) in top_level else "lazy import"
            if node.level:  # relative: inside the same package by construction
                continue
            add(node.module or "", node, how)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in _LOADERS and node.args and isinstance(node.args[0], ast.Constant):
                value = node.args[0].value
                if isinstance(value, str):
                    add(value.split(":", 1)[0], node, "importlib")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            for match in _REFERENCE.finditer(node.value):
                add(match.group(0).split(":", 1)[0], node, "reference")
    return found


def violations(found: list[Reach], package: str) -> list[Reach]:
    allowed = MAY_IMPORT[package]
    return [
        r
        for r in found
        if r.target not in allowed
        and not (r.how == "reference" and (r.path, r.target) in ALLOWED_REFERENCES)
    ]


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", OURS)
def test_package_reaches_only_what_it_may(package: str) -> None:
    modules = _modules(package)
    assert modules, f"no modules found under {package}/"
    bad: list[Reach] = []
    for path in modules:
        rel = str(path.relative_to(ROOT))
        bad += violations(reaches(path.read_text(), rel, package), package)
    assert not bad, "\n".join(f"{r.path}:{r.line}: {r.how} of {r.target}" for r in bad)


def test_allowed_references_still_exist() -> None:
    """An exception that no longer matches anything is removed, not left to rot."""
    for (rel, target), _why in ALLOWED_REFERENCES.items():
        package = rel.split("/", 1)[0]
        found = reaches((ROOT / rel).read_text(), rel, package)
        assert any(r.target == target and r.how == "reference" for r in found), (rel, target)


def test_the_checker_sees_every_kind_of_reach() -> None:
    """The checker itself can fail: each way of reaching another package is caught."""
    source = '''
"""A docstring may name agent.client_app:app freely."""
import importlib
from typing import TYPE_CHECKING

import numpy
from schemas import HardwareProfile
from . import sibling

if TYPE_CHECKING:
    from bench.run import main

def lazy():
    import agent.store
    from server.registry import Registry
    return importlib.import_module("agent.tuner")

LOADER = "agent.client_app:app"
COMMAND = ["-m", "agent.enroll"]  # a separate process, not an import
'''
    found = reaches(source, "server/x.py", "server")
    got = sorted((r.target, r.how, r.line) for r in violations(found, "server"))
    assert got == [
        ("agent", "importlib", 16),
        ("agent", "lazy import", 14),
        ("agent", "reference", 18),
        ("bench", "lazy import", 11),
    ]
    # in schemas every one of them is a violation, and `from schemas import` is not
    in_schemas = violations(reaches(source, "schemas/x.py", "schemas"), "schemas")
    assert {r.target for r in in_schemas} == {"agent", "bench", "server"}
    # server's import of itself is no violation in server, one in agent
    in_agent = violations(reaches(source, "agent/x.py", "agent"), "agent")
    assert {r.target for r in in_agent} == {"bench", "server"}


# -- no import circle between modules -----------------------------------------------------
# Imports under `if TYPE_CHECKING:` are left out: they never run.
CIRCLE_FREE = OURS


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(tree: ast.AST) -> set[int]:
    """The import statements under `if TYPE_CHECKING:`."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return ids


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules of `sources` it imports (at the top or lazily).

    `sources`: module name -> (its source, whether it is a package's __init__)."""

    def resolve(name: str) -> str | None:
        while name and name not in sources:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        tree = ast.parse(source)
        skip = _type_only(tree)
        names: list[str] = []
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".")[: None if is_package else -1]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
        graph[module] = {t for n in names if (t := resolve(n)) and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_between_modules() -> None:
    sources = {
        _module_name(path): (path.read_text(), path.name == "__init__.py")
        for package in CIRCLE_FREE
        for path in _modules(package)
    }
    assert len(sources) > 100
    assert circles(import_graph(sources)) == []


def _bench_part(module: str) -> str:
    """bench's sub-package of a module (bench.report.claims -> bench.report); a module at
    bench's top (bench.run, bench.protocol) stands for itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def test_no_import_circle_between_bench_subpackages() -> None:
    """bench's sub-packages are layers too: report never imports compile, which imports it."""
    sources = {
        _module_name(path): (path.read_text(), path.name == "__init__.py")
        for path in _modules("bench")
    }
    assert {_bench_part(m) for m in sources} >= {"bench.compile", "bench.report", "bench.run"}
    parts: dict[str, set[str]] = {}
    for module, targets in import_graph(sources).items():
        part = _bench_part(module)
        parts.setdefault(part, set()).update(_bench_part(t) for t in targets)
        parts[part].discard(part)
    assert circles(parts) == []


def test_a_circle_between_modules_is_found() -> None:
    """The circle check can fail: a lazy import back up closes a circle, and it is found."""
    sources = {
        "bench": ("", True),
        "bench.report": ("", True),
        "bench.report.a": ("from bench.report.b import render", False),
        "bench.report.b": ("def render():\n    from bench.report import a", False),
        "bench.report.c": ("from bench import report", False),
    }
    assert circles(import_graph(sources)) == [["bench.report.a", "bench.report.b"]]


def test_the_circle_checker_sees_lazy_and_relative_imports() -> None:
    sources = {
        "p": ("from p import a\n", True),
        "p.a": ("def f():\n    from p.b import g\n", False),
        "p.b": ("from . import a\nfrom typing import TYPE_CHECKING\n", False),
        "p.c": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.d\n", False),
        "p.d": ("import p.c\n", False),
    }
    # p runs p.a, which (lazily) runs p.b, which imports from p: one circle of three;
    # p.c -> p.d -> p.c only for the type checker, so none there
    assert circles(import_graph(sources)) == [["p", "p.a", "p.b"]]
