"""NNX State: a nested mapping whose leaves are Variables (or raw arrays)."""

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

import jax

import pytreemod as pm

from .variablelib import Variable, _unwrap

Path = tuple[Any, ...]
"""A path of attribute names (str) and list indices (int)."""


def _is_inner(x: Any) -> bool:
    return isinstance(x, (State, dict))


def flatten_mapping(nested: Mapping[Any, Any], prefix: Path = ()) -> dict[Path, Any]:
    """``{path: leaf}`` of a nested mapping (dicts and States are inner nodes)."""
    flat: dict[Path, Any] = {}
    for key, value in nested.items():
        if _is_inner(value) and len(value) > 0:
            flat.update(flatten_mapping(value, (*prefix, key)))
        else:
            flat[(*prefix, key)] = value
    return flat


def unflatten_mapping(flat: Mapping[Path, Any]) -> dict[Any, Any]:
    """The nested dict of a ``{path: leaf}`` mapping."""
    nested: dict[Any, Any] = {}
    for path, value in flat.items():
        node = nested
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return nested


def _sort_key(path: Path) -> tuple[tuple[str, str], ...]:
    return tuple((type(k).__name__, f"{k:020d}" if isinstance(k, int) else str(k)) for k in path)


class State(MutableMapping[Any, Any]):
    """A nested mapping from attribute names (str) and list indices (int) to Variables.

    ``state['layers'][0]['kernel']`` or ``state.layers[0].kernel``; inner mappings come back
    as ``State``. A JAX pytree whose leaves are the Variables' values.
    """

    def __init__(self, mapping: Mapping[Any, Any] | None = None) -> None:
        raw: dict[Any, Any] = {}
        for key, value in (mapping or {}).items():
            raw[key] = dict(value._mapping) if isinstance(value, State) else value
        object.__setattr__(self, "_mapping", raw)

    _mapping: dict[Any, Any]

    def __getitem__(self, key: Any) -> Any:
        value = self._mapping[key]
        if isinstance(value, dict):
            sub = State()
            object.__setattr__(sub, "_mapping", value)
            return sub
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self._mapping[key] = dict(value._mapping) if isinstance(value, State) else value

    def __delitem__(self, key: Any) -> None:
        del self._mapping[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._mapping)

    def __len__(self) -> int:
        return len(self._mapping)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_mapping":
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"No attribute {name!r} in State") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        del self[name]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        return pm.tree_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    def flat_state(self) -> list[tuple[Path, Any]]:
        """``[(path, leaf), ...]`` sorted by path."""
        flat = flatten_mapping(self._mapping)
        return [(p, flat[p]) for p in sorted(flat, key=_sort_key)]

    @classmethod
    def from_flat_path(cls, flat: Mapping[Path, Any] | list[tuple[Path, Any]]) -> "State":
        """The State of ``{path: leaf}`` pairs."""
        return cls(unflatten_mapping(dict(flat)))

    def to_pure_dict(self) -> dict[Any, Any]:
        """Same as ``nnx.to_pure_dict(self)``."""
        return to_pure_dict(self)

    def replace_by_pure_dict(self, pure_dict: Mapping[Any, Any]) -> None:
        """Same as ``nnx.replace_by_pure_dict(self, pure_dict)``."""
        replace_by_pure_dict(self, pure_dict)

    def filter(self, first: pm.FilterLike, /, *filters: pm.FilterLike) -> Any:
        """The leaves matching each filter: one State, or a tuple for several filters."""
        return filter_state(self, first, *filters)

    def split(self, first: pm.FilterLike, /, *filters: pm.FilterLike) -> Any:
        """Same as :func:`split_state`."""
        return split_state(self, first, *filters)

    @staticmethod
    def merge(state: Mapping[Any, Any], /, *states: Mapping[Any, Any]) -> "State":
        """One State holding the leaves of all ``states`` (later ones win)."""
        return merge_state(state, *states)

    def __repr__(self) -> str:
        lines = [f"  {p!r}: {leaf!r}" for p, leaf in self.flat_state()]
        return "State({\n" + ",\n".join(lines) + "\n})" if lines else "State({})"


def _flatten_state(state: State) -> tuple[list[Any], tuple[Path, ...]]:
    flat = state.flat_state()
    return [leaf for _, leaf in flat], tuple(p for p, _ in flat)


def _flatten_state_with_keys(state: State) -> tuple[list[tuple[Any, Any]], tuple[Path, ...]]:
    flat = state.flat_state()
    children = [(jax.tree_util.DictKey(p), leaf) for p, leaf in flat]
    return children, tuple(p for p, _ in flat)


def _unflatten_state(paths: tuple[Path, ...], leaves: Any) -> State:
    return State.from_flat_path(dict(zip(paths, leaves, strict=True)))


jax.tree_util.register_pytree_with_keys(
    State, _flatten_state_with_keys, _unflatten_state, _flatten_state
)


def _to_filters(filters: tuple[pm.FilterLike, ...]) -> list[pm.Filter]:
    normal = [pm.to_filter(f) for f in filters]
    for i, f in enumerate(normal):
        if isinstance(f, pm.Everything) and not all(
            isinstance(g, pm.Everything) for g in normal[i + 1 :]
        ):
            raise ValueError(
                f"`...` or `True` can only be used as the last filters, got {filters[i]} at "
                f"index {i}: it selects everything, so the filters after it get nothing."
            )
    return normal


def _partition(
    state: Mapping[Any, Any], filters: tuple[pm.FilterLike, ...], exhaustive: bool
) -> list[State]:
    normal = _to_filters(filters)
    parts: list[dict[Path, Any]] = [{} for _ in normal]
    rest: dict[Path, Any] = {}
    for path, leaf in flatten_mapping(state).items():
        for i, f in enumerate(normal):
            if f(path, leaf):
                parts[i][path] = leaf
                break
        else:
            rest[path] = leaf
    if exhaustive and rest:
        raise ValueError(
            f"Non-exhaustive filters, got a non-empty remainder: {State.from_flat_path(rest)}.\n"
            "Use `...` to match all remaining elements."
        )
    return [State.from_flat_path(p) for p in parts]


def split_state(state: Mapping[Any, Any], first: pm.FilterLike, /, *filters: pm.FilterLike) -> Any:
    """Partition ``state`` by filters (each leaf goes to the first match; all must match)."""
    parts = _partition(state, (first, *filters), exhaustive=True)
    return parts[0] if len(parts) == 1 else tuple(parts)


def filter_state(state: Mapping[Any, Any], first: pm.FilterLike, /, *filters: pm.FilterLike) -> Any:
    """The leaves of ``state`` matching each filter (non-matching leaves are dropped)."""
    parts = _partition(state, (first, *filters), exhaustive=False)
    return parts[0] if len(parts) == 1 else tuple(parts)


def merge_state(state: Mapping[Any, Any], /, *states: Mapping[Any, Any]) -> State:
    """One State holding the leaves of all ``states`` (later ones win)."""
    flat: dict[Path, Any] = {}
    for s in (state, *states):
        flat.update(flatten_mapping(s))
    return State.from_flat_path(flat)


def to_flat_state(state: Mapping[Any, Any]) -> list[tuple[Path, Any]]:
    """``[(path, leaf), ...]`` of a (nested) state, sorted by path."""
    return State(state).flat_state()


def to_pure_dict(
    state: Mapping[Any, Any], extract_fn: Callable[[Any], Any] | None = None
) -> dict[Any, Any]:
    """A nested dict of plain values (Variables unwrapped); list entries keep int keys."""
    if extract_fn is None:
        extract_fn = _unwrap
    return unflatten_mapping({p: extract_fn(v) for p, v in flatten_mapping(state).items()})


def _to_int(key: Any) -> Any:
    try:
        return int(key)
    except (TypeError, ValueError):
        return key


def restore_int_paths(pure_dict: Mapping[Any, Any]) -> dict[Any, Any]:
    """``pure_dict`` with keys such as ``'0'`` (from a checkpoint) turned back into ints."""
    flat = flatten_mapping(pure_dict)
    return unflatten_mapping({tuple(map(_to_int, p)): v for p, v in flat.items()})


def replace_by_pure_dict(
    state: State,
    pure_dict: Mapping[Any, Any],
    replace_fn: Callable[[Any, Any], Any] | None = None,
) -> None:
    """Replace ``state``'s values in place by those of ``pure_dict`` (a subset of its paths).

    Keys may be strings of ints (``'0'``), as after a msgpack round trip. A path of
    ``pure_dict`` that ``state`` lacks raises ``ValueError``.
    """
    if replace_fn is None:
        replace_fn = _replace_leaf
    current = flatten_mapping(state)
    for path, value in flatten_mapping(pure_dict).items():
        if path not in current:
            int_path = tuple(map(_to_int, path))
            if int_path not in current:
                raise ValueError(f"key in pure_dict not available in state: {path}")
            path = int_path
        current[path] = replace_fn(current[path], value)
    new = unflatten_mapping(current)
    for key in list(state.keys()):
        state[key] = new[key]


def _replace_leaf(leaf: Any, value: Any) -> Any:
    return leaf.replace(value) if isinstance(leaf, Variable) else value
