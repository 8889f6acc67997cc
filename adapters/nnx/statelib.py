"""NNX State (``flax.nnx.statelib``): a nested mapping whose leaves are Variables.

``State`` keeps a plain nested ``dict`` and shows inner dicts as ``State``s. It flattens
as Flax's does, so its JAX key paths are Flax's: one ``DictKey`` per level (keys sorted),
then the Variable's ``GetAttrKey('value')``; an Orbax checkpoint of NNX state written by
real Flax restores here and the other way round. ``FlatState`` is the sorted
``[(path, leaf), ...]`` form the graph functions work on.

Filters here are NNX's (``filterlib.to_predicate``): a string is a tag, a type is
``isinstance``; a leaf goes to the first filter that matches it.
"""

import sys
import typing as tp
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import jax.tree_util as jtu

from adapters.typing import PathParts

from . import _structure, filterlib, reprlib, traversals, variablelib
from .traversals import flatten_mapping as flatten_mapping
from .traversals import unflatten_mapping as unflatten_mapping

__all__ = [
    "FlatState",
    "State",
    "diff",
    "filter_state",
    "from_flat_state",
    "map_state",
    "merge_state",
    "replace_by_pure_dict",
    "restore_int_paths",
    "split_state",
    "to_flat_state",
    "to_pure_dict",
]

V = tp.TypeVar("V")
Path = PathParts
"""A path of attribute names (str) and list indices (int)."""

ExtractValueFn = Callable[[Any], Any]
SetValueFn = Callable[[Any, Any], Any]


def _deprecated(name: str) -> None:
    # Flax's own code does not call these; adapters' and pytreemod's code may, silently.
    if sys._getframe(2).f_code.co_filename.startswith(variablelib._LIBRARY_DIRS):
        return
    warnings.warn(
        "`flax.nnx.State` will be deprecated and be replaced by the built-in "
        f"Python dict. Please use the equivalent `nnx.{name}` instead.",
        DeprecationWarning,
        # Flax attributes these to its own module (stacklevel 1), so Python's default
        # filters hide them outside test runners: so do we.
        stacklevel=1,
    )


class NestedStateRepr(reprlib.Representable):
    """How a State nested in a State prints: ``{...}`` without the type name."""

    def __init__(self, state: "State") -> None:
        self.state = state

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object("", kv_sep=": ", start="{", end="}")
        for r in self.state.__nnx_repr__():
            if not isinstance(r, reprlib.Object):
                yield r

    def __treescope_repr__(self, path: Any, subtree_renderer: Any) -> Any:
        children = {k: _nested(v) for k, v in self.state.items()}
        return subtree_renderer(children, path=path)


def _nested(v: Any) -> Any:
    return NestedStateRepr(v) if isinstance(v, State) else v


class FlatState(Sequence[tuple[PathParts, V]], reprlib.Representable):
    """A sequence of ``(path, leaf)`` pairs (``paths`` and ``leaves`` are the two columns);
    a pytree whose leaves are the leaves and whose paths are static."""

    __slots__ = ("_keys", "_values")

    _keys: tuple[PathParts, ...]
    _values: list[V]

    def __init__(self, items: Iterable[tuple[PathParts, V]], /, *, sort: bool) -> None:
        pairs = sorted(items) if sort else list(items)
        self._keys = tuple(k for k, _ in pairs)
        self._values = [v for _, v in pairs]

    @staticmethod
    def from_sorted_keys_values(keys: tuple[PathParts, ...], values: list[V], /) -> "FlatState[V]":
        """A FlatState of already sorted ``keys`` and their ``values`` (not copied)."""
        flat: FlatState[V] = object.__new__(FlatState)
        flat._keys = keys
        flat._values = values
        return flat

    @property
    def paths(self) -> tuple[PathParts, ...]:
        """The paths, in order."""
        return self._keys

    @property
    def leaves(self) -> list[V]:
        """The leaves, in order."""
        return self._values

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type="FlatState", kv_sep="", start="([", end="])")
        for pair in self:
            yield reprlib.Attr("", pair)

    @tp.overload
    def __getitem__(self, index: int) -> tuple[PathParts, V]: ...
    @tp.overload
    def __getitem__(self, index: slice) -> "FlatState[V]": ...
    def __getitem__(self, index: int | slice) -> "tuple[PathParts, V] | FlatState[V]":
        if isinstance(index, int):
            return self._keys[index], self._values[index]
        return FlatState(zip(self._keys[index], self._values[index]), sort=False)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[tuple[PathParts, V]]:
        return iter(zip(self._keys, self._values))

    def to_nested_state(self) -> "State":
        """The nested State of these pairs."""
        return from_flat_state(self)

    def split(self, first: filterlib.Filter, /, *filters: filterlib.Filter) -> Any:
        """One FlatState per filter (each pair goes to the first match); every pair must
        match some filter (``ValueError`` otherwise)."""
        *parts, rest = _split_state(self, first, *filters)
        if rest:
            raise ValueError(
                f"Non-exhaustive filters, got a non-empty remainder: {rest}.\n"
                "Use `...` to match all remaining elements."
            )
        return parts[0] if len(parts) == 1 else tuple(parts)

    def filter(self, first: filterlib.Filter, /, *filters: filterlib.Filter) -> Any:
        """One FlatState per filter; pairs matching none are dropped."""
        *parts, _rest = _split_state(self, first, *filters)
        return parts[0] if len(parts) == 1 else tuple(parts)

    @staticmethod
    def merge(
        flat_state: Iterable[tuple[PathParts, V]], /, *flat_states: Iterable[tuple[PathParts, V]]
    ) -> "FlatState[V]":
        """One sorted FlatState of all pairs."""
        if not flat_states:
            if isinstance(flat_state, FlatState):
                return flat_state
            return FlatState(flat_state, sort=True)
        return FlatState((p for fs in (flat_state, *flat_states) for p in fs), sort=True)


jtu.register_pytree_node(
    FlatState,
    lambda fs: (fs._values, fs._keys),
    lambda keys, values: FlatState.from_sorted_keys_values(keys, list(values)),
)


class State(MutableMapping[Any, Any], reprlib.Representable):
    """A nested mapping from attribute names (str) and list indices (int) to Variables.

    ``state['layers'][0]['kernel']`` or ``state.layers[0].kernel``; inner mappings are
    plain dicts inside, shown as ``State`` views that write through.
    """

    _mapping: dict[Any, Any]

    def __init__(
        self,
        mapping: Mapping[Any, Any] | Iterable[tuple[Any, Any]],
        /,
        *,
        _copy: bool = True,
    ) -> None:
        if _copy:
            raw = dict(mapping)
        elif isinstance(mapping, dict):
            raw = mapping
        else:
            raise ValueError(
                f"Expected a dictionary when `_copy=False`, got {type(mapping)} instead."
            )
        object.__setattr__(self, "_mapping", raw)

    @property
    def raw_mapping(self) -> dict[Any, Any]:
        """The underlying nested dict (not a copy)."""
        return self._mapping

    def __contains__(self, key: object) -> bool:
        return key in self._mapping

    def __getitem__(self, key: Any) -> Any:
        value = self._mapping[key]
        if isinstance(value, dict):
            return type(self)(value, _copy=False)
        return value

    def __getattr__(self, key: str) -> Any:
        if "_mapping" not in vars(self) or key not in self._mapping:
            raise AttributeError(f"No attribute '{key}' in State")
        return self[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        _structure.bump()
        if key == "__orig_class__":
            object.__setattr__(self, key, value)
        elif isinstance(value, State):
            self._mapping[key] = value._mapping
        else:
            self._mapping[key] = value

    __setattr__ = __setitem__  # type: ignore[assignment]

    def __delitem__(self, key: Any) -> None:
        _structure.bump()
        del self._mapping[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._mapping)

    def __len__(self) -> int:
        return len(self._mapping)

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type(self), kv_sep=": ", start="({", end="})")
        for k, v in self.items():
            yield reprlib.Attr(repr(k), _nested(v))

    def __treescope_repr__(self, path: Any, subtree_renderer: Any) -> Any:
        import treescope  # optional: only needed to render

        return treescope.repr_lib.render_dictionary_wrapper(
            object_type=type(self),
            wrapped_dict={k: _nested(v) for k, v in self.items()},
            path=path,
            subtree_renderer=subtree_renderer,
        )

    # Deprecated in Flax (State is to become a plain dict): each has a function.

    def map(self, f: Callable[[tuple[Any, ...], Any], Any]) -> "State":
        """Deprecated: ``nnx.map_state(f, state)``."""
        _deprecated("map_state")
        return map_state(f, self)

    def flat_state(self) -> FlatState[Any]:
        """Deprecated: ``nnx.to_flat_state(state)``."""
        _deprecated("to_flat_state")
        return to_flat_state(self)

    @classmethod
    def from_flat_path(
        cls, flat_state: Mapping[PathParts, Any] | Iterable[tuple[PathParts, Any]], /
    ) -> "State":
        """Deprecated: ``nnx.from_flat_state(flat_state)``."""
        _deprecated("from_flat_state")
        return from_flat_state(flat_state, cls=cls)

    def to_pure_dict(self, extract_fn: ExtractValueFn | None = None) -> dict[Any, Any]:
        """Deprecated: ``nnx.to_pure_dict(state)``."""
        _deprecated("to_pure_dict")
        return to_pure_dict(self, extract_fn)

    def replace_by_pure_dict(
        self, pure_dict: Mapping[Any, Any], replace_fn: SetValueFn | None = None
    ) -> None:
        """Deprecated: ``nnx.replace_by_pure_dict(state, pure_dict)``."""
        _deprecated("replace_by_pure_dict")
        replace_by_pure_dict(self, pure_dict, replace_fn)

    def split(self, first: filterlib.Filter, /, *filters: filterlib.Filter) -> Any:
        """Deprecated: ``nnx.split_state(state, *filters)``."""
        _deprecated("split_state")
        return split_state(self, first, *filters)

    def filter(self, first: filterlib.Filter, /, *filters: filterlib.Filter) -> Any:
        """Deprecated: ``nnx.filter_state(state, *filters)``."""
        _deprecated("filter_state")
        return filter_state(self, first, *filters)

    @classmethod
    def merge(cls, state: Mapping[Any, Any], /, *states: Mapping[Any, Any]) -> "State":
        """Deprecated: ``nnx.merge_state(state, *states)``."""
        _deprecated("merge_state")
        return merge_state(state, *states, cls=cls)

    def __or__(self, other: Mapping[Any, Any]) -> "State":  # type: ignore[override]
        if not other:
            return self
        return merge_state(self, other)

    def __sub__(self, other: "State") -> "State":
        _deprecated("diff")
        return diff(self, other)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register_state(cls)


def _state_flatten_with_keys(x: State) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
    items = sorted(x._mapping.items())
    return [(jtu.DictKey(k), v) for k, v in items], tuple(k for k, _ in items)


def _state_flatten(x: State) -> tuple[list[Any], tuple[Any, ...]]:
    items = sorted(x._mapping.items())
    return [v for _, v in items], tuple(k for k, _ in items)


def _register_state(cls: type[State]) -> None:
    jtu.register_pytree_with_keys(
        cls,
        _state_flatten_with_keys,
        lambda keys, leaves: cls(zip(keys, leaves)),
        _state_flatten,
    )


_register_state(State)


# --------------------------------------------------------------------------------------
# Functions
# --------------------------------------------------------------------------------------


def to_flat_state(state: Mapping[Any, Any]) -> FlatState[Any]:
    """The sorted ``FlatState`` of a (nested) state."""
    raw = state._mapping if isinstance(state, State) else state
    return FlatState(traversals.flatten_to_sequence(raw), sort=True)


def from_flat_state(
    flat_state: Mapping[PathParts, Any] | Iterable[tuple[PathParts, Any]],
    *,
    cls: type[State] = State,
) -> State:
    """The nested ``State`` (or ``cls``) of ``{path: leaf}`` pairs."""
    if not isinstance(flat_state, Mapping):
        flat_state = dict(flat_state)
    return cls(traversals.unflatten_mapping(flat_state))


def map_state(f: Callable[[tuple[Any, ...], Any], Any], state: Mapping[Any, Any]) -> State:
    """A new State whose leaves are ``f(path, leaf)``."""
    return from_flat_state([(path, f(path, leaf)) for path, leaf in to_flat_state(state)])


def to_pure_dict(
    state: Mapping[Any, Any], extract_fn: ExtractValueFn | None = None
) -> dict[Any, Any]:
    """A nested dict of plain values: Variables replaced by their values (or by
    ``extract_fn(leaf)``)."""
    if extract_fn is None:
        extract_fn = variablelib._unwrap
    return traversals.unflatten_mapping({p: extract_fn(x) for p, x in to_flat_state(state)})


def _try_int(key: Any) -> Any:
    try:
        return int(key)
    except ValueError:
        return key


def restore_int_paths(pure_dict: Mapping[Any, Any]) -> dict[Any, Any]:
    """``pure_dict`` with keys such as ``'0'`` (as a checkpoint writes list indices) turned
    back into ints."""
    flat = traversals.flatten_mapping(pure_dict)
    return traversals.unflatten_mapping({tuple(map(_try_int, p)): v for p, v in flat.items()})


def _replace_leaf(leaf: Any, value: Any) -> Any:
    return leaf.replace(value) if hasattr(leaf, "replace") else value


def replace_by_pure_dict(
    state: State, pure_dict: Mapping[Any, Any], replace_fn: SetValueFn | None = None
) -> None:
    """Replace, in place, the leaves of ``state`` at the paths of ``pure_dict`` by its values
    (``replace_fn(leaf, value)``: by default a Variable's ``replace``). Keys may be strings
    of ints (``'0'``); a path ``state`` lacks is a ``ValueError``."""
    if replace_fn is None:
        replace_fn = _replace_leaf
    current = dict(to_flat_state(state))
    for path, value in traversals.flatten_mapping(pure_dict).items():
        if path not in current:
            int_path = tuple(map(_try_int, path))
            if int_path not in current:
                raise ValueError(f"key in pure_dict not available in state: {path}")
            path = int_path
        current[path] = replace_fn(current[path], value)
    state.update(traversals.unflatten_mapping(current))


def _split_state(flat_state: FlatState[V], *filters: filterlib.Filter) -> list[FlatState[V]]:
    """One FlatState per filter plus one for the pairs matching none."""
    predicates = filterlib.filters_to_predicates(filters)
    groups: list[list[tuple[PathParts, V]]] = [[] for _ in range(len(predicates) + 1)]
    for path, value in flat_state:
        for i, predicate in enumerate(predicates):
            if predicate(path, value):
                groups[i].append((path, value))
                break
        else:
            groups[-1].append((path, value))
    return [FlatState(g, sort=False) for g in groups]


def split_state(state: Mapping[Any, Any], first: filterlib.Filter, /, *filters: Any) -> Any:
    """Split ``state`` into one State per filter (each leaf goes to the first match); the
    filters must be exhaustive (use ``...`` last to take the rest)."""
    *parts, rest = (
        fs.to_nested_state() for fs in _split_state(to_flat_state(state), first, *filters)
    )
    if rest:
        raise ValueError(
            f"Non-exhaustive filters, got a non-empty remainder: {rest}.\n"
            "Use `...` to match all remaining elements."
        )
    return parts[0] if len(parts) == 1 else tuple(parts)


def filter_state(state: Mapping[Any, Any], first: filterlib.Filter, /, *filters: Any) -> Any:
    """One State per filter, like ``split_state``, dropping the leaves matching none."""
    *parts, _rest = (
        fs.to_nested_state() for fs in _split_state(to_flat_state(state), first, *filters)
    )
    return parts[0] if len(parts) == 1 else tuple(parts)


def merge_state(
    state: Mapping[Any, Any], /, *states: Mapping[Any, Any], cls: type[State] = State
) -> State:
    """One State holding the leaves of all ``states`` (the inverse of ``split_state``; on a
    path in several, the last wins)."""
    if not states:
        return state if isinstance(state, cls) else cls(state)
    flat: dict[PathParts, Any] = {}
    for s in (state, *states):
        flat.update(traversals.flatten_mapping(s))
    return from_flat_state(flat, cls=cls)


def diff(state: State, other: State) -> State:
    """The leaves of ``state`` whose paths ``other`` does not have."""
    if not other:
        return state
    other_paths = set(to_flat_state(other).paths)
    return from_flat_state({k: v for k, v in to_flat_state(state) if k not in other_paths})
