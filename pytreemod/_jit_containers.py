"""Generated tests that a container of arrays (dicts, lists, tuples, ``None``) has a known
structure, without flattening it.

``jit``'s fast path must confirm, on every call, that an argument such as an optimizer
state dict still has the structure it was checked with and holds arrays only. Flattening
it sorts every dict's keys and builds a treedef to compare: about 0.1 µs per leaf. The
conditions written here compare a dict's keys directly (as one set when there are many),
and check the children of a node whose children all have one structure (the layers of a
model, the two arrays of a layer) together: a few ``map`` calls per level, so the work per
leaf runs in C. A structure too irregular for that is left to the caller (``TooLarge``).

The conditions are source text for a generated function (see ``_jit._learn_pattern``):
``conds(expr, treedef, const, local, leaves)`` returns them for the value of ``expr``,
naming constants through ``const`` and fresh local variables through ``local``, and puts
in ``leaves`` the expressions that read its arrays in flattening order.
"""

from collections.abc import Callable
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, cast

_VECTOR = 4  # from this many children of one structure on, they are checked together
_FEW_KEYS = 8  # a dict with more keys than this has its key set compared whole
_MAX_CONDS = 96  # beyond this, the caller checks the container by flattening it
_MAX_LEAF_EXPRS = 64  # beyond this many leaves, the arrays are read by flattening

# Names the conditions use besides their constants: the caller puts these in scope.
NAMES: dict[str, Any] = {
    "_chain": chain.from_iterable,
    "_get": dict.get,
    "_repeat": repeat,
    "_MISSING": object(),
    "_NONE": frozenset({type(None)}),
}


class TooLarge(Exception):
    """The structure needs more conditions than a generated test should hold."""


def is_pure(treedef: Any) -> bool:
    """Whether ``treedef`` is made of dicts, lists, tuples and None only."""
    data = treedef.node_data()
    if data is None:
        return True
    if data[0] not in (dict, list, tuple, type(None)):
        return False
    return all(is_pure(c) for c in treedef.children())


def conds(
    expr: str,
    treedef: Any,
    const: Callable[[Any], str],
    local: Callable[[], str],
    leaves: list[str] | None = None,
) -> list[str]:
    """Conditions true exactly when ``expr`` has structure ``treedef`` (pure) with an
    array (a type in ``_AT``) at every leaf; ``TooLarge`` if there are too many.

    ``leaves``, if given, receives expressions reading the arrays in flattening order,
    valid once the conditions hold: the ones the leaf conditions read (``x4[k1]``, from
    the locals the conditions bind), or, where children were checked together, one
    starred flatten (``*_leaves(expr)``)."""
    out: list[str] = []
    found: list[str | None] = []
    _one(out, expr, treedef, const, local, found)
    if leaves is not None:
        if None in found or len(found) > _MAX_LEAF_EXPRS:
            leaves.append(f"*_leaves({expr})")
        else:
            leaves += cast(list[str], found)
    return out


def _add(out: list[str], cond: str) -> None:
    out.append(cond)
    if len(out) > _MAX_CONDS:
        raise TooLarge


def _keys(treedef: Any, const: Callable[[Any], str]) -> str:
    """A constant keys view with the keys of a dict node, to compare whole key sets
    (equal sets: the same keys, as the treedef's sorted list, whatever their order)."""
    return const(dict.fromkeys(treedef.node_data()[1]).keys())


def _uniform(children: list[Any]) -> bool:
    return len(children) >= _VECTOR and all(c == children[0] for c in children[1:])


def _one(
    out: list[str],
    expr: str,
    treedef: Any,
    const: Callable[[Any], str],
    local: Callable[[], str],
    found: list[str | None],
) -> None:
    """Conditions for ``expr``; ``found`` gets each leaf's expression, or None for
    children checked together (which have none of their own)."""
    data = treedef.node_data()
    if data is None:
        _add(out, f"type({expr}) in _AT")
        found.append(expr)
        return
    typ = data[0]
    if typ is type(None):
        _add(out, f"{expr} is None")
        return
    var = local()
    children = treedef.children()
    _add(out, f"type({var} := {expr}) is {const(typ)}")
    if typ is dict:
        if len(children) > _FEW_KEYS:
            _add(out, f"{var}.keys() == {_keys(treedef, const)}")
        else:  # cheaper for a few keys: as many keys, each of them present
            _add(out, f"len({var}) == {len(children)}")
            for key in data[1]:
                _add(out, f"{const(key)} in {var}")
        if _uniform(children):
            _many(out, f"{var}.values()", children[0], const, local)
            found.append(None)
            return
        for key, child in zip(data[1], children):
            _one(out, f"{var}[{const(key)}]", child, const, local, found)
        return
    _add(out, f"len({var}) == {len(children)}")
    if _uniform(children):
        _many(out, var, children[0], const, local)
        found.append(None)
        return
    for i, child in enumerate(children):
        _one(out, f"{var}[{i}]", child, const, local, found)


def _many(
    out: list[str],
    seq: str,
    treedef: Any,
    const: Callable[[Any], str],
    local: Callable[[], str],
    again: bool = True,
) -> None:
    """Conditions that every item of ``seq`` has structure ``treedef``; ``again``: whether
    ``seq`` gives a collection (that may be iterated several times) or an iterator."""
    data = treedef.node_data()
    if data is None:
        _add(out, f"set(map(type, {seq})) <= _AT")
        return
    typ = data[0]
    if typ is type(None):
        _add(out, f"set(map(type, {seq})) == _NONE")
        return
    var = local()
    children = treedef.children()
    seq = seq if again else f"tuple({seq})"
    _add(out, f"set(map(type, ({var} := {seq}))) == {const(frozenset({typ}))}")
    _add(out, f"set(map(len, {var})) == {const(frozenset({len(children)}))}")
    if typ is dict:
        # As many keys as the structure, each of them present: the same keys. A missing
        # one reads as _MISSING, which no structure accepts.
        for key, child in zip(data[1], children):
            items = f"map(_get, {var}, _repeat({const(key)}), _repeat(_MISSING))"
            _many(out, items, child, const, local, False)
        return
    if all(c == children[0] for c in children[1:]) and children:
        _many(out, f"_chain({var})", children[0], const, local, False)
        return
    for i, child in enumerate(children):
        _many(out, f"map({const(itemgetter(i))}, {var})", child, const, local, False)
