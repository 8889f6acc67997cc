"""Walking a graph: iter_graph, iter_children, recursive_map, find_duplicates, with_vars."""

from collections.abc import Callable, Iterator
from typing import Any

import jax

from .. import filterlib
from ..variablelib import Variable
from ._api import clone, map
from ._flatten import (
    _check_valid_pytree,
    _duplicate_error,
    _tree_mode_suggestion_api,
    set_graph_mode,
)
from ._nodes import (
    GraphNodeImpl,
    PathParts,
    _key_path_to_key,
    get_node_impl,
    is_array_ref,
    is_graph_node,
    is_node,
    is_node_leaf,
    is_node_module,
    is_pytree_node,
)


def _graph(graph: bool | None) -> bool:
    return set_graph_mode.current_value() if graph is None else graph


def _str_path(path: PathParts) -> str:
    return "/".join(str(p) for p in path)


def _direct_children(node: Any) -> list[tuple[Any, Any]]:
    children, _ = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    return [(_key_path_to_key(path[0]), child) for path, child in children]


def _cycle_error(node: Any, first: str, second: str, fn_name: str) -> ValueError:
    return ValueError(
        f"Cycle detected for {type(node).__name__}\nfound at paths:\n\n"
        f"  - {first}\n  - {second}\n\n"
        "Cycles are not supported with graph=False. " + _tree_mode_suggestion_api(fn_name)
    )


def iter_graph(node: Any, /, *, graph: bool | None = None) -> Iterator[tuple[PathParts, Any]]:
    """``(path, value)`` of every node and leaf under ``node`` (static values included),
    children before their parent; an object reachable twice is visited once."""
    return _iter_graph(node) if _graph(graph) else _iter_tree(node)


def _iter_graph(root: Any) -> Iterator[tuple[PathParts, Any]]:
    visited: set[int] = set()
    stack: list[tuple[PathParts, Any, bool]] = [((), root, False)]
    while stack:
        path, node, traversed = stack.pop()
        if traversed or not (is_node(node) or isinstance(node, Variable)):
            yield path, node
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        impl = get_node_impl(node)
        if impl is None:
            yield path, node
            continue
        stack.append((path, node, True))
        for key, child in reversed(impl.node_dict(node).items()):
            stack.append(((*path, key), child, False))


def _iter_tree(root: Any) -> Iterator[tuple[PathParts, Any]]:
    in_progress: dict[int, str] = {}
    seen_refs: dict[int, str] = {}
    stack: list[tuple[PathParts, Any, bool]] = [((), root, False)]
    while stack:
        path, current, traversed = stack.pop()
        if traversed:
            in_progress.pop(id(current), None)
            yield path, current
            continue
        if not is_pytree_node(current, check_graph_registry=False):
            _check_valid_pytree(current, "iter_graph", _str_path(path))
            _check_duplicate(current, path, seen_refs, "iter_graph")
            yield path, current
            continue
        if id(current) in in_progress:
            raise _cycle_error(current, in_progress[id(current)], _str_path(path), "iter_graph")
        in_progress[id(current)] = _str_path(path)
        stack.append((path, current, True))
        for key, child in reversed(_direct_children(current)):
            stack.append(((*path, key), child, False))


def _check_duplicate(x: Any, path: PathParts, seen: dict[int, str], fn_name: str) -> None:
    if isinstance(x, Variable) or is_array_ref(x):
        where = _str_path(path)
        if id(x) in seen:
            raise _duplicate_error(x, seen[id(x)], where, fn_name)
        seen[id(x)] = where


def _iter_direct(
    node: Any, graph: bool | None, keep: Callable[[Any], bool]
) -> Iterator[tuple[Any, Any]]:
    if _graph(graph):
        impl = get_node_impl(node)
        if impl is None:
            raise ValueError(
                f"Expected a graph node, got {type(node).__name__}. "
                "If this is a regular pytree, use graph=False."
            )
        for key, value in impl.node_dict(node).items():
            if keep(value):
                yield key, value
        return
    _check_valid_pytree(node, "iter_children")
    if not is_pytree_node(node, check_graph_registry=False):
        raise ValueError(
            f"Expected a pytree node, got {type(node).__name__}. "
            "If this is a graph node, use graph=True."
        )
    for key, child in _direct_children(node):
        if keep(child):
            yield key, child


def iter_children(node: Any, /, *, graph: bool | None = None) -> Iterator[tuple[Any, Any]]:
    """``(key, child)`` for the direct children of ``node`` that are graph nodes."""
    return _iter_direct(node, graph, is_graph_node)


def iter_module_children(node: Any, /, *, graph: bool | None = None) -> Iterator[tuple[Any, Any]]:
    """``(key, child)`` for the direct children of ``node`` that are Pytrees/Modules."""
    return _iter_direct(node, graph, is_node_module)


def recursive_map(
    f: Callable[[PathParts, Any], Any], node: Any, /, *, graph: bool | None = None
) -> Any:
    """Apply ``f(path, value)`` to every node and leaf, children first, and return the
    result for the root (the children replaced by their results). Graph mode works on a
    clone of the graph sharing the Variables."""
    if not _graph(graph):
        return _recursive_map_tree(f, node)
    node = clone(node, variables=False, graph=True)
    return _recursive_map_graph(f, node, (), set(), {})


def _recursive_map_graph(
    f: Callable[[PathParts, Any], Any],
    node: Any,
    path: PathParts,
    visited: set[int],
    results: dict[int, Any],
) -> Any:
    if id(node) in visited:
        if id(node) in results:
            return results[id(node)]
        raise ValueError(
            f"Found cycle in the graph at path '{_str_path(path)}'. Node of type"
            f" {type(node)} has already been visited but has not been returned yet."
        )
    impl = get_node_impl(node)
    if type(impl) is GraphNodeImpl or isinstance(node, Variable) or is_array_ref(node):
        visited.add(id(node))
    if impl is not None:
        for key, value in impl.node_dict(node).items():
            new_value = _recursive_map_graph(f, value, (*path, key), visited, results)
            if new_value is not value:
                if impl.set_key is None:
                    raise ValueError(
                        f"Cannot update key '{key}' for node of type '{type(node)}'"
                        " because the node does not support mutation."
                    )
                impl.set_key(node, key, new_value)
    new_node = f(path, node)
    results[id(node)] = new_node
    return new_node


def _recursive_map_tree(f: Callable[[PathParts, Any], Any], root: Any) -> Any:
    in_progress: dict[int, str] = {}
    seen_refs: dict[int, str] = {}

    def recurse(path: PathParts, current: Any) -> Any:
        if not is_pytree_node(current, check_graph_registry=False):
            _check_valid_pytree(current, "recursive_map", _str_path(path))
            _check_duplicate(current, path, seen_refs, "recursive_map")
            return f(path, current)
        if id(current) in in_progress:
            raise _cycle_error(current, in_progress[id(current)], _str_path(path), "recursive_map")
        in_progress[id(current)] = _str_path(path)
        children, treedef = jax.tree_util.tree_flatten_with_path(
            current, is_leaf=lambda x: x is not current
        )
        new_children = [recurse((*path, _key_path_to_key(p[0])), c) for p, c in children]
        result = f(path, treedef.unflatten(new_children))
        in_progress.pop(id(current), None)
        return result

    return recurse((), root)


def find_duplicates(node: Any, /, *, only: Any = ...) -> list[list[PathParts]]:
    """The paths of each object with identity (node, Variable, array) reachable more than
    once, one list per object; ``only`` filters which objects count."""
    node_paths: dict[int, list[PathParts]] = {}
    _node_paths(node, node_paths, (), filterlib.to_predicate(only))
    return [paths for paths in node_paths.values() if len(paths) > 1]


def _node_paths(
    node: Any, node_paths: dict[int, list[PathParts]], path: PathParts, candidate: Any
) -> None:
    graph_node = is_graph_node(node)
    leaf = is_node_leaf(node)
    if not (graph_node or leaf or is_pytree_node(node)):
        return
    if id(node) in node_paths:
        if (graph_node or leaf) and candidate(path, node):
            node_paths[id(node)].append(path)
        return
    if graph_node or leaf:
        node_paths[id(node)] = [path]
    impl = get_node_impl(node)
    if impl is None:
        return
    for key, value in impl.node_dict(node).items():
        _node_paths(value, node_paths, (*path, key), candidate)


def with_vars(
    node: Any,
    /,
    *,
    hijax: bool | None = None,
    ref: bool | None = None,
    mutable: bool | None = None,
    only: Any = ...,
    allow_duplicates: bool = False,
) -> Any:
    """A copy of ``node`` whose Variables matching ``only`` have the given modes
    (``hijax``, ``ref``, ``mutable``) set; shared Variables are refused unless
    ``allow_duplicates``."""
    new_attrs: dict[str, bool] = {}
    if hijax is not None:
        new_attrs["hijax"] = hijax
    if ref is not None:
        new_attrs["ref"] = ref
    if mutable is not None:
        new_attrs["mutable"] = mutable

    def different(path: PathParts, x: Any) -> bool:
        del path
        return isinstance(x, Variable) and any(
            getattr(x, k, None) != v for k, v in new_attrs.items()
        )

    selected = filterlib.All(different, only)
    predicate = filterlib.to_predicate(selected)
    if not allow_duplicates and (duplicates := find_duplicates(node, only=selected)):
        text = "\n  ---"
        for paths in duplicates:
            for p in paths:
                text += f"\n  {_str_path(p)}"
            text += "\n  ---"
        raise ValueError(f"Found duplicate at paths:{text}")

    def to_new(path: PathParts, x: Any) -> Any:
        if predicate(path, x):
            return x.copy(**new_attrs)
        return x

    return map(to_new, node, recreate_variables=False)


vars_as = with_vars
