"""``adapters.traverse_util``: nested-dict helpers under ``flax.traverse_util``'s names.

``flatten_dict`` turns ``{'a': {'b': 1}}`` into ``{('a', 'b'): 1}`` (or ``{'a/b': 1}``
with ``sep='/'``); ``unflatten_dict`` reverses it; ``path_aware_map`` maps
``f(path, leaf)`` over a nested dict. Empty dicts are dropped unless
``keep_empty_nodes=True`` marks them with ``empty_node``.

Flax's deprecated ``Traversal`` objects are here too (``t_identity['a'].each()``,
``ModelParamTraversal(filter_fn)``): lenses that ``iterate`` over the values they focus
on or ``update``/``set`` them in a copy. Creating one warns (``DeprecationWarning``), as
in Flax; ``path_aware_map`` with optax's masks is the current way.
"""

import abc
import copy
import dataclasses
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax

from . import struct
from .core import FrozenDict

PathParts = tuple[str, ...]


@struct.dataclass
class _EmptyNode:
    """Marker for an empty dict in a flattened dict (a pytree without leaves)."""


empty_node: _EmptyNode = _EmptyNode()
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


# ----------------------------------------------------------------------------- traversals


class Traversal(abc.ABC):
    """A focus on some values inside an object: ``iterate`` yields them, ``update``
    returns a copy with ``fn`` applied to each. Indexing, attribute access, ``each()``,
    ``tree()``, ``filter(pred)`` and ``merge(...)`` focus further."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "Traversal":
        warnings.warn(
            "`flax.traverse_util.Traversal` will be deprecated: select parameters with "
            "`traverse_util.path_aware_map` and optax's masks (`optax.multi_transform`, "
            "`optax.masked`) instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return super().__new__(cls)

    @abc.abstractmethod
    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        """A copy of ``inputs`` with ``fn`` applied to every focused value."""

    @abc.abstractmethod
    def iterate(self, inputs: Any) -> Iterator[Any]:
        """The focused values of ``inputs``, in order."""

    def set(self, values: list[Any], inputs: Any) -> Any:
        """A copy of ``inputs`` with the focused values replaced by ``values`` in order
        (consumed from the list); there must be exactly one per focused value."""

        def take(_: Any) -> Any:
            if not values:
                raise ValueError("Not enough values provided")
            return values.pop(0)

        out = self.update(take, inputs)
        if values:
            raise ValueError("Too many values provided")
        return out

    def compose(self, other: "Traversal") -> "Traversal":
        """Focus with ``other`` inside every value this traversal focuses on."""
        return TraverseCompose(self, other)

    def merge(self, *traversals: "Traversal") -> "Traversal":
        """Focus on the union of ``traversals``, each applied after this one."""
        return self.compose(TraverseMerge(*traversals))

    def each(self) -> "Traversal":
        """Focus on every entry of the focused lists, tuples or dicts."""
        return self.compose(TraverseEach())

    def tree(self) -> "Traversal":
        """Focus on every leaf of the focused pytrees."""
        return self.compose(TraverseTree())

    def filter(self, fn: Callable[[Any], bool]) -> "Traversal":
        """Keep the focused values for which ``fn`` is true."""
        return self.compose(TraverseFilter(fn))

    def __getattr__(self, attr: str) -> "Traversal":
        if attr.startswith("__"):  # protocol probes (copy, pickle...) are not fields
            raise AttributeError(attr)
        return self.compose(TraverseAttr(attr))

    def __getitem__(self, key: Any) -> "Traversal":
        return self.compose(TraverseItem(key))


class TraverseId(Traversal):
    """Focus on the object itself."""

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        return fn(inputs)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        yield inputs


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    t_identity: Traversal = TraverseId()
    """The identity traversal, the usual starting point: ``t_identity['params'].each()``."""


class TraverseMerge(Traversal):
    """The union of several traversals' focuses (updated one traversal after another)."""

    def __init__(self, *traversals: Traversal) -> None:
        self._traversals = traversals

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        for traversal in self._traversals:
            inputs = traversal.update(fn, inputs)
        return inputs

    def iterate(self, inputs: Any) -> Iterator[Any]:
        for traversal in self._traversals:
            yield from traversal.iterate(inputs)


class TraverseCompose(Traversal):
    """``inner`` applied to every value ``outer`` focuses on."""

    def __init__(self, outer: Traversal, inner: Traversal) -> None:
        self._outer, self._inner = outer, inner

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        return self._outer.update(lambda x: self._inner.update(fn, x), inputs)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        for x in self._outer.iterate(inputs):
            yield from self._inner.iterate(x)


class TraverseFilter(Traversal):
    """Focus on the object if ``fn(object)`` is true, else on nothing."""

    def __init__(self, fn: Callable[[Any], bool]) -> None:
        self._pred = fn

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        return fn(inputs) if self._pred(inputs) else inputs

    def iterate(self, inputs: Any) -> Iterator[Any]:
        if self._pred(inputs):
            yield inputs


def _is_namedtuple(cls: type) -> bool:
    return issubclass(cls, tuple) and hasattr(cls, "_fields")


class TraverseAttr(Traversal):
    """Focus on one attribute; updates go through ``_replace`` (named tuples),
    ``dataclasses.replace`` (dataclasses) or ``setattr`` on a shallow copy."""

    def __init__(self, attr: str) -> None:
        self._attr = attr

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        new = fn(getattr(inputs, self._attr))
        if _is_namedtuple(type(inputs)):
            return inputs._replace(**{self._attr: new})
        if dataclasses.is_dataclass(inputs) and not isinstance(inputs, type):
            return dataclasses.replace(inputs, **{self._attr: new})
        out = copy.copy(inputs)
        setattr(out, self._attr, new)
        return out

    def iterate(self, inputs: Any) -> Iterator[Any]:
        yield getattr(inputs, self._attr)


class TraverseItem(Traversal):
    """Focus on ``inputs[key]`` (a slice focuses on each item it selects); tuples and
    named tuples are rebuilt, other containers updated in a shallow copy."""

    def __init__(self, key: Any) -> None:
        self._key = key

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        if not isinstance(inputs, tuple):
            out = copy.copy(inputs)
            out[self._key] = fn(out[self._key])
            return out
        key = self._key if isinstance(self._key, slice) else slice(self._key, self._key + 1)
        chosen = set(range(len(inputs))[key])
        items = [fn(x) if i in chosen else x for i, x in enumerate(inputs)]
        return type(inputs)(*items) if _is_namedtuple(type(inputs)) else type(inputs)(items)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        if isinstance(self._key, slice):
            yield from inputs[self._key]
        else:
            yield inputs[self._key]


class TraverseEach(Traversal):
    """Focus on every entry of a list or tuple, or every value of a dict."""

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        kind = type(inputs)
        if kind is dict:
            return {k: fn(v) for k, v in inputs.items()}
        if kind not in (list, tuple):
            raise ValueError("Only the entries of a list or tuple can be traversed.")
        return kind(fn(x) for x in inputs)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        yield from inputs.values() if isinstance(inputs, dict) else inputs


class TraverseTree(Traversal):
    """Focus on every leaf of a pytree."""

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        return jax.tree.map(fn, inputs)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        yield from jax.tree.leaves(inputs)


class ModelParamTraversal(Traversal):
    """Focus on the parameters of a nested dict that ``filter_fn(path, value)`` selects;
    ``path`` is ``'/'`` followed by the keys joined with ``'/'`` (``'/Dense_0/kernel'``).
    Values are visited in the sorted order of their key paths."""

    def __init__(self, filter_fn: Callable[[str, Any], bool]) -> None:
        self._filter_fn = filter_fn

    @staticmethod
    def _flat(inputs: Any, keep_empty_nodes: bool) -> list[tuple[Any, Any]]:
        if not isinstance(inputs, (dict, FrozenDict)):
            raise ValueError(
                f"Can only traverse a flax Model instance or a nested dict, not {type(inputs)}"
            )
        flat = flatten_dict(dict(inputs), keep_empty_nodes=keep_empty_nodes)
        return sorted(flat.items(), key=lambda item: item[0])

    def _selects(self, path: tuple[Any, ...], value: Any) -> bool:
        return self._filter_fn("/" + "/".join(path), value)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        for path, value in self._flat(inputs, keep_empty_nodes=False):
            if self._selects(path, value):
                yield value

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        new = {
            path: fn(value) if value is not empty_node and self._selects(path, value) else value
            for path, value in self._flat(inputs, keep_empty_nodes=True)
        }
        out = unflatten_dict(new)
        return FrozenDict(out) if isinstance(inputs, FrozenDict) else out
