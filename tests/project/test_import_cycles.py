"""No import circles among the gateway's modules (GUIDE: "no import circles"), checked on the source text.

Every module under ``gateway/`` is parsed with :mod:`ast` (nothing is imported), like
tests/project/test_layering.py. Every import counts, whatever runs it: at module level, inside a function body
(a deferred import postpones a circle to the first call, it does not remove it) and under ``if
TYPE_CHECKING:`` (a type-only circle still ties two modules together: neither can be read, moved or tested
without the other). The fix is the same for all three: move the shared piece to a module both import. A
failure names each circle, with the file, line and kind of every import along it.

A submodule import also runs its packages' ``__init__`` files; those implicit edges are not counted (a
package face that re-exports its submodules would otherwise be a circle with each of them).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.files import ROOT
from tests.support.imports import GATEWAY, is_local_module, module_name, resolve_from


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    line: int
    kind: str  # "module level", "in a function" or "TYPE_CHECKING"

    def __str__(self) -> str:
        path = ROOT.joinpath(*self.source.split("."))
        file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        return f"{file.relative_to(ROOT)}:{self.line} imports {self.target} ({self.kind})"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, path: Path) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        module = resolve_from(node, path)
        names = [
            f"{module}.{alias.name}" if is_local_module(f"{module}.{alias.name}") else module
            for alias in node.names
        ]
    return [name for name in names if name.split(".")[0] == "gateway" and is_local_module(name)]


def edges_of(path: Path, source: str | None = None) -> list[Edge]:
    """The gateway modules ``path`` (or ``source``, read as if at ``path``) imports, with each one's kind."""
    text = path.read_text(encoding="utf-8") if source is None else source
    name = module_name(path)
    found: list[Edge] = []

    def visit(nodes: Iterable[ast.AST], kind: str) -> None:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.extend(Edge(name, target, node.lineno, kind) for target in _targets(node, path))
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.body, "TYPE_CHECKING")
                visit(node.orelse, kind)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(
                    ast.iter_child_nodes(node),
                    "TYPE_CHECKING" if kind == "TYPE_CHECKING" else "in a function",
                )
            else:
                visit(ast.iter_child_nodes(node), kind)

    visit(ast.parse(text, filename=str(path)).body, "module level")
    return found


def import_graph() -> dict[str, list[Edge]]:
    graph: dict[str, list[Edge]] = {}
    for path in sorted(GATEWAY.rglob("*.py")):
        if "pb" in path.relative_to(GATEWAY).parts[:-1]:
            continue
        graph[module_name(path)] = edges_of(path)
    return graph


def _components(graph: Mapping[str, list[Edge]]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself), iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = [edge.target for edge in graph.get(node, []) if edge.target in graph]
            if position < len(targets):
                work.append((node, position + 1))
                target = targets[position]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or any(edge.target == node for edge in graph[node]):
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def _one_circle(graph: Mapping[str, list[Edge]], members: list[str]) -> list[Edge]:
    """A shortest circle through the component's first module, as the imports that make it."""
    inside = set(members)
    start = members[0]
    came: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for edge in graph[node]:
            if edge.target not in inside:
                continue
            if edge.target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, came[path[0].source])
                return path
            if edge.target not in came:
                came[edge.target] = edge
                queue.append(edge.target)
    raise AssertionError(f"{members} is not a cycle")  # unreachable for a strongly connected component


def circles(graph: Mapping[str, list[Edge]]) -> list[str]:
    report = []
    for members in _components(graph):
        circle = _one_circle(graph, members)
        names = " -> ".join([edge.source for edge in circle] + [circle[0].source])
        report.append(
            f"{names} (modules in the knot: {', '.join(members)})\n" + "\n".join(f"    {e}" for e in circle)
        )
    return report


def test_the_walker_sees_every_kind_of_import() -> None:
    path = GATEWAY / "serve.py"
    source = (
        "from typing import TYPE_CHECKING\n"
        "from gateway import config\n"
        "if TYPE_CHECKING:\n"
        "    from gateway.workers.context import WorkerContext\n"
        "def f() -> None:\n"
        "    from .api import app\n"
        "class C:\n"
        "    def g(self) -> None:\n"
        "        import gateway.tls\n"
    )
    assert [(e.target, e.kind) for e in edges_of(path, source)] == [
        ("gateway.config", "module level"),
        ("gateway.workers.context", "TYPE_CHECKING"),
        ("gateway.api.app", "in a function"),
        ("gateway.tls", "in a function"),
    ]
    graph = import_graph()
    assert len(graph) > 150 and sum(len(edges) for edges in graph.values()) > 500


def test_the_finder_names_a_circle_of_any_kind() -> None:
    # The rule below must be able to fail: a three-module circle through a deferred and a type-only import.
    graph = {
        "a": [Edge("a", "b", 1, "module level")],
        "b": [Edge("b", "c", 2, "in a function"), Edge("b", "d", 3, "module level")],
        "c": [Edge("c", "a", 4, "TYPE_CHECKING")],
        "d": [],
    }
    [found] = circles(graph)
    assert found.splitlines()[0] == "a -> b -> c -> a (modules in the knot: a, b, c)"
    assert "(TYPE_CHECKING)" in found and "(in a function)" in found
    assert circles({"a": [Edge("a", "a", 1, "module level")]}) != []
    assert circles({"a": [Edge("a", "b", 1, "module level")], "b": []}) == []


def test_no_import_circles() -> None:
    found = circles(import_graph())
    assert found == [], (
        "import circles among gateway modules (move what both sides need to a module both import):\n"
        + "\n".join(found)
    )
