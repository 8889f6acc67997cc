"""An array's sharding as its type gives it on an Explicit mesh, one tuple of mesh axes
per dimension (``entries``), and resharding to such entries. The vocabulary of the
Explicit-mesh policy (``_policy``) and of the transforms that keep a stack's sharding.
"""

import sys
from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from .._errors import ShardingError
from ._mesh import type_sharding
from ._op_errors import sharding_message

Entries = list[tuple[str, ...]]
"""One tuple of mesh axis names per array dimension (``()``: replicated)."""


def explicit_mesh(*arrays: Any) -> Any:
    """The (abstract) mesh of the first operand whose type is sharded over an Explicit
    axis, or ``None`` (no mesh, Auto axes, or every operand replicated)."""
    for x in arrays:
        sharding = type_sharding(x)
        if sharding is None:
            continue
        mesh = sharding.mesh
        if mesh.empty or AxisType.Explicit not in mesh.axis_types:
            continue
        if any(entry(e) for e in sharding.spec):
            return mesh
    return None


def entry(e: Any) -> tuple[str, ...]:
    if e is None:
        return ()
    if isinstance(e, str):
        return (e,)
    return tuple(e)


def entries(x: Any) -> Entries:
    """The sharding of ``x``'s type, one tuple of mesh axes per dimension."""
    sharding = type_sharding(x)
    spec = tuple(sharding.spec) if sharding is not None else ()
    out = [entry(e) for e in spec]
    return out + [()] * (x.ndim - len(out))


def spec_of(ents: Sequence[tuple[str, ...]]) -> PartitionSpec:
    """A ``PartitionSpec`` of entries (``None`` for replicated dimensions)."""
    return PartitionSpec(*(None if not e else e[0] if len(e) == 1 else e for e in ents))


def check_mesh(mesh: Any, op: str, operands: dict[str, Any]) -> None:
    for name, x in operands.items():
        sharding = type_sharding(x)
        if sharding is None or sharding.mesh.empty:
            continue
        if sharding.mesh.axis_names != mesh.axis_names or sharding.mesh.shape != mesh.shape:
            raise ShardingError(
                sharding_message(
                    op,
                    operands,
                    f"{name} is on mesh {dict(sharding.mesh.shape)} but another operand is on "
                    f"mesh {dict(mesh.shape)}",
                    "place every parameter and input on one mesh (pm.shard(model, mesh), "
                    "jax.device_put(x, sharding))",
                    sys._getframe(1),
                )
            )


def reshard(x: Any, mesh: Any, ents: Sequence[tuple[str, ...]]) -> Any:
    """``x`` resharded to ``ents`` on ``mesh`` (``x`` itself when its type already is)."""
    if list(ents) == entries(x):
        return x
    return jax.sharding.reshard(x, NamedSharding(mesh, spec_of(ents)))


def named(mesh: Any, spec: Any) -> Any:
    """``out_sharding=`` given by the user (a ``PartitionSpec`` or ``NamedSharding``) made a
    ``NamedSharding`` on the operands' mesh; ``None`` stays ``None``."""
    if spec is None or isinstance(spec, NamedSharding) or mesh is None:
        return spec
    return NamedSharding(mesh, spec if isinstance(spec, PartitionSpec) else PartitionSpec(*spec))
