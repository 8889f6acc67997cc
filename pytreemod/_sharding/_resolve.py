"""The one resolver of logical axis names into mesh axes (Flax's priority assignment).

The rules are taken in order of precedence: a rule ``(name, mesh_axes)`` assigns
``mesh_axes`` to the array axis called ``name`` if that axis has no assignment yet and
none of ``mesh_axes`` is used by another axis of the same array. An axis that no rule
assigns is ``UNASSIGNED`` here; what happens to it is the caller's choice
(``RulesFallback``): replicated by default. A ``None`` name is replicated, deliberately;
``PartitionSpec.UNCONSTRAINED`` is passed through (the axis is left to XLA's propagation).
Every function of pytreemod and ``adapters`` that turns logical names into a
``PartitionSpec`` goes through ``resolve``.
"""

import enum
from collections.abc import Sequence
from typing import Any, overload

import jax
from jax.sharding import NamedSharding, PartitionSpec

from .._errors import ShardingError
from ._mesh import AnyMesh, named_sharding
from ._rules import LogicalRules, rules_arg


class Unassigned:
    """The resolution of an axis whose logical name no rule assigns (falsy, like ``None``)."""

    def __repr__(self) -> str:
        return "UnassignedAxis"

    def __bool__(self) -> bool:
        return False


UNASSIGNED = Unassigned()
"""The one ``Unassigned`` value."""


class RulesFallback(enum.Enum):
    """What ``with_logical_constraint`` does with an axis that no rule assigns.

    - ``AXIS_IS_UNSHARDED`` (default): the axis is replicated.
    - ``RAISE_ERROR``: a ``ShardingError``.
    - ``NO_CONSTRAINT``: the array is returned without any constraint.

    A ``None`` name is always replicated: it is a deliberate choice, not a missing rule.
    """

    AXIS_IS_UNSHARDED = "axis_is_unsharded"
    RAISE_ERROR = "raise_error"
    NO_CONSTRAINT = "no_constraint"


def mesh_axes_set(axes: Any) -> set[str]:
    """The mesh axis names in one resolved entry (none for ``None``, unassigned, ...)."""
    if isinstance(axes, str):
        return {axes}
    if isinstance(axes, (tuple, list)):
        return {a for a in axes if isinstance(a, str)}
    return set()


def _is_name(n: Any) -> bool:
    return n is None or isinstance(n, str) or n is PartitionSpec.UNCONSTRAINED


def resolve(names: Sequence[Any], rules: LogicalRules, where: str = "") -> list[Any]:
    """Per axis of ``names``: its mesh axes (a name, a tuple, ``None``), ``UNASSIGNED``,
    or ``PartitionSpec.UNCONSTRAINED``. A name that is not a string, ``None`` or
    ``UNCONSTRAINED``, or a name used for two axes, is a ``ShardingError``."""
    names = tuple(names)
    for n in names:
        if not _is_name(n):
            raise ShardingError(
                f"{where}logical axis names must be strings or None, got {n!r} in {names}; "
                "write mesh axes only on the right-hand side of the rules."
            )
    dups = sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})
    if dups:
        raise ShardingError(
            f"{where}logical axis names {dups} occur more than once in {names}; give every "
            "array axis its own logical name (or None)."
        )
    result: list[Any] = [UNASSIGNED if isinstance(n, str) else n for n in names]
    used: set[str] = set()
    for name, axes in rules:
        if name not in names:
            continue
        pos = names.index(name)
        wanted = mesh_axes_set(axes)
        if result[pos] is UNASSIGNED and not (wanted & used):
            result[pos] = axes
            used |= wanted
    return result


def unassigned(names: Sequence[Any], resolved: Sequence[Any]) -> list[Any]:
    """The names that ``resolve`` left unassigned."""
    return [n for n, a in zip(names, resolved) if a is UNASSIGNED]


def spec(resolved: Sequence[Any]) -> PartitionSpec:
    """The ``PartitionSpec`` of a resolution: unassigned axes replicated."""
    return PartitionSpec(*(None if a is UNASSIGNED else a for a in resolved))


def names_spec(names: Sequence[Any], rules: LogicalRules, where: str = "") -> PartitionSpec:
    """``Partitioned`` semantics: names resolve through ``rules`` if there are any and are
    taken literally as mesh axes otherwise."""
    if rules:
        return spec(resolve(names, rules, where))
    return PartitionSpec(*names)


BATCH = "batch"
"""The logical name of the batch axis: the mesh axes the rules give it are the ones that
FSDP parameters are gathered out of where an op cannot see a batch axis."""


def batch_mesh_axes(rules: LogicalRules | None = None) -> set[str]:
    """The mesh axes ``rules`` (default: the active ones) give to the logical ``"batch"``."""
    return mesh_axes_set(resolve((BATCH,), rules_arg(rules))[0])


@overload
def logical_to_mesh_axes(
    array_dim_names: None, rules: Sequence[tuple[str, Any]] | None = None
) -> None: ...


@overload
def logical_to_mesh_axes(
    array_dim_names: Sequence[str | None] | PartitionSpec,
    rules: Sequence[tuple[str, Any]] | None = None,
) -> PartitionSpec: ...


def logical_to_mesh_axes(
    array_dim_names: Sequence[str | None] | PartitionSpec | None,
    rules: Sequence[tuple[str, Any]] | None = None,
) -> PartitionSpec | None:
    """Resolve one logical name (or ``None``) per array axis into a ``PartitionSpec``.

    The rules (``rules`` if given, else the active ones) are taken in order of precedence:
    ``(name, mesh_axes)`` shards the axis called ``name`` over ``mesh_axes`` if that axis
    is not assigned yet and none of ``mesh_axes`` is used by another axis. Axes that no
    rule assigns, and ``None`` names, are replicated. ``None`` instead of names gives
    ``None``. A logical name used for two axes is a ``ShardingError``.

    >>> import pytreemod as pm
    >>> rules = [("batch", "X"), ("features", "X"), ("heads", "Y"), ("batch", "Z")]
    >>> pm.logical_to_mesh_axes(("batch", "length", "heads", "features"), rules)
    P('X', None, 'Y', None)
    """
    if array_dim_names is None:
        return None
    return spec(resolve(tuple(array_dim_names), rules_arg(rules)))


@overload
def logical_to_mesh_sharding(
    array_dim_names: None, mesh: AnyMesh, rules: Sequence[tuple[str, Any]] | None = None
) -> None: ...


@overload
def logical_to_mesh_sharding(
    array_dim_names: Sequence[str | None] | PartitionSpec,
    mesh: AnyMesh,
    rules: Sequence[tuple[str, Any]] | None = None,
) -> NamedSharding: ...


def logical_to_mesh_sharding(
    array_dim_names: Sequence[str | None] | PartitionSpec | None,
    mesh: AnyMesh,
    rules: Sequence[tuple[str, Any]] | None = None,
) -> NamedSharding | None:
    """``NamedSharding(mesh, logical_to_mesh_axes(array_dim_names, rules))``."""
    resolved = logical_to_mesh_axes(array_dim_names, rules)
    if resolved is None:
        return None
    return named_sharding(mesh, resolved, "")


def is_logical_spec(x: Any) -> bool:
    """A single spec: ``None``, a ``PartitionSpec``, or a tuple/list of names."""
    if x is None or isinstance(x, PartitionSpec):
        return True
    return isinstance(x, (tuple, list)) and all(_is_name(n) for n in x)


def logical_to_mesh(tree: Any, rules: Sequence[tuple[str, Any]] | None = None) -> Any:
    """``logical_to_mesh_axes`` on every spec (a tuple of names) in a tree of specs."""
    normalized = rules_arg(rules)
    return jax.tree.map(
        lambda names: logical_to_mesh_axes(names, normalized), tree, is_leaf=is_logical_spec
    )


def resolve_logical_axes(
    names: Sequence[Any], rules: Sequence[tuple[str, Any]] | None = None
) -> list[Any]:
    """Per axis of ``names``, what the rules (default: the active ones) give it: its mesh
    axes (a name, a tuple of names, ``None``), ``PartitionSpec.UNCONSTRAINED`` as given,
    or ``pm.sharding.UNASSIGNED`` where no rule assigns the name (``logical_to_mesh_axes``
    replicates those; ``RulesFallback`` chooses for ``with_logical_constraint``).

    >>> import pytreemod as pm
    >>> pm.sharding.resolve_logical_axes(("batch", "embed", None), [("batch", "data")])
    ['data', UnassignedAxis, None]
    """
    return resolve(tuple(names), rules_arg(rules))
