"""Axis metadata boxes (docs/design/axis_metadata.md).

``AxisMetadata`` is a small abstract box: ``unbox`` returns the wrapped value,
``add_axis(index, params)`` / ``remove_axis(index, params)`` update the metadata when a
transform (``vmap``, ``scan`` over layers) adds or removes an axis of the value, and
``replace_boxed`` swaps the value. Boxes are Modules, hence PyTree nodes whose only child
is the value: ``jax.tree.map`` maps the value and keeps the metadata, so optimizer state
built from boxed parameters inherits their partitioning.

Law, for every box type (property-tested): ``x.add_axis(i, p).remove_axis(i, p) == x``
and, when axis ``i`` carries the name in ``p``, ``x.remove_axis(i, p).add_axis(i, p) == x``.

The sharding boxes, ``Partitioned`` and ``LogicallyPartitioned``, are in
``_sharding._boxes``, with the rules that resolve their names.

The slot: a model's variable is a ``Variable`` holding boxes (outermost first) holding an
array. ``slot_value`` opens the Variable, ``peel`` takes the slot apart into its boxes and
the array, ``rebox`` puts an array back into boxes, ``unboxed`` reads the array through
each box's ``unbox()``. Code that opens a slot uses these, never its own loop.
"""

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax.tree_util as jtu

from ._module import Module
from ._variables import Variable

_B = TypeVar("_B", bound="AxisMetadata")

PARTITION_NAME = "partition_name"
"""Key of ``metadata_params`` naming the axis a transform adds (``{PARTITION_NAME: 'layers'}``)."""


class AxisMetadata(Module):
    """Abstract base of boxes that carry per-axis metadata for the value they wrap."""

    value: Any

    @abc.abstractmethod
    def unbox(self) -> Any:
        """Return the wrapped value (one level: a box inside a box is returned as is)."""

    @abc.abstractmethod
    def add_axis(self: _B, index: int, params: Mapping[Any, Any]) -> _B:
        """Return a copy whose metadata has a new axis at ``index``.

        ``params`` is the ``metadata_params`` dict the user passed to the transform that
        adds the axis. Inverse of ``remove_axis``.
        """

    @abc.abstractmethod
    def remove_axis(self: _B, index: int, params: Mapping[Any, Any]) -> _B:
        """Return a copy whose metadata lost the axis at ``index``. Inverse of ``add_axis``."""

    def replace_boxed(self: _B, value: Any) -> _B:
        """Return a copy of the box holding ``value`` instead."""
        return self.replace(value=value)


def is_box(x: Any) -> bool:
    """Whether ``x`` is an ``AxisMetadata`` box."""
    return isinstance(x, AxisMetadata)


def unbox(tree: Any) -> Any:
    """Strip every ``AxisMetadata`` box in ``tree``, leaving the values they wrap."""
    return jtu.tree_map(lambda x: x.unbox() if is_box(x) else x, tree, is_leaf=is_box)


def map_boxes(fn: Callable[["AxisMetadata"], Any], tree: Any) -> Any:
    """Apply ``fn`` to every ``AxisMetadata`` box in ``tree``; other leaves stay as they are.

    A box inside a box is handed to ``fn`` as a whole (the outer box), as ``unbox`` does.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> tree = {"w": pm.Partitioned(jnp.zeros((2, 3)), ("a", "b")), "n": 1}
    >>> pm.map_boxes(lambda b: b.replace(names=("x", "y")), tree)["w"].names
    ('x', 'y')
    """
    return jtu.tree_map(lambda x: fn(x) if is_box(x) else x, tree, is_leaf=is_box)


AxisFn = Callable[[Any, int, Mapping[Any, Any]], Any]
"""``fn(x, index, params)``: what ``x`` becomes when a transform adds (removes) axis
``index`` with ``metadata_params`` ``params``."""

_AXIS_TYPES: dict[type, tuple[AxisFn, AxisFn]] = {}  # registered classes
_AXIS_FOUND: dict[type, tuple[AxisFn, AxisFn] | None] = {}  # per class, through its MRO


def register_axis_metadata(cls: type, *, add_axis: AxisFn, remove_axis: AxisFn) -> None:
    """Make the instances of ``cls`` (subclasses included) take part in ``pm.add_axis``
    and ``pm.remove_axis`` beside the ``AxisMetadata`` boxes.

    For a class that carries per-axis metadata but is not a box, such as an adapter's
    Variable with its own method names: the walk stops at an instance ``x`` and puts
    ``add_axis(x, index, params)`` (``remove_axis(x, index, params)``) in its place.

    >>> import pytreemod as pm
    >>> class Named:
    ...     def __init__(self, names): self.names = names
    >>> pm.register_axis_metadata(
    ...     Named,
    ...     add_axis=lambda x, i, p: Named(x.names[:i] + (p[pm.PARTITION_NAME],) + x.names[i:]),
    ...     remove_axis=lambda x, i, p: Named(x.names[:i] + x.names[i + 1 :]),
    ... )
    >>> pm.add_axis([Named(("a",))], 0, {pm.PARTITION_NAME: "layers"})[0].names
    ('layers', 'a')
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_axis_metadata: expected a class, got {cls!r}.")
    _AXIS_TYPES[cls] = (add_axis, remove_axis)
    _AXIS_FOUND.clear()


def _registered(x: Any) -> tuple[AxisFn, AxisFn] | None:
    cls = type(x)
    try:
        return _AXIS_FOUND[cls]
    except KeyError:
        found = next((_AXIS_TYPES[c] for c in cls.__mro__ if c in _AXIS_TYPES), None)
        _AXIS_FOUND[cls] = found
        return found


def _has_axes(x: Any) -> bool:
    return isinstance(x, AxisMetadata) or (bool(_AXIS_TYPES) and _registered(x) is not None)


def _change_axis(tree: Any, index: int, params: Mapping[Any, Any] | None, add: bool) -> Any:
    """The one walk behind ``add_axis``/``remove_axis``: every box, and every instance
    of a class registered with ``register_axis_metadata``, replaced by its new self."""
    p: Mapping[Any, Any] = {} if params is None else params

    def one(x: Any) -> Any:
        if isinstance(x, AxisMetadata):
            return x.add_axis(index, p) if add else x.remove_axis(index, p)
        fns = _registered(x) if _AXIS_TYPES else None
        if fns is None:
            return x
        return fns[0 if add else 1](x, index, p)

    return jtu.tree_map(one, tree, is_leaf=_has_axes)


def add_axis(tree: Any, index: int, params: Mapping[Any, Any] | None = None) -> Any:
    """Call ``box.add_axis(index, params)`` on every ``AxisMetadata`` box in ``tree``.

    The one implementation of a transform adding an axis to boxed values: ``pm.vmap`` and
    ``pm.scan`` call it on their mapped outputs with their ``metadata_params``. Only the
    metadata changes; the boxed values are left as they are. Inverse of ``remove_axis``.
    Instances of classes given to ``register_axis_metadata`` take part too.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> tree = {"w": pm.Partitioned(jnp.zeros((4, 8)), ("embed", "mlp"))}
    >>> pm.add_axis(tree, 0, {pm.PARTITION_NAME: "layers"})["w"].names
    ('layers', 'embed', 'mlp')
    """
    return _change_axis(tree, index, params, add=True)


def remove_axis(tree: Any, index: int, params: Mapping[Any, Any] | None = None) -> Any:
    """Call ``box.remove_axis(index, params)`` on every ``AxisMetadata`` box in ``tree``.

    ``pm.vmap`` and ``pm.scan`` call it on mapped inputs with their ``metadata_params``.
    Inverse of ``add_axis``; a box whose axis ``index`` does not carry the name in
    ``params`` raises ``AxisMetadataError``. Instances of classes given to
    ``register_axis_metadata`` take part too.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> tree = {"w": pm.Partitioned(jnp.zeros((3, 4, 8)), ("layers", "embed", "mlp"))}
    >>> pm.remove_axis(tree, 0, {pm.PARTITION_NAME: "layers"})["w"].names
    ('embed', 'mlp')
    """
    return _change_axis(tree, index, params, add=False)


def slot_value(slot: Any) -> Any:
    """The value a Variable holds (boxes included), or ``slot`` itself if it is none."""
    return slot.value if isinstance(slot, Variable) else slot


def peel(slot: Any) -> tuple[tuple[AxisMetadata, ...], Any]:
    """A slot taken apart: the boxes around its value (outermost first) and the leaf
    inside them. ``slot`` is a Variable, a box or a bare value; boxes are opened by their
    ``value`` field (no ``unbox()`` side effect). Inverse of ``rebox``.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> from pytreemod._meta import peel
    >>> boxes, leaf = peel(pm.Param(pm.Partitioned(jnp.zeros(2), ("a",))))
    >>> [type(b).__name__ for b in boxes], leaf.shape
    (['Partitioned'], (2,))
    """
    value = slot_value(slot)
    boxes: list[AxisMetadata] = []
    while isinstance(value, AxisMetadata):
        boxes.append(value)
        value = value.value
    return tuple(boxes), value


def rebox(boxes: Sequence[AxisMetadata], leaf: Any) -> Any:
    """``leaf`` put back in ``boxes`` (outermost first, as ``peel`` returns them), each
    keeping its metadata. Inverse of ``peel`` (a Variable type wraps the result)."""
    for box in reversed(boxes):
        leaf = box.replace_boxed(leaf)
    return leaf


def unboxed(slot: Any) -> Any:
    """The leaf of a slot read through each box's ``unbox()``: what a layer computes
    with (a ``LogicallyPartitioned`` constrains a traced value to its names there)."""
    value = slot_value(slot)
    while isinstance(value, AxisMetadata):
        value = value.unbox()
    return value
