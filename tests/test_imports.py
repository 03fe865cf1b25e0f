"""The package's imports go one way: no module imports itself back through others.

Every ``import`` counts, those under ``if TYPE_CHECKING:`` too (a cycle through annotations is
still a cycle for whoever reads the code). ``from . import x`` counts as an import of the
submodule ``x``, not of the package.
"""

from __future__ import annotations

import ast
import pathlib

import broker

ROOT = pathlib.Path(broker.__file__).parent


def _modules() -> dict[str, tuple[pathlib.Path, list[str]]]:
    found = {}
    for file in sorted(ROOT.rglob("*.py")):
        parts = list(file.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            package = parts
        else:
            package = parts[:-1]
        found[".".join(parts)] = (file, package)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (file, package) in modules.items():
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                origin = ".".join(base + (node.module.split(".") if node.module else []))
                for alias in node.names:
                    submodule = f"{origin}.{alias.name}"
                    targets.append(submodule if submodule in modules else origin)
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = import_graph()
    graph["broker._agent"].add("broker._session")  # the loop this package used to have
    assert any({"broker._agent", "broker._session"} <= set(c) for c in cycles(graph))


def test_the_core_imports_downward() -> None:
    graph = import_graph()
    assert "broker._session" not in graph["broker._agent"]
    assert "broker._broker" not in graph["broker._session"]
    store = {name for name in graph if name.startswith("broker.store")}
    outside = {target for name in store for target in graph[name]} - store
    assert not {m for m in outside if m in ("broker._broker", "broker._session", "broker._agent")}


def test_every_subpackage_states_its_public_names() -> None:
    """Issue 26: each package of broker curates its API in ``__all__``, and every name listed
    is there (the CLI included: its one public name is ``main``)."""
    import importlib

    root = pathlib.Path(broker.__file__).parent
    missing = []
    for init in sorted(root.rglob("__init__.py")):
        if "__pycache__" in init.parts:
            continue
        name = ".".join(("broker", *init.parent.relative_to(root).parts))
        module = importlib.import_module(name)
        names = getattr(module, "__all__", None)
        if not names:
            missing.append(name)
            continue
        assert all(hasattr(module, n) for n in names), name
    assert missing == []
