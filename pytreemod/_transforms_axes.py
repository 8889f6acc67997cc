"""Axis specs of ``vmap``/``scan``: ``Carry``, ``StateAxes`` and their resolution per variable slot.

A spec is a JAX-style prefix of the arguments (int, ``None``, ``Carry``, ``StateAxes``, or
tuples/dicts of them); ``_slot_specs`` resolves it for every variable slot of a packed tree
and rejects different specs for aliases of one Variable. Messages name the slot by its path
(``_describe``). ``_remove_box_axes`` takes the mapped axis out of the axis-metadata
boxes of the mapped slots before ``vmap``/``scan`` map over them.
"""

from collections.abc import Callable, Mapping
from typing import Any, Final, cast

import jax.tree_util as jtu

from ._errors import TransformError
from ._filters import FilterLike, check_collections, to_filter
from ._meta import is_box, remove_axis, slot_value
from ._pack import Skeleton, pack, unpack
from ._tree import Path, format_path, is_array
from ._variables import Variable


class _CarryType:
    """The ``Carry`` marker of ``scan``'s ``in_axes``/``out_axes`` and ``StateAxes``."""

    _instance: "_CarryType | None" = None

    def __new__(cls) -> "_CarryType":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "Carry"

    def __reduce__(self) -> str:
        return "Carry"


Carry: Final[_CarryType] = _CarryType()
"""Marks state carried from one ``scan`` iteration to the next."""


class StateAxes:
    """Per-filter axes for one module argument of ``vmap`` or ``scan``.

    ``StateAxes({"params": 0, "batch_stats": None})`` maps parameters on axis 0 and
    broadcasts batch statistics; in ``scan`` a value may also be ``Carry``. A variable
    goes to the first filter that matches it; a variable no filter matches is an error
    (end with ``...: None`` to broadcast the rest).
    """

    __slots__ = ("items",)

    def __init__(self, axes: Mapping[FilterLike, Any]):
        items = tuple((to_filter(f), a) for f, a in axes.items())
        for f, _ in items:
            check_collections(f, "StateAxes")
        for _, a in items:
            if not (a is None or a is Carry or isinstance(a, int)):
                raise TransformError(
                    f"StateAxes values must be an int axis, None or Carry, got {a!r}."
                )
        object.__setattr__(self, "items", items)

    def axis_for(self, path: Path, value: Any) -> Any:
        for filt, axis in self.items:
            if filt(path, value):
                return axis
        raise _Unmatched

    def __repr__(self) -> str:
        return "StateAxes({" + ", ".join(f"{f!r}: {a!r}" for f, a in self.items) + "})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StateAxes) and self.items == other.items

    def __hash__(self) -> int:
        return hash(self.items)


class _Unmatched(Exception):
    pass


def _describe(path: Path, root: str) -> str:
    """Render ``path`` for a message: root ``"args"`` is a packed ``(args, kwargs)`` pair,
    ``"*args"`` a packed tuple of positional arguments (``scan``)."""
    if root == "*args":
        return f"args{format_path(path)}" if path else "args"
    if root == "args" and len(path) > 1:
        head, key, rest = path[0], path[1], path[2:]
        tail = format_path(rest) if rest else ""  # not "<root>" after args[i]
        if head == 0:
            return f"args[{key}]{tail}"
        if head == 1:
            return f"kwargs[{key!r}]{tail}"
    return f"{root}{format_path(path)}" if path else root


def _resolve(spec: Any, path: Path, value: Any, what: str, root: str) -> Any:
    """The axis (int, None or Carry) ``spec`` gives the variable at ``path``."""
    for i in range(len(path) + 1):
        if isinstance(spec, bool):
            raise TransformError(
                f"{what}: {spec!r} at {_describe(path[:i], root)} is not an axis; use an int "
                "axis, None, StateAxes or a tuple/dict of them."
            )
        if spec is None or spec is Carry or isinstance(spec, int):
            return spec
        if isinstance(spec, StateAxes):
            try:
                return spec.axis_for(path[i:], value)
            except _Unmatched:
                raise TransformError(
                    f"{what}: {spec!r} does not match {_describe(path, root)} (collection "
                    f"{_collection(value)!r}); add a filter for it, e.g. `...: None` to "
                    "broadcast everything else."
                ) from None
        if i == len(path):
            break
        key = path[i]
        try:
            if isinstance(spec, Mapping):
                spec = spec[key]
            elif isinstance(spec, (tuple, list)):
                spec = spec[cast(int, key)]
            else:
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise TransformError(
                f"{what}: the spec {spec!r} does not fit the tree at "
                f"{_describe(path[: i + 1], root)}; give an int, None or StateAxes there, or "
                "a tuple/dict prefix with an entry per element."
            ) from None
    raise TransformError(
        f"{what}: {spec!r} is not a valid axis spec at {_describe(path, root)}; use an int, "
        "None, StateAxes or a tuple/dict of them."
    )


def _collection(value: Any) -> str:
    return value.collection if isinstance(value, Variable) else "params"


def _slot_specs(
    skel: Skeleton, slot_values: list[Any], spec: Any, what: str, root: str
) -> dict[int, Any]:
    """Resolve ``spec`` for every slot and reject inconsistent specs for shared Variables."""
    out: dict[int, Any] = {}
    value_of = dict(zip(skel.slots, slot_values))
    for slot in skel.slots:
        out[slot] = _resolve(spec, skel.path(slot), value_of[slot], what, root)
    for slot, first in enumerate(skel.structure.alias):
        if first is None:
            continue
        mine = _resolve(spec, skel.path(slot), value_of[first], what, root)
        if mine != out[first]:
            raise TransformError(
                f"{what}: {_describe(skel.path(first), root)} and "
                f"{_describe(skel.path(slot), root)} are the same Variable (shared), but "
                f"get different specs ({out[first]!r} and {mine!r}). Give every alias of a "
                "variable the same spec."
            )
    return out


def _args_spec(spec: Any, nargs: int, what: str) -> Any:
    if isinstance(spec, list):
        spec = tuple(spec)
    if isinstance(spec, tuple):
        if len(spec) != nargs:
            raise TransformError(
                f"{what} has {len(spec)} entries but the function got {nargs} positional "
                "arguments; give one entry per argument (or a single int/None/StateAxes for "
                "all of them)."
            )
    return spec


def _check_axis(what: str, where: Callable[[], str], shape: tuple[int, ...], ax: int) -> None:
    if not -len(shape) <= ax < len(shape):
        has = "a scalar" if not shape else f"of shape {shape} (rank {len(shape)})"
        raise TransformError(
            f"{what}: {where()} is {has}, which has no axis {ax} to {what} over; give it "
            "in_axes=None (the same value every time) or an axis it has."
        )


def _holds_box(value: Any) -> bool:
    inner = slot_value(value)
    if is_box(inner):
        return True
    return not is_array(inner) and any(is_box(x) for x in jtu.tree_leaves(inner, is_leaf=is_box))


def _remove_box_axes(
    skel: Skeleton,
    arrays: list[Any],
    slot_values: list[Any],
    slot_axis: Mapping[int, Any],
    params: Mapping[Any, Any],
) -> tuple[Skeleton, list[Any]]:
    """``pm.remove_axis(value, axis, params)`` on every slot mapped along an int axis,
    before the transform maps over it: a box's ``remove_axis`` sees the whole, still
    stacked value (as in Flax's lifted transforms), so it may change that value, e.g.
    broadcast a reduced one back to the mapped size. The packed ``(skeleton, arrays)``
    of the result; unchanged (no copy) when no mapped slot holds a box."""
    mapped_boxes = any(
        isinstance(slot_axis[s], int) and _holds_box(v) for s, v in zip(skel.slots, slot_values)
    )
    if not mapped_boxes:
        return skel, arrays

    def fix(slot: int, value: Any) -> Any:
        ax = slot_axis[slot]
        return remove_axis(value, ax, params) if isinstance(ax, int) else value

    new_skel, new_arrays, _ = pack(unpack(skel, arrays, fix))
    return new_skel, new_arrays
