"""``vmap`` over modules: JAX-style axes, ``StateAxes`` per module argument, and box axes
added/removed with ``metadata_params`` (``pm.add_axis``/``pm.remove_axis``)."""

import functools
from collections.abc import Callable, Hashable, Mapping
from typing import Any, ParamSpec, TypeVar, overload

import jax
import jax.numpy as jnp

from ._errors import TransformError, require_callable
from ._meta import add_axis
from ._pack import Skeleton, pack, unpack
from ._sharding._types import entries, explicit_mesh, reshard
from ._transforms_axes import (
    Carry,
    _args_spec,
    _check_axis,
    _describe,
    _remove_box_axes,
    _slot_specs,
)

P = ParamSpec("P")
R = TypeVar("R")


@overload
def vmap(
    fun: Callable[P, R],
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: Hashable | None = None,
    spmd_axis_name: Any = None,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[P, R]: ...
@overload
def vmap(
    fun: None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: Hashable | None = None,
    spmd_axis_name: Any = None,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def vmap(
    fun: Callable[..., Any] | None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: Hashable | None = None,
    spmd_axis_name: Any = None,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Any:
    """``jax.vmap`` over modules.

    ``in_axes``/``out_axes`` are prefixes as in JAX, where a module argument takes an
    int, ``None`` or ``StateAxes({filter: axis_or_None})``. Non-array leaves pass through
    unmapped. Keyword arguments are mapped over axis 0, as in JAX. Axis-metadata boxes in
    mapped inputs get ``remove_axis(axis, metadata_params)`` before the mapping (on the
    stacked value) and boxes in mapped outputs ``add_axis(axis, metadata_params)`` after
    it (on the stacked value), so a box may change its value on the way in and out.

    An ensemble of ``n`` independently initialised models is one call::

        models = pm.vmap(lambda k: MLP(..., key=k))(jax.random.split(key, n))

    and ``metadata_params={pm.PARTITION_NAME: "ensemble"}`` names the new axis in the
    models' ``Partitioned`` boxes.

    Typing: the mapped function has ``fun``'s parameters and return type (a batch of
    modules is typed as the module; arrays gain an axis the types do not show).
    """
    if fun is None:
        return functools.partial(
            vmap,
            in_axes=in_axes,
            out_axes=out_axes,
            axis_size=axis_size,
            axis_name=axis_name,
            spmd_axis_name=spmd_axis_name,
            metadata_params=metadata_params,
        )
    require_callable(fun, "vmap")
    params: Mapping[Any, Any] = dict(metadata_params or {})
    fun_ = fun

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        spec = (_args_spec(in_axes, len(args), "vmap in_axes"), 0)
        skel, arrays, slot_values = pack((args, kwargs))
        slot_axis = _slot_specs(skel, slot_values, spec, "vmap in_axes", "args")
        for slot, ax in slot_axis.items():
            if ax is Carry:
                raise TransformError(
                    f"vmap in_axes: Carry (at {_describe(skel.path(slot), 'args')}) is only "
                    "meaningful in scan; use an int axis or None."
                )
        skel, arrays = _remove_box_axes(skel, arrays, slot_values, slot_axis, params)
        array_axes = [slot_axis[s] for s in skel.array_slots()]
        _check_mapped_sizes(skel, arrays, array_axes, axis_size)
        arrays = _align_mapped_shardings(arrays, array_axes)
        cell: dict[str, Any] = {}

        def body(arrays: list[Any]) -> Any:
            a, k = unpack(skel, arrays)
            out = fun_(*a, **k)
            oskel, oarrays, ovalues = pack(out)
            oaxis = _slot_specs(oskel, ovalues, out_axes, "vmap out_axes", "output")
            axes = [oaxis[s] for s in oskel.array_slots()]
            cell["out"] = (oskel, oaxis, axes)
            mapped = [x for x, ax in zip(oarrays, axes) if ax is not None]
            unmapped = [x for x, ax in zip(oarrays, axes) if ax is None]
            return mapped, unmapped

        mapped, unmapped = jax.vmap(
            body,
            in_axes=(array_axes,),
            out_axes=(0, None),
            axis_size=axis_size,
            axis_name=axis_name,
            spmd_axis_name=spmd_axis_name,
        )(arrays)
        oskel, oaxis, axes = cell["out"]
        it_m, it_u = iter(mapped), iter(unmapped)
        merged = [
            next(it_u) if ax is None else jnp.moveaxis(next(it_m), 0, ax) if ax else next(it_m)
            for ax in axes
        ]

        def fix_out(slot: int, value: Any) -> Any:
            ax = oaxis[slot]
            return value if ax is None else add_axis(value, ax, params)

        return unpack(oskel, merged, fix_out)

    return wrapper


def _check_mapped_sizes(
    skel: Skeleton, arrays: list[Any], axes: list[Any], axis_size: int | None
) -> None:
    """Check from shapes alone (before tracing) that each mapped array has its axis and
    all mapped sizes agree: JAX's own errors name the flattened ``arrays[i]``."""
    slots = skel.array_slots()
    by_size: dict[int, list[int]] = {}  # size -> array indices
    for i, (x, ax) in enumerate(zip(arrays, axes)):
        if ax is not None:
            shape = x.shape
            where = functools.partial(_describe, skel.path(slots[i]), "args")
            _check_axis("vmap", where, shape, ax)
            by_size.setdefault(shape[ax], []).append(i)
    if len(by_size) <= 1 and (axis_size is None or set(by_size) <= {axis_size}):
        return

    def group(size: int, idx: list[int]) -> str:
        paths = [_describe(skel.path(slots[i]), "args") for i in idx[:3]]
        more = f" and {len(idx) - 3} more" if len(idx) > 3 else ""
        return f"size {size}: {', '.join(paths)}{more}"

    found = "; ".join(group(n, idx) for n, idx in by_size.items())
    want = f" and axis_size={axis_size}" if axis_size is not None else ""
    raise TransformError(
        f"vmap: the sizes of the mapped axes{want} do not agree: {found}. "
        "Every mapped input needs the same size; give in_axes=None to what is the same "
        "for every element (e.g. in_axes=(None, 0) for a model and a batch)."
    )


def _align_mapped_shardings(arrays: list[Any], axes: list[Any]) -> list[Any]:
    """On an Explicit mesh JAX's vmap needs every mapped axis sharded alike: an input whose
    mapped axis is replicated (fresh PRNG keys split for an ensemble's members, a stack
    built unplaced) is resharded to the mesh axes another input's mapped axis uses (an
    ensemble sharded over ``data`` by a ``("layers", "data")`` rule). An input that uses
    those mesh axes on another of its axes is left as it is."""
    mapped = [(i, ax) for i, ax in enumerate(axes) if isinstance(ax, int)]
    mesh, target = None, ()
    for i, ax in mapped:
        mesh = explicit_mesh(arrays[i])
        target = entries(arrays[i])[ax] if mesh is not None else ()
        if target:
            break
    if not target:
        return arrays
    out = list(arrays)
    for i, ax in mapped:
        ents = entries(out[i])
        if ents[ax] or any(set(e) & set(target) for e in ents):
            continue
        ents[ax] = target
        out[i] = reshard(out[i], mesh, ents)
    return out
