"""Logical axis rules, and names resolved into ``PartitionSpec``s and ``NamedSharding``s.

The part of sharding that knows nothing about boxes or trees: the active rules (a
``contextvars`` variable), Flax's priority resolution of logical names into mesh axes,
the mesh picked from arguments or ``jax.set_mesh``, and the constraint of one array.
``_meta`` (``Partitioned``) and ``_sharding`` (``LogicallyPartitioned``, tree functions) are
built on it; see ``_sharding`` for the rules' semantics.
"""

import contextlib
import contextvars
import enum
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias, overload

import jax
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from ._errors import LogicalAxisRulesError, ShardingError

MeshAxes: TypeAlias = str | tuple[str, ...] | None
"""What a logical name maps to: one mesh axis, several (sharded over their product), or
``None`` (replicated)."""

LogicalRules: TypeAlias = tuple[tuple[str, MeshAxes], ...]
"""Normalised logical axis rules: ``(logical_name, mesh_axes)`` pairs in precedence order."""

AnyMesh: TypeAlias = Mesh | AbstractMesh

_RULES: contextvars.ContextVar[LogicalRules] = contextvars.ContextVar(
    "pytreemod_logical_axis_rules", default=()
)


# ----------------------------------------------------------------------------- rules


def _normalize_rules(rules: Any) -> LogicalRules:
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
    token = _RULES.set(_normalize_rules(rules))
    try:
        yield
    finally:
        _RULES.reset(token)


def set_logical_axis_rules(rules: Sequence[tuple[str, Any]]) -> None:
    """Set the active logical axis rules for the current context, outside any ``with`` block.

    Prefer the ``logical_axis_rules`` context manager, which restores the previous rules.
    ``set_logical_axis_rules(())`` clears them.
    """
    _RULES.set(_normalize_rules(rules))


def get_logical_axis_rules() -> LogicalRules:
    """The active logical axis rules (``()`` when none are set), normalised to tuples."""
    return _RULES.get()


# ----------------------------------------------------------------------------- resolution


class _Unassigned:
    """An array axis no rule has assigned yet."""

    def __repr__(self) -> str:
        return "<unassigned>"


_UNASSIGNED = _Unassigned()


def _mesh_axes_set(axes: Any) -> set[str]:
    if axes is None or isinstance(axes, _Unassigned):
        return set()
    if isinstance(axes, str):
        return {axes}
    return set(axes)


def _assign(names: Sequence[Any], rules: LogicalRules, where: str = "") -> list[Any]:
    """Flax's priority assignment: the mesh axes (or ``_UNASSIGNED``) of every axis."""
    names = tuple(names)
    for n in names:
        if n is not None and not isinstance(n, str):
            raise ShardingError(
                f"{where}logical axis names must be strings or None, got {n!r} in {names}; "
                "write mesh axes only on the right-hand side of the rules."
            )
    dups = sorted({n for n in names if n is not None and names.count(n) > 1})
    if dups:
        raise ShardingError(
            f"{where}logical axis names {dups} occur more than once in {names}; give every "
            "array axis its own logical name (or None)."
        )
    result: list[Any] = [_UNASSIGNED] * len(names)
    used: set[str] = set()
    for name, axes in rules:
        if name not in names:
            continue
        pos = names.index(name)
        wanted = _mesh_axes_set(axes)
        if result[pos] is _UNASSIGNED and not (wanted & used):
            result[pos] = axes
            used |= wanted
    # None names mean "replicated", deliberately.
    return [None if n is None else a for n, a in zip(names, result)]


def _spec(assigned: Sequence[Any]) -> PartitionSpec:
    return PartitionSpec(*(None if a is _UNASSIGNED else a for a in assigned))


def _rules_arg(rules: Sequence[tuple[str, Any]] | None) -> LogicalRules:
    return _RULES.get() if rules is None else _normalize_rules(rules)


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
    return _spec(_assign(tuple(array_dim_names), _rules_arg(rules)))


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
    spec = logical_to_mesh_axes(array_dim_names, rules)
    if spec is None:
        return None
    return _named_sharding(mesh, spec, "")


def _is_logical_spec(x: Any) -> bool:
    """A single spec: ``None``, a ``PartitionSpec``, or a tuple/list of names."""
    if x is None or isinstance(x, PartitionSpec):
        return True
    return isinstance(x, (tuple, list)) and all(n is None or isinstance(n, str) for n in x)


def logical_to_mesh(tree: Any, rules: Sequence[tuple[str, Any]] | None = None) -> Any:
    """``logical_to_mesh_axes`` on every spec (a tuple of names) in a tree of specs."""
    normalized = _rules_arg(rules)
    return jax.tree.map(
        lambda names: logical_to_mesh_axes(names, normalized), tree, is_leaf=_is_logical_spec
    )


# ----------------------------------------------------------------------------- names and meshes


def _ndim(x: Any) -> int | None:
    ndim = getattr(x, "ndim", None)
    return ndim if isinstance(ndim, int) else None


def _check_rank(value: Any, names: Sequence[Any], kind: str, where: str) -> None:
    """A box's names must be one per axis of its value (``kind``: the box's class name)."""
    ndim = _ndim(value)
    if ndim is not None and ndim != len(names):
        raise ShardingError(
            f"{where}{kind} has names {tuple(names)} ({len(names)} axes) but "
            f"its value has {ndim} axes. This happens when a transform adds or removes an "
            "axis without updating the metadata (e.g. plain jax.vmap over a boxed tree); "
            "use pm.vmap/pm.scan with metadata_params, or box the value anew."
        )


def _names_spec(names: Sequence[Any], rules: LogicalRules, where: str = "") -> PartitionSpec:
    """``Partitioned`` semantics: names resolve through ``rules`` if there are any and are
    taken literally as mesh axes otherwise."""
    if rules:
        return _spec(_assign(names, rules, where))
    return PartitionSpec(*names)


def _context_mesh() -> AnyMesh | None:
    """The mesh set with ``jax.set_mesh``: concrete outside ``jax.jit``, abstract inside."""
    abstract = jax.sharding.get_abstract_mesh()
    if abstract.empty:
        return None
    try:
        concrete = jax.sharding.get_mesh()
    except ValueError:  # inside jax.jit, only the abstract mesh is available
        return abstract
    return abstract if concrete.empty else concrete


def _pick_mesh(mesh: AnyMesh | None, box_mesh: AnyMesh | None, where: str) -> AnyMesh:
    for m in (mesh, box_mesh, _context_mesh()):
        if m is not None:
            return m
    raise ShardingError(
        f"{where}no mesh to build a NamedSharding on: pass mesh=..., give the box a mesh "
        "(with_partitioning(init, names, mesh)) or set one with `with jax.set_mesh(mesh):`."
    )


def _spec_axes(spec: PartitionSpec) -> list[str]:
    axes: list[str] = []
    for entry in spec:
        if entry is None:
            continue
        axes.extend([entry] if isinstance(entry, str) else list(entry))
    return axes


def _named_sharding(mesh: AnyMesh, spec: PartitionSpec, where: str) -> NamedSharding:
    axes = _spec_axes(spec)
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


# ----------------------------------------------------------------------------- constraints


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


def _constrain(
    x: Any,
    names: Sequence[Any],
    rules: LogicalRules | None,
    mesh: AnyMesh | None,
    fallback: RulesFallback,
    where: str = "",
) -> Any:
    names = tuple(names)
    ndim = _ndim(x)
    if ndim is None:
        raise ShardingError(
            f"{where}with_logical_constraint needs an array, got {type(x).__name__}."
        )
    if len(names) != ndim:
        raise ShardingError(
            f"{where}logical names {names} have {len(names)} entries but the array has shape "
            f"{tuple(x.shape)} ({ndim} axes); give one name (or None) per axis."
        )
    assigned = _assign(names, rules if rules is not None else _RULES.get(), where)
    unassigned = [n for n, a in zip(names, assigned) if a is _UNASSIGNED]
    if unassigned and fallback is RulesFallback.RAISE_ERROR:
        raise ShardingError(
            f"{where}logical axis names {unassigned} of {names} match no rule (or every "
            "matching rule's mesh axes are used by another axis); add a rule for them or use "
            "fallback=RulesFallback.AXIS_IS_UNSHARDED."
        )
    if unassigned and fallback is RulesFallback.NO_CONSTRAINT:
        return x
    spec = _spec(assigned)
    target_mesh = mesh if mesh is not None else _context_mesh()
    if target_mesh is None:
        return x  # no mesh anywhere: nothing to constrain to (as in Flax)
    sharding = _named_sharding(target_mesh, spec, where)
    types = dict(zip(target_mesh.axis_names, target_mesh.axis_types))
    if any(types[a] == AxisType.Explicit for a in _spec_axes(spec)):
        # Explicit axes: the sharding is part of the type; reshard is the constraint.
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)
