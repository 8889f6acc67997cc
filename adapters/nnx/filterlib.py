"""NNX's filter language (``flax.nnx.filterlib``), as pytreemod filters.

Every filter here is a ``pm.Filter``, so it combines with pytreemod's (``~``, ``|``, ``&``)
and any pytreemod API takes it as it is. What NNX reads differently from pytreemod is the
*bare* forms, normalised by ``to_predicate``:

- a **string** is a tag, ``WithTag(s)``: it selects objects whose ``tag`` attribute (a
  Variable's ``tag`` metadata: an Rngs stream's ``RngKey``/``RngCount``) equals ``s``.
  pytreemod (``pm.to_filter``) reads a string as a collection name; to select by
  collection in NNX, pass the Variable type (``nnx.Param``);
- a **type** is ``OfType(t)``: ``isinstance(x, t)``, and nothing more (pytreemod's
  ``OfType`` also matches a Variable whose value is a ``t``, and counts a bare array as a
  ``Param``);
- a callable stays itself; ``True``/``...`` are ``Everything()``, ``False``/``None`` are
  ``Nothing()``, a list or tuple is ``Any(...)``.

``Any``, ``All`` and ``Not`` read their arguments with ``to_predicate``.
"""

import dataclasses
import types
import typing as tp
from collections.abc import Callable, Sequence
from typing import Any as _Any

import pytreemod as pm
from adapters.typing import Key, PathParts
from pytreemod import Everything as Everything
from pytreemod import Nothing as Nothing

__all__ = [
    "All",
    "Any",
    "Everything",
    "Filter",
    "FilterLiteral",
    "HasTag",
    "Not",
    "Nothing",
    "OfType",
    "PathContains",
    "PathIn",
    "Predicate",
    "WithTag",
    "filters_to_predicates",
    "to_predicate",
]

Predicate = Callable[[PathParts, _Any], bool]
"""``predicate(path, x) -> bool``."""

FilterLiteral = type | str | Predicate | bool | types.EllipsisType | None
Filter = _Any
"""A filter literal, or a tuple/list of filters."""


def to_predicate(filter: Filter) -> Predicate:
    """The predicate of any filter form (a string is a tag, see the module docstring)."""
    if isinstance(filter, str):
        return WithTag(filter)
    if isinstance(filter, type):
        return OfType(filter)
    if isinstance(filter, bool):
        return Everything() if filter else Nothing()
    if filter is Ellipsis:
        return Everything()
    if filter is None:
        return Nothing()
    if callable(filter):
        return tp.cast(Predicate, filter)
    if isinstance(filter, (list, tuple)):
        return Any(*filter)
    raise TypeError(f"Invalid collection filter: {filter!r}. ")


def _as_filter(filter: Filter) -> pm.Filter:
    """``to_predicate(filter)`` as a ``pm.Filter`` (a plain callable wrapped)."""
    p = to_predicate(filter)
    return p if isinstance(p, pm.Filter) else pm.Predicate(p)


def _is_everything(f: _Any) -> bool:
    return f is Ellipsis or f is True


def filters_to_predicates(filters: Sequence[Filter]) -> tuple[Predicate, ...]:
    """The predicates of ``filters``; ``...``/``True`` may only come last (whatever follows
    it would get nothing)."""
    for i, f in enumerate(filters):
        if _is_everything(f) and not all(_is_everything(g) for g in filters[i + 1 :]):
            raise ValueError(
                f"`...` or `True` can only be used as the last filters, got {f} it at index {i}."
            )
    return tuple(map(to_predicate, filters))


class HasTag(tp.Protocol):
    """What ``WithTag`` matches: an object with a ``tag`` string."""

    tag: str


@dataclasses.dataclass(frozen=True)
class WithTag(pm.Filter):
    """Selects objects whose ``tag`` (a Variable's ``tag`` metadata) is ``tag``."""

    tag: str

    def __call__(self, path: PathParts, x: _Any) -> bool:
        return hasattr(x, "tag") and x.tag == self.tag

    def __repr__(self) -> str:
        return f"WithTag({self.tag!r})"


@dataclasses.dataclass(frozen=True)
class PathContains(pm.PathContains):
    """Selects leaves whose path contains ``key``; with ``exact=False``, those where
    ``str(key)`` is a substring of some part of the path."""

    key: Key | str
    exact: bool = True

    def __call__(self, path: PathParts, x: _Any) -> bool:
        if self.exact:
            return self.key in path
        return any(str(self.key) in str(part) for part in path)

    def __repr__(self) -> str:
        return f"PathContains({self.key!r}, exact={self.exact})"


class PathIn(pm.Filter):
    """Selects leaves whose path is one of ``paths``."""

    def __init__(self, *paths: PathParts) -> None:
        self.paths = frozenset(paths)

    def __call__(self, path: PathParts, x: _Any) -> bool:
        return path in self.paths

    def __repr__(self) -> str:
        return f"PathIn({','.join(map(repr, self.paths))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PathIn) and self.paths == other.paths

    def __hash__(self) -> int:
        return hash(self.paths)


@dataclasses.dataclass(frozen=True)
class OfType(pm.OfType):
    """Selects objects that are instances of ``type`` (subclasses included)."""

    def __call__(self, path: PathParts, x: _Any) -> bool:
        return isinstance(x, self.type)

    def __repr__(self) -> str:
        return f"OfType({self.type!r})"


class Any(pm.Any):
    """Selects what any of ``filters`` selects."""

    def __init__(self, *filters: Filter) -> None:
        object.__setattr__(self, "filters", tuple(map(_as_filter, filters)))

    @property
    def predicates(self) -> tuple[Predicate, ...]:
        """The predicates of the filters, in order."""
        return self.filters  # type: ignore[return-value]

    def __call__(self, path: PathParts, x: _Any) -> bool:
        return any(p(path, x) for p in self.predicates)


class All(pm.All):
    """Selects what every one of ``filters`` selects."""

    def __init__(self, *filters: Filter) -> None:
        object.__setattr__(self, "filters", tuple(map(_as_filter, filters)))

    @property
    def predicates(self) -> tuple[Predicate, ...]:
        """The predicates of the filters, in order."""
        return self.filters  # type: ignore[return-value]

    def __call__(self, path: PathParts, x: _Any) -> bool:
        return all(p(path, x) for p in self.predicates)


class Not(pm.Not):
    """Selects what ``filter`` does not."""

    def __init__(self, filter: Filter, /) -> None:
        object.__setattr__(self, "filter", _as_filter(filter))

    @property
    def predicate(self) -> Predicate:
        """The predicate of the negated filter."""
        return self.filter

    def __call__(self, path: PathParts, x: _Any) -> bool:
        return not self.filter(path, x)

    def __repr__(self) -> str:
        return f"Not({self.filter!r})"
