"""Shared helpers of the bridge: Variable types per collection, and dict-key conversion.

pytreemod's states key list and tuple items by integers; Linen's variable dicts use
string keys throughout (Flax's serialization and ``traverse_util`` expect them). The
bridge writes ``str(key)`` on the Linen side and maps keys back through the pytreemod
model's own structure, so nothing is guessed.
"""

from collections.abc import Mapping
from typing import Any

import pytreemod as pm

_BUILTIN: dict[str, type[pm.Variable[Any]]] = {
    pm.Param.collection: pm.Param,
    pm.BatchStat.collection: pm.BatchStat,
    pm.Cache.collection: pm.Cache,
    pm.Intermediate.collection: pm.Intermediate,
}
_CREATED: dict[str, type[pm.Variable[Any]]] = {}


def variable_type(collection: str) -> type[pm.Variable[Any]]:
    """The pytreemod Variable type the bridge uses for a Linen collection.

    ``params``, ``batch_stats``, ``cache`` and ``intermediates`` map to ``pm.Param``,
    ``pm.BatchStat``, ``pm.Cache`` and ``pm.Intermediate``. Any other name gets a
    ``pm.Variable`` subclass whose ``collection`` is that name, created on first use and
    reused afterwards (so filters on the type keep matching).
    """
    if collection in _BUILTIN:
        return _BUILTIN[collection]
    vtype = _CREATED.get(collection)
    if vtype is None:
        name = "".join(p[:1].upper() + p[1:] for p in collection.split("_") if p)
        name = name if name.isidentifier() else "LinenCollection"
        vtype = _CREATED[collection] = _make_type(name, collection)
    return vtype


def _make_type(name: str, collection: str) -> type[pm.Variable[Any]]:
    cls = type(
        name, (pm.Variable,), {"__slots__": (), "__module__": __name__}, collection=collection
    )
    cls.__doc__ = f"A variable of the Linen collection {collection!r} (made by adapters.bridge)."
    return cls


def to_linen_keys(tree: Any) -> Any:
    """A nested dict with every key turned into a string (values, boxes included, kept)."""
    if isinstance(tree, Mapping):
        return {str(k): to_linen_keys(v) for k, v in tree.items()}
    return tree


def from_linen_keys(tree: Any, like: Any) -> Any:
    """``tree`` (string keys) re-keyed like ``like`` (a pytreemod state with its own keys).

    Entries of ``tree`` that ``like`` has no place for are kept under their string key,
    so ``pm.from_variables`` reports them.
    """
    if not isinstance(like, Mapping) or not isinstance(tree, Mapping):
        return tree
    out: dict[Any, Any] = {}
    by_text = {str(k): k for k in like}
    for key, value in tree.items():
        original = by_text.get(str(key), key)
        out[original] = from_linen_keys(value, like.get(original))
    return out
