"""Collection filters over pytreemod's filter language.

Flax's collection filters (``True``, ``False``, a name, a list/tuple/set of names,
``DenyList(f)``) are pytreemod filters: ``to_filter`` normalises them and
``Filter.matches_collection(name)`` decides whether a whole collection (or rng stream) is
selected. This module only adds what selecting *by name* needs: normalising sets,
combining filters, and grouping a variables dict into groups (first match wins).
"""

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax

import pytreemod as pm

from ._errors import InvalidFilterError

CollectionFilter = Any
"""A collection (or rng stream) filter: bool, name, list/tuple/set of names, DenyList..."""

_NORMALIZED: dict[Any, pm.Filter] = {}


def to_filter(spec: CollectionFilter) -> pm.Filter:
    """Normalise a collection filter to a pytreemod ``Filter`` (sets become unions)."""
    if isinstance(spec, pm.Filter):
        return spec
    try:
        cached = _NORMALIZED.get(spec)
    except TypeError:  # unhashable: a list, a dict...
        cached = None
    if cached is not None:
        return cached
    raw = spec
    if isinstance(spec, (set, frozenset)):
        spec = tuple(sorted(spec, key=repr))
    elif isinstance(spec, Mapping):
        raise InvalidFilterError(raw)
    try:
        result = pm.to_filter(spec)
    except pm.InvalidFilterError as e:
        raise InvalidFilterError(raw) from e
    try:
        if len(_NORMALIZED) < 4096:
            _NORMALIZED[raw] = result
    except TypeError:
        pass
    return result


def in_filter(filt: pm.Filter, name: str) -> bool:
    """Whether the (normalised) filter selects the whole collection/stream ``name``."""
    result = filt.matches_collection(name)
    if result is None:
        raise InvalidFilterError(filt)
    return result


def union(*filters: CollectionFilter) -> pm.Filter:
    """The filter selecting what any of ``filters`` selects."""
    return pm.to_filter(pm.Any(*(to_filter(f) for f in filters)))


def intersect(*filters: CollectionFilter) -> pm.Filter:
    """The filter selecting what every one of ``filters`` selects."""
    parts = [to_filter(f) for f in filters]
    if any(isinstance(p, pm.Nothing) for p in parts):
        return pm.Nothing()
    parts = [p for p in parts if not isinstance(p, pm.Everything)]
    return pm.to_filter(pm.All(*parts))


def subtract(a: CollectionFilter, b: CollectionFilter) -> pm.Filter:
    """The filter selecting what ``a`` selects and ``b`` does not."""
    return intersect(a, pm.to_filter(pm.Not(to_filter(b))))


def mentioned_names(filt: pm.Filter) -> set[str]:
    """Every collection name a filter mentions (to probe name-based filters exactly)."""
    if isinstance(filt, pm.Collection):
        return {filt.name}
    if isinstance(filt, pm.Not):
        return mentioned_names(filt.filter)
    if isinstance(filt, (pm.Any, pm.All)):
        out: set[str] = set()
        for f in filt.filters:
            out |= mentioned_names(f)
        return out
    return set()


def typo_hint(wanted: str, names: Iterable[str], holder: str) -> str:
    """A hint to append to an error about collection ``wanted`` when one of ``names``
    (the collections the user gave) is a near miss of it: ``' mutable= names
    "batch_stat", not "batch_stats" (a typo?).'``; ``''`` when none is close."""
    others = sorted({n for n in names if isinstance(n, str) and n != wanted})
    close = difflib.get_close_matches(wanted, others, n=1, cutoff=0.8)
    return f' {holder} "{close[0]}", not "{wanted}" (a typo?).' if close else ""


def selected_names(filt: pm.Filter) -> list[str]:
    """The collection names a filter mentions and selects (``mutable=["batch_stats"]``
    gives ``["batch_stats"]``; a ``DenyList`` gives none)."""
    return [n for n in sorted(mentioned_names(filt)) if in_filter(filt, n)]


_PROBE = "\x00unnamed-collection"


def may_overlap(a: pm.Filter, b: pm.Filter, known: Sequence[str] = ()) -> bool:
    """Whether some collection name is selected by both (exact for name-based filters)."""
    names = mentioned_names(a) | mentioned_names(b) | set(known) | {_PROBE}
    return any(in_filter(a, n) and in_filter(b, n) for n in names)


def is_filter_empty(filt: CollectionFilter) -> bool:
    """Whether the filter selects no collection at all."""
    f = to_filter(filt)
    names = mentioned_names(f) | {_PROBE}
    return not any(in_filter(f, n) for n in names)


def group_collections(
    xs: Mapping[str, Any], filters: Sequence[pm.Filter]
) -> tuple[dict[str, Any], ...]:
    """Split a ``{collection: value}`` dict into one dict per filter; first match wins.

    Collections no filter selects are left out.
    """
    groups: list[dict[str, Any]] = [{} for _ in filters]
    for col, value in xs.items():
        for group, filt in zip(groups, filters):
            if in_filter(filt, col):
                group[col] = value
                break
    return tuple(groups)


# ----------------------------------------------------------------------------- Flax's algebra


def _sorted_sets(spec: Any) -> Any:
    return tuple(sorted(spec, key=repr)) if isinstance(spec, (set, frozenset)) else spec


class DenyList(pm.DenyList):
    """``DenyList(f)`` selects every collection ``f`` does not (pytreemod's ``DenyList``;
    a set of names is accepted, as in Flax, and equals the same names as a list)."""

    def __init__(self, deny: CollectionFilter):
        super().__init__(_sorted_sets(deny))


def filter_to_set(x: CollectionFilter) -> set[str]:
    """The set of names a finite filter selects (``False`` -> ``set()``)."""
    assert x is not True and not isinstance(x, pm.Not), "Infinite set"
    if x is False or x is None or isinstance(x, pm.Nothing):
        return set()
    if isinstance(x, str):
        return {x}
    if isinstance(x, pm.Collection):
        return {x.name}
    if isinstance(x, pm.Any) and all(isinstance(f, pm.Collection) for f in x.filters):
        return {f.name for f in x.filters}  # type: ignore[attr-defined]
    if isinstance(x, (list, tuple, set, frozenset)):
        return set(x)
    raise InvalidFilterError(x)


def _is_true(x: CollectionFilter) -> bool:
    return x is True or x is Ellipsis or isinstance(x, pm.Everything)


def union_filters(a: CollectionFilter, b: CollectionFilter) -> CollectionFilter:
    """A filter selecting what ``a`` or ``b`` selects (``True``, a ``DenyList`` or a set)."""
    if _is_true(a) or _is_true(b):
        return True
    if isinstance(a, pm.Not) and isinstance(b, pm.Not):
        return DenyList(intersect_filters(a.filter, b.filter))
    if isinstance(b, pm.Not):
        a, b = b, a
    if isinstance(a, pm.Not):
        return DenyList(subtract_filters(a.filter, b))
    return filter_to_set(a) | filter_to_set(b)


def subtract_filters(a: CollectionFilter, b: CollectionFilter) -> CollectionFilter:
    """A filter selecting what ``a`` selects and ``b`` does not."""
    if _is_true(b):
        return False
    if _is_true(a):
        return DenyList(b)
    if isinstance(a, pm.Not) and isinstance(b, pm.Not):
        return subtract_filters(b.filter, a.filter)
    if isinstance(a, pm.Not):
        return DenyList(union_filters(a.filter, b))
    if isinstance(b, pm.Not):
        return intersect_filters(a, b.filter)
    return filter_to_set(a) - filter_to_set(b)


def intersect_filters(a: CollectionFilter, b: CollectionFilter) -> CollectionFilter:
    """A filter selecting what both ``a`` and ``b`` select."""
    if _is_true(a):
        return b
    if _is_true(b):
        return a
    if isinstance(a, pm.Not) and isinstance(b, pm.Not):
        return DenyList(union_filters(b.filter, a.filter))
    if isinstance(b, pm.Not):
        a, b = b, a
    if isinstance(a, pm.Not):
        return subtract_filters(b, a.filter)
    return filter_to_set(a) & filter_to_set(b)


def in_filter_like(filter_like: CollectionFilter, col: Any) -> bool:
    """Whether ``filter_like`` (any collection-filter form) selects collection ``col``."""
    if isinstance(filter_like, str):
        return col == filter_like
    if isinstance(filter_like, bool):
        return filter_like
    if isinstance(filter_like, pm.Filter):
        return in_filter(filter_like, col)
    if isinstance(filter_like, (list, tuple, set, frozenset)):
        return col in filter_like
    return in_filter(to_filter(filter_like), col)


def group_collections_copy(
    xs: Mapping[str, Any], col_filters: Sequence[CollectionFilter]
) -> tuple[dict[str, Any], ...]:
    """Flax's ``group_collections``: one dict per filter, each collection in the first
    group whose filter selects it; the values' containers are copied."""
    groups = group_collections(xs, [to_filter(f) for f in col_filters])
    return tuple({col: jax.tree.map(lambda v: v, val) for col, val in g.items()} for g in groups)
