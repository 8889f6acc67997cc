"""``adapters.core.spmd``: logical axis rules (``flax.core.spmd``), over pytreemod's.

The rules (``(logical_name, mesh_axes)`` pairs) are pytreemod's thread-local setting, so
``adapters.linen`` and pytreemod see the same ones.
"""

from collections.abc import Callable, Sequence
from typing import Any

from jax.experimental.layout import Format
from jax.sharding import NamedSharding, PartitionSpec

import pytreemod as pm
from pytreemod import get_logical_axis_rules as get_logical_axis_rules
from pytreemod import logical_axis_rules as logical_axis_rules
from pytreemod import set_logical_axis_rules as set_logical_axis_rules

LogicalRules = Sequence[tuple[str, Any]]


def composite_rules(rule1: LogicalRules, rule2: LogicalRules) -> LogicalRules:
    """The rules of both; a name mapped differently by the two is a ``ValueError``."""
    if not rule1 and not rule2:
        return ()
    if not rule2:
        return rule1
    if not rule1:
        return rule2
    merged = dict(rule1)
    for name, axes in rule2:
        if name in merged and merged[name] != axes:
            raise ValueError(
                f"Inconsistent logical axis annotations for {name}: {merged[name]} vs {axes}"
            )
        merged[name] = axes
    return tuple(merged.items())


def from_sharding_rules(sharding: Sequence[Any], sharding_rules: LogicalRules) -> tuple[Any, ...]:
    """Each entry of ``sharding`` renamed by the rules (entries without a rule kept)."""
    rules = dict(sharding_rules)
    return tuple(rules[str(s)] if s and str(s) in rules else s for s in sharding)


def _map_spec(f: Callable[[tuple[Any, ...]], tuple[Any, ...]], sharding: Any) -> Any:
    """``sharding`` (names, ``PartitionSpec``, ``NamedSharding`` or ``Format``) with its
    spec's entries replaced by ``f(entries)``."""
    if isinstance(sharding, PartitionSpec | tuple):
        return PartitionSpec(*f(tuple(sharding)))
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, _map_spec(f, sharding.spec))
    if isinstance(sharding, Format):
        return Format(sharding.layout, _map_spec(f, sharding.sharding))
    return None


def _sharding_mesh(sharding: Any) -> Any:
    if isinstance(sharding, NamedSharding):
        return sharding.mesh
    if isinstance(sharding, Format):
        return _sharding_mesh(sharding.sharding)
    return None


def apply_rules(sharding: Any, sharding_rules: LogicalRules | None) -> Any:
    """``sharding`` with each name renamed by the active rules plus ``sharding_rules``
    (names without a rule are kept: they are mesh axis names)."""
    context = get_logical_axis_rules()
    rules = composite_rules(context, sharding_rules or ()) if context or sharding_rules else ()
    return _map_spec(lambda names: from_sharding_rules(names, rules), sharding)


def shard_value(
    value: Any, out_sharding: Any, sharding_rules: LogicalRules | None, mesh: Any
) -> Any:
    """``value`` placed by ``out_sharding`` (renamed by the rules) on ``mesh``, the
    sharding's own mesh or the one set with ``jax.set_mesh``: ``pm.sharding.apply_sharding``
    (a ``reshard`` on Explicit axes, a sharding constraint on Auto ones; NNX's eager
    sharding of Variables)."""
    if not out_sharding:
        return value
    if mesh is None:
        mesh = pm.sharding.current_mesh()
    out_sharding = apply_rules(out_sharding, sharding_rules)
    mesh = _sharding_mesh(out_sharding) or mesh
    if mesh is None:
        raise ValueError(
            "An auto mesh context or metadata is required if creating a variable"
            f" with annotation {out_sharding=}. "
            "For more guidance, see "
            "https://flax.readthedocs.io/en/latest/flip/4844-var-eager-sharding.html."
        )
    if isinstance(out_sharding, PartitionSpec):
        out_sharding = NamedSharding(mesh, out_sharding)
    if isinstance(out_sharding, Format):  # a layout: a sharding constraint
        return pm.sharding.apply_sharding(value, out_sharding)
    if not (mesh.are_all_axes_explicit or mesh.are_all_axes_auto):
        raise ValueError(
            "Mesh must have all axes as Explicit or all axes as Auto. "
            f"Got mixed axis types: {mesh.axis_types}"
        )
    return pm.sharding.apply_sharding(value, out_sharding)


__all__ = [
    "apply_rules",
    "composite_rules",
    "from_sharding_rules",
    "get_logical_axis_rules",
    "logical_axis_rules",
    "set_logical_axis_rules",
    "shard_value",
]
