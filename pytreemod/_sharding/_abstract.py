"""``abstract``: a model's shapes, dtypes and shardings, the target sharded restores fill.

Orbax (``orbax.checkpoint``) writes and reads arrays sharded over many devices and
processes; given a tree of ``jax.ShapeDtypeStruct`` leaves that carry shardings, it
restores every array straight into its sharding, with no full copy on one device.
``abstract`` builds that tree from a model or an ``eval_shape`` skeleton, taking each
array's sharding from its axis metadata (``get_sharding``). ``load`` accepts the same
tree as ``like``.
"""

from typing import Any, TypeVar

import jax

from .._meta import slot_value
from .._partition import _build, _split
from .._tree import format_path
from ._boxes import Partitioned
from ._trees import AnyMesh, _check_fits, get_sharding

T = TypeVar("T")


def abstract(tree: T, mesh: AnyMesh | None = None) -> T:
    """``tree`` with every array replaced by a ``jax.ShapeDtypeStruct`` carrying the
    ``NamedSharding`` its axis metadata asks for on ``mesh`` (replicated when it has none).

    Boxes, Variables (tied ones stay tied) and static parts are kept, so the result has
    ``tree``'s structure: pass it (or ``pm.state`` of it) as the target of an Orbax
    restore, or as ``like`` to ``pm.load``, and every array lands on its devices
    directly. ``mesh`` defaults to a box's own mesh, then to the mesh set with
    ``jax.set_mesh``. Nothing is allocated. An array the mesh cannot split evenly is a
    ``ShardingError`` naming its path.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> mesh = jax.make_mesh((2,), ("model",), devices=jax.devices()[:2])
    >>> tree = {"w": pm.Param(pm.Partitioned(jnp.zeros((4, 6)), (None, "model")))}
    >>> pm.abstract(tree, mesh)["w"].value.value.sharding.spec
    P(None, 'model')
    """
    structure, values = _split(tree)
    out: list[Any] = []
    for slot, value in enumerate(values):
        if structure.alias[slot] is not None:
            out.append(None)
            continue
        inner = slot_value(value)
        leaf = inner.value if isinstance(inner, Partitioned) else inner
        sharding = get_sharding(inner, mesh)
        _check_fits(leaf, sharding, f"{format_path(structure.paths[slot])}: ")
        spec = jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)
        out.append(inner.replace_boxed(spec) if isinstance(inner, Partitioned) else spec)
    return _build(structure, out)
