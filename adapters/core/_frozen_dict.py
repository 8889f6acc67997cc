"""``FrozenDict`` and the dict helpers of ``flax.core``: ``freeze``, ``unfreeze``, ``copy``,
``pop``, ``pretty_repr``.

Variables dicts in ``adapters.core`` are plain ``dict``s (``init``/``apply`` return them);
``FrozenDict`` is kept for code that freezes its variables. It is an immutable, hashable
``Mapping`` and a PyTree with keys (its children are its values, in sorted key order), so
``jax.tree`` utilities and every transform take it directly.
"""

from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

import jax.tree_util as jtu

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class FrozenDict(Mapping[K, V], Generic[K, V]):
    """An immutable, hashable dict; nested dicts are frozen too.

    >>> d = FrozenDict({"params": {"w": 1}})
    >>> d["params"]["w"], type(d["params"]).__name__
    (1, 'FrozenDict')
    """

    __slots__ = ("_dict", "_hash")

    def __init__(self, *args: Any, **kwargs: Any):
        raw = dict(*args, **kwargs)
        object.__setattr__(self, "_dict", {k: _freeze_value(v) for k, v in raw.items()})
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key: K) -> V:
        return self._dict[key]

    def __contains__(self, key: object) -> bool:
        return key in self._dict

    def __iter__(self) -> Iterator[K]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._dict)

    def __setitem__(self, key: K, value: V) -> None:
        raise ValueError(
            "FrozenDict is immutable: use `copy(d, {key: value})` or `unfreeze(d)` to get a "
            "dict you can change."
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FrozenDict is immutable.")

    def __repr__(self) -> str:
        return self.pretty_repr()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenDict):
            return self._dict == other._dict
        return isinstance(other, dict) and self._dict == other

    def __hash__(self) -> int:
        if self._hash is None:
            h = 0
            for key, value in self._dict.items():
                h ^= hash((key, value))
            object.__setattr__(self, "_hash", h)
        return self._hash  # type: ignore[return-value]

    def __reduce__(self) -> tuple[Any, ...]:
        return FrozenDict, (unfreeze(self),)

    def copy(self, add_or_replace: Mapping[K, V] | None = None) -> "FrozenDict[K, V]":
        """A new FrozenDict with the entries of ``add_or_replace`` added or replaced."""
        return type(self)({**self._dict, **(add_or_replace or {})})

    def pop(self, key: K) -> tuple["FrozenDict[K, V]", V]:
        """``(rest, value)``: a FrozenDict without ``key``, and the value it had."""
        value = self._dict[key]
        return type(self)({k: v for k, v in self._dict.items() if k != key}), value

    def unfreeze(self) -> dict[K, V]:
        """A plain (mutable) nested dict copy."""
        return unfreeze(self)

    def pretty_repr(self, num_spaces: int = 4) -> str:
        """An indented, multi-line representation."""
        return _pretty(self, num_spaces, 0)


def _freeze_value(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenDict(value)
    return value


def _flatten_with_keys(
    d: FrozenDict[Any, Any],
) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
    keys = tuple(sorted(d._dict))
    return [(jtu.DictKey(k), d._dict[k]) for k in keys], keys


def _unflatten(keys: tuple[Any, ...], values: Any) -> FrozenDict[Any, Any]:
    new = object.__new__(FrozenDict)
    object.__setattr__(new, "_dict", dict(zip(keys, values)))
    object.__setattr__(new, "_hash", None)
    return new


jtu.register_pytree_with_keys(
    FrozenDict,
    _flatten_with_keys,
    _unflatten,
    lambda d: (tuple(d._dict[k] for k in sorted(d._dict)), tuple(sorted(d._dict))),
)


def freeze(xs: Mapping[Any, Any]) -> FrozenDict[Any, Any]:
    """Freeze a nested dict (nested dicts become FrozenDicts)."""
    return FrozenDict(unfreeze(xs) if isinstance(xs, FrozenDict) else xs)


@overload
def unfreeze(x: Mapping[K, V]) -> dict[K, V]: ...


@overload
def unfreeze(x: Any) -> Any: ...


def unfreeze(x: Any) -> Any:
    """A plain nested ``dict`` copy of ``x`` (a FrozenDict or dict); other values as is."""
    if isinstance(x, (FrozenDict, dict)):
        return {k: unfreeze(v) for k, v in x.items()}
    return x


def copy(x: Mapping[Any, Any], add_or_replace: Mapping[Any, Any] | None = None) -> Any:
    """A copy of ``x`` (same type: dict or FrozenDict) with entries added or replaced."""
    if isinstance(x, FrozenDict):
        return x.copy(add_or_replace)
    if isinstance(x, dict):
        new = unfreeze(x)
        new.update(add_or_replace or {})
        return new
    raise TypeError(f"copy expects a dict or FrozenDict, got {type(x).__name__}.")


def pop(x: Mapping[Any, Any], key: Any) -> tuple[Any, Any]:
    """``(rest, value)``: a copy of ``x`` (same type) without ``key``, and its value."""
    if isinstance(x, FrozenDict):
        return x.pop(key)
    if isinstance(x, dict):
        new = unfreeze(x)
        value = new.pop(key)
        return new, value
    raise TypeError(f"pop expects a dict or FrozenDict, got {type(x).__name__}.")


def pretty_repr(x: Any, num_spaces: int = 4) -> str:
    """An indented, multi-line representation of a (nested) dict or FrozenDict.

    >>> print(pretty_repr({"a": {"b": 1}}))
    {
        a: {
            b: 1,
        },
    }
    """
    if isinstance(x, FrozenDict):
        return x.pretty_repr(num_spaces)
    if isinstance(x, dict):
        return _pretty(x, num_spaces, 0, frozen=False)
    return repr(x)


def _pretty(x: Mapping[Any, Any], num_spaces: int, level: int, frozen: bool = True) -> str:
    if not x:
        return "FrozenDict({})" if frozen and level == 0 else "{}"
    pad = " " * (num_spaces * (level + 1))
    lines = []
    for key, value in x.items():
        if isinstance(value, (dict, FrozenDict)):
            shown = _pretty(value, num_spaces, level + 1, frozen)
        else:
            shown = repr(value).replace("\n", "\n" + pad)
        lines.append(f"{pad}{key}: {shown},")
    head = "FrozenDict({" if frozen and level == 0 else "{"
    tail = "})" if frozen and level == 0 else "}"
    return head + "\n" + "\n".join(lines) + "\n" + " " * (num_spaces * level) + tail
