"""Axis metadata for ``adapters.core``: pytreemod's boxes under ``flax.core.meta``'s names.

The boxes are pytreemod's (``AxisMetadata``, ``Partitioned``, ``LogicallyPartitioned``),
so their ``add_axis``/``remove_axis`` methods are pytreemod's. The tree-level helpers of
``flax.core.meta`` that apply a box method to every box in a tree are pytreemod's too:
``add_axis`` is ``pm.add_axis``, ``remove_axis`` is ``pm.remove_axis``, ``map_axis_meta``
is ``pm.map_boxes`` (the same objects; the lifted transforms do not call them, they hand
the boxes and ``metadata_params`` to ``pm.vmap``/``pm.scan``, which do). This module adds
``replace_boxed``, Flax's ``unbox`` (sharding-constrained under a mesh) and Flax's
``get_partition_spec``/``get_sharding``.

Those two follow Flax, not pytreemod: a ``Partitioned`` box's spec is its names as they
are, and a ``LogicallyPartitioned`` box's too (its *logical* names; Linen code maps them to
mesh axes with ``nn.logical_to_mesh_sharding``). pytreemod's functions of the same names
resolve logical names through the active rules instead.
"""

from collections.abc import Callable
from typing import Any

import jax

import pytreemod as pm
from pytreemod import PARTITION_NAME as PARTITION_NAME
from pytreemod import AxisMetadata as AxisMetadata
from pytreemod import LogicallyPartitioned as LogicallyPartitioned
from pytreemod import Partitioned as Partitioned
from pytreemod import with_logical_partitioning as with_logical_partitioning
from pytreemod import with_partitioning as with_partitioning

is_axis_metadata: Callable[[Any], bool] = pm.is_box
"""Whether a value is an ``AxisMetadata`` box."""


def get_global_mesh() -> Any:
    """The mesh set by ``jax.sharding.use_mesh``/``jax.set_mesh``, or ``None``."""
    return pm.sharding.current_mesh()


def global_mesh_defined() -> bool:
    """Whether a global mesh is set."""
    return get_global_mesh() is not None


def _unbox_one(box: Any) -> Any:
    # Flax's Partitioned.unbox: under a mesh (its own or the global one) the value gets a
    # sharding constraint from its names. LogicallyPartitioned applies its own.
    # pytreemod's one way to apply a sharding: a reshard on Explicit mesh axes.
    mesh = box.mesh if type(box) is Partitioned and box.mesh is not None else None
    if type(box) is Partitioned and (mesh is not None or global_mesh_defined()):
        mesh = mesh if mesh is not None else get_global_mesh()
        spec = jax.sharding.PartitionSpec(*box.names)
        return pm.sharding.apply_sharding(box.value, jax.sharding.NamedSharding(mesh, spec))
    return box.unbox()


def unbox(tree: Any) -> Any:
    """Strip every box in ``tree``; as in Flax, a ``Partitioned`` value is sharding-
    constrained by its names when a mesh is known (the box's own, or a global one)."""
    return jax.tree.map(lambda x: _unbox_one(x) if pm.is_box(x) else x, tree, is_leaf=pm.is_box)


map_axis_meta = pm.map_boxes
add_axis = pm.add_axis
remove_axis = pm.remove_axis


def replace_boxed(tree: Any, updates: Any) -> Any:
    """Put the leaves of ``updates`` into the boxes of ``tree`` (boxes keep their metadata)."""
    return jax.tree.map(
        lambda b, u: b.replace_boxed(u) if pm.is_box(b) else u, tree, updates, is_leaf=pm.is_box
    )


def _leaf_partition_spec(x: Any) -> jax.sharding.PartitionSpec | None:
    if isinstance(x, Partitioned):
        return jax.sharding.PartitionSpec(*x.names)
    if hasattr(x, "get_partition_spec"):
        return x.get_partition_spec()
    if hasattr(x, "shape"):  # an unboxed array: replicated
        return jax.sharding.PartitionSpec()
    return None


def get_partition_spec(tree: Any) -> Any:
    """The ``PartitionSpec`` of every leaf: a box's names as they are (logical names
    stay logical), ``P()`` for a plain array, ``None`` for anything else."""
    return jax.tree.map(_leaf_partition_spec, tree, is_leaf=_is_box)


def get_sharding(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """``NamedSharding(mesh, spec)`` for every leaf ``get_partition_spec`` gives a spec."""

    def one(x: Any) -> jax.sharding.Sharding | None:
        spec = _leaf_partition_spec(x)
        return None if spec is None else jax.sharding.NamedSharding(mesh, spec)

    return jax.tree.map(one, tree, is_leaf=_is_box)


def _is_box(x: Any) -> bool:
    return isinstance(x, AxisMetadata)
