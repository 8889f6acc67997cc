"""``adapters.traverse_util``: nested-dict helpers under ``flax.traverse_util``'s names.

``flatten_dict`` turns ``{'a': {'b': 1}}`` into ``{('a', 'b'): 1}`` (or ``{'a/b': 1}``
with ``sep='/'``); ``unflatten_dict`` reverses it; ``path_aware_map`` maps
``f(path, leaf)`` over a nested dict. Empty dicts are dropped unless
``keep_empty_nodes=True`` marks them with ``empty_node``. (Flax's deprecated
``Traversal`` classes are not provided; use ``path_aware_map`` or optax masks.)
"""

from collections.abc import Callable, Mapping
from typing import Any

from . import struct
from .core import FrozenDict

PathParts = tuple[str, ...]


@struct.dataclass
class _EmptyNode:
    """Marker for an empty dict in a flattened dict (a pytree without leaves)."""


empty_node = _EmptyNode()
"""Stands for an empty sub-dict in ``flatten_dict(..., keep_empty_nodes=True)``."""


def _join(path: tuple[Any, ...], sep: str | None) -> Any:
    return path if sep is None else sep.join(path)


def _flatten(
    xs: Any,
    prefix: tuple[Any, ...],
    keep_empty_nodes: bool,
    is_leaf: Callable[[tuple[Any, ...], Any], bool] | None,
    sep: str | None,
    out: dict[Any, Any],
) -> None:
    if not isinstance(xs, (dict, FrozenDict)) or (is_leaf is not None and is_leaf(prefix, xs)):
        out[_join(prefix, sep)] = xs
        return
    if not xs:
        if keep_empty_nodes and prefix:
            out[_join(prefix, sep)] = empty_node
        return
    for key, value in xs.items():
        _flatten(value, (*prefix, key), keep_empty_nodes, is_leaf, sep, out)


def flatten_dict(
    xs: Mapping[Any, Any],
    keep_empty_nodes: bool = False,
    is_leaf: Callable[[tuple[Any, ...], Any], bool] | None = None,
    sep: str | None = None,
) -> dict[Any, Any]:
    """Flatten a nested dict (or ``FrozenDict``) into ``{path: leaf}``.

    Paths are key tuples, or ``sep``-joined strings. ``is_leaf(path, value)`` stops the
    descent at a sub-dict. Empty sub-dicts are dropped, or kept as ``empty_node`` with
    ``keep_empty_nodes`` (an empty input gives ``{}`` either way).
    """
    assert isinstance(xs, (dict, FrozenDict)), f"expected (frozen)dict; got {type(xs)}"
    out: dict[Any, Any] = {}
    _flatten(xs, (), keep_empty_nodes, is_leaf, sep, out)
    return out


def unflatten_dict(xs: Mapping[Any, Any], sep: str | None = None) -> dict[Any, Any]:
    """Rebuild the nested dict from ``flatten_dict``'s output (``empty_node`` -> ``{}``)."""
    assert isinstance(xs, dict), f"input is not a dict; it is a {type(xs)}"
    result: dict[Any, Any] = {}
    for path, value in xs.items():
        keys = path.split(sep) if sep is not None else path
        node = result
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = {} if value is empty_node else value
    return result


def path_aware_map(f: Callable[[PathParts, Any], Any], nested_dict: Mapping[str, Any]) -> Any:
    """``f(path, leaf)`` for every leaf of a nested dict, keeping its structure (empty
    sub-dicts included); ``path`` is the tuple of keys."""
    flat = flatten_dict(nested_dict, keep_empty_nodes=True)
    return unflatten_dict({k: v if v is empty_node else f(k, v) for k, v in flat.items()})
