"""Finding the mesh, and checking a ``PartitionSpec`` against it.

``context_mesh`` is the one place that reads the mesh set with ``jax.set_mesh``
(concrete outside ``jax.jit``, abstract inside); ``pick_mesh`` chooses between a mesh
given as an argument, a box's own mesh and that one.
"""

from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

from .._errors import ShardingError
from ._rules import AnyMesh


def context_mesh() -> AnyMesh | None:
    """The mesh set with ``jax.set_mesh``: concrete outside ``jax.jit``, abstract inside;
    ``None`` when none is set."""
    abstract = jax.sharding.get_abstract_mesh()
    if abstract.empty:
        return None
    try:
        concrete = jax.sharding.get_mesh()
    except ValueError:  # inside jax.jit, only the abstract mesh is available
        return abstract
    return abstract if concrete.empty else concrete


def pick_mesh(mesh: AnyMesh | None, box_mesh: AnyMesh | None, where: str) -> AnyMesh:
    """``mesh``, else ``box_mesh``, else the context's; a ``ShardingError`` if none."""
    for m in (mesh, box_mesh, context_mesh()):
        if m is not None:
            return m
    raise ShardingError(
        f"{where}no mesh to build a NamedSharding on: pass mesh=..., give the box a mesh "
        "(with_partitioning(init, names, mesh)) or set one with `with jax.set_mesh(mesh):`."
    )


def type_sharding(x: Any) -> NamedSharding | None:
    """The ``NamedSharding`` of ``x``'s type, or ``None`` (not an array, or no mesh)."""
    if x is None or not hasattr(x, "shape"):
        return None
    try:
        sharding = jax.typeof(x).sharding
    except TypeError:
        return None
    return sharding if isinstance(sharding, NamedSharding) else None


def spec_axes(spec: PartitionSpec) -> list[str]:
    """The mesh axis names a ``PartitionSpec`` uses, in order."""
    axes: list[str] = []
    for entry in spec:
        if entry is None or entry is PartitionSpec.UNCONSTRAINED:
            continue
        axes.extend([entry] if isinstance(entry, str) else list(entry))
    return axes


def named_sharding(mesh: AnyMesh, spec: PartitionSpec, where: str) -> NamedSharding:
    """``NamedSharding(mesh, spec)``, with a ``ShardingError`` naming what is wrong for a
    mesh axis the mesh lacks or one used twice."""
    axes = spec_axes(spec)
    missing = [a for a in axes if a not in mesh.axis_names]
    if missing:
        raise ShardingError(
            f"{where}{spec} names mesh axes {missing} that the mesh does not have (its axes "
            f"are {tuple(mesh.axis_names)}); add logical axis rules that map these names to "
            "mesh axes, or rename them."
        )
    dups = sorted({a for a in axes if axes.count(a) > 1})
    if dups:
        raise ShardingError(
            f"{where}{spec} uses mesh axes {dups} for more than one array axis; each mesh "
            "axis can shard at most one axis of an array."
        )
    return NamedSharding(mesh, spec)


def ndim(x: Any) -> int | None:
    """``x.ndim`` when ``x`` has an integer one."""
    n = getattr(x, "ndim", None)
    return n if isinstance(n, int) else None


def check_rank(value: Any, names: Sequence[Any], kind: str, where: str) -> None:
    """A box's names must be one per axis of its value (``kind``: the box's class name)."""
    n = ndim(value)
    if n is not None and n != len(names):
        raise ShardingError(
            f"{where}{kind} has names {tuple(names)} ({len(names)} axes) but "
            f"its value has {n} axes. This happens when a transform adds or removes an "
            "axis without updating the metadata (e.g. plain jax.vmap over a boxed tree); "
            "use pm.vmap/pm.scan with metadata_params, or box the value anew."
        )
