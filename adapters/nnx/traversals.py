"""``flax.nnx.traversals``: flatten nested mappings to ``{path: leaf}`` and back."""

from collections.abc import Callable, Iterable, Mapping
from typing import Any, overload

import jax

__all__ = ["empty_node", "flatten_mapping", "flatten_to_sequence", "unflatten_mapping"]


class _EmptyNode:
    """Stands for an empty mapping in a flat mapping (``keep_empty_nodes=True``)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _EmptyNode)

    def __hash__(self) -> int:
        return hash(_EmptyNode)

    def __repr__(self) -> str:
        return "_EmptyNode()"


# A pytree with no leaves, so a flat mapping holding it still goes through jax.tree.map.
jax.tree_util.register_pytree_node(_EmptyNode, lambda _: ((), None), lambda *_: empty_node)

empty_node = _EmptyNode()
"""The placeholder ``flatten_mapping(..., keep_empty_nodes=True)`` puts for ``{}``."""

IsLeafCallable = Callable[[tuple[Any, ...], Mapping[Any, Any]], bool]
"""``is_leaf(path, mapping)``: true if ``mapping`` is a leaf, not to be flattened."""


def _check_mapping(xs: Any) -> None:
    if not isinstance(xs, Mapping):  # Flax asserts this
        raise AssertionError(f"expected Mapping; got {type(xs).__qualname__}")


@overload
def flatten_mapping(
    xs: Mapping[Any, Any],
    /,
    *,
    keep_empty_nodes: bool = False,
    is_leaf: IsLeafCallable | None = None,
    sep: None = None,
) -> dict[tuple[Any, ...], Any]: ...


@overload
def flatten_mapping(
    xs: Mapping[Any, Any],
    /,
    *,
    keep_empty_nodes: bool = False,
    is_leaf: IsLeafCallable | None = None,
    sep: str,
) -> dict[str, Any]: ...


def flatten_mapping(
    xs: Mapping[Any, Any],
    /,
    *,
    keep_empty_nodes: bool = False,
    is_leaf: IsLeafCallable | None = None,
    sep: str | None = None,
) -> dict[Any, Any]:
    """``{path: leaf}`` of a nested mapping; ``{'a': {'b': 1}}`` -> ``{('a', 'b'): 1}``.

    Args:
      xs: the nested mapping (any ``Mapping``: dict, FrozenDict, State...).
      keep_empty_nodes: keep an empty inner mapping as ``empty_node`` (else it vanishes).
      is_leaf: ``is_leaf(path, mapping)``; true stops the flattening at that mapping.
      sep: join each path's keys with ``sep`` into one string key.
    """
    _check_mapping(xs)
    flat: dict[Any, Any] = {}

    def key(path: tuple[Any, ...]) -> Any:
        return path if sep is None else sep.join(path)

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if not isinstance(node, Mapping) or (is_leaf is not None and is_leaf(path, node)):
            flat[key(path)] = node
            return
        if not node:
            if keep_empty_nodes and path:
                flat[key(path)] = empty_node
            return
        for k, v in node.items():
            walk(v, (*path, k))

    walk(xs, ())
    return flat


def flatten_to_sequence(
    xs: Mapping[Any, Any], /, *, is_leaf: IsLeafCallable | None = None
) -> list[tuple[Any, Any]]:
    """``[(path, leaf), ...]`` of a nested mapping, in its iteration order (empty inner
    mappings are dropped)."""
    _check_mapping(xs)
    out: list[tuple[Any, Any]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if not isinstance(node, Mapping) or (is_leaf is not None and is_leaf(path, node)):
            out.append((path, node))
            return
        for k, v in node.items():
            walk(v, (*path, k))

    walk(xs, ())
    return out


def unflatten_mapping(xs: Any, /, *, sep: str | None = None) -> dict[Any, Any]:
    """The nested dict of a flat mapping or sequence of ``(path, leaf)`` pairs (inverse of
    ``flatten_mapping``; ``empty_node`` becomes ``{}``; ``sep`` splits string keys)."""
    items: Iterable[tuple[Any, Any]]
    if isinstance(xs, Mapping):
        items = xs.items()
    elif isinstance(xs, Iterable):
        items = xs
    else:
        raise TypeError(f"expected Mapping or Iterable; got {type(xs).__qualname__}")
    nested: dict[Any, Any] = {}
    for path, value in items:
        parts = path.split(sep) if sep is not None else path
        node = nested
        for k in parts[:-1]:
            node = node.setdefault(k, {})
        node[parts[-1]] = {} if value is empty_node else value
    return nested
