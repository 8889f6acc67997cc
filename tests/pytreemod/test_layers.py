"""pytreemod's modules form layers: no import cycle, no method patched in from elsewhere.

The import graph is read from the source with ``ast``: every ``import`` counts, including
those inside functions (a function-level import does not make a cycle go away, it only
hides it). The layer order checked here is the one declared in pyproject's
``[tool.importlinter]`` (which ``lint-imports`` enforces too) and drawn in
``pytreemod/README.md``.
"""

import ast
import inspect
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

import pytreemod as pm

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytreemod"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The pytreemod modules one import statement names (``from . import x`` included)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("pytreemod")]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    if not target.startswith("pytreemod"):
        return []
    # `from .pkg import sub` imports the submodule `pkg.sub` when that is a module.
    return [target] + [f"{target}.{a.name}" for a in node.names]


def import_graph() -> dict[str, set[str]]:
    """``module -> modules it imports`` for every module of the pytreemod package."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps: set[str] = set()
        for node in ast.walk(tree):
            for target in _imported(node, name, path.name == "__init__.py"):
                if target in files and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``) of ``graph``, or ``None`` if it is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _without_package_inits(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    # A package's __init__ re-exports its submodules, and submodules may import siblings
    # through it (`from .. import x`); what must be acyclic is the graph of the modules
    # themselves, so an edge to a package stands for nothing here.
    packages = {n for n in graph if (PACKAGE.parent / n.replace(".", "/")).is_dir()}
    return {n: deps - packages for n, deps in graph.items() if n not in packages}


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    graph = import_graph()
    # Direct, relative, and nested-package relative imports are all found.
    assert "pytreemod._errors" in graph["pytreemod._module._base"]
    assert "pytreemod._module" in graph["pytreemod._meta"]
    assert "pytreemod._shapecheck" in graph["pytreemod.nn._linear"]
    source = "def f():\n    from ._module import Module\n"
    nodes = list(ast.walk(ast.parse(source)))
    found = [t for n in nodes for t in _imported(n, "pytreemod._repr", False)]
    assert "pytreemod._module" in found


def test_pytreemod_has_no_import_cycle() -> None:
    cycle = find_cycle(_without_package_inits(import_graph()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _declared_core_layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (core,) = [c for c in contracts if c.get("containers") == ["pytreemod"]]
    return [
        [f"pytreemod.{name.strip()}" for name in re.split(r"[|:]", layer)]
        for layer in core["layers"]
    ]


def test_core_modules_import_only_lower_layers() -> None:
    layers = _declared_core_layers()
    assert ["pytreemod._errors"] == layers[-1] and ["pytreemod.nn"] == layers[0]
    rank = {m: i for i, layer in enumerate(layers) for m in layer}  # 0 is the top
    graph = import_graph()
    wrong = [
        f"{module} imports {dep}"
        for module, deps in graph.items()
        if module in rank
        for dep in deps
        if dep in rank and rank[dep] <= rank[module] and dep != module
    ]
    assert not wrong, wrong


def test_readme_draws_the_declared_layers() -> None:
    readme = (PACKAGE / "README.md").read_text(encoding="utf-8")
    drawn = re.search(r"```text\n(.*?)```", readme, re.S)
    assert drawn is not None
    rows = [
        sorted(re.findall(r"\b(nn|_[a-z_]+)\b", line))
        for line in drawn.group(1).splitlines()
        if re.search(r"\b(nn|_[a-z_]+)\b", line)
    ]
    declared = [
        sorted(m.removeprefix("pytreemod.") for m in layer) for layer in _declared_core_layers()
    ]
    assert rows == declared


# Function attributes a decorator may set on the function it returns (not a class's
# method being replaced).
_FUNCTION_METADATA = frozenset(
    {"__wrapped__", "__name__", "__qualname__", "__module__", "__doc__", "__annotations__"}
    | {"__kwdefaults__", "__no_type_check__", "__signature__"}
)
# Hooks that run while a class is being created, before any code sees it (the Module
# metaclass sets ``cls.__init__`` to the dataclass-generated one taking Python numbers;
# ``Variable.__init_subclass__`` sets the collection name): defining a class, not
# replacing a method of an existing one.
_CLASS_CREATION = frozenset({"__new__", "__init_subclass__"})


def _patches(source: str) -> list[int]:
    """Lines of ``source`` that replace an attribute of some other object at run time:
    ``setattr``/``delattr`` calls, ``X.__dunder__ = ...`` and ``cls.name = ...``
    assignments, anywhere (module level and function bodies)."""
    tree = ast.parse(source)
    lines = []
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for func in [tree, *(n for n in ast.walk(tree) if isinstance(n, functions))]:
        allowed = getattr(func, "name", "") in _CLASS_CREATION
        for node in _own_nodes(func):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in (
                "setattr",
                "delattr",
            ):
                lines.append(node.lineno)
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, ast.Delete) else [node.target]
            for t in targets:
                if not isinstance(t, ast.Attribute) or allowed:
                    continue
                owner = getattr(t.value, "id", "")
                if isinstance(func, ast.Module) and owner != "self":
                    lines.append(t.lineno)  # module level: any `Imported.attr = ...`
                elif _is_dunder(t.attr) and t.attr not in _FUNCTION_METADATA and owner != "self":
                    lines.append(t.lineno)
                elif owner in ("cls", "klass", "owner_cls") and not t.attr.startswith("_pytreemod"):
                    lines.append(t.lineno)
    return sorted(set(lines))


def _own_nodes(func: ast.AST) -> list[ast.AST]:
    """The nodes of a function body, nested function bodies excluded (they are visited on
    their own)."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return out


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def test_the_patch_finder_reads_function_bodies() -> None:
    source = (
        "import m\n"
        "m.Thing.run = run\n"  # 2: module level
        "def f(klass, original):\n"
        "    klass.__call__ = wrap(original)\n"  # 4: in a function body
        "    setattr(klass, '__call__', original)\n"  # 5
        "    def g(cls):\n"
        "        cls.forward = None\n"  # 7: nested function
        "    wrapper.__wrapped__ = original\n"  # function metadata: fine
        "    self.x = 1\n"  # fine
    )
    assert _patches(source) == [2, 4, 5, 7]


def test_no_method_is_patched_in_from_elsewhere() -> None:
    # No class has a method replaced, at import time or while the library runs (a
    # `klass.__call__ = ...` in a function, `setattr(cls, "__call__", ...)`): pm.tabulate
    # records calls through the call hook of Module's call path instead.
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in _patches(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, offenders


@pytest.mark.parametrize("name", ["set", "get"])
def test_variable_set_and_get_are_defined_in_the_class(name: str) -> None:
    method = pm.Variable.__dict__[name]
    assert method.__qualname__ == f"Variable.{name}"
    assert method.__module__ == "pytreemod._variables"
    source = inspect.getsource(method)
    assert "NotImplementedError" not in source and "recorders" in source
