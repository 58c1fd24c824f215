"""The package's layout (issue 23): no import circle among its modules.

The graph is built from the source with ``ast``, every import counted wherever it is (module level, inside a
function, under ``TYPE_CHECKING``): a circle through a function-level import is still a circle a reader must
untangle. ``from P import name`` depends on the module ``P.name`` when there is one, else on ``P`` (a name from
the package's namespace); a submodule's implicit import of its parent package is not an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("predispatch_views", "predispatch_views_autoload")

# The one known circle, left to the engine's owner (issue 23): the package imports flag, flag imports the autoload
# hook for its names, and the hook imports the package on the first compile. Remove it here once it is gone.
KNOWN_CIRCLES: list[frozenset[str]] = []


def _module_files() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    """The package modules one import statement depends on."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        if node.level:
            parts = module.split(".") if is_package else module.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            source = ".".join([*parts, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
    found = set()
    for target in targets:
        while target and target not in modules:  # import a.b.c: the deepest package module named
            target = target.rpartition(".")[0]
        if target:
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _module_files()
    graph = {}
    for module, path in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _imported(module, path.name == "__init__.py", node, modules)
        graph[module] = edges - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_graph_sees_the_package_imports() -> None:
    graph = import_graph()
    assert "predispatch_views.compare.parity" in graph["predispatch_views.compare.main"]  # a function-level import
    assert "predispatch_views._torch_internals" in graph["predispatch_views.compare.strategies"]  # from .. import x
    assert "predispatch_views.compare.case_types" in graph["predispatch_views.compare.cases_upstream"]


def test_circles_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_circle_in_the_package() -> None:
    unexpected = [sorted(c) for c in circles(import_graph()) if c not in KNOWN_CIRCLES]
    assert unexpected == [], f"import circles: {unexpected}"
