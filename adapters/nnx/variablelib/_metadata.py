"""The pieces of a Variable that are not the class: hooks, metadata, refs, sizes."""

import dataclasses
import typing as tp
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.ref
import numpy as np

from adapters.config import config

A = tp.TypeVar("A")

GetValueHook = Callable[[Any, Any], Any]
SetValueHook = Callable[[Any, Any], Any]
CreateValueHook = Callable[[Any, Any], Any]
AxisName = str
AxisIndex = int
AddAxisHook = Callable[[Any, AxisIndex, AxisName | None], None]
RemoveAxisHook = Callable[[Any, AxisIndex, AxisName | None], None]

Ref = jax.Ref
"""JAX's mutable array type (``jax.new_ref`` makes one)."""

_HOOKS = ("on_get_value", "on_set_value", "on_create_value", "on_add_axis", "on_remove_axis")


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def is_array_ref(x: Any) -> bool:
    """Whether ``x`` is a ``jax.Ref`` (a mutable array), concrete or traced."""
    if isinstance(x, Ref):
        return True
    return isinstance(x, jax.Array) and isinstance(jax.typeof(x), jax.ref.AbstractRef)


def _copy_tree(x: Any) -> Any:
    """A copy of the containers of ``x`` (the leaves are shared)."""
    return jax.tree.map(lambda leaf: leaf, x)


def _run_hooks(hooks: Any, *args: Any) -> Any:
    """Run one hook or a tuple of hooks, threading the value (``args[1]``) through."""
    variable, value, *rest = args
    for hook in hooks if isinstance(hooks, tuple) else (hooks,):
        out = hook(variable, value, *rest)
        if not rest:
            value = out
    return value


def _remap_sharding_metadata(metadata: dict[str, Any]) -> None:
    """Rename the deprecated ``sharding``/``sharding_names`` entries to ``out_sharding``."""
    for old in ("sharding", "sharding_names"):
        if old in metadata:
            warnings.warn(
                f"'{old}' is deprecated, use 'out_sharding' instead.",
                DeprecationWarning,
                stacklevel=4,
            )
            metadata["out_sharding"] = metadata.pop(old)


def _size_comment(value: Any) -> str:
    """`` # 6 (24 B)``: the element count and bytes of the arrays in ``value``."""
    size = nbytes = 0
    for leaf in jax.tree.leaves(value):
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            n = int(np.prod(leaf.shape))
            size += n
            dtype = np.dtype(leaf.dtype) if isinstance(leaf.dtype, str) else leaf.dtype
            nbytes += n * int(getattr(dtype, "itemsize", 0))
    if not size:
        return ""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if nbytes > scale:
            return f" # {size:,} ({nbytes / scale:,.1f} {unit})"
    return f" # {size:,} ({nbytes:,} B)"


def _shown_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata a repr shows: the required entries only where not at their default."""
    defaults = {
        "hijax": config.flax_hijax_variable,
        "ref": False,
        "eager_sharding": config.flax_always_shard_variable,
    }
    return {k: v for k, v in metadata.items() if not (k in defaults and v == defaults[k])}


@dataclasses.dataclass
class VariableMetadata(tp.Generic[A]):
    """A value with the metadata and hooks a Variable built from it gets
    (``nnx.with_metadata`` initializers return one)."""

    raw_value: A
    on_set_value: tuple[SetValueHook, ...] = ()
    on_get_value: tuple[GetValueHook, ...] = ()
    on_create_value: tuple[CreateValueHook, ...] = ()
    on_add_axis: tuple[AddAxisHook, ...] = ()
    on_remove_axis: tuple[RemoveAxisHook, ...] = ()
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _same_array_type(value: Any, raw: jax.Array) -> bool:
    return (
        isinstance(value, jax.Array)
        and value.shape == raw.shape
        and value.dtype == raw.dtype
        and getattr(value, "sharding", None) == getattr(raw, "sharding", None)
    )


def _take_variable_metadata(
    value: VariableMetadata[Any],
    metadata: dict[str, Any],
    hijax: bool | None,
    ref: bool | None,
    eager_sharding: bool | None,
) -> tuple[bool | None, bool | None, bool | None, Any]:
    """Merge a ``VariableMetadata``'s entries and hooks into ``metadata``; the required
    flags it carries must agree with the constructor's arguments."""
    aux = dict(value.metadata)
    given = {"hijax": hijax, "ref": ref, "eager_sharding": eager_sharding}
    for key in ("hijax", "ref", "eager_sharding"):
        if key in aux:
            if given[key] is not None and given[key] != aux[key]:
                raise ValueError(
                    f"Cannot specify {key} both in VariableMetadata and as an argument to "
                    "Variable constructor."
                )
            given[key] = aux.pop(key) if key != "eager_sharding" else aux[key]
    metadata.update(aux)
    for hook in _HOOKS:
        hooks = getattr(value, hook)
        if hook not in metadata and hooks:
            metadata[hook] = hooks
    return given["hijax"], given["ref"], given["eager_sharding"], value.raw_value
