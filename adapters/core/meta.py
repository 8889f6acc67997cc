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
from pytreemod import unbox as unbox
from pytreemod import with_logical_partitioning as with_logical_partitioning
from pytreemod import with_partitioning as with_partitioning

is_axis_metadata = pm.is_box
"""Whether a value is an ``AxisMetadata`` box."""


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
