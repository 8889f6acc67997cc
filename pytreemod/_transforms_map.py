"""``vmap`` over modules: JAX-style axes, ``StateAxes`` per module argument, and box axes
added/removed with ``metadata_params`` (``pm.add_axis``/``pm.remove_axis``)."""

import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
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
    _holds_box,
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

    def run(body: _Body, axes: list[Any], arrays: list[Any], owners: list[Any]) -> Any:
        del owners
        return jax.vmap(
            body,
            in_axes=(axes,),
            out_axes=(0, None),
            axis_size=axis_size,
            axis_name=axis_name,
            spmd_axis_name=spmd_axis_name,
        )(_align_mapped_shardings(arrays, axes))

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = _MapCall("vmap", fun_, in_axes, out_axes, axis_size, params)
        return call(args, kwargs, run)

    return wrapper


@overload
def pmap(
    fun: Callable[P, R],
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
    devices: Sequence[Any] | None = None,
    backend: str | None = None,
    static_broadcasted_argnums: int | Iterable[int] = (),
    donate_argnums: int | Iterable[int] = (),
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[P, R]: ...
@overload
def pmap(
    fun: None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
    devices: Sequence[Any] | None = None,
    backend: str | None = None,
    static_broadcasted_argnums: int | Iterable[int] = (),
    donate_argnums: int | Iterable[int] = (),
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def pmap(
    fun: Callable[..., Any] | None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
    devices: Sequence[Any] | None = None,
    backend: str | None = None,
    static_broadcasted_argnums: int | Iterable[int] = (),
    donate_argnums: int | Iterable[int] = (),
    metadata_params: Mapping[Any, Any] | None = None,
) -> Any:
    """``jax.pmap`` over modules: ``vmap``'s axes (``in_axes``/``out_axes`` prefixes,
    ``StateAxes``, box axes added and removed with ``metadata_params``), the mapped axis
    spread over ``devices`` (its size is the number of devices used).

    - ``static_broadcasted_argnums``: positional arguments handed to ``fun`` as they are
      (arrays included, not traced), the same on every device; their ``in_axes`` entry
      is ignored. Other non-array leaves are static anyway.
    - ``donate_argnums``: positional arguments whose arrays are donated to the
      computation (their buffers may be reused for the outputs; do not use them after
      the call). A static argument cannot be donated.

    Each call compiles afresh: use it for one-off replicated work, ``pm.jit`` with
    shardings for training loops.
    """
    if fun is None:
        return functools.partial(
            pmap,
            in_axes=in_axes,
            out_axes=out_axes,
            axis_name=axis_name,
            axis_size=axis_size,
            devices=devices,
            backend=backend,
            static_broadcasted_argnums=static_broadcasted_argnums,
            donate_argnums=donate_argnums,
            metadata_params=metadata_params,
        )
    require_callable(fun, "pmap")
    params: Mapping[Any, Any] = dict(metadata_params or {})
    static = _argnums(static_broadcasted_argnums)
    donate = _argnums(donate_argnums)
    if set(static) & set(donate):
        raise TransformError(
            f"pmap: argument(s) {sorted(set(static) & set(donate))} are both static "
            "(static_broadcasted_argnums) and donated (donate_argnums); a static argument "
            "is not a buffer, so it cannot be donated."
        )
    options: dict[str, Any] = {"axis_name": axis_name, "devices": devices, "backend": backend}
    if axis_size is not None:
        options["axis_size"] = axis_size
    fun_ = fun

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        n = len(args)
        for i in (*static, *donate):
            if not -n <= i < n:
                raise TransformError(
                    f"pmap: static_broadcasted_argnums/donate_argnums name argument {i} but "
                    f"the function got {n} positional arguments."
                )
        fixed = {i % n: args[i] for i in static}
        dynamic = tuple(a for i, a in enumerate(args) if i not in fixed)
        axes = in_axes
        if fixed and isinstance(in_axes, (tuple, list)) and len(in_axes) == n:
            axes = tuple(a for i, a in enumerate(in_axes) if i not in fixed)
        donated = {i % n for i in donate}
        positions = [i for i in range(n) if i not in fixed]

        def run(body: _Body, array_axes: list[Any], arrays: list[Any], owners: list[Any]) -> Any:
            # Split the arrays into donated and kept ones, so JAX can donate the first.
            heads = [None if o is None else positions[o] for o in owners]
            give = [j for j, h in enumerate(heads) if h in donated]
            keep = [j for j, h in enumerate(heads) if h not in donated]

            def split_body(gave: list[Any], kept: list[Any]) -> Any:
                full: list[Any] = [None] * len(arrays)
                for j, x in zip(give, gave):
                    full[j] = x
                for j, x in zip(keep, kept):
                    full[j] = x
                return body(full)

            return jax.pmap(
                split_body,
                in_axes=([array_axes[j] for j in give], [array_axes[j] for j in keep]),
                out_axes=(0, None),
                donate_argnums=(0,) if give else (),
                **options,
            )([arrays[j] for j in give], [arrays[j] for j in keep])

        call = _MapCall("pmap", fun_, axes, out_axes, axis_size, params, fixed)
        return call(dynamic, kwargs, run)

    return wrapper


def _argnums(argnums: int | Iterable[int]) -> tuple[int, ...]:
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


_Body = Callable[[list[Any]], tuple[list[Any], dict[str, Any]]]


@dataclasses.dataclass(frozen=True)
class _MapCall:
    """One call of a mapping transform (``vmap``, ``pmap``) over modules: pack the
    arguments, resolve each array's axis, run ``body`` under the transform (``run``),
    put the output axes in place and add box axes."""

    name: str
    fun: Callable[..., Any]
    in_axes: Any
    out_axes: Any
    axis_size: int | None
    params: Mapping[Any, Any]
    static: Mapping[int, Any] = dataclasses.field(default_factory=dict)

    def __call__(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run: Callable[[_Body, list[Any], list[Any], list[Any]], Any],
    ) -> Any:
        """``run(body, axes, arrays, owners)`` maps ``body`` over ``arrays`` along
        ``axes``; ``owners`` gives each array's positional argument (``None``: a keyword
        argument's)."""
        name, params = self.name, self.params
        spec = (_args_spec(self.in_axes, len(args), f"{name} in_axes"), 0)
        skel, arrays, slot_values = pack((args, kwargs))
        slot_axis = _slot_specs(skel, slot_values, spec, f"{name} in_axes", "args")
        for slot, ax in slot_axis.items():
            if ax is Carry:
                raise TransformError(
                    f"{name} in_axes: Carry (at {_describe(skel.path(slot), 'args')}) is "
                    "only meaningful in scan; use an int axis or None."
                )
        skel, arrays = _remove_box_axes(skel, arrays, slot_values, slot_axis, params)
        array_axes = [slot_axis[s] for s in skel.array_slots()]
        _check_mapped_sizes(name, skel, arrays, array_axes, self.axis_size)
        cell: dict[str, Any] = {}

        def body(arrays: list[Any]) -> tuple[list[Any], dict[str, Any]]:
            a, k = unpack(skel, arrays)
            if self.static:  # static positional arguments go back in their places
                it = iter(a)
                n = len(a) + len(self.static)
                a = tuple(self.static[i] if i in self.static else next(it) for i in range(n))
            out = self.fun(*a, **k)
            oskel, oarrays, ovalues = pack(out)
            oaxis = _slot_specs(oskel, ovalues, self.out_axes, f"{name} out_axes", "output")
            slots = oskel.array_slots()
            axes = [oaxis[s] for s in slots]
            cell["out"] = (oskel, oaxis, axes)
            mapped = [x for x, ax in zip(oarrays, axes) if ax is not None]
            # Keyed by path: JAX's "got axis spec None but output was batched" error
            # then names the output (a flat list would only give its index). Single
            # quotes only, so JAX's repr of the key shows it unescaped.
            unmapped = {
                f"{i}:{_describe(oskel.path(s), 'output')}".replace('"', "'"): x
                for i, (x, s, ax) in enumerate(zip(oarrays, slots, axes))
                if ax is None
            }
            return mapped, unmapped

        owners = [p[1] if p[0] == 0 else None for p in map(skel.path, skel.array_slots())]
        mapped, unmapped = run(body, array_axes, arrays, owners)
        oskel, oaxis, axes = cell["out"]
        it_m = iter(mapped)
        names = iter(sorted(unmapped, key=lambda k: int(k.split(":", 1)[0])))
        merged = [
            unmapped[next(names)]
            if ax is None
            else jnp.moveaxis(next(it_m), 0, ax)
            if ax
            else next(it_m)
            for ax in axes
        ]

        def fix_out(slot: int, value: Any) -> Any:
            ax = oaxis[slot]
            return value if ax is None or not _holds_box(value) else add_axis(value, ax, params)

        return unpack(oskel, merged, fix_out)


def _check_mapped_sizes(
    name: str, skel: Skeleton, arrays: list[Any], axes: list[Any], axis_size: int | None
) -> None:
    """Check from shapes alone (before tracing) that each mapped array has its axis and
    all mapped sizes agree: JAX's own errors name the flattened ``arrays[i]``."""
    slots = skel.array_slots()
    by_size: dict[int, list[int]] = {}  # size -> array indices
    for i, (x, ax) in enumerate(zip(arrays, axes)):
        if ax is not None:
            shape = x.shape
            where = functools.partial(_describe, skel.path(slots[i]), "args")
            _check_axis(name, where, shape, ax)
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
        f"{name}: the sizes of the mapped axes{want} do not agree: {found}. "
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
