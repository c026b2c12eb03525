"""The house plan, checked: imports run one way (no circles, including imports placed inside
functions or under ``TYPE_CHECKING``), the rooms import only what they may, and files and
functions stay small."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "protein_performer"

#: Functions allowed past :data:`MAX_FUNCTION_LINES`, each with why.
LONG_FUNCTIONS: dict[str, str] = {}
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its body. ``from A import b``
    counts as importing ``A.b`` where that is a module, else ``A``."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if not is_package:
                    base.pop()
                base = base[: len(base) - (node.level - 1)]
                parent = ".".join(base + ([node.module] if node.module else []))
            else:
                parent = node.module or ""
            for alias in node.names:
                child = f"{parent}.{alias.name}"
                found.add(child if child in known else parent)
    return {m for m in found if m in known and m != name}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    mods = modules(package)
    return {name: imported_modules(name, path, set(mods)) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_planted_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "protein_performer"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from protein_performer.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")  # inside a function
    (pkg / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from . import a\n")
    (pkg / "d.py").write_text("from protein_performer import a\n")  # into the circle, not of it
    assert cycles(import_graph(pkg)) == [
        ["protein_performer.a", "protein_performer.c", "protein_performer.sub.b"]
    ]


def _imports_of(room: str) -> set[str]:
    graph = import_graph()
    return {d for m, deps in graph.items() if m == room or m.startswith(room + ".") for d in deps}


@pytest.mark.slow
def test_nothing_imports_the_cli() -> None:
    graph = import_graph()
    users = {m for m, deps in graph.items() if not m.startswith("protein_performer.cli")
             for d in deps if d.startswith("protein_performer.cli")}  # fmt: skip
    assert users <= {"protein_performer.__main__", "protein_performer.entry"}


@pytest.mark.parametrize(
    ("room", "may_import"),
    [
        ("protein_performer.attention", ("attention", "errors", "utils")),
        ("protein_performer.utils", ("utils", "errors")),
        ("protein_performer.config.schema", ("config.schema", "errors", "data", "model.config")),
        ("protein_performer.data", ("data", "errors", "utils", "config")),
        ("protein_performer.model", ("model", "attention", "errors", "utils", "data")),
    ],
)
def test_rooms_import_only_what_they_may(room: str, may_import: tuple[str, ...]) -> None:
    allowed = tuple(f"protein_performer.{r}" for r in (*may_import, "version"))
    wrong = {
        d
        for d in _imports_of(room)
        if d != "protein_performer" and not any(d == a or d.startswith(a + ".") for a in allowed)
    }
    assert wrong == set(), f"{room} imports {sorted(wrong)}"


def test_no_file_over_the_limit() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert long == {}


def test_no_function_over_the_limit_without_a_reason() -> None:
    long = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                key = f"{path.relative_to(PACKAGE)}::{node.name}"
                if n > MAX_FUNCTION_LINES and key not in LONG_FUNCTIONS:
                    long[key] = n
                elif key in LONG_FUNCTIONS and n <= MAX_FUNCTION_LINES:
                    long[key] = f"{n} lines: no longer needs its entry"
    assert long == {}
