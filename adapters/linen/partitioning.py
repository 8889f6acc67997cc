"""Legacy axis-name partitioning helpers (``flax.linen.partitioning``).

Parameters created with ``param_with_axes`` carry logical axis names in a parallel
``params_axes`` collection (``AxisMetadata`` entries named ``<param>_axes``);
``get_axis_names`` turns that collection into ``PartitionSpec``s. ``scan_with_axes`` and
``vmap_with_axes`` keep those names in step with the axis the transform adds. (The
newer way is boxing: ``with_partitioning`` / ``with_logical_partitioning``.)
"""

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax

from adapters.core import Variable as _CoreVariable
from adapters.core import errors, lift
from adapters.core import freeze as freeze
from adapters.core import unfreeze as unfreeze
from adapters.core._filters import union as _union_filters

from . import module as _module
from . import transforms
from .spmd import RulesFallback as RulesFallback
from .spmd import _is_logical_spec
from .spmd import _with_sharding_constraint as _with_sharding_constraint
from .spmd import get_logical_axis_rules as get_axis_rules
from .spmd import logical_axis_rules as axis_rules
from .spmd import logical_to_mesh as logical_to_mesh
from .spmd import logical_to_mesh_axes as logical_to_mesh_axes
from .spmd import set_logical_axis_rules as set_axis_rules
from .spmd import with_logical_constraint as with_sharding_constraint

__all__ = [
    "AxisMetadata",
    "PartitionedVariable",
    "RulesFallback",
    "axis_rules",
    "get_axis_names",
    "get_axis_rules",
    "logical_to_mesh",
    "logical_to_mesh_axes",
    "param_with_axes",
    "remat",
    "scan_with_axes",
    "set_axis_rules",
    "variable_with_axes",
    "vmap_with_axes",
    "with_sharding_constraint",
]

_: tuple[Any, ...] = (_with_sharding_constraint, freeze)  # re-exported names Flax's module also has


@dataclasses.dataclass(frozen=True)
class AxisMetadata:
    """The logical axis names of a variable (a tree of them), kept as static metadata."""

    names: Any

    def replace(self, **updates: Any) -> "AxisMetadata":
        """A copy with fields replaced."""
        return dataclasses.replace(self, **updates)


jax.tree_util.register_pytree_node(
    AxisMetadata, lambda m: ((), m.names), lambda names, _: AxisMetadata(names)
)


def _sow_axes_reduce(old: Any, new: Any) -> Any:
    if not isinstance(new, AxisMetadata):
        raise TypeError("Expected newly sown value to be an AxisMetadata")
    if isinstance(old, AxisMetadata):
        if old != new:
            raise ValueError(
                f"If axis names are sown twice, expected them to match. Got {old} and {new}."
            )
    elif old:
        raise AssertionError(f"Non-initial-or-AxisMetadata value encountered: {old}")
    return new


def _current_module(module: Any) -> Any:
    if module is None:
        module = _module._context.module_stack[-1]
        assert module is not None
    return module


def param_with_axes(
    name: str,
    init_fn: Callable[..., Any],
    *init_args: Any,
    axes: tuple[str, ...] | None = None,
    module: Any = None,
    **init_kwargs: Any,
) -> Any:
    """``module.param(name, init_fn, ...)`` (default: the module being run), constrained
    to the logical ``axes`` and recorded as ``params_axes/<name>_axes``."""
    module = _current_module(module)
    value = module.param(name, init_fn, *init_args, **init_kwargs)
    if axes is not None:
        value = with_sharding_constraint(value, jax.sharding.PartitionSpec(*axes))
        module.sow("params_axes", f"{name}_axes", AxisMetadata(axes), reduce_fn=_sow_axes_reduce)
    return value


class PartitionedVariable(_CoreVariable[Any]):
    """A variable whose value is constrained to logical ``axes`` when read and written."""

    __slots__ = ("axes", "fallback")

    def __init__(
        self,
        scope: Any,
        collection: str,
        name: str,
        axes: tuple[str, ...] | None = None,
        fallback: RulesFallback = RulesFallback.AXIS_IS_UNSHARDED,
    ) -> None:
        super().__init__(scope, collection, name)
        self.axes: tuple[str, ...] | None = axes
        self.fallback: RulesFallback = fallback

    @property
    def value(self) -> Any:
        """The value, with the sharding constraint applied."""
        value = self.scope.get_variable(self.collection, self.name)
        if self.axes is not None:
            value = with_sharding_constraint(value, self.axes, fallback=self.fallback)
        return value

    @value.setter
    def value(self, value: Any) -> None:
        if self.axes is not None:
            value = with_sharding_constraint(value, self.axes, fallback=self.fallback)
        self.scope.put_variable(self.collection, self.name, value)


def _core_variable_with_axes(
    scope: Any,
    col: str,
    name: str,
    init_fn: Callable[..., Any],
    *init_args: Any,
    axes: tuple[str, ...] | None = None,
    fallback: RulesFallback = RulesFallback.AXIS_IS_UNSHARDED,
    **init_kwargs: Any,
) -> PartitionedVariable:
    scope.reserve(name)
    if not scope.has_variable(col, name):
        if not scope.is_mutable_collection(col):
            raise errors.ScopeVariableNotFoundError(name, col, scope.path_text)
        value = init_fn(*init_args, **init_kwargs)
        if axes is not None:
            value = with_sharding_constraint(value, axes, fallback=fallback)
        scope.put_variable(col, name, value)
    return PartitionedVariable(scope, col, name, axes, fallback)


def variable_with_axes(
    collection: str,
    name: str,
    init_fn: Callable[..., Any],
    *init_args: Any,
    axes: tuple[str, ...] | None = None,
    module: Any = None,
    fallback: RulesFallback = RulesFallback.AXIS_IS_UNSHARDED,
    **init_kwargs: Any,
) -> PartitionedVariable:
    """A ``PartitionedVariable`` in ``collection``; its axes are recorded as
    ``<collection>_axes/<name>_axes``."""
    module = _current_module(module)
    var = _core_variable_with_axes(
        module.scope,
        collection,
        name,
        init_fn,
        *init_args,
        axes=axes,
        fallback=fallback,
        **init_kwargs,
    )
    if axes is not None:
        module.sow(
            f"{collection}_axes",
            f"{name}_axes",
            AxisMetadata(axes),
            reduce_fn=_sow_axes_reduce,
        )
    return var


def _flatten(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, (*prefix, k)))
        else:
            out[(*prefix, k)] = v
    return out


def _unflatten(flat: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, v in flat.items():
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = v
    return out


def get_axis_names(axes_metadata: Any) -> Any:
    """The ``PartitionSpec`` tree of a ``params_axes`` collection, keyed like the
    parameters (the ``_axes`` suffix dropped)."""

    def spec(names: Any) -> Any:
        return None if names is None else jax.sharding.PartitionSpec(*names)

    flat = {
        re.sub(r"_axes$", "", "/".join(k)): jax.tree_util.tree_map(
            spec, v.names, is_leaf=_is_logical_spec
        )
        for k, v in _flatten(unfreeze(axes_metadata)).items()
    }
    return freeze(_unflatten({tuple(k.split("/")): v for k, v in flat.items()}))


def _tree_map_axes(fn: Callable[[AxisMetadata], Any], tree: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda x: fn(x) if isinstance(x, AxisMetadata) else x,
        tree,
        is_leaf=lambda x: isinstance(x, AxisMetadata),
    )


def _is_mutable(axis_col: str) -> bool:
    last = _module._context.module_stack[-1]
    return last.is_mutable_collection(axis_col) if last else True  # pyright: ignore[reportAttributeAccessIssue]


def _add_axis_to_metadata(fn: Any, axis_pos: Any, axis_name: str, axis_col: str) -> Any:
    """Wrap a transformed target so its ``axis_col`` names gain ``axis_name`` at
    ``axis_pos`` on the way out (and lose it on the way in)."""
    pos: int = getattr(axis_pos, "axis", axis_pos)

    def insert(names: Any) -> Any:
        if names is None:
            return names
        names = list(names)
        names.insert(pos, axis_name)
        return tuple(names)

    def remove(names: Any) -> Any:
        if names is None:
            return names
        names = list(names)
        if names[pos] != axis_name:
            raise ValueError(
                f"Expected axis {axis_name} at position {pos} in axis metadata {names}."
            )
        names.pop(pos)
        return tuple(names)

    def over(leaf_fn: Callable[[Any], Any]) -> Callable[[AxisMetadata], AxisMetadata]:
        return lambda m: m.replace(
            names=jax.tree_util.tree_map(leaf_fn, m.names, is_leaf=_is_logical_spec)
        )

    return transforms.map_variables(
        fn,
        axis_col,
        mutable=_is_mutable(axis_col),
        trans_in_fn=lambda tree: _tree_map_axes(over(remove), tree),
        trans_out_fn=lambda tree: _tree_map_axes(over(insert), tree),
    )


def scan_with_axes(
    target: Any,
    variable_axes: Mapping[Any, Any] = {},
    variable_broadcast: Any = False,
    variable_carry: Any = False,
    split_rngs: Mapping[Any, bool] = {},
    in_axes: Any = 0,
    out_axes: Any = 0,
    length: int | None = None,
    reverse: bool = False,
    unroll: int = 1,
    axis_name: str = "layers",
    axes_collections: tuple[str, ...] = ("params",),
    data_transform: Callable[..., Any] | None = None,
    methods: Any = None,
) -> Any:
    """``nn.scan`` that also adds ``axis_name`` to the ``<col>_axes`` metadata of every
    scanned collection in ``axes_collections`` (the metadata itself is broadcast)."""
    axes_filters = tuple(f"{col}_axes" for col in axes_collections)
    broadcast = _union_filters(variable_broadcast, axes_filters)
    scanned = transforms.lift_transform(
        lift.scan,
        target,
        variable_axes=variable_axes,
        variable_broadcast=broadcast,
        variable_carry=variable_carry,
        split_rngs=split_rngs,
        in_axes=in_axes,
        out_axes=out_axes,
        length=length,
        reverse=reverse,
        unroll=unroll,
        data_transform=data_transform,
        methods=methods,
    )
    for col in axes_collections:
        if col in variable_axes:
            scanned = _add_axis_to_metadata(
                scanned, variable_axes[col], axis_name, axis_col=f"{col}_axes"
            )
    return scanned


def vmap_with_axes(
    target: Any,
    variable_axes: Mapping[Any, Any],
    split_rngs: Mapping[Any, bool] = {},
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: str | None = None,
    partitioning_axis_names: Mapping[Any, str] = {},
    spmd_axis_name: str | None = None,
    methods: Any = None,
) -> Any:
    """``nn.vmap`` that adds ``partitioning_axis_names[col]`` to the ``<col>_axes``
    metadata of each mapped collection."""
    variable_axes = dict(variable_axes)
    for name in partitioning_axis_names:
        variable_axes[f"{name}_axes"] = None
    vmapped = transforms.lift_transform(
        lift.vmap,
        target,
        variable_axes=variable_axes,
        split_rngs=split_rngs,
        in_axes=in_axes,
        out_axes=out_axes,
        axis_size=axis_size,
        axis_name=axis_name,
        spmd_axis_name=spmd_axis_name,
        methods=methods,
    )
    for col, axis in variable_axes.items():
        if col in partitioning_axis_names:
            vmapped = _add_axis_to_metadata(
                vmapped, axis, partitioning_axis_names[col], axis_col=f"{col}_axes"
            )
    return vmapped


def core_remat_static(
    fn: Callable[..., Any],
    variables: Any = True,
    rngs: Any = True,
    concrete: bool = False,
    prevent_cse: bool = True,
    static_argnums: tuple[int, ...] = (),
    policy: Any = None,
) -> Callable[..., Any]:
    """A lifted ``jax.checkpoint`` whose ``static_argnums`` arguments are constants."""
    if concrete:
        raise NotImplementedError(
            "The concrete argument is deprecated. Use static_argnums instead. for more "
            "information, see https://docs.jax.dev/en/latest/jep/11830-new-remat-checkpoint.html"
        )
    return lift.checkpoint(
        fn,
        variables=variables,
        rngs=rngs,
        prevent_cse=prevent_cse,
        static_argnums=tuple(sorted(static_argnums)),
        policy=policy,
    )


def remat(
    target: Any,
    variables: Any = True,
    rngs: Any = True,
    concrete: bool = False,
    prevent_cse: bool = True,
    static_argnums: tuple[int, ...] = (),
    policy: Any = None,
    methods: Any = None,
) -> Any:
    """``nn.remat`` with ``static_argnums`` (arguments after ``self``) as constants."""
    return transforms.lift_transform(
        core_remat_static,
        target,
        variables=variables,
        rngs=rngs,
        concrete=concrete,
        prevent_cse=prevent_cse,
        static_argnums=static_argnums,
        policy=policy,
        methods=methods,
    )
