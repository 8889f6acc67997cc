"""Sharding whole trees: specs, shardings and placement of every boxed array, the
logical constraint of a tree of activations, and arrays born sharded.
"""

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.tree_util as jtu
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from .._errors import ShardingError
from .._meta import unbox
from .._tree import format_path
from .._variables import Variable
from ._apply import constrain
from ._boxes import LogicallyPartitioned, Partitioned
from ._mesh import AnyMesh as AnyMesh
from ._mesh import context_mesh, named_sharding, ndim, pick_mesh, type_sharding
from ._resolve import RulesFallback, is_logical_spec, mesh_axes_set, resolve, spec
from ._rules import get_logical_axis_rules, normalize_rules
from ._types import entries, reshard


def _has_shape(x: Any) -> bool:
    return ndim(x) is not None and hasattr(x, "shape")


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
    rules = get_logical_axis_rules()

    def f(path: Any, x: Any) -> Any:
        if isinstance(x, Partitioned):
            return x._partition_spec(rules, _where(path))
        if _has_shape(x):
            return PartitionSpec()
        return None

    return jtu.tree_map_with_path(f, tree, is_leaf=_is_partitioned)


def get_sharding(tree: Any, mesh: AnyMesh | None = None) -> Any:
    """A tree shaped like ``tree`` with a ``NamedSharding`` on ``mesh`` for every array.

    The specs are those of ``get_partition_spec``. ``mesh`` defaults to a box's own
    ``mesh`` and then to the mesh set with ``jax.set_mesh``. Non-array leaves become
    ``None``. The result fits ``jax.device_put`` and the ``in_shardings``/``out_shardings``
    of ``jax.jit`` (a box is one leaf there: its sharding applies to its value).
    """
    rules = get_logical_axis_rules()

    def f(path: Any, x: Any) -> Any:
        where = _where(path)
        if isinstance(x, Partitioned):
            chosen = pick_mesh(mesh, x.mesh, where)
            return named_sharding(chosen, x._partition_spec(rules, where), where)
        if _has_shape(x):
            return NamedSharding(pick_mesh(mesh, None, where), PartitionSpec())
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
    are kept, and a Variable found at several places (tied weights) stays one Variable
    (``jax.device_put`` of a model would untie it). An array that the mesh cannot split
    evenly is a ``ShardingError`` naming its path.
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
    return _retie(tree, treedef.unflatten(out))


def _retie(original: Any, rebuilt: Any) -> Any:
    """``rebuilt`` (``original``'s structure) with the Variables that were one object in
    ``original`` made one object again: unflattening builds a Variable per place."""
    is_variable = lambda x: isinstance(x, Variable)
    before = jax.tree.leaves(original, is_leaf=is_variable)
    after, treedef = jax.tree.flatten(rebuilt, is_leaf=is_variable)
    first: dict[int, Any] = {}
    tied = False
    for i, (old, new) in enumerate(zip(before, after)):
        if isinstance(old, Variable):
            kept = first.setdefault(id(old), new)
            if kept is not new:
                after[i], tied = kept, True
    return treedef.unflatten(after) if tied else rebuilt


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
    normalized = None if rules is None else normalize_rules(rules)
    spec_leaves, spec_def = jtu.tree_flatten_with_path(
        logical_axis_resources, is_leaf=is_logical_spec
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
            return constrain(leaf, names, normalized, mesh, fallback, where)

        out.append(jtu.tree_map_with_path(one, subtree))
    return spec_def.unflatten(out)


def logical_zeros(shape: Sequence[int], dtype: Any, names: Sequence[Any]) -> LogicallyPartitioned:
    """Zeros boxed as ``LogicallyPartitioned(zeros, names)``, created on the devices that
    the active rules give ``names`` on the mesh set with ``jax.set_mesh`` (a decoding cache
    is born sharded, not replicated and resharded later): placed directly when the mesh is
    concrete, constrained (a ``reshard`` on Explicit axes) inside ``jax.jit``. A name whose
    mesh axes cannot split its axis evenly (a batch of 1 over ``data``) is dropped: that
    axis is replicated. Without active rules or a mesh: plain zeros in the box."""
    shape, names = tuple(shape), tuple(names)
    mesh = context_mesh()
    rules = get_logical_axis_rules()
    if not rules or mesh is None:
        return LogicallyPartitioned(jax.numpy.zeros(shape, dtype), names)
    sizes = dict(mesh.shape)
    assigned = resolve(names, rules)
    names = tuple(
        n if size % math.prod(sizes.get(a, 1) for a in mesh_axes_set(axes)) == 0 else None
        for n, axes, size in zip(names, assigned, shape)
    )
    sharding = named_sharding(mesh, spec(resolve(names, rules)), "")
    if isinstance(mesh, jax.sharding.AbstractMesh):  # inside jax.jit
        value = jax.numpy.zeros(shape, dtype)
        value = constrain(value, names, None, None, RulesFallback.AXIS_IS_UNSHARDED)
    else:
        value = jax.numpy.zeros(shape, dtype, device=sharding)
    return LogicallyPartitioned(value, names)


def replicate_axis(x: Any, axis: int) -> Any:
    """``x`` with dimension ``axis`` whole on every device, where its type splits that
    dimension over ``Explicit`` mesh axes: a ``jax.sharding.reshard`` that gathers it and
    keeps every other dimension's sharding. Otherwise ``x`` itself (no mesh, ``Auto``
    axes, or the dimension not split). JAX cannot take one element out of an axis split
    over an Explicit mesh axis (a layer of a stack sharded along ``"layers"``), so code
    that indexes such an axis replicates it first.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> x = jnp.ones((4, 2))
    >>> pm.replicate_axis(x, 0) is x  # no mesh: nothing to gather
    True
    """
    sharding = type_sharding(x)
    if sharding is None or sharding.mesh.empty:
        return x
    axis = axis % x.ndim
    ents = entries(x)
    types = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_types))
    if not any(types[a] == AxisType.Explicit for a in ents[axis]):
        return x
    ents[axis] = ()
    return reshard(x, sharding.mesh, ents)
