"""Axis metadata for ``adapters.core``: pytreemod's boxes under ``flax.core.meta``'s names.

The boxes are pytreemod's (``AxisMetadata``, ``Partitioned``, ``LogicallyPartitioned``);
this module adds only the tree-level helpers of ``flax.core.meta`` (``add_axis``,
``remove_axis``, ``replace_boxed``, ``map_axis_meta``), which apply a box method to every
box in a tree.
"""

from collections.abc import Callable, Mapping
from typing import Any

import jax

import pytreemod as pm
from pytreemod import PARTITION_NAME as PARTITION_NAME
from pytreemod import AxisMetadata as AxisMetadata
from pytreemod import LogicallyPartitioned as LogicallyPartitioned
from pytreemod import Partitioned as Partitioned
from pytreemod import get_partition_spec as get_partition_spec
from pytreemod import get_sharding as get_sharding
from pytreemod import with_logical_partitioning as with_logical_partitioning
from pytreemod import with_partitioning as with_partitioning

is_axis_metadata = pm.is_box
"""Whether a value is an ``AxisMetadata`` box."""


def get_global_mesh() -> Any:
    """The mesh set by ``jax.sharding.use_mesh``/``jax.set_mesh``, or ``None``."""
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty else mesh


def global_mesh_defined() -> bool:
    """Whether a global mesh is set."""
    return get_global_mesh() is not None


def _unbox_one(box: Any) -> Any:
    # Flax's Partitioned.unbox: under a mesh (its own or the global one) the value gets a
    # sharding constraint from its names. LogicallyPartitioned applies its own.
    if type(box) is Partitioned and (box.mesh is not None or global_mesh_defined()):
        spec = jax.sharding.PartitionSpec(*box.names)
        target = spec if box.mesh is None else jax.sharding.NamedSharding(box.mesh, spec)
        return jax.lax.with_sharding_constraint(box.value, target)
    return box.unbox()


def unbox(tree: Any) -> Any:
    """Strip every box in ``tree``; as in Flax, a ``Partitioned`` value is sharding-
    constrained by its names when a mesh is known (the box's own, or a global one)."""
    return jax.tree.map(lambda x: _unbox_one(x) if pm.is_box(x) else x, tree, is_leaf=pm.is_box)


def map_axis_meta(fn: Callable[[AxisMetadata], Any], tree: Any) -> Any:
    """Apply ``fn`` to every box in ``tree`` (other leaves unchanged)."""
    return jax.tree.map(lambda x: fn(x) if pm.is_box(x) else x, tree, is_leaf=pm.is_box)


def add_axis(tree: Any, index: int, params: Mapping[Any, Any]) -> Any:
    """``box.add_axis(index, params)`` for every box in ``tree``."""
    return map_axis_meta(lambda b: b.add_axis(index, params), tree)


def remove_axis(tree: Any, index: int, params: Mapping[Any, Any]) -> Any:
    """``box.remove_axis(index, params)`` for every box in ``tree``."""
    return map_axis_meta(lambda b: b.remove_axis(index, params), tree)


def replace_boxed(tree: Any, updates: Any) -> Any:
    """Put the leaves of ``updates`` into the boxes of ``tree`` (boxes keep their metadata)."""
    return jax.tree.map(
        lambda b, u: b.replace_boxed(u) if pm.is_box(b) else u, tree, updates, is_leaf=pm.is_box
    )
