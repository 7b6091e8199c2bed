"""The package layout's rules, read from the code: each package's ``__init__`` says what it
may import ("May import: …") and its modules obey; the layers point one way (binlog <- rows
<- relay/apply <- spark <- cli); no two modules import each other, directly or around a
circle; no product package imports the test tooling."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import binrelay

ROOT = Path(binrelay.__file__).resolve().parent

#: Lower layers first; a module imports only from layers below its own (or its package).
LAYERS: list[set[str]] = [
    {"__init__", "_speedups", "errors", "failpoints", "logfmt", "sqlclient",
     "threadtimes"},
    {"gtid", "position"},
    {"config", "binlog"},
    {"metrics", "rows", "upstream"},
    {"relay", "apply"},
    {"spark", "status"},
    {"testing"},
    {"cli"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(("binrelay", *path.relative_to(ROOT).with_suffix("").parts))
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """The binrelay modules ``path`` imports, anywhere but under ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text())
    typing_only = {id(sub) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for sub in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from pkg import mod" depends on mod; "from mod import name" on mod.
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES
                     else node.module for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name.startswith("binrelay"):
                found.add(name)
    return found


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_top_level_name_has_a_layer() -> None:
    assert {_top(m) for m in MODULES} <= set(RANK)


def test_imports_point_down_the_layers() -> None:
    wrong = sorted(f"{m} imports {t}" for m, targets in GRAPH.items() for t in targets
                   if _top(t) != _top(m) and _top(t) != "__init__"
                   and RANK[_top(t)] >= RANK[_top(m)])
    assert not wrong


def test_each_package_imports_only_what_its_init_allows() -> None:
    checked = 0
    for pkg in sorted({_top(m) for m in MODULES if m.count(".") >= 2}):
        doc = ast.get_docstring(ast.parse((ROOT / pkg / "__init__.py").read_text())) or ""
        rule = re.search(r"^May import: (.+?)\.$", doc, re.MULTILINE | re.DOTALL)
        assert rule, f"binrelay/{pkg}/__init__.py does not say what it may import"
        checked += 1
        if rule.group(1).startswith("any binrelay package"):
            continue
        allowed = {w.strip() for w in rule.group(1).split(",")}
        wrong = sorted(f"{m} imports {t}" for m, targets in GRAPH.items()
                       if _top(m) == pkg for t in targets
                       if _top(t) not in (pkg, "__init__") and _top(t) not in allowed)
        assert not wrong, f"binrelay.{pkg} may import {sorted(allowed)}"
    assert checked >= 8


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles


def test_only_the_cli_imports_the_test_tooling() -> None:
    users = defaultdict(set)
    for m, targets in GRAPH.items():
        for t in targets:
            if _top(t) == "testing" and _top(m) != "testing":
                users[_top(m)].add(m)
    assert set(users) <= {"cli"}
