"""Applying a sharding to an array: the one "reshard on Explicit, else constrain".

On ``Explicit`` mesh axes a sharding is part of an array's type and
``jax.lax.with_sharding_constraint`` only asserts it, so the array is resharded; on
``Auto`` axes a sharding constraint tells XLA's propagation what to produce. Every
constraint pytreemod and ``adapters`` apply (``with_logical_constraint``, a box's
``unbox``, an ``out_sharding=`` given to a layer, Flax's ``with_sharding_constraint``)
goes through ``apply_sharding``.
"""

from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from .._errors import ShardingError
from ._mesh import AnyMesh, context_mesh, named_sharding, ndim, spec_axes, type_sharding
from ._resolve import RulesFallback, resolve, spec, unassigned
from ._rules import LogicalRules, get_logical_axis_rules


def _keep_axes(target: PartitionSpec, keep: set[str]) -> PartitionSpec:
    """``target`` with only the mesh axes in ``keep`` (the others replicated)."""
    out: list[Any] = []
    for entry in target:
        if entry is PartitionSpec.UNCONSTRAINED:
            out.append(entry)
            continue
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        kept = tuple(a for a in axes if a in keep)
        out.append(None if not kept else kept[0] if len(kept) == 1 else kept)
    return PartitionSpec(*out)


def apply_sharding(x: Any, sharding: Any) -> Any:
    """``x`` given ``sharding``, on any kind of mesh.

    Where the target or ``x``'s own type uses an ``Explicit`` mesh axis, ``x`` is
    resharded (``jax.sharding.reshard``: an array split over ``data`` constrained to
    replicated is gathered); on ``Auto`` axes it is a sharding constraint that XLA's
    propagation honours. A mesh with both kinds gets both, each on its own axes.

    ``sharding`` is a ``NamedSharding``, or a ``PartitionSpec`` on the mesh set with
    ``jax.set_mesh``; any other sharding JAX accepts (a ``Format`` with a layout, a
    single-device sharding) names no mesh axes and is a sharding constraint.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> mesh = jax.make_mesh((1,), ("data",))
    >>> pm.sharding.apply_sharding(jnp.ones(4), jax.NamedSharding(mesh, jax.P("data"))).shape
    (4,)
    """
    if isinstance(sharding, PartitionSpec):
        mesh = context_mesh()
        if mesh is None:  # no mesh set with jax.set_mesh: JAX's own rules apply
            return jax.lax.with_sharding_constraint(x, sharding)
        sharding = NamedSharding(mesh, sharding)
    if not isinstance(sharding, NamedSharding):
        return jax.lax.with_sharding_constraint(x, sharding)
    mesh = sharding.mesh
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    explicit = {a for a, t in types.items() if t == AxisType.Explicit}
    auto = set(types) - explicit
    own = type_sharding(x)
    own_axes = set(spec_axes(own.spec)) if own is not None else set()
    if explicit & (set(spec_axes(sharding.spec)) | own_axes):
        x = jax.sharding.reshard(x, NamedSharding(mesh, _keep_axes(sharding.spec, explicit)))
    if auto:
        target = sharding.spec if not explicit else _keep_axes(sharding.spec, auto)
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, target))
    return x


def constrain(
    x: Any,
    names: Sequence[Any],
    rules: LogicalRules | None,
    mesh: AnyMesh | None,
    fallback: RulesFallback,
    where: str = "",
) -> Any:
    """``x`` constrained to its logical ``names`` resolved through ``rules`` (default: the
    active ones) on ``mesh`` (default: the context's); ``x`` itself with no mesh at all."""
    names = tuple(names)
    n = ndim(x)
    if n is None:
        raise ShardingError(
            f"{where}with_logical_constraint needs an array, got {type(x).__name__}."
        )
    if len(names) != n:
        raise ShardingError(
            f"{where}logical names {names} have {len(names)} entries but the array has shape "
            f"{tuple(x.shape)} ({n} axes); give one name (or None) per axis."
        )
    resolved = resolve(names, rules if rules is not None else get_logical_axis_rules(), where)
    missing = unassigned(names, resolved)
    if missing and fallback is RulesFallback.RAISE_ERROR:
        raise ShardingError(
            f"{where}logical axis names {missing} of {names} match no rule (or every "
            "matching rule's mesh axes are used by another axis); add a rule for them or use "
            "fallback=RulesFallback.AXIS_IS_UNSHARDED."
        )
    if missing and fallback is RulesFallback.NO_CONSTRAINT:
        return x
    target_mesh = mesh if mesh is not None else context_mesh()
    if target_mesh is None:
        return x  # no mesh anywhere: nothing to constrain to (as in Flax)
    return apply_sharding(x, named_sharding(target_mesh, spec(resolved), where))
