"""Walking the attribute values of modules: containers of submodules, naming suffixes,
freezing, and the local method/descriptor names of a class.

A module attribute may be a container (dict, ``FrozenDict``, list, tuple, named tuple)
holding submodules; each submodule is named after the attribute plus a suffix built from
its keys (``layers_0``, ``blocks_enc_1``). Keys are visited in the order of their text.
"""

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...core import FrozenDict
from ._marker import ModuleBase


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _children(x: Any) -> list[tuple[str, Any, Any]] | None:
    """``(key text, key, child)`` of a container (sorted by key text), else ``None``."""
    if isinstance(x, (dict, FrozenDict)):
        items = [(str(k), k, v) for k, v in x.items()]
    elif _is_namedtuple(x):
        items = [(f, f, getattr(x, f)) for f in x._fields]
    elif isinstance(x, (list, tuple)):
        items = [(str(i), i, v) for i, v in enumerate(x)]
    else:
        return None
    items.sort(key=lambda item: item[0])
    return items


def _rebuild(x: Any, new_children: dict[Any, Any]) -> Any:
    if isinstance(x, FrozenDict):
        return FrozenDict({k: new_children[k] for k in x})
    if isinstance(x, dict):
        return {k: new_children[k] for k in x}
    if _is_namedtuple(x):
        return type(x)(**{f: new_children[f] for f in x._fields})
    values = [new_children[i] for i in range(len(x))]
    return tuple(values) if isinstance(x, tuple) else values


def _collect_pairs(path: tuple[str, ...], x: Any, pairs: list[tuple[tuple[str, ...], Any]]) -> None:
    kids = _children(x)
    if kids is None or (not kids and path):
        pairs.append((path, x))
        return
    for text, _, child in kids:
        _collect_pairs((*path, text), child, pairs)


def _get_suffix_value_pairs(tree_or_leaf: Any) -> list[tuple[str, Any]]:
    """``(suffix, leaf)`` pairs of a container tree: ``[('_a', 1), ('_b_c', 2)]``.

    A leaf, or an empty container, is its own single pair ``('', x)``.
    """
    if not _children(tree_or_leaf):
        return [("", tree_or_leaf)]
    pairs: list[tuple[tuple[str, ...], Any]] = []
    _collect_pairs((), tree_or_leaf, pairs)
    return [("_" + "_".join(path), value) for path, value in pairs]


def _map_leaves(fn: Callable[[str, Any], Any], path: tuple[str, ...], x: Any) -> Any:
    # A module-level recursion (no self-referencing closure): nothing here may keep the
    # traced values of a module alive in a reference cycle.
    kids = _children(x)
    if kids is None or (not kids and path):
        return fn("_" + "_".join(path), x)
    return _rebuild(x, {key: _map_leaves(fn, (*path, text), child) for text, key, child in kids})


def _map_over_modules_in_tree(fn: Callable[[str, Any], Any], tree_or_leaf: Any) -> Any:
    """Rebuild a container tree with ``fn(suffix, leaf)`` in place of every leaf
    (empty containers included), visiting leaves in suffix order."""
    if not _children(tree_or_leaf):
        return fn("", tree_or_leaf)
    return _map_leaves(fn, (), tree_or_leaf)


def _freeze_attr(val: Any) -> Any:
    """Make an attribute value immutable: lists become tuples, dicts ``FrozenDict``s
    (recursively); named tuples and ``PartitionSpec``s keep their type."""
    if isinstance(val, (dict, FrozenDict)):
        return FrozenDict({k: _freeze_attr(v) for k, v in val.items()})
    if isinstance(val, tuple):
        if _is_namedtuple(val) or type(val).__name__ == "PartitionSpec":
            return type(val)(*[_freeze_attr(v) for v in val])
        return tuple(_freeze_attr(v) for v in val)
    if isinstance(val, list):
        return tuple(_freeze_attr(v) for v in val)
    return val


def _map_submodules(fn: Callable[[Any], Any], tree: Any) -> Any:
    """Apply ``fn`` to every ``Module`` in an attribute tree (freezing the result)."""
    return _freeze_attr(
        _map_over_modules_in_tree(lambda _, x: fn(x) if isinstance(x, ModuleBase) else x, tree)
    )


def _get_local_method_names(cls: Any, exclude: Iterable[str] = ()) -> tuple[str, ...]:
    """Names of the plain methods defined in ``cls`` itself (no static/class methods,
    no nested classes, nothing inherited), minus ``exclude``."""
    excluded = set(exclude)
    names = []
    for name, attr in cls.__dict__.items():
        if name in excluded or not callable(attr) or inspect.isclass(attr):
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            continue
        names.append(name)
    return tuple(names)


def _get_local_descriptor_names(cls: Any, exclude: Iterable[str] = ()) -> tuple[str, ...]:
    """Names of the non-callable descriptors (properties...) defined in ``cls`` itself."""
    excluded = set(exclude)
    names = []
    for name, attr in cls.__dict__.items():
        if name in excluded or callable(attr):
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            continue
        if hasattr(attr, "__get__") or hasattr(attr, "__set__") or hasattr(attr, "__delete__"):
            names.append(name)
    return tuple(names)


def _sorted_mapping_items(x: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    return sorted(x.items(), key=lambda kv: kv[0])
