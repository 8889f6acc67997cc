"""NNX sharding (``flax.nnx.spmd``): sharding metadata on Variables and the trees of
``PartitionSpec``/``NamedSharding`` it gives.

A Variable's ``out_sharding`` metadata names one mesh axis (or logical name, or ``None``)
per array axis; ``sharding_rules`` metadata and the active ``logical_axis_rules`` rename
logical names to mesh axes (a name without a rule is a mesh axis name). The renaming is
``adapters.core.spmd``'s (Flax's ``flax.core.spmd``), over pytreemod's logical axis rules,
so Linen, NNX and pytreemod read the same rules. Placing arrays is JAX's own machinery
(``NamedSharding``, ``reshard``, sharding constraints, ``jax.eval_shape`` with shardings).

Transforms that add or remove an axis of every Variable (``nnx.vmap``, ``nnx.scan``) call
``add_axis``/``remove_axis`` with their ``transform_metadata``: the axis named
``transform_metadata[PARTITION_NAME]`` is inserted into (or taken out of) ``out_sharding``
at the mapped index, and every other entry of ``transform_metadata`` does the same to the
Variable's metadata tuple of that name. They are pytreemod's one walk (``pm.add_axis``/
``pm.remove_axis``), with ``Variable`` registered with it (``pm.register_axis_metadata``).
"""

import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax
from jax.sharding import NamedSharding, PartitionSpec

import pytreemod as pm
from adapters.core import spmd as core_spmd

from . import graphlib, variablelib
from .variablelib import Variable

A = TypeVar("A")
F = TypeVar("F", bound=Callable[..., Any])
PARTITION_NAME = pm.PARTITION_NAME


def _is_variable(x: Any) -> bool:
    return isinstance(x, Variable)


# ----------------------------------------------------------------------------- axes


def _partition_name(transform_metadata: Mapping[Any, Any]) -> tuple[Any, dict[Any, Any]]:
    if PARTITION_NAME not in transform_metadata:
        raise ValueError(
            'Trying to transform a Partitioned variable but "partition_name" '
            f"is not specified in transform_metadata: {transform_metadata}"
        )
    others = dict(transform_metadata)
    return others.pop(PARTITION_NAME), others


def _inserted(fields: Any, index: int, value: Any) -> tuple[Any, ...]:
    items = list(fields)
    items.extend([None] * (index - len(items)))
    items.insert(index, value)
    return tuple(items)


def _removed(fields: Any, index: int, value: Any) -> tuple[Any, ...]:
    items = list(fields)
    found = items.pop(index)
    if found != value:
        raise ValueError(
            f"Expected to remove {value!r} at index {index} from {fields!r}, but found {found!r}."
        )
    return tuple(items)


def _metadata_tuples(v: Variable, others: Mapping[Any, Any]) -> list[tuple[Any, tuple[Any, ...]]]:
    """``(name, tuple)`` for the other transform metadata the Variable has as a tuple."""
    found = []
    for name in others:
        current = v.get_metadata(name, None)
        if current and isinstance(current, tuple):
            found.append((name, current))
    return found


def _add_variable_axis(x: Variable, index: int, transform_metadata: Mapping[Any, Any]) -> Variable:
    axis_name, others = _partition_name(transform_metadata)
    sharding = x.get_metadata("out_sharding", None)
    if sharding:
        x.set_metadata("out_sharding", _inserted(sharding, index, axis_name))
    for name, current in _metadata_tuples(x, others):
        x.set_metadata(name, _inserted(current, index, others[name]))
    x.add_axis(index, axis_name)
    return x


def _remove_variable_axis(
    x: Variable, index: int, transform_metadata: Mapping[Any, Any]
) -> Variable:
    axis_name, others = _partition_name(transform_metadata)
    sharding = x.get_metadata("out_sharding", None)
    if sharding is not None:
        x.set_metadata("out_sharding", _removed(sharding, index, axis_name))
    for name, current in _metadata_tuples(x, others):
        x.set_metadata(name, _removed(current, index, others[name]))
    x.remove_axis(index, axis_name)
    return x


# pytreemod's one walk (``pm.add_axis``/``pm.remove_axis``) stops at a Variable and calls
# these (``Variable.add_axis(axis_index, axis_name)`` is Flax's hook runner, a different
# signature from a box's ``add_axis(index, params)``).
pm.register_axis_metadata(Variable, add_axis=_add_variable_axis, remove_axis=_remove_variable_axis)


def add_axis(tree: A, index: int, transform_metadata: Mapping[Any, Any]) -> A:
    """Insert the transform's axis at ``index`` into every Variable of ``tree``: into its
    ``out_sharding`` (the name ``transform_metadata[PARTITION_NAME]``) and its other
    metadata tuples named in ``transform_metadata``; then call ``Variable.add_axis`` (the
    ``on_add_axis`` hooks). The walk is ``pm.add_axis``'s (axis-metadata boxes outside
    Variables get their own ``add_axis``)."""
    _partition_name(transform_metadata)  # Flax's error, whatever the tree holds
    return pm.add_axis(tree, index, transform_metadata)


def remove_axis(tree: A, index: int, transform_metadata: Mapping[Any, Any]) -> A:
    """Undo ``add_axis``: take the transform's axis out of every Variable's ``out_sharding``
    and metadata tuples at ``index`` (a ``ValueError`` if another name is there), then call
    ``Variable.remove_axis`` (the ``on_remove_axis`` hooks); the walk is
    ``pm.remove_axis``'s."""
    _partition_name(transform_metadata)
    return pm.remove_axis(tree, index, transform_metadata)


# ----------------------------------------------------------------------------- annotations


def with_partitioning(
    initializer: F,
    sharding: Any,
    mesh: jax.sharding.Mesh | None = None,
    **metadata: Any,
) -> F:
    """``initializer`` whose result, given to a Variable, carries ``out_sharding=sharding``
    (and ``mesh``, and any other ``metadata``)."""
    return variablelib.with_metadata(initializer, out_sharding=sharding, mesh=mesh, **metadata)


def get_var_pspec(v: Variable) -> PartitionSpec | None:
    """The ``PartitionSpec`` of a Variable: its ``out_sharding`` renamed by its
    ``sharding_rules`` and the active rules; ``PartitionSpec()`` for an array without
    ``out_sharding``; ``None`` for a value that is not an array."""
    sharding = v.get_metadata("out_sharding", None)
    if sharding:
        rules = v.get_metadata("sharding_rules", None)
        if core_spmd.get_logical_axis_rules() or rules is not None:
            combined = core_spmd.composite_rules(core_spmd.get_logical_axis_rules(), rules or ())
            return PartitionSpec(*core_spmd.from_sharding_rules(sharding, combined))
        return PartitionSpec(*sharding)
    if hasattr(v.get_value(), "shape"):
        return PartitionSpec()
    return None


def get_partition_spec(tree: A) -> A:
    """``tree`` with every Variable's value replaced by its ``PartitionSpec`` (see
    ``get_var_pspec``), every other array by ``PartitionSpec()``, anything else by ``None``."""

    def one(x: Any) -> Any:
        if isinstance(x, Variable):
            return x.replace(get_var_pspec(x))
        if hasattr(x, "shape"):
            return PartitionSpec()
        return None

    return jax.tree.map(one, tree, is_leaf=_is_variable)


def get_named_sharding(tree: A, mesh: jax.sharding.Mesh) -> A:
    """``get_partition_spec(tree)`` with each spec made a ``NamedSharding`` on ``mesh``."""
    specs = get_partition_spec(tree)
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs)


# ----------------------------------------------------------------------------- abstract models


def get_abstract_model(
    init_fn: Callable[[], Any], mesh: jax.sharding.Mesh, *, graph: bool | None = None
) -> tuple[Any, Any]:
    """The graphdef of the model ``init_fn()`` builds and its abstract state (no array
    allocated): a ``jax.ShapeDtypeStruct`` per array with the ``NamedSharding`` its
    metadata gives on ``mesh``."""
    graphdefs: list[Any] = []

    def build() -> Any:
        graphdef, state = graphlib.split(init_fn(), graph=graph)
        graphdefs.append(graphdef)
        return state

    with jax.set_mesh(mesh):
        abstract = jax.eval_shape(build)
        shardings = get_named_sharding(abstract, mesh)
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
        )
    return graphdefs[0], abstract


def as_abstract(tree: A, graph: bool | None = None) -> A:
    """``tree`` (e.g. from ``nnx.eval_shape``) with each abstract Variable that has
    ``out_sharding`` metadata but no sharding yet given a ``jax.ShapeDtypeStruct`` with the
    ``NamedSharding`` of its spec, on its ``mesh`` metadata or else the current abstract
    mesh. Other Variables are kept."""

    def add_sharding(_path: Any, x: Any) -> Any:
        if not isinstance(x, Variable):
            return x
        value = x.get_value()
        if (
            hasattr(value, "shape")
            and hasattr(value, "dtype")
            and getattr(value, "sharding", None) is None
            and "out_sharding" in x.get_metadata()
        ):
            mesh = x.get_metadata("mesh", None) or jax.sharding.get_abstract_mesh()
            sharding = NamedSharding(mesh, get_var_pspec(x) or PartitionSpec())
            return x.replace(jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding))
        return x

    return graphlib.map(add_sharding, tree, graph=graph)


def abstract_with_sharding(tree: A, graph: bool | None = None) -> A:
    """Deprecated: use ``as_abstract``."""
    warnings.warn(
        "This function is deprecated. Use as_abstract instead.", DeprecationWarning, stacklevel=2
    )
    return as_abstract(tree, graph=graph)
