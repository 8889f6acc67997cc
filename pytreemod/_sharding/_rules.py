"""The active logical axis rules: a ``contextvars`` variable, set with a ``with`` block.

Rules are ``(logical_name, mesh_axes)`` pairs in order of precedence; this module
validates and normalises them and holds the active ones. ``_resolve`` turns names into
mesh axes with them.
"""

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

from jax.sharding import AbstractMesh, Mesh, PartitionSpec

from .._errors import LogicalAxisRulesError

MeshAxes: TypeAlias = str | tuple[str, ...] | None
"""What a logical name maps to: one mesh axis, several (sharded over their product), or
``None`` (replicated). (``PartitionSpec.UNCONSTRAINED`` is accepted too, as in Flax: the
axis is left to XLA's propagation.)"""

LogicalRules: TypeAlias = tuple[tuple[str, MeshAxes], ...]
"""Normalised logical axis rules: ``(logical_name, mesh_axes)`` pairs in precedence order."""

AnyMesh: TypeAlias = Mesh | AbstractMesh

_RULES: contextvars.ContextVar[LogicalRules] = contextvars.ContextVar(
    "pytreemod_logical_axis_rules", default=()
)


def normalize_rules(rules: Any) -> LogicalRules:
    """Validate ``rules`` and return them as a tuple of ``(str, MeshAxes)`` pairs."""
    if isinstance(rules, Mapping):
        raise LogicalAxisRulesError(
            "logical axis rules must be a sequence of (logical_name, mesh_axes) pairs in "
            "order of precedence, got a mapping; pass tuple(rules.items()) if the order of "
            "the dict is the precedence you want."
        )
    if isinstance(rules, (str, bytes)) or not isinstance(rules, Sequence):
        raise LogicalAxisRulesError(
            "logical axis rules must be a sequence of (logical_name, mesh_axes) pairs, got "
            f"{type(rules).__name__} {rules!r}; e.g. (('batch', 'data'), ('mlp', 'model'))."
        )
    out: list[tuple[str, MeshAxes]] = []
    for i, rule in enumerate(rules):
        if isinstance(rule, (str, bytes)) or not isinstance(rule, Sequence) or len(rule) != 2:
            raise LogicalAxisRulesError(
                f"logical axis rule {i} is {rule!r}, not a (logical_name, mesh_axes) pair; "
                "write each rule as a 2-tuple such as ('mlp', 'model') or ('embed', None)."
            )
        name, axes = rule
        if not isinstance(name, str):
            raise LogicalAxisRulesError(
                f"logical axis rule {i} {tuple(rule)!r} has logical name {name!r}; the "
                "first element of a rule must be a string (the logical axis name)."
            )
        out.append((name, _normalize_mesh_axes(i, rule, axes)))
    return tuple(out)


def _normalize_mesh_axes(i: int, rule: Any, axes: Any) -> MeshAxes:
    if axes is None or isinstance(axes, str):
        return axes
    if axes is PartitionSpec.UNCONSTRAINED:  # left to XLA's propagation (Flax allows it)
        return axes
    if isinstance(axes, (tuple, list)) and all(isinstance(a, str) for a in axes):
        return tuple(axes) if axes else None
    raise LogicalAxisRulesError(
        f"logical axis rule {i} {tuple(rule)!r} maps to {axes!r}; the second element of a "
        "rule must be a mesh axis name, a tuple of mesh axis names, or None (replicated)."
    )


@contextlib.contextmanager
def logical_axis_rules(rules: Sequence[tuple[str, Any]]) -> Iterator[None]:
    """Make ``rules`` the active logical axis rules inside a ``with`` block.

    ``rules`` is a sequence of ``(logical_name, mesh_axes)`` pairs in order of precedence,
    where ``mesh_axes`` is a mesh axis name, a tuple of them or ``None`` (replicated).
    Blocks nest: an inner block's rules replace the outer ones and the outer rules come
    back when it ends (the rules are a ``contextvars`` variable, so threads and asyncio
    tasks each see their own).

    >>> import pytreemod as pm
    >>> with pm.logical_axis_rules([("batch", "data"), ("mlp", "model")]):
    ...     pm.logical_to_mesh_axes(("batch", "embed", "mlp"))
    P('data', None, 'model')
    """
    token = _RULES.set(normalize_rules(rules))
    try:
        yield
    finally:
        _RULES.reset(token)


def set_logical_axis_rules(rules: Sequence[tuple[str, Any]]) -> None:
    """Set the active logical axis rules for the current context, outside any ``with`` block.

    Prefer the ``logical_axis_rules`` context manager, which restores the previous rules.
    ``set_logical_axis_rules(())`` clears them.
    """
    _RULES.set(normalize_rules(rules))


def get_logical_axis_rules() -> LogicalRules:
    """The active logical axis rules (``()`` when none are set), normalised to tuples."""
    return _RULES.get()


def rules_arg(rules: Sequence[tuple[str, Any]] | None) -> LogicalRules:
    """``rules`` normalised, or the active rules when ``rules`` is ``None``."""
    return _RULES.get() if rules is None else normalize_rules(rules)


def optional_rules(rules: Any) -> LogicalRules | None:
    """``rules`` normalised, ``None`` kept (a box without rules of its own)."""
    return None if rules is None else normalize_rules(rules)
