"""The house plan, checked: imports run one way (no circles between modules nor between rooms,
including imports placed inside functions or under ``TYPE_CHECKING``), every room imports only
what ARCHITECTURE.md's table lets it, no room imports another's private names, and files and
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


def room_of(module: str) -> str:
    """The room a module lives in: its subpackage (``data``, ``model``, ...) or, for a module at
    the top of the package, its own name (``errors``, ``version``, ``pretrained``); the
    package's ``__init__`` is ``protein_performer``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which rooms import which: an edge wherever one of a room's modules imports another
    room's (imports inside functions and under ``TYPE_CHECKING`` included)."""
    rooms: dict[str, set[str]] = {room_of(m): set() for m in graph}
    for module, deps in graph.items():
        rooms[room_of(module)].update(room_of(d) for d in deps if room_of(d) != room_of(module))
    return rooms


def test_no_room_imports_one_that_imports_it_back() -> None:
    assert cycles(room_graph(import_graph())) == []


def test_the_room_cycle_finder_finds_a_planted_circle(tmp_path: Path) -> None:
    # no module circle (a -> b.y, b.x -> a), but the rooms a and b import each other
    pkg = tmp_path / "protein_performer"
    for room in ("a", "b"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "m.py").write_text("from protein_performer.b import y\n")
    (pkg / "b" / "x.py").write_text("def f():\n    from protein_performer.a import m\n")
    (pkg / "b" / "y.py").write_text("")
    graph = import_graph(pkg)
    assert cycles(graph) == []
    assert cycles(room_graph(graph)) == [["a", "b"]]


#: What each room may import (ARCHITECTURE.md's table), as modules of the package: a room, or
#: one module of a room (``data.config``: the rooms' own config modules). Every room may import
#: itself, ``errors`` and ``version``.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "errors": (),
    "version": (),
    "utils": (),
    "config": ("utils", "data.config", "model.config"),
    "data": ("utils", "config"),
    # "torch only": errors (its exceptions) and utils.devices are the ground floor
    "attention": ("utils",),
    # a checkpoint carries its alphabet and objective; the metrics read the label convention
    "model": ("attention", "utils", "data"),
    "training": ("model", "data", "config", "utils"),
    "evaluation": ("model", "data", "config", "utils"),
    "analysis": ("model", "data", "utils"),
    "pretrained": ("model", "data", "utils"),
    # the top floor: everything (and nothing imports it: test_nothing_imports_the_cli)
    "cli": ("*",),
    "entry": ("cli",),
    "__main__": ("entry",),
    # the package's facade: load, train, evaluate on first use
    "protein_performer": ("pretrained", "training.run", "evaluation.evaluate"),
}

#: Imports that break a room's rule, each with why and what removes it (importer, imported).
ALLOWED_EXCEPTIONS: dict[tuple[str, str], str] = {
    # training runs analysis's similarity views as a callback (analysis.similarity_every_n_steps)
    ("training.builders", "analysis.callback"): "the similarity callback of cfg.analysis",
    # feature redraws, the fused CPU kernel and Taylor's feature size: model should offer these
    # once attention has one interface (issue 56 item 4, another helper's work)
    ("training.lm_module", "attention"): "until attention's interface lands",
    ("training.lm_module", "attention.favor"): "until attention's interface lands",
    ("training.memory", "attention.taylor"): "until attention's interface lands",
    # the old import path of protein_performer.evaluate, kept for one release
    ("training", "evaluation.evaluate"): "deprecated re-export, remove next release",
}


def _short(module: str) -> str:
    return module.removeprefix("protein_performer.")


def _allowed(module: str, dep: str) -> bool:
    room, target = room_of(module), _short(dep)
    rules = (room, "errors", "version", *MAY_IMPORT[room])
    if "*" in rules or (_short(module), target) in ALLOWED_EXCEPTIONS:
        return True
    return any(target == r or target.startswith(r + ".") for r in rules)


def wrong_imports(graph: dict[str, set[str]]) -> set[str]:
    """``importer -> imported`` for every import a room may not make."""
    return {
        f"{_short(m)} -> {_short(d)}"
        for m, deps in graph.items()
        for d in deps
        if room_of(d) != room_of(m) and not _allowed(m, d)
    }


def test_the_config_schema_composes_the_rooms_configs_only() -> None:
    deps = import_graph()["protein_performer.config.schema"]
    assert deps <= {"protein_performer.data.config", "protein_performer.model.config"}


def test_every_room_has_its_rule() -> None:
    assert set(room_graph(import_graph())) == set(MAY_IMPORT)


def test_rooms_import_only_what_they_may() -> None:
    assert wrong_imports(import_graph()) == set()


def test_every_allowed_exception_is_still_needed() -> None:
    graph = import_graph()
    edges = {(_short(m), _short(d)) for m, deps in graph.items() for d in deps}
    assert set(ALLOWED_EXCEPTIONS) - edges == set()


def test_a_planted_wrong_import_is_found() -> None:
    graph = {k: set(v) for k, v in import_graph().items()}
    graph["protein_performer.data.fasta"].add("protein_performer.model.performer")
    graph["protein_performer.config.schema"].add("protein_performer.data.datamodule")
    assert wrong_imports(graph) == {
        "data.fasta -> model.performer",
        "config.schema -> data.datamodule",
    }


@pytest.mark.slow
def test_nothing_imports_the_cli() -> None:
    graph = import_graph()
    users = {m for m, deps in graph.items() if not m.startswith("protein_performer.cli")
             for d in deps if d.startswith("protein_performer.cli")}  # fmt: skip
    assert users <= {"protein_performer.__main__", "protein_performer.entry"}


#: Private names imported from another module, each with why (importer, name).
PRIVATE_EXCEPTIONS: dict[tuple[str, str], str] = {}


def private_imports(package: Path = PACKAGE) -> set[tuple[str, str]]:
    """``(importer, module.name)`` for every ``_name`` (or ``_module``) one module imports from
    another: a room uses another's public names only, and a file split for size keeps its
    insides private to itself."""
    mods = modules(package)
    found = set()
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [(a.name, a.name.rsplit(".", 1)[-1]) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                parent = node.module or ""
                if node.level:
                    base = name.split(".")[: len(name.split(".")) - node.level + is_package]
                    parent = ".".join(base + ([node.module] if node.module else []))
                targets = [(f"{parent}.{a.name}", a.name) for a in node.names]
                targets += [(parent, part) for part in parent.split(".")]
            else:
                continue
            for target, last in targets:
                top = target.split(".")[0]
                private = last.startswith("_") and not last.startswith("__")
                own = target == name or target.startswith(name + ".")  # its own insides
                if top == package.name and private and not own:
                    found.add((_short(name), _short(target)))
    return found


def test_no_room_imports_another_rooms_private_names() -> None:
    assert private_imports() - set(PRIVATE_EXCEPTIONS) == set()
    assert set(PRIVATE_EXCEPTIONS) - private_imports() == set()  # each entry still needed


def test_a_planted_private_import_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "protein_performer"
    for room in ("a", "b"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "m.py").write_text("_x = 1\ny = 2\n")
    (pkg / "a" / "n.py").write_text("from .m import _x\n")  # a file split off: its insides too
    (pkg / "b" / "k.py").write_text("def f():\n    from ..a.m import _x, y\n")
    (pkg / "b" / "j.py").write_text("from protein_performer.a import _hidden\n")
    (pkg / "a" / "o.py").write_text("_y = 1\nprint(_y)\n")  # a module's own use: fine
    assert private_imports(pkg) == {("a.n", "a.m._x"), ("b.k", "a.m._x"), ("b.j", "a._hidden")}


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
