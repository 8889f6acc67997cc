"""``adapters.core.spmd``: logical axis rules (``flax.core.spmd``), over pytreemod's.

The rules (``(logical_name, mesh_axes)`` pairs) are pytreemod's thread-local setting, so
``adapters.linen`` and pytreemod see the same ones.
"""

from collections.abc import Sequence
from typing import Any

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


__all__ = [
    "composite_rules",
    "from_sharding_rules",
    "get_logical_axis_rules",
    "logical_axis_rules",
    "set_logical_axis_rules",
]
