"""Logical axis names for SPMD (``flax.linen.spmd``).

Parameters and activations are annotated with logical axis names (``'batch'``,
``'embed'``, ``'mlp'``...); logical axis rules, ``(logical_name, mesh_axes)`` pairs in
order of precedence, map them to mesh axes. Everything is pytreemod's: the rules
(``pm.logical_axis_rules``), the boxes (``pm.LogicallyPartitioned``), the resolver
(``pm.sharding.resolve_logical_axes``), ``RulesFallback``, the mesh lookup
(``pm.sharding.current_mesh``) and the constraint (``pm.sharding.apply_sharding``: a
reshard on Explicit axes). This module translates names and errors into Flax's:
``ValueError`` with Flax's messages, names without rules left unconstrained.
"""

import collections
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import PartitionSpec

import pytreemod as pm
from pytreemod import LogicallyPartitioned as LogicallyPartitioned
from pytreemod import get_logical_axis_rules as get_logical_axis_rules
from pytreemod import logical_axis_rules as logical_axis_rules
from pytreemod import set_logical_axis_rules as set_logical_axis_rules

__all__ = [
    "LogicallyPartitioned",
    "RulesFallback",
    "get_logical_axis_rules",
    "logical_axis_rules",
    "logical_to_mesh",
    "logical_to_mesh_axes",
    "logical_to_mesh_sharding",
    "set_logical_axis_rules",
    "with_logical_constraint",
    "with_logical_partitioning",
]


RulesFallback = pm.RulesFallback
"""What ``with_logical_constraint`` does with a name no rule assigns: replicate the
axis (``AXIS_IS_UNSHARDED``), raise a ``ValueError`` (``RAISE_ERROR``), or leave the
array unconstrained (``NO_CONSTRAINT``). pytreemod's enum."""


def _check(names: Sequence[Any], rules: Any) -> None:
    """Flax's errors for names used twice and rules of the wrong type."""
    counts = collections.Counter(names)
    dups = tuple(k for k, v in counts.items() if v > 1 and isinstance(k, str))
    if dups:
        raise ValueError(f"Unsupported: Dimensions {dups} occur more than once in array names.")
    if not isinstance(rules, tuple | list):
        raise ValueError("Unknown axis rule specification type.")


def _resolve(names: Sequence[Any] | None, rules: Any = None) -> list[Any] | None:
    """Per axis the mesh axes, ``None``, the unconstrained marker or
    ``pm.sharding.UNASSIGNED`` (pytreemod's resolver, with Flax's errors)."""
    if names is None:
        return None
    if rules is None:
        rules = get_logical_axis_rules()
    _check(list(names), rules)
    return pm.sharding.resolve_logical_axes(tuple(names), rules)


def logical_to_mesh_axes(
    array_dim_names: Sequence[Any] | None, rules: Any = None
) -> PartitionSpec | None:
    """The ``PartitionSpec`` of logical axis names under ``rules`` (default: the active
    ones). Rules are taken in order; an axis gets the first rule for its name whose mesh
    axes are still free; unmatched names are replicated.

    >>> logical_to_mesh_axes(("batch", "embed"), rules=(("batch", "data"),))
    P('data', None)
    """
    result = _resolve(array_dim_names, rules)
    if result is None:
        return None
    return PartitionSpec(*(None if a is pm.sharding.UNASSIGNED else a for a in result))


def _is_spec(x: Any) -> bool:
    return isinstance(x, PartitionSpec)


def logical_to_mesh(tree: Any, rules: Any = None) -> Any:
    """``logical_to_mesh_axes`` applied to every ``PartitionSpec`` of ``tree``."""
    return jax.tree_util.tree_map(lambda x: logical_to_mesh_axes(x, rules), tree, is_leaf=_is_spec)


def logical_to_mesh_sharding(tree: Any, mesh: jax.sharding.Mesh, rules: Any = None) -> Any:
    """The ``NamedSharding`` on ``mesh`` of every logical ``PartitionSpec`` of ``tree``."""
    return jax.tree_util.tree_map(
        lambda x: jax.sharding.NamedSharding(mesh, x),
        logical_to_mesh(tree, rules),
        is_leaf=_is_spec,
    )


def _with_sharding_constraint(
    x: Any, axis_resources: PartitionSpec | None, mesh: jax.sharding.Mesh | None = None
) -> Any:
    """``x`` constrained to ``axis_resources`` on ``mesh`` or the mesh set with
    ``jax.set_mesh``; ``x`` itself when there is neither. The constraint is
    ``pm.sharding.apply_sharding``: a ``jax.sharding.reshard`` wherever an ``Explicit``
    mesh axis is involved (beyond Flax, which only has Auto axes here), a sharding
    constraint on ``Auto`` axes."""
    target = mesh if mesh is not None else pm.sharding.current_mesh()
    if target is None or axis_resources is None:
        return x
    return pm.sharding.apply_sharding(x, jax.sharding.NamedSharding(target, axis_resources))


def _constrain_one(
    names: Any,
    x: Any,
    fallback: RulesFallback = RulesFallback.AXIS_IS_UNSHARDED,
    rules: Any = None,
    mesh: jax.sharding.Mesh | None = None,
) -> Any:
    resolved = _resolve(names, rules)
    if resolved is None:
        return _with_sharding_constraint(x, None, mesh=mesh)
    if any(a is pm.sharding.UNASSIGNED for a in resolved):
        if fallback == RulesFallback.RAISE_ERROR:
            raise ValueError(f"Axis names {names} did not match a rule")
        if fallback == RulesFallback.NO_CONSTRAINT:
            return x
    spec = PartitionSpec(*(None if a is pm.sharding.UNASSIGNED else a for a in resolved))
    return _with_sharding_constraint(x, spec, mesh=mesh)


def _is_axis(x: Any) -> bool:
    return isinstance(x, str) or x is PartitionSpec.UNCONSTRAINED or x is None


def _is_logical_spec(x: Any) -> bool:
    return x is None or (isinstance(x, tuple) and all(_is_axis(e) for e in x))


def with_logical_constraint(
    x: Any,
    logical_axis_resources: Any,
    rules: Any = None,
    mesh: jax.sharding.Mesh | None = None,
    fallback: RulesFallback = RulesFallback.AXIS_IS_UNSHARDED,
) -> Any:
    """``lax.with_sharding_constraint`` with logical names: one spec (a tuple of names or
    a ``PartitionSpec``) per array of ``x``, or a tree of them. Without rules, or without
    a mesh (given or set), ``x`` is returned unchanged."""
    if rules is None:
        rules = get_logical_axis_rules()
    if not rules or logical_axis_resources is None:
        return x
    return jax.tree_util.tree_map(
        functools.partial(_constrain_one, fallback=fallback, rules=rules, mesh=mesh),
        logical_axis_resources,
        x,
        is_leaf=_is_logical_spec,
    )


def with_logical_partitioning(
    fn: Callable[..., Any],
    names: Sequence[str | None],
    mesh: jax.sharding.Mesh | None = None,
    rules: Any = None,
) -> Callable[..., LogicallyPartitioned]:
    """Wrap an initializer so its value is boxed as ``LogicallyPartitioned(value, names)``.

    >>> import jax
    >>> init = with_logical_partitioning(jax.nn.initializers.zeros, ("embed", "mlp"))
    >>> init(jax.random.key(0), (2, 3)).names
    ('embed', 'mlp')
    """
    return pm.with_logical_partitioning(fn, names, mesh=mesh, rules=rules)
