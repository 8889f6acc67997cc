"""Sharding from axis metadata: logical axis rules, ``PartitionSpec``s and ``NamedSharding``s.

Axis-metadata boxes record one name per array axis. This module turns those names into
``jax.sharding`` objects and nothing else: the sharding itself runs on JAX's SPMD machinery
(``Mesh``, ``NamedSharding``, ``jax.jit`` with shardings, ``with_sharding_constraint``).

- **Logical axis rules** map logical names (``"batch"``, ``"embed"``, ``"mlp"``) to mesh
  axes (``"data"``, ``"model"``, a tuple of mesh axes, or ``None`` for replicated). They
  are set with the ``logical_axis_rules(rules)`` context manager (nestable: the innermost
  rules replace the outer ones until the block ends) or ``set_logical_axis_rules``.
- **Resolution** follows Flax's ``logical_to_mesh_axes``: the rules are taken in order of
  precedence; a rule ``(name, mesh_axes)`` assigns ``mesh_axes`` to the array axis called
  ``name`` if that axis has no assignment yet and none of ``mesh_axes`` is used by another
  axis of the same array. An axis that no rule assigns is replicated (``None``).
- **Which names are logical.** ``Partitioned`` names are resolved through the active rules
  when rules are active (non-empty) and taken literally as mesh axis names otherwise.
  ``LogicallyPartitioned`` names and the names given to ``with_logical_constraint`` are
  always logical: they resolve through the box's own rules or the active ones, and with no
  rules at all every axis is replicated.

Rules are read when a function is traced: a function jitted under one set of rules keeps
them baked into its compiled version.
"""

import contextlib
import contextvars
import enum
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias, overload

import jax
import jax.core
import jax.tree_util as jtu
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from ._errors import LogicalAxisRulesError, ShardingError
from ._meta import Partitioned, unbox
from ._module import field
from ._tree import format_path

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


# ----------------------------------------------------------------------------- boxes


def _optional_rules(rules: Any) -> LogicalRules | None:
    return None if rules is None else _normalize_rules(rules)


def _ndim(x: Any) -> int | None:
    ndim = getattr(x, "ndim", None)
    return ndim if isinstance(ndim, int) else None


def _has_shape(x: Any) -> bool:
    return _ndim(x) is not None and hasattr(x, "shape")


def _check_box_rank(box: Partitioned, where: str) -> None:
    ndim = _ndim(box.value)
    if ndim is not None and ndim != len(box.names):
        raise ShardingError(
            f"{where}{type(box).__name__} has names {box.names} ({len(box.names)} axes) but "
            f"its value has {ndim} axes. This happens when a transform adds or removes an "
            "axis without updating the metadata (e.g. plain jax.vmap over a boxed tree); "
            "use pm.vmap/pm.scan with metadata_params, or box the value anew."
        )


def _box_spec(box: Partitioned, rules: LogicalRules, where: str = "") -> PartitionSpec:
    _check_box_rank(box, where)
    if type(box).get_partition_spec is not Partitioned.get_partition_spec:
        # A box that knows its own resolution (LogicallyPartitioned, user subclasses).
        return box.get_partition_spec()
    if rules:
        return _spec(_assign(box.names, rules, where))
    return PartitionSpec(*box.names)


class LogicallyPartitioned(Partitioned):
    """A ``Partitioned`` box whose names are always logical (as in Flax).

    Its names resolve through its own ``rules`` if given, else through the active logical
    axis rules; with no rules at all every axis is replicated. (A plain ``Partitioned``
    with no rules active takes its names literally as mesh axes.)

    **Fields:**

    - ``value``, ``names``, ``mesh``: as in ``Partitioned``.
    - ``rules``: optional logical axis rules for this box, overriding the active ones.

    ``unbox()`` returns the value with ``with_logical_constraint`` applied when the value
    is being traced (inside ``jax.jit`` and other transforms) and a mesh is known (the
    box's ``mesh`` or one set with ``jax.set_mesh``); otherwise it returns the value as is.
    ``unbox(apply_constraint=False)`` never adds the constraint.
    """

    rules: LogicalRules | None = field(static=True, default=None, converter=_optional_rules)

    def unbox(self, apply_constraint: bool = True) -> Any:
        value = self.value
        if not apply_constraint or not isinstance(value, jax.core.Tracer):
            return value
        return _constrain(value, self.names, self.rules, self.mesh, RulesFallback.AXIS_IS_UNSHARDED)

    def get_partition_spec(self) -> PartitionSpec:
        """The ``PartitionSpec`` of the names resolved through the box's or active rules."""
        rules = self.rules if self.rules is not None else _RULES.get()
        return _spec(_assign(self.names, rules))

    def get_sharding(self, mesh: AnyMesh | None = None) -> NamedSharding:
        """The ``NamedSharding`` on ``mesh`` (default: the box's mesh, else the context's)."""
        chosen = _pick_mesh(mesh, self.mesh, "")
        return _named_sharding(chosen, self.get_partition_spec(), "")


def with_logical_partitioning(
    fn: Callable[..., Any],
    names: Sequence[str | None],
    mesh: Mesh | None = None,
    rules: Sequence[tuple[str, Any]] | None = None,
) -> Callable[..., LogicallyPartitioned]:
    """Wrap an initializer so the array it returns is boxed as ``LogicallyPartitioned``.

    >>> import jax
    >>> import pytreemod as pm
    >>> init = pm.with_logical_partitioning(jax.nn.initializers.zeros, ("embed", "mlp"))
    >>> init(jax.random.key(0), (4, 8)).get_partition_spec()
    P(None, None)
    """
    names = tuple(names)

    def wrapper(*args: Any, **kwargs: Any) -> LogicallyPartitioned:
        return LogicallyPartitioned(fn(*args, **kwargs), names, mesh, rules)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


# ----------------------------------------------------------------------------- trees


def _is_partitioned(x: Any) -> bool:
    return isinstance(x, Partitioned)


def _where(path: Sequence[Any]) -> str:
    return f"at {format_path(path)}: "


def get_partition_spec(tree: Any) -> Any:
    """A tree shaped like ``tree`` with a ``PartitionSpec`` for every array.

    Each ``Partitioned`` box (also inside Variables, e.g. ``Param(Partitioned(...))``)
    becomes the ``PartitionSpec`` of its names, resolved through the active logical axis
    rules when rules are active and taken literally as mesh axis names otherwise
    (``LogicallyPartitioned`` boxes always resolve through rules). Every other array leaf
    becomes ``PartitionSpec()`` (replicated), and every non-array leaf ``None``.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> tree = {"w": pm.Param(pm.Partitioned(jnp.zeros((4, 8)), ("embed", "mlp"))),
    ...         "b": jnp.zeros(8)}
    >>> with pm.logical_axis_rules([("mlp", "model")]):
    ...     specs = pm.get_partition_spec(tree)
    >>> specs["w"].value, specs["b"]
    (P(None, 'model'), P())
    """
    rules = _RULES.get()

    def f(path: Any, x: Any) -> Any:
        if isinstance(x, Partitioned):
            return _box_spec(x, rules, _where(path))
        if _has_shape(x):
            return PartitionSpec()
        return None

    return jtu.tree_map_with_path(f, tree, is_leaf=_is_partitioned)


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


def get_sharding(tree: Any, mesh: AnyMesh | None = None) -> Any:
    """A tree shaped like ``tree`` with a ``NamedSharding`` on ``mesh`` for every array.

    The specs are those of ``get_partition_spec``. ``mesh`` defaults to a box's own
    ``mesh`` and then to the mesh set with ``jax.set_mesh``. Non-array leaves become
    ``None``. The result fits ``jax.device_put`` and the ``in_shardings``/``out_shardings``
    of ``jax.jit`` (a box is one leaf there: its sharding applies to its value).
    """
    rules = _RULES.get()

    def f(path: Any, x: Any) -> Any:
        where = _where(path)
        if isinstance(x, Partitioned):
            return _named_sharding(
                _pick_mesh(mesh, x.mesh, where), _box_spec(x, rules, where), where
            )
        if _has_shape(x):
            return NamedSharding(_pick_mesh(mesh, None, where), PartitionSpec())
        return None

    return jtu.tree_map_with_path(f, tree, is_leaf=_is_partitioned)


def _check_fits(x: Any, sharding: NamedSharding, where: str) -> None:
    shape = tuple(x.shape)
    spec = sharding.spec
    if len(spec) > len(shape):
        raise ShardingError(
            f"{where}{spec} has {len(spec)} entries but the array has shape {shape} "
            f"({len(shape)} axes); give at most one entry per axis."
        )
    sizes = dict(sharding.mesh.shape)
    for i, entry in enumerate(spec):
        if entry is None:
            continue
        axes = (entry,) if isinstance(entry, str) else tuple(entry)
        n = math.prod(sizes[a] for a in axes)
        if shape[i] % n:
            raise ShardingError(
                f"{where}axis {i} of shape {shape} has size {shape[i]}, which the {n} "
                f"devices of mesh axes {axes} cannot split evenly; choose sizes divisible by "
                "the mesh axis sizes or map this logical axis to another mesh axis (or None)."
            )


def shard(tree: Any, mesh: AnyMesh | None = None) -> Any:
    """Place every array of ``tree`` on ``mesh`` with the sharding ``get_sharding`` gives.

    One ``jax.device_put`` for all arrays; boxes, Variables, modules and non-array leaves
    are kept. An array that the mesh cannot split evenly is a ``ShardingError`` naming
    its path.
    """
    shardings = get_sharding(tree, mesh)
    leaves, treedef = jtu.tree_flatten_with_path(tree, is_leaf=_is_partitioned)
    shard_leaves = treedef.flatten_up_to(shardings)
    arrays: list[Any] = []
    targets: list[NamedSharding] = []
    for (path, leaf), sharding in zip(leaves, shard_leaves):
        if sharding is None:
            continue
        value = leaf.value if isinstance(leaf, Partitioned) else leaf
        _check_fits(value, sharding, _where(path))
        arrays.append(value)
        targets.append(sharding)
    placed = iter(jax.device_put(arrays, targets))
    out = []
    for (_, leaf), sharding in zip(leaves, shard_leaves):
        if sharding is None:
            out.append(leaf)
        elif isinstance(leaf, Partitioned):
            out.append(leaf.replace_boxed(next(placed)))
        else:
            out.append(next(placed))
    return treedef.unflatten(out)


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


def with_logical_constraint(
    x: Any,
    logical_axis_resources: Any,
    rules: Sequence[tuple[str, Any]] | None = None,
    mesh: AnyMesh | None = None,
    fallback: RulesFallback = RulesFallback.AXIS_IS_UNSHARDED,
) -> Any:
    """``jax.lax.with_sharding_constraint`` with logical axis names.

    **Arguments:**

    - ``x``: an array, or a tree of arrays (boxes are unboxed first).
    - ``logical_axis_resources``: one logical name (or ``None``) per axis, as a tuple or
      ``PartitionSpec``, applied to every array of ``x``; or a tree of such specs matching
      ``x`` (a ``None`` spec leaves that array unconstrained).
    - ``rules``: logical axis rules; default: the active ones.
    - ``mesh``: the mesh; default: the one set with ``jax.set_mesh`` (abstract inside
      ``jax.jit``). With no mesh at all, ``x`` is returned unchanged (as in Flax), so a
      model annotated with constraints still runs on one device.
    - ``fallback``: what to do with an axis no rule assigns (``RulesFallback``).

    On a mesh whose axes are ``Explicit`` (the default of ``jax.make_mesh``), the
    constraint is a ``jax.sharding.reshard``; on ``Auto`` axes it is a sharding constraint
    that XLA's propagation honours.
    """
    x = unbox(x)
    normalized = None if rules is None else _normalize_rules(rules)
    spec_leaves, spec_def = jtu.tree_flatten_with_path(
        logical_axis_resources, is_leaf=_is_logical_spec
    )
    try:
        subtrees = spec_def.flatten_up_to(x)
    except ValueError as e:
        raise ShardingError(
            "with_logical_constraint: the tree of logical specs is not a prefix of the "
            f"structure of x ({e}); give one spec for all arrays or a tree of specs shaped "
            "like x."
        ) from None
    out = []
    for (prefix, names), subtree in zip(spec_leaves, subtrees):
        if isinstance(names, PartitionSpec):
            names = tuple(names)

        def one(path: Any, leaf: Any, names: Any = names, prefix: Any = prefix) -> Any:
            if names is None:
                return leaf
            full = (*prefix, *path)
            where = _where(full) if full else ""
            return _constrain(leaf, names, normalized, mesh, fallback, where)

        out.append(jtu.tree_map_with_path(one, subtree))
    return spec_def.unflatten(out)
