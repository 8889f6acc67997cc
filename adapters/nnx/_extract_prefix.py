"""Prefix arguments of the NNX transforms (``in_axes``, shardings, ``argnums``...):
their checks, their broadcasting over a tree of graph nodes, and Flax's aliasing errors.

Split out of ``extract`` (which re-exports these names, as Flax's ``nnx.extract`` has them).
"""

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import jax

from . import graphlib
from .variablelib import Variable

KeyPath = tuple[Any, ...]
PathParts = tuple[Any, ...]
_BUILTIN_CONTAINERS = (list, tuple, dict)


class _MissingType:
    def __repr__(self) -> str:
        return "MISSING"


Missing: Any = _MissingType()


def is_node_leaf(x: Any) -> bool:
    """Whether ``x`` is lowered by a transform: a Variable or a graph node (a Module,
    ``nnx.List``...), not a plain list, tuple or dict (those are traversed as pytrees)."""
    return isinstance(x, Variable) or (
        type(x) not in _BUILTIN_CONTAINERS and graphlib.is_graph_node(x)
    )


def resolve_modes(graph: bool | None, graph_updates: bool | None) -> tuple[bool, bool]:
    """``graph``/``graph_updates`` with ``None`` read from ``set_graph_mode``/
    ``set_graph_updates`` (both on by default, as in Flax)."""
    if graph is None:
        flag = getattr(graphlib, "set_graph_mode", None)
        graph = True if flag is None else bool(flag.current_value())
    if graph_updates is None:
        flag = getattr(graphlib, "set_graph_updates", None)
        graph_updates = True if flag is None else bool(flag.current_value())
    return graph, graph and graph_updates


# --------------------------------------------------------------------------- errors


def _keystr(path: Any) -> str:
    return jax.tree_util.keystr(tuple(path))


def alias_error(fn_name: str, leaf: Any, first: str, second: str) -> ValueError:
    """Flax's error for a Variable reachable twice where aliasing is not supported."""
    return ValueError(
        f"Duplicate {leaf}\nfound at paths:\n\n  - {first}\n  - {second}\n\n"
        f"nnx.{fn_name} with graph_updates=False does not support Variable aliasing "
        "(duplicate inputs, duplicate outputs, or input Variables returned as outputs). "
        "Consider the following options:\n\n"
        "1. Remove the duplicate Variables.\n"
        "2. Create new Variables via nnx.clone() and use those instead.\n"
        "3. Enable graph mode and graph updates by passing graph=True and "
        f"graph_updates=True to {fn_name}\n\n"
        f"  nnx.{fn_name}(..., graph=True, graph_updates=True)\n\n"
        f"4. Use nnx.compat.{fn_name} (sets graph and graph_updates to True "
        f"automatically)\n\n  nnx.compat.{fn_name}(...)"
    )


def check_no_aliases(fn_name: str, /, *, check: Iterable[str] = (), **trees: Any) -> None:
    """Raise Flax's aliasing error if a Variable occurs twice among ``trees``' leaves."""
    seen: dict[int, str] = {}
    for name, tree in trees.items():
        for path, leaf in _variables_with_paths(tree):
            where = f".{name}{_keystr(path)}"
            if id(leaf) in seen:
                raise alias_error(fn_name, leaf, seen[id(leaf)], where)
            seen[id(leaf)] = where


def _variables_with_paths(tree: Any) -> list[tuple[KeyPath, Variable]]:
    """Every Variable leaf of ``tree`` as a pytree (Modules are pytrees), repeats kept."""
    leaves = jax.tree_util.tree_leaves_with_path(tree, is_leaf=lambda x: isinstance(x, Variable))
    return [(path, leaf) for path, leaf in leaves if isinstance(leaf, Variable)]


class PrefixMapping:
    """A lift type that gives each Variable of a node its own prefix (``StateSharding``,
    ``StateAxes``): ``map_prefix(path, variable)``."""

    def map_prefix(self, path: PathParts, variable: Variable) -> Any:
        raise NotImplementedError


def check_consistent_aliasing(
    node: Any,
    prefix: Any,
    /,
    *,
    node_prefixes: dict[int, list[tuple[PathParts, Any]]] | None = None,
) -> None:
    """Raise Flax's error if a Variable reachable from ``node`` (and from the nodes seen
    before, recorded in ``node_prefixes``) is given two different prefixes."""
    if node_prefixes is None:
        node_prefixes = {}
    variables: dict[int, Variable] = {}
    for path, value in graphlib.iter_graph(node, graph=True):
        if isinstance(value, Variable):
            p = prefix.map_prefix(path, value) if isinstance(prefix, PrefixMapping) else prefix
            variables[id(value)] = value
            node_prefixes.setdefault(id(value), []).append((path, p))
    messages = []
    for node_id, entries in node_prefixes.items():
        if len({_hashable(p) for _, p in entries}) > 1:
            lines = "\n".join(
                f"  {'/'.join(map(str, path)) if path else '<root>'}: {p}" for path, p in entries
            )
            name = (
                type(variables[node_id]).__name__ if node_id in variables else f"Node ID: {node_id}"
            )
            messages.append(f"Node: {name}\n{lines}")
    if messages:
        raise ValueError(
            "Inconsistent aliasing detected. The following nodes have different prefixes:\n"
            + "\n".join(messages)
        )


def check_prefix_aliasing(tree: Any, prefix: Any) -> None:
    """``check_consistent_aliasing`` over every node of ``tree`` with its part of
    ``prefix`` (a tree prefix of ``tree``)."""
    prefixes = broadcast_prefix(
        prefix,
        tree,
        prefix_is_leaf=lambda x: (
            x is None or isinstance(x, (PrefixMapping, TreeState)) or is_node_leaf(x)
        ),
    )
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=is_node_leaf)
    node_prefixes: dict[int, list[tuple[PathParts, Any]]] = {}
    for leaf, p in zip(leaves, prefixes):
        if is_node_leaf(leaf):
            check_consistent_aliasing(leaf, p, node_prefixes=node_prefixes)


def _hashable(x: Any) -> Any:
    try:
        hash(x)
        return x
    except TypeError:
        return id(x)


def check_prefix(prefix: Any, prefix_name: str, fn_name: str, graph: bool, updates: bool) -> None:
    """Flax's checks on a prefix argument (``argnums``, ``in_axes``, shardings)."""

    def check(path: Any, leaf: Any) -> None:
        where = jax.tree_util.keystr(path)
        if isinstance(leaf, Variable):
            raise ValueError(
                f"Found Variable of type {type(leaf).__name__} at path {where} in "
                f"`{prefix_name}` for nnx.{fn_name}. Variables prefixes are not supported."
                "Pass a prefix for the entire Variable instead of passing a Variable with a "
                "prefix for its value."
            )
        if isinstance(leaf, PrefixMapping) and not (graph and updates):
            kind = type(leaf).__name__
            raise ValueError(
                f"`{prefix_name}` cannot contain `{kind}` objects when `graph=False` or "
                "`graph_updates=False`. Consider the following options:\n\n"
                f"1. Remove `{kind}` objects from `{prefix_name}`.\n"
                "2. Enable graph mode and graph updates by passing graph=True and "
                f"graph_updates=True to {fn_name} e.g.\n\n"
                f"  nnx.{fn_name}(..., graph=True, graph_updates=True)\n\n"
                f"3. Use nnx.compat.{fn_name} instead e.g.\n\n  nnx.compat.{fn_name}(...)"
            )
        if graph and graphlib.is_graph_node(leaf):
            raise ValueError(
                f"Found graph node of type {type(leaf).__name__} at path {where} in "
                f"`{prefix_name}` for nnx.{fn_name}. Graph nodes are not allowed as prefixes "
                "when graph=True.Consider the following options:\n\n"
                f"1. Remove graph nodes from `{prefix_name}`.\n"
                f"2. Enable tree mode by passing graph=False to {fn_name} e.g.\n\n"
                f"  nnx.{fn_name}(..., graph=False)\n\n"
                "3. If you using nnx.prefix to create the prefix, pass graph=True:\n\n"
                "  prefix = nnx.prefix(..., graph=True)"
            )
        if isinstance(leaf, TreeState) and (not graph or updates):
            msg = (
                f"Found `TreeState` object at path {where} in `{prefix_name}` for "
                f"nnx.{fn_name}. `TreeState` objects are only allowed as prefixes when "
                "`graph=True` and `graph_updates=False`.Consider the following options:\n\n"
                "1. Enable graph mode and graph updates by passing graph=True and "
                f"graph_updates=True to {fn_name} e.g.\n\n"
                f"  nnx.{fn_name}(..., graph=True, graph_updates=True)\n\n"
                f"2. Use nnx.compat.{fn_name} instead e.g.\n\n  nnx.compat.{fn_name}(...)"
            )
            if updates:
                msg += (
                    "\n\n3. If you using nnx.prefix to create the prefix, pass graph=False:"
                    "\n\n  prefix = nnx.prefix(..., graph=False)"
                )
            raise ValueError(msg)

    jax.tree_util.tree_map_with_path(
        check,
        prefix,
        is_leaf=lambda x: (
            x is None
            or isinstance(x, (Variable, PrefixMapping, TreeState))
            or graphlib.is_graph_node(x)
        ),
    )


# --------------------------------------------------------------------------- prefix types


class _Static:
    """A pytree with no leaves whose aux data is ``value`` (hashed into jit's cache key)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


jax.tree_util.register_pytree_node(
    _Static, lambda s: ((), s.value), lambda value, _: _Static(value)
)


@dataclasses.dataclass(frozen=True)
class TreeState:
    """A node in tree form: its GraphDef and nested State (``prefix`` builds these)."""

    graphdef: Any
    state: Any


# The GraphDef is the aux data (compared by value: equal structures, equal treedefs).
jax.tree_util.register_pytree_node(
    TreeState, lambda t: ((t.state,), t.graphdef), lambda g, ch: TreeState(g, ch[0])
)


def broadcast_prefix(
    prefix_tree: Any,
    full_tree: Any,
    prefix_is_leaf: Callable[[Any], bool] | None = None,
    tree_is_leaf: Callable[[Any], bool] | None = is_node_leaf,
) -> list[Any]:
    """One prefix per leaf of ``full_tree`` (``prefix_tree`` is a tree prefix of it)."""
    result: list[Any] = []

    def add(x: Any, subtree: Any) -> None:
        n = jax.tree_util.tree_structure(subtree, is_leaf=tree_is_leaf).num_leaves
        result.extend([x] * n)

    jax.tree.map(add, prefix_tree, full_tree, is_leaf=prefix_is_leaf)
    return result
