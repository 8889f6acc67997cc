"""Both packages are one-way houses: the import graph of ``pytreemod`` and ``adapters`` has
no cycle, counting every import the source holds.

The graph is read from the source with ``ast``, so the imports that do not run at import
time count too: those inside functions and those under ``if TYPE_CHECKING:``. Moving an
import into a function does not remove a cycle, it only hides it from the interpreter.

An import names a node the way the interpreter resolves it: ``from pkg import name`` is an
edge to the module ``pkg.name`` when that is a module, and to the package ``pkg`` (its
``__init__``) otherwise. Package ``__init__`` files are nodes like any other, so a module
that reaches a sibling through its package's re-exports while the package imports that
module is a cycle too. A package ``__getattr__`` that loads submodules on first access
(PEP 562) is an edge from the package down, not an import statement, and is not counted.
"""

import ast
import itertools
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pytreemod", "adapters")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _targets(node: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The modules one import statement makes ``module`` depend on."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names)
        return
    if not isinstance(node, ast.ImportFrom):
        return
    if node.level:
        base = module.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        yield sub if sub in known else target


def _owner(name: str, known: set[str]) -> str | None:
    """The innermost known module that ``name`` lies in (``None`` outside both packages)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """``module -> modules it imports`` over both packages, every import statement counted."""
    files = _modules()
    known = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(node, name, path.name == "__init__.py", known):
                owner = _owner(target, known)
                if owner is not None and owner != name:
                    deps.add(owner)
        graph[name] = deps
    return graph


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of size > 1."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = itertools.count()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = next(counter)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_circles() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert strongly_connected({"a": {"a"}}) == [["a"]]


def test_the_graph_counts_hidden_imports() -> None:
    known = {"p", "p.a", "p.b", "p.c", "p.sub", "p.sub.d"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .b import B\n"
        "def f():\n    from . import c\n    from .sub import thing\n"
    )
    found = {
        t
        for node in ast.walk(ast.parse(source))
        for t in _targets(node, "p.a", False, known)
        if _owner(t, known)
    }
    assert found == {"p.b", "p.c", "p.sub"}


def test_the_graph_covers_both_packages() -> None:
    graph = import_graph()
    assert {m.split(".")[0] for m in graph} == set(PACKAGES)
    assert any(dep.startswith("pytreemod") for dep in graph["adapters.core._scope"])


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package: str) -> None:
    circles = [c for c in strongly_connected(import_graph()) if c[0].split(".")[0] == package]
    assert not circles, "import circles (every import counts):\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


def test_every_package_has_an_acyclic_contract() -> None:
    # lint-imports checks the same from the built graph: every package of both is named
    # in an `acyclic_siblings` contract of pyproject (a new package is a visible change).
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    named = {a for c in contracts if c["type"] == "acyclic_siblings" for a in c["ancestors"]}
    packages = {_module_name(p) for pkg in PACKAGES for p in (ROOT / pkg).rglob("__init__.py")}
    adapters = {p for p in packages if p.startswith("adapters")}
    assert "adapters.linen._module" in adapters and "adapters.nnx" in adapters
    assert adapters <= named, sorted(adapters - named)
    assert "pytreemod" in named  # its contract covers the subpackages recursively
