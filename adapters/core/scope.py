"""``adapters.core.scope``: the scope API under ``flax.core.scope``'s names.

``Scope``, ``Variable``, ``LazyRng``, ``DenyList``, ``bind``/``apply``/``init``/
``lazy_init``, and Flax's collection-filter helpers (``in_filter``, ``union_filters``,
``intersect_filters``, ``subtract_filters``, ``filter_to_set``, ``is_filter_empty``,
``group_collections``). This module only re-exports.
"""

from typing import Any

from jax import Array as Array

from ._apply import _is_valid_rng as _is_valid_rng
from ._apply import _is_valid_rngs as _is_valid_rngs
from ._apply import apply as apply
from ._apply import bind as bind
from ._apply import init as init
from ._apply import lazy_init as lazy_init
from ._filters import CollectionFilter as CollectionFilter
from ._filters import DenyList as DenyList
from ._filters import filter_to_set as filter_to_set
from ._filters import group_collections_copy as group_collections
from ._filters import in_filter_like as in_filter
from ._filters import intersect_filters as intersect_filters
from ._filters import is_filter_empty as is_filter_empty
from ._filters import subtract_filters as subtract_filters
from ._filters import union_filters as union_filters
from ._frozen_dict import FrozenDict
from ._scope import LazyRng as LazyRng
from ._scope import Scope as Scope
from ._scope import Variable as Variable


def _fold_in_static(rng: Any, data: Any) -> Any:
    """Fold static strings and ints into ``rng`` (Flax's hash; ``rng`` when ``data`` is empty)."""
    return LazyRng(rng, tuple(data)).as_jax_rng()


Filter = CollectionFilter
PRNGSequenceFilter = CollectionFilter
Collection = dict[str, Any]
MutableCollection = dict[str, Any]
VariableDict = dict[str, Collection]
FrozenVariableDict = FrozenDict[str, Any]
MutableVariableDict = dict[str, MutableCollection]
RNGSequences = dict[str, Any]

__all__ = [
    "Array",
    "CollectionFilter",
    "DenyList",
    "Filter",
    "FrozenVariableDict",
    "LazyRng",
    "MutableVariableDict",
    "PRNGSequenceFilter",
    "RNGSequences",
    "Scope",
    "Variable",
    "VariableDict",
    "apply",
    "bind",
    "filter_to_set",
    "group_collections",
    "in_filter",
    "init",
    "intersect_filters",
    "is_filter_empty",
    "lazy_init",
    "subtract_filters",
    "union_filters",
]
