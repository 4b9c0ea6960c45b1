"""The package layering, checked on the import graph of every module.

Imports are read from the source (``ast``), all of them: module level, under
``if TYPE_CHECKING:`` and inside functions, because each is a dependency a reader and a
refactoring must respect. A module may depend, directly or through others, only on the
layers its own layer lists; no module may import itself back through others; core and
wire stay sans-IO.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: layer -> the layers it may use. A layer is the first package under ``magnetar`` or, for
#: the entries of ``SPECIAL``, a module of its own.
LAYERS: dict[str, set[str]] = {
    "wire": {"wire"},
    "core": {"core", "wire"},
    "storage": {"storage", "core", "wire"},
    "config": {"config", "core"},
    "security": {"security", "core"},
    "server": {"server", "security", "storage", "core", "wire", "config"},
    "admin": {"admin", "server", "security", "storage", "core", "wire", "config"},
    "runner": {"runner", "admin", "server", "security", "storage", "core", "wire", "config"},
    "spark": {"spark", "core", "wire"},
    "cli": {"cli", "runner", "admin", "server", "security", "storage", "core", "wire", "config", "spark",
            "testing"},
    "testing": {"testing", "cli", "runner", "admin", "server", "security", "storage", "core", "wire", "config"},
    "package": {"package"},
}
for _allowed in LAYERS.values():
    _allowed.add("package")  # ``magnetar/__init__`` holds the version and imports nothing
#: modules that are layers of their own: the standalone runner and the cluster's broker (the
#: same runner with its cluster membership) compose server and admin
SPECIAL = {"magnetar.server.standalone": "runner", "magnetar.server.cluster_broker": "runner",
           "magnetar": "package", "magnetar.config": "config"}
#: what sans-IO code must not touch: the network, threads, the clock, randomness, the OS
IO_MODULES = {"asyncio", "socket", "threading", "time", "random", "selectors", "subprocess", "os", "uvloop"}
SANS_IO_LAYERS = {"core", "wire"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in SRC.joinpath("magnetar").rglob("*.py")}


def layer_of(name: str) -> str:
    if name in SPECIAL:
        return SPECIAL[name]
    return name.split(".")[1]


def imported(tree: ast.AST, known: Collection[str] = ()) -> Iterator[str]:
    """Every module an ``import`` or ``from ... import`` names, wherever it stands.

    ``from package import submodule`` depends on the submodule alone: a package that
    re-exports its submodules is no cycle with them."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            if not all(name in known for name in names):
                yield node.module
            yield from names


@cache
def graph() -> dict[str, frozenset[str]]:
    """module -> the project modules it imports."""
    known = modules()
    edges = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = {target for target in imported(tree, known) if target in known and target != name}
        edges[name] = frozenset(targets)
    return edges


@cache
def external(name: str) -> frozenset[str]:
    tree = ast.parse(modules()[name].read_text(encoding="utf-8"))
    return frozenset(target.split(".")[0] for target in imported(tree) if not target.startswith("magnetar"))


def reachable(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph()[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph()[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph()):
        if node not in index:
            visit(node)
    return found


def layering_violations() -> list[str]:
    problems = []
    for name in sorted(graph()):
        allowed = LAYERS[layer_of(name)]
        for dependency in sorted(reachable(name)):
            if layer_of(dependency) not in allowed:
                problems.append(f"{name} ({layer_of(name)}) reaches {dependency} ({layer_of(dependency)})")
    return problems


def test_every_module_belongs_to_a_known_layer() -> None:
    assert {layer_of(name) for name in modules()} <= set(LAYERS)


def test_no_layer_reaches_a_layer_above_it() -> None:
    assert layering_violations() == []


def test_no_module_imports_itself_back() -> None:
    assert cycles() == []


@pytest.mark.parametrize("layer", sorted(SANS_IO_LAYERS))
def test_sans_io_layers_touch_no_io(layer: str) -> None:
    offenders = {name: sorted(external(name) & IO_MODULES) for name in modules()
                 if layer_of(name) == layer and external(name) & IO_MODULES}
    assert offenders == {}


def test_the_checks_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core module that reached storage, or a cycle, would be reported."""
    edges = dict(graph())
    edges["magnetar.core.topics.topic"] = edges["magnetar.core.topics.topic"] | {"magnetar.storage.segment_ledger"}
    edges["magnetar.wire.frames"] = edges["magnetar.wire.frames"] | {"magnetar.core.topics.topic"}
    monkeypatch.setattr(__import__(__name__), "graph", lambda: edges)
    assert any("magnetar.core.topics.topic (core) reaches magnetar.storage" in p for p in layering_violations())
    assert any("magnetar.wire.frames" in cycle for cycle in cycles())
