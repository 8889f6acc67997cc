"""Collection filters over pytreemod's filter language.

Flax's collection filters (``True``, ``False``, a name, a list/tuple/set of names,
``DenyList(f)``) are pytreemod filters: ``to_filter`` normalises them and
``Filter.matches_collection(name)`` decides whether a whole collection (or rng stream) is
selected. This module only adds what selecting *by name* needs: normalising sets,
combining filters, and grouping a variables dict into groups (first match wins).
"""

from collections.abc import Mapping, Sequence
from typing import Any

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
