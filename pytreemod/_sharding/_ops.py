"""What a layer author calls: the ops of ``pytreemod.nn`` and their ``out_sharding=``.

An op on arrays that may be sharded over an Explicit mesh does three things:

1. asks the current ``ExplicitMeshPolicy`` (``_policy``) for its operands and output
   sharding, through the functions of this module named after the policy's methods
   (``contraction``, ``gather_rows``, ...);
2. passes ``**out_kwargs(out_sharding, derived, *operands)`` to the JAX call (the user's
   ``out_sharding=`` if given, else the policy's), inside ``with sharding_errors(op, ...)``
   so that JAX's ``ShardingTypeError`` becomes a ``ShardingError`` naming the layer;
3. returns ``constrain(y, out_sharding, *operands)``: the user's ``out_sharding=`` applied
   where the JAX call could not take it (``apply_sharding``: a reshard on Explicit axes, a
   constraint on Auto ones).

Off Explicit meshes each step is the identity and the op traces as it always did.
"""

from collections.abc import Callable, Sequence
from typing import Any

from jax.sharding import AxisType, NamedSharding

from ._apply import apply_sharding
from ._mesh import context_mesh, type_sharding
from ._op_errors import sharding_errors as sharding_errors
from ._policy import explicit_mesh_policy
from ._types import explicit_mesh as explicit_mesh
from ._types import named


def contraction(
    x: Any,
    kernel: Any,
    x_contract: Sequence[int],
    k_contract: Sequence[int],
    x_batch: Sequence[int] = (),
    k_batch: Sequence[int] = (),
    *,
    op: str,
) -> tuple[Any, Any, NamedSharding | None]:
    """``ExplicitMeshPolicy.contraction`` of the current policy."""
    policy = explicit_mesh_policy()
    return policy.contraction(x, kernel, x_contract, k_contract, x_batch, k_batch, op=op)


def einsum_contraction(
    equation: str, x: Any, kernel: Any, *, op: str
) -> tuple[Any, Any, NamedSharding | None]:
    """``ExplicitMeshPolicy.einsum_contraction`` of the current policy."""
    return explicit_mesh_policy().einsum_contraction(equation, x, kernel, op=op)


def convolution(
    x: Any,
    kernel: Any,
    out_shape: Callable[[], Sequence[int]],
    feature_group_count: int,
    *,
    op: str,
) -> tuple[Any, Any, NamedSharding | None]:
    """``ExplicitMeshPolicy.convolution`` of the current policy."""
    policy = explicit_mesh_policy()
    return policy.convolution(x, kernel, out_shape, feature_group_count, op=op)


def split_last(x: Any, parts: int) -> tuple[Any, NamedSharding | None]:
    """``ExplicitMeshPolicy.split_last`` of the current policy."""
    return explicit_mesh_policy().split_last(x, parts)


def gather_rows(table: Any, ids: Any, *, op: str) -> tuple[Any, NamedSharding | None]:
    """``ExplicitMeshPolicy.gather_rows`` of the current policy."""
    return explicit_mesh_policy().gather_rows(table, ids, op=op)


def class_pick(
    logits: Any, labels: Any, axes: Sequence[int], *, op: str
) -> tuple[Any, NamedSharding | None, NamedSharding | None]:
    """``ExplicitMeshPolicy.class_pick`` of the current policy."""
    return explicit_mesh_policy().class_pick(logits, labels, axes, op=op)


def match_trailing(operand: Any, like: Any) -> Any:
    """``ExplicitMeshPolicy.match_trailing`` of the current policy."""
    return explicit_mesh_policy().match_trailing(operand, like)


def draw_kwargs(like: Any, shape: Sequence[int]) -> dict[str, Any]:
    """``ExplicitMeshPolicy.draw_kwargs`` of the current policy."""
    return explicit_mesh_policy().draw_kwargs(like, shape)


def gather_dims(x: Any, dims: Sequence[int]) -> Any:
    """``ExplicitMeshPolicy.gather_dims`` of the current policy."""
    return explicit_mesh_policy().gather_dims(x, dims)


def cache_update(cache: Any, update: Any, dim: int) -> tuple[Any, Any]:
    """``ExplicitMeshPolicy.cache_update`` of the current policy."""
    return explicit_mesh_policy().cache_update(cache, update, dim)


def steady_carry(step: Callable[..., Any], carry: Any, *args: Any) -> Any:
    """``ExplicitMeshPolicy.steady_carry`` of the current policy."""
    return explicit_mesh_policy().steady_carry(step, carry, *args)


def like(x: Any, ref: Any) -> Any:
    """``ExplicitMeshPolicy.like`` of the current policy."""
    return explicit_mesh_policy().like(x, ref)


def _override_mesh(override: Any, operands: Sequence[Any]) -> Any:
    """The mesh an ``out_sharding=`` override refers to: its own (a ``NamedSharding``),
    else the operands', else the context's (``jax.set_mesh``); ``None`` when there is none."""
    if isinstance(override, NamedSharding):
        return override.mesh
    mesh = explicit_mesh(*operands)
    if mesh is not None:
        return mesh
    for x in operands:
        sharding = type_sharding(x)
        if sharding is not None and not sharding.mesh.empty:
            return sharding.mesh
    return context_mesh()


def _is_explicit(mesh: Any) -> bool:
    return mesh is not None and AxisType.Explicit in mesh.axis_types


def out_kwargs(override: Any, derived: Any, *operands: Any) -> dict[str, Any]:
    """``{"out_sharding": ...}`` for a JAX call: the user's ``override`` (made a
    ``NamedSharding`` on the operands' mesh) if given and the mesh is Explicit, else the
    ``derived`` one; ``{}`` when neither (the call traces as it always did; an override
    on an Auto mesh is applied by ``constrain`` after the call)."""
    if override is not None:
        mesh = _override_mesh(override, operands)
        if _is_explicit(mesh):
            return {"out_sharding": named(mesh, override)}
    return {} if derived is None else {"out_sharding": derived}


def constrain(y: Any, override: Any, *operands: Any) -> Any:
    """``y`` with the user's ``out_sharding=`` ``override`` applied after the op
    (``apply_sharding``: a reshard on Explicit axes, a no-op when the op already produced
    it; a sharding constraint on Auto axes); ``y`` itself without a mesh or an override."""
    if override is None:
        return y
    mesh = _override_mesh(override, (y, *operands))
    if mesh is None:
        return y
    return apply_sharding(y, named(mesh, override))
