"""Axis metadata boxes (the axis-metadata design note).

``AxisMetadata`` is a small abstract box: ``unbox`` returns the wrapped value,
``add_axis(index, params)`` / ``remove_axis(index, params)`` update the metadata when a
transform (``vmap``, ``scan`` over layers) adds or removes an axis of the value, and
``replace_boxed`` swaps the value. Boxes are Modules, hence PyTree nodes whose only child
is the value: ``jax.tree.map`` maps the value and keeps the metadata, so optimizer state
built from boxed parameters inherits their partitioning.

Law, for every box type (property-tested): ``x.add_axis(i, p).remove_axis(i, p) == x``
and, when axis ``i`` carries the name in ``p``, ``x.remove_axis(i, p).add_axis(i, p) == x``.
"""

import abc
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax
import jax.tree_util as jtu

from ._axis_rules import (
    AnyMesh,
    _check_rank,
    _named_sharding,
    _names_spec,
    _pick_mesh,
    get_logical_axis_rules,
)
from ._errors import AxisMetadataError, require_callable
from ._module import Module, field

_B = TypeVar("_B", bound="AxisMetadata")

PARTITION_NAME = "partition_name"
"""Key of ``metadata_params`` naming the axis a transform adds (``{PARTITION_NAME: 'layers'}``)."""

_ROOT = "at <root>: "  # where a box's own get_partition_spec/get_sharding errors point


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


def add_axis(tree: Any, index: int, params: Mapping[Any, Any] | None = None) -> Any:
    """Call ``box.add_axis(index, params)`` on every ``AxisMetadata`` box in ``tree``.

    The one implementation of a transform adding an axis to boxed values: ``pm.vmap`` and
    ``pm.scan`` call it on their mapped outputs with their ``metadata_params``. Only the
    metadata changes; the boxed values are left as they are. Inverse of ``remove_axis``.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> tree = {"w": pm.Partitioned(jnp.zeros((4, 8)), ("embed", "mlp"))}
    >>> pm.add_axis(tree, 0, {pm.PARTITION_NAME: "layers"})["w"].names
    ('layers', 'embed', 'mlp')
    """
    p: Mapping[Any, Any] = {} if params is None else params
    return map_boxes(lambda b: b.add_axis(index, p), tree)


def remove_axis(tree: Any, index: int, params: Mapping[Any, Any] | None = None) -> Any:
    """Call ``box.remove_axis(index, params)`` on every ``AxisMetadata`` box in ``tree``.

    ``pm.vmap`` and ``pm.scan`` call it on mapped inputs with their ``metadata_params``.
    Inverse of ``add_axis``; a box whose axis ``index`` does not carry the name in
    ``params`` raises ``AxisMetadataError``.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> tree = {"w": pm.Partitioned(jnp.zeros((3, 4, 8)), ("layers", "embed", "mlp"))}
    >>> pm.remove_axis(tree, 0, {pm.PARTITION_NAME: "layers"})["w"].names
    ('embed', 'mlp')
    """
    p: Mapping[Any, Any] = {} if params is None else params
    return map_boxes(lambda b: b.remove_axis(index, p), tree)


def _as_names(names: Any) -> tuple[Any, ...]:
    return tuple(names)


class Partitioned(AxisMetadata):
    """A value with one logical or mesh axis name (or ``None``) per array axis.

    **Fields:**

    - ``value``: the array.
    - ``names``: one entry per axis of ``value``: a mesh axis name, a logical name
      resolved through ``logical_axis_rules``, or ``None`` (replicated).
    - ``mesh``: optional ``jax.sharding.Mesh`` used by ``get_sharding`` when none is given.

    As in Flax, the box does not check ``names`` against the value's rank when it is
    built (a transform may add only a metadata axis, e.g. ``add_metadata_axis``); a
    mismatch is a ``ShardingError`` when the names are turned into a sharding.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> p = pm.Partitioned(jnp.zeros((4, 8)), ("embed", "mlp"))
    >>> p.add_axis(0, {pm.PARTITION_NAME: "layers"}).names
    ('layers', 'embed', 'mlp')
    """

    value: Any
    names: tuple[Any, ...] = field(static=True, converter=_as_names)
    mesh: Any = field(static=True, default=None)

    def unbox(self) -> Any:
        return self.value

    def add_axis(self, index: int, params: Mapping[Any, Any]) -> "Partitioned":
        names = list(self.names)
        names.insert(_axis_index(index, len(names) + 1), _partition_name(params))
        return self.replace(names=tuple(names))

    def remove_axis(self, index: int, params: Mapping[Any, Any]) -> "Partitioned":
        names = list(self.names)
        i = _axis_index(index, len(names))
        expected = _partition_name(params)
        if names[i] != expected:
            raise AxisMetadataError(
                f"remove_axis({index}) expected axis name {expected!r} (from "
                f"metadata_params) but the axis is named {names[i]!r} in {self.names}; pass "
                "the same metadata_params that added the axis."
            )
        del names[i]
        return self.replace(names=tuple(names))

    def get_partition_spec(self) -> jax.sharding.PartitionSpec:
        """The ``PartitionSpec`` of the names: resolved through the active logical axis
        rules if any are set, taken literally as mesh axis names otherwise (the same as
        ``pytreemod.get_partition_spec`` gives for this box)."""
        _check_rank(self.value, self.names, type(self).__name__, _ROOT)
        return _names_spec(self.names, get_logical_axis_rules(), _ROOT)

    def get_sharding(self, mesh: AnyMesh | None = None) -> jax.sharding.NamedSharding:
        """The ``NamedSharding`` of the value on ``mesh`` (default: the box's own mesh, then
        the mesh set with ``jax.set_mesh``)."""
        chosen = _pick_mesh(mesh, self.mesh, _ROOT)
        _check_rank(self.value, self.names, type(self).__name__, _ROOT)
        return _named_sharding(chosen, self.get_partition_spec(), _ROOT)


def _axis_index(index: int, ndim: int) -> int:
    if not -ndim <= index < ndim:
        raise AxisMetadataError(f"axis {index} is out of range for {ndim} axes.")
    return index % ndim


def _partition_name(params: Mapping[Any, Any]) -> Any:
    return params.get(PARTITION_NAME) if params else None


def with_partitioning(
    init_fn: Callable[..., Any], names: tuple[Any, ...], mesh: Any = None
) -> Callable[..., Partitioned]:
    """Wrap an initializer so the array it returns is boxed as ``Partitioned(arr, names)``.

    >>> import jax
    >>> import pytreemod as pm
    >>> init = pm.with_partitioning(jax.nn.initializers.lecun_normal(), (None, "mlp"))
    >>> init(jax.random.key(0), (4, 8)).names
    (None, 'mlp')
    """
    require_callable(init_fn, "with_partitioning")

    def wrapper(*args: Any, **kwargs: Any) -> Partitioned:
        return Partitioned(init_fn(*args, **kwargs), names, mesh)

    wrapper.__wrapped__ = init_fn  # type: ignore[attr-defined]
    return wrapper
