"""The one filter language that selects state everywhere.

A filter decides, for one variable at a path in a model, whether it is selected. The
forms (all normalised by ``to_filter``):

=========================  ===================================================
form                       selects
=========================  ===================================================
``"params"``               variables of that collection
``Param`` (a type)         variables of that type or a subclass
``True`` / ``...``         everything
``False`` / ``None``       nothing
``Not(f)``/``DenyList(f)`` everything ``f`` does not select
``Any(f, g)``/``[f, g]``   the union
``All(f, g)``              the intersection
``PathContains("bias")``   variables whose path contains the key
``fn(path, value)``        variables for which the predicate is true
=========================  ===================================================

``path`` is a tuple of plain keys (``('blocks', 3, 'weight')``); ``value`` is the Variable
(or, for a bare array in a module, the array, which counts as a ``Param``). Filters are
small frozen value objects with ``repr``, ``==`` and ``hash``, and combine with ``~``,
``|`` and ``&``. Where state is split into groups, a variable goes to the **first** group
whose filter matches.
"""

import dataclasses
import typing as t
from collections.abc import Callable, Hashable

from ._errors import InvalidFilterError
from ._tree import Path
from ._variables import Param, Variable, collection_of

FilterLike: t.TypeAlias = t.Any
"""Anything ``to_filter`` accepts."""


class Filter:
    """Base class of normalised filters: ``filter(path, value) -> bool``."""

    def __call__(self, path: Path, value: t.Any) -> bool:
        raise NotImplementedError

    def matches_collection(self, name: str) -> bool | None:
        """Whether every variable of collection ``name`` is selected (``None``: depends)."""
        return None

    def __invert__(self) -> "Filter":
        return to_filter(Not(self))

    def __or__(self, other: FilterLike) -> "Filter":
        return to_filter(Any(self, other))

    def __and__(self, other: FilterLike) -> "Filter":
        return to_filter(All(self, other))


@dataclasses.dataclass(frozen=True)
class Everything(Filter):
    """Selects every variable (the normal form of ``True`` and ``...``)."""

    def __call__(self, path: Path, value: t.Any) -> bool:
        return True

    def matches_collection(self, name: str) -> bool:
        return True

    def __repr__(self) -> str:
        return "Everything()"


@dataclasses.dataclass(frozen=True)
class Nothing(Filter):
    """Selects nothing (the normal form of ``False``, ``None`` and ``[]``)."""

    def __call__(self, path: Path, value: t.Any) -> bool:
        return False

    def matches_collection(self, name: str) -> bool:
        return False

    def __repr__(self) -> str:
        return "Nothing()"


@dataclasses.dataclass(frozen=True)
class Collection(Filter):
    """Selects variables of the collection ``name`` (the normal form of a string)."""

    name: str

    def __call__(self, path: Path, value: t.Any) -> bool:
        return collection_of(value) == self.name

    def matches_collection(self, name: str) -> bool:
        return name == self.name


@dataclasses.dataclass(frozen=True)
class OfType(Filter):
    """Selects variables that are instances of ``type`` (subclasses included).

    A bare array in a module counts as a ``Param``. A type that is not a Variable (an
    ``AxisMetadata`` box type, say) is matched against the variable's value too.
    """

    type: type

    def __call__(self, path: Path, value: t.Any) -> bool:
        if isinstance(value, self.type):
            return True
        if isinstance(value, Variable):
            return isinstance(value.value, self.type)
        return issubclass(Param, self.type)

    def matches_collection(self, name: str) -> bool | None:
        if issubclass(self.type, Variable) and self.type.collection == name:
            return True
        return None


@dataclasses.dataclass(frozen=True)
class Not(Filter):
    """Selects what ``filter`` does not."""

    filter: Filter

    # Explicit, so that type checkers accept any filter form: Not("params").
    def __init__(self, filter: FilterLike):
        object.__setattr__(self, "filter", to_filter(filter))

    def __eq__(self, other: object) -> bool:
        # DenyList is another spelling of the same filter: equal, with the same hash.
        return isinstance(other, Not) and self.filter == other.filter

    def __hash__(self) -> int:
        return hash((Not, self.filter))

    def __call__(self, path: Path, value: t.Any) -> bool:
        return not self.filter(path, value)

    def matches_collection(self, name: str) -> bool | None:
        inner = self.filter.matches_collection(name)
        return None if inner is None else not inner


class DenyList(Not):
    """Flax's spelling of ``Not``: ``DenyList("params")`` selects all but ``params``."""

    @property
    def deny(self) -> Filter:
        """The filter whose matches are excluded."""
        return self.filter

    def __repr__(self) -> str:
        return f"DenyList({self.filter!r})"


class _Nary(Filter):
    filters: tuple[Filter, ...]

    def __init__(self, *filters: FilterLike):
        object.__setattr__(self, "filters", tuple(to_filter(f) for f in filters))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.filters))})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.filters == other.filters  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.filters))

    def __setattr__(self, name: str, value: t.Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


class Any(_Nary):
    """Selects what any of ``filters`` selects (the normal form of a list or tuple)."""

    def __call__(self, path: Path, value: t.Any) -> bool:
        return any(f(path, value) for f in self.filters)

    def matches_collection(self, name: str) -> bool | None:
        results = [f.matches_collection(name) for f in self.filters]
        if any(r is True for r in results):
            return True
        return False if all(r is False for r in results) else None


class All(_Nary):
    """Selects what every one of ``filters`` selects."""

    def __call__(self, path: Path, value: t.Any) -> bool:
        return all(f(path, value) for f in self.filters)

    def matches_collection(self, name: str) -> bool | None:
        results = [f.matches_collection(name) for f in self.filters]
        if any(r is False for r in results):
            return False
        return True if all(r is True for r in results) else None


@dataclasses.dataclass(frozen=True)
class PathContains(Filter):
    """Selects variables whose path contains ``key`` (``PathContains("bias")``)."""

    key: Hashable

    def __call__(self, path: Path, value: t.Any) -> bool:
        return self.key in path


@dataclasses.dataclass(frozen=True)
class Predicate(Filter):
    """Selects variables for which ``fn(path, value)`` is true."""

    fn: Callable[[Path, t.Any], bool]

    def __call__(self, path: Path, value: t.Any) -> bool:
        return bool(self.fn(path, value))


_declared: set[str] = set()


def _walk_subclasses(cls: type) -> None:
    _declared.add(t.cast(t.Any, cls).collection)
    for sub in cls.__subclasses__():
        _walk_subclasses(sub)


def declared_collections() -> frozenset[str]:
    """Every collection some Variable class declares (``params``, ``batch_stats``...)."""
    _walk_subclasses(Variable)
    return frozenset(_declared)


def _collection_names(f: Filter) -> list[str]:
    if isinstance(f, Collection):
        return [f.name]
    if isinstance(f, Not):
        return _collection_names(f.filter)
    if isinstance(f, _Nary):
        return [n for part in f.filters for n in _collection_names(part)]
    return []


def check_collections(
    spec: FilterLike, where: str, have: Callable[[], t.Iterable[str]] | None = None
) -> None:
    """Raise ``InvalidFilterError`` if ``spec`` names a collection no Variable class
    declares (a typo such as ``"parms"``).

    A declared collection that the tree happens not to hold is fine (it selects nothing:
    generic code passes ``"batch_stats"`` for models with and without BatchNorm). ``have``
    (a function giving the tree's collections, called only on an error) makes the message
    more useful. Costs a set lookup per
    name unless a name is new (then the Variable classes are walked once more).
    """
    names = _collection_names(to_filter(spec))
    unknown = [n for n in names if n not in _declared]
    if unknown:
        declared = declared_collections()
        unknown = [n for n in unknown if n not in declared]
    if not unknown:
        return
    listed = ", ".join(repr(c) for c in sorted(set(have()))) if have is not None else None
    declared = sorted(declared_collections())
    known = ", ".join(repr(c) for c in declared[:12]) + (", ..." if len(declared) > 12 else "")
    raise InvalidFilterError(
        f"{where}: no variable has collection {unknown[0]!r} (a typo?). "
        + (f"The tree's collections are {listed or 'none'}; " if listed is not None else "")
        + f"the declared collections are {known}. A collection exists once a Variable "
        "class declares it (class MyVar(pm.Variable, collection=...))."
    )


_FORMS = (
    "a collection name ('params'), a Variable type (Param), True or ... (everything), "
    "False or None (nothing), Not(f) or DenyList(f), Any(...) or a list/tuple (union), "
    "All(...) (intersection), PathContains(key), or a predicate fn(path, value) -> bool"
)


def to_filter(spec: FilterLike) -> Filter:
    """Normalise any filter form to a ``Filter`` object (the only place forms are parsed).

    Double negations and one-element unions/intersections are simplified, so
    ``to_filter(Not(Not("params"))) == to_filter("params")``.

    >>> to_filter(["params", "batch_stats"])
    Any(Collection(name='params'), Collection(name='batch_stats'))
    """
    if isinstance(spec, Not):
        inner = spec.filter
        if isinstance(inner, Not):
            return inner.filter
        if isinstance(inner, Everything):
            return Nothing()
        if isinstance(inner, Nothing):
            return Everything()
        return spec
    if isinstance(spec, _Nary):
        parts = spec.filters
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return Nothing() if isinstance(spec, Any) else Everything()
        return spec
    if isinstance(spec, Filter):
        return spec
    if spec is True or spec is Ellipsis:
        return Everything()
    if spec is False or spec is None:
        return Nothing()
    if isinstance(spec, str):
        return Collection(spec)
    if isinstance(spec, type):
        return OfType(spec)
    if isinstance(spec, (list, tuple)):
        return to_filter(Any(*spec))
    if callable(spec):
        return Predicate(t.cast(Callable[[Path, t.Any], bool], spec))
    raise InvalidFilterError(
        f"{spec!r} (of type {type(spec).__name__}) is not a filter. A filter is {_FORMS}."
    )
