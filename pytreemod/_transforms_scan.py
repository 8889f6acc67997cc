"""``scan`` over modules (scan over layers): ``Carry``, an int axis, ``None`` or ``StateAxes``
per positional argument. ``_cached_body`` keeps one body per argument structure.

One call runs in steps, each a function below: ``_plan`` resolves the mode of every array
of the arguments (carried, scanned along an axis, broadcast), removes the scanned axis
from the boxes of scanned state and checks the scanned lengths; ``_make_body`` builds the
function ``jax.lax.scan`` iterates (rebuild the iteration's arguments, call, split the
output into the new carry and the stacked outputs); ``_stacked_outputs`` puts the stacked
axes in place and adds box axes; ``_rebuild_carry`` reassembles the carried arguments from
their carried, scanned and broadcast state.
"""

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar, overload

import jax
import jax.numpy as jnp

from ._errors import ShardingError, TransformError, require_callable
from ._meta import add_axis
from ._pack import Skeleton, pack, unpack
from ._sharding._types import entries, explicit_mesh
from ._transforms_axes import (
    Carry,
    StateAxes,
    _args_spec,
    _check_axis,
    _describe,
    _remove_box_axes,
    _slot_specs,
)
from ._tree import Path, format_path

P = ParamSpec("P")
R = TypeVar("R")


class _CarrySlot:
    """Placeholder for the carry inside a scan's output while the rest is packed."""

    def __repr__(self) -> str:
        return "<carry>"


_CARRY_SLOT = _CarrySlot()


def _contains_carry(spec: Any) -> bool:
    if spec is Carry:
        return True
    if isinstance(spec, StateAxes):
        return any(a is Carry for _, a in spec.items)
    if isinstance(spec, Mapping):
        return any(_contains_carry(v) for v in spec.values())
    if isinstance(spec, (tuple, list)):
        return any(_contains_carry(v) for v in spec)
    return False


def _take_carry(out: Any, spec: Any, found: list[Any]) -> Any:
    """Replace the subtree of ``out`` at the ``Carry`` of ``spec`` by a placeholder."""
    if spec is Carry:
        found.append(out)
        return _CARRY_SLOT
    if isinstance(spec, (tuple, list)) and isinstance(out, (tuple, list)):
        if len(spec) != len(out):
            raise TransformError(
                f"scan out_axes {spec!r} has {len(spec)} entries but the function returned "
                f"{len(out)}; out_axes must be a prefix of the output."
            )
        return type(out)(_take_carry(o, s, found) for o, s in zip(out, spec))
    if isinstance(spec, Mapping) and isinstance(out, Mapping):
        return {k: _take_carry(out[k], spec[k], found) if k in spec else out[k] for k in out}
    return out


def _argument_name(fun: Callable[..., Any], index: int) -> str:
    """```name`` (positional i)` for positional argument ``index`` of ``fun``, from its
    signature (only on error paths: ``inspect.signature`` is not free)."""
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return f"positional argument {index}"
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    for i, p in enumerate(positional):
        if p.kind is p.VAR_POSITIONAL:
            return f"argument `*{p.name}[{index - i}]` (positional {index})"
        if i == index:
            return f"argument `{p.name}` (positional {index})"
    return f"positional argument {index}"


def _name_input(fun: Callable[..., Any], path: Path) -> str:
    """Name an array of the packed arguments by the user's argument and the path in it."""
    head = path[0] if path else None
    if not isinstance(head, int):
        return f"args{format_path(path)}"
    rest = f" at {format_path(path[1:])}" if len(path) > 1 else ""
    return f"{_argument_name(fun, head)}{rest}"


@dataclasses.dataclass(frozen=True)
class _Options:
    """What the user passed to ``scan`` besides the function."""

    in_axes: Any
    out_axes: Any
    length: int | None
    reverse: bool
    unroll: int | bool
    params: Mapping[Any, Any]
    split_transpose: bool = False


@dataclasses.dataclass(frozen=True)
class _Plan:
    """One call's arguments, resolved: which array is carried, scanned or broadcast."""

    args: tuple[Any, ...]
    arg_specs: tuple[Any, ...]  # one spec per positional argument
    carry_args: list[int]  # positions of the arguments that contain Carry
    skel: Skeleton
    arrays: list[Any]
    mode: dict[int, Any]  # slot -> Carry, an int axis, or None (broadcast)
    carry_idx: list[int]  # indices into ``arrays`` of the carried arrays
    xs_idx: list[int]  # indices into ``arrays`` of the scanned arrays
    xs: list[Any]  # the scanned arrays, scanned axis moved to the front
    length: int


def _plan(fun: Callable[..., Any], args: tuple[Any, ...], opts: _Options) -> _Plan:
    spec = _args_spec(opts.in_axes, len(args), "scan in_axes")
    arg_specs = spec if isinstance(spec, tuple) else (spec,) * len(args)
    carry_args = [i for i, s in enumerate(arg_specs) if _contains_carry(s)]
    if bool(carry_args) != _contains_carry(opts.out_axes):
        raise TransformError(
            "scan: in_axes and out_axes must both contain Carry or neither does "
            f"(in_axes={opts.in_axes!r}, out_axes={opts.out_axes!r})."
        )
    skel, arrays, slot_values = pack(args)
    mode = _slot_specs(skel, slot_values, spec, "scan in_axes", "*args")
    skel, arrays = _remove_box_axes(skel, arrays, slot_values, mode, opts.params)
    array_slots = skel.array_slots()
    amode = [mode[s] for s in array_slots]
    carry_idx = [i for i, m in enumerate(amode) if m is Carry]
    xs_idx = [i for i, m in enumerate(amode) if isinstance(m, int)]
    for i in xs_idx:
        where = functools.partial(_name_input, fun, skel.path(array_slots[i]))
        _check_axis("scan", where, arrays[i].shape, amode[i])
    xs = [jnp.moveaxis(arrays[i], amode[i], 0) if amode[i] else arrays[i] for i in xs_idx]
    paths = [skel.path(array_slots[i]) for i in xs_idx]
    length = _scan_length(fun, paths, [x.shape[0] for x in xs], opts.length)
    return _Plan(args, arg_specs, carry_args, skel, arrays, mode, carry_idx, xs_idx, xs, length)


def _scan_length(
    fun: Callable[..., Any], paths: list[Path], lengths: list[int], length: int | None
) -> int:
    """The number of iterations: ``length`` or the scanned inputs' common length."""
    n = length if length is not None else (lengths[0] if lengths else None)
    if n is None:
        raise TransformError("scan: no input is scanned (no int in in_axes), so pass length=... .")
    if all(m == n for m in lengths):
        return n
    # Name the user's arguments (not flattened arrays): the first input of each length.
    firsts: dict[int, Path] = {}
    for path, m in zip(paths, lengths):
        if length is None or m != length:
            firsts.setdefault(m, path)
    found = ", ".join(f"{_name_input(fun, p)} has {m}" for m, p in list(firsts.items())[:4])
    head = (
        f"length={length} but " if length is not None else "the scanned inputs differ in length: "
    )
    raise TransformError(
        f"scan: {head}{found} along the scanned axis; every scanned input must have the "
        "same length (the number of iterations)."
    )


def _split_output(
    out: Any, inner_carry: tuple[Any, ...], plan: _Plan, opts: _Options
) -> tuple[list[Any], list[Any], Any]:
    """Split one iteration's output into (carry arrays, scanned state arrays of the carried
    arguments, the other outputs with a placeholder where the carry was)."""
    found: list[Any] = []
    rest = _take_carry(out, opts.out_axes, found)
    if not plan.carry_args:
        return [], [], rest
    if len(found) != 1:
        raise TransformError(f"scan: out_axes={opts.out_axes!r} must contain exactly one Carry.")
    returned = found[0] if len(plan.carry_args) > 1 else (found[0],)
    specs = [plan.arg_specs[i] for i in plan.carry_args]
    new_carry, state_ys = _split_new_carry(inner_carry, returned, specs)
    return new_carry, state_ys, rest


def _stacked_axes(yskel: Skeleton, yvalues: list[Any], out_axes: Any) -> dict[int, Any]:
    yaxis = _slot_specs(yskel, yvalues, out_axes, "scan out_axes", "output")
    for slot, ax in yaxis.items():
        if ax is None:
            raise TransformError(
                f"scan out_axes: None at {_describe(yskel.path(slot), 'output')}; "
                "outputs other than the carry are stacked over iterations, so give "
                "an int axis (or return the value as part of the carry)."
            )
    return yaxis


def _make_body(
    fun: Callable[..., Any], plan: _Plan, opts: _Options, cell: dict[str, Any]
) -> Callable[[list[Any], list[Any]], Any]:
    """The function ``jax.lax.scan`` iterates; it leaves the outputs' skeleton in ``cell``."""

    def body(carry: list[Any], x: list[Any]) -> Any:
        full = list(plan.arrays)
        for i, c in zip(plan.carry_idx, carry):
            full[i] = c
        for i, v in zip(plan.xs_idx, x):
            full[i] = v
        inner_args = unpack(plan.skel, full)
        out = fun(*inner_args)
        inner_carry = tuple(inner_args[i] for i in plan.carry_args)
        new_carry, state_ys, rest = _split_output(out, inner_carry, plan, opts)
        yskel, yarrays, yvalues = pack(rest)
        cell["ys"] = (yskel, _stacked_axes(yskel, yvalues, opts.out_axes))
        return new_carry, (yarrays, state_ys)

    return body


def _stacked_outputs(
    yskel: Skeleton, yaxis: dict[int, Any], ys: list[Any], params: Mapping[Any, Any]
) -> Any:
    """The stacked outputs with their axes moved into place and box axes added."""
    ys_axes = [yaxis[s] for s in yskel.array_slots()]
    ys = [jnp.moveaxis(y, 0, ax) if isinstance(ax, int) and ax else y for y, ax in zip(ys, ys_axes)]

    def fix_out(slot: int, value: Any) -> Any:
        ax = yaxis[slot]
        return add_axis(value, ax, params) if isinstance(ax, int) else value

    return unpack(yskel, ys, fix_out)


def _rebuild_carry(plan: _Plan, final: list[Any], state_ys: list[Any]) -> Any:
    """The carried arguments after the scan: carried state from the final carry, scanned
    state from the stacked per-iteration values, broadcast state from the input."""
    carry_specs = tuple(plan.arg_specs[i] for i in plan.carry_args)
    cskel, carrays, cvalues = pack(tuple(plan.args[i] for i in plan.carry_args))
    cmode = _slot_specs(cskel, cvalues, carry_specs, "scan in_axes", "carry")
    it_final, it_state = iter(final), iter(state_ys)
    rebuilt = []
    for x, slot in zip(carrays, cskel.array_slots()):
        m = cmode[slot]
        if m is Carry:
            rebuilt.append(next(it_final))
        elif m is None:
            rebuilt.append(x)
        else:
            y = next(it_state)
            rebuilt.append(jnp.moveaxis(y, 0, m) if m else y)
    carry_out = unpack(cskel, rebuilt)
    return carry_out if len(plan.carry_args) > 1 else carry_out[0]


def _check_scanned_axes(xs: list[Any]) -> None:
    """On an Explicit mesh JAX scans only over a replicated leading axis: a stack sharded
    along it (``("layers", "data")``) is a ``ShardingError`` with the fix, not JAX's."""
    for x in xs:
        if explicit_mesh(x) is None or not entries(x)[0]:
            continue
        shape = "x".join(map(str, x.shape))
        raise ShardingError(
            f"scan: an array scanned over ({shape} sharded {jax.typeof(x).sharding.spec}) "
            f"is split along its scanned axis over mesh axes {entries(x)[0]} of an Explicit "
            "mesh, and JAX scans only over a replicated axis. Fix: map that axis's logical "
            "name (metadata_params' PARTITION_NAME, e.g. 'layers') to None in the rules "
            "(('layers', None)), reshard the stack with that axis replicated, or use a mesh "
            "of Auto axes."
        )


_Cache = dict[Any, tuple[Callable[[list[Any], list[Any]], Any], dict[str, Any]]]
_CACHE_SIZE = 32


def _cached_body(
    fun: Callable[..., Any], plan: _Plan, opts: _Options, cache: _Cache
) -> tuple[Callable[[list[Any], list[Any]], Any], dict[str, Any]]:
    """The body ``jax.lax.scan`` iterates and the cell it leaves the outputs' skeleton in.

    When every array is carried or scanned (none is closed over), the body depends only on
    the arguments' skeleton, so one body per skeleton is kept: JAX then finds its traced
    loop in its own cache and a scan called again on the same structure is not traced (nor,
    outside ``jit``, compiled) again."""
    if len(plan.carry_idx) + len(plan.xs_idx) != len(plan.arrays):
        cell: dict[str, Any] = {}
        return _make_body(fun, plan, opts, cell), cell
    key = (plan.skel, tuple(plan.carry_idx), tuple(plan.xs_idx))
    try:
        found = cache.get(key)
    except TypeError:  # an unhashable static leaf: no caching
        cell = {}
        return _make_body(fun, plan, opts, cell), cell
    if found is None:
        # The body keeps the skeleton only, not this call's arrays.
        bare = dataclasses.replace(plan, args=(), arrays=[None] * len(plan.arrays), xs=[])
        cell = {}
        found = (_make_body(fun, bare, opts, cell), cell)
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = found
    return found


def _run(fun: Callable[..., Any], args: tuple[Any, ...], opts: _Options, cache: _Cache) -> Any:
    plan = _plan(fun, args, opts)
    _check_scanned_axes(plan.xs)
    body, cell = _cached_body(fun, plan, opts, cache)
    final, (ys, state_ys) = jax.lax.scan(
        body,
        [plan.arrays[i] for i in plan.carry_idx],
        plan.xs,
        length=plan.length,
        reverse=opts.reverse,
        unroll=opts.unroll,
        _split_transpose=opts.split_transpose,
    )
    yskel, yaxis = cell["ys"]
    out = _stacked_outputs(yskel, yaxis, ys, opts.params)
    if not plan.carry_args:
        return out
    carry_value = _rebuild_carry(plan, final, state_ys)
    return jax.tree.map(
        lambda leaf: carry_value if leaf is _CARRY_SLOT else leaf,
        out,
        is_leaf=lambda leaf: leaf is _CARRY_SLOT,
    )


def _split_new_carry(
    inner: tuple[Any, ...], returned: Any, specs: list[Any]
) -> tuple[list[Any], list[Any]]:
    """Split the carried arguments the body returned into (carry arrays, scanned arrays)."""
    if not isinstance(returned, tuple) or len(returned) != len(inner):
        raise TransformError(
            f"scan: the Carry output must be the {len(inner)} carried argument(s) "
            f"{'as a tuple ' if len(inner) > 1 else ''}in order; got {type(returned).__name__}."
        )
    skel_in, _, _ = pack(inner)
    skel_out, arrays, values = pack(returned)
    if skel_in != skel_out:
        raise TransformError(
            "scan: the carry returned by the body does not have the structure of the carry "
            f"it received (input {skel_in.structure.treedef}, output "
            f"{skel_out.structure.treedef}); carried state must keep its variables, "
            "static fields and metadata from one iteration to the next."
        )
    mode = _slot_specs(skel_out, values, tuple(specs), "scan in_axes", "carry")
    carry, state = [], []
    for x, slot in zip(arrays, skel_out.array_slots()):
        m = mode[slot]
        if m is Carry:
            carry.append(x)
        elif m is not None:
            state.append(x)
    return carry, state


@overload
def scan(
    fun: Callable[P, R],
    *,
    in_axes: Any = (Carry, 0),
    out_axes: Any = (Carry, 0),
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    metadata_params: Mapping[Any, Any] | None = None,
    split_transpose: bool = False,
) -> Callable[P, R]: ...
@overload
def scan(
    fun: None = None,
    *,
    in_axes: Any = (Carry, 0),
    out_axes: Any = (Carry, 0),
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    metadata_params: Mapping[Any, Any] | None = None,
    split_transpose: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def scan(
    fun: Callable[..., Any] | None = None,
    *,
    in_axes: Any = (Carry, 0),
    out_axes: Any = (Carry, 0),
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    metadata_params: Mapping[Any, Any] | None = None,
    split_transpose: bool = False,
) -> Any:
    """``jax.lax.scan`` with JAX-style axes over modules (scan over layers).

    Each positional argument gets a spec in ``in_axes``: ``Carry`` (threaded through the
    iterations), an int (scanned along that axis), ``None`` (broadcast: the same value
    every iteration) or ``StateAxes({filter: axis | None | Carry})`` to split one module's
    state by collection. ``out_axes`` is a prefix of the output: ``Carry`` marks where the
    function returns the new carry (the carried argument, or a tuple of them in order),
    ints stack the other outputs along that axis.

    For an argument split with ``StateAxes``, the function returns the whole updated
    module at its ``Carry`` position: its carried state is threaded, its scanned state is
    stacked back in place, and its broadcast state is read-only (the input's is kept).

    The scan-over-layers pattern::

        layers = pm.vmap(lambda k: Block(..., key=k))(jax.random.split(key, depth))

        @pm.scan(in_axes=(pm.Carry, 0), out_axes=pm.Carry)
        def forward(x, block):
            return block(x)

        y = forward(x, layers)

    Boxes in scanned inputs get ``remove_axis(axis, metadata_params)`` before the loop (on
    the stacked value) and boxes in stacked outputs ``add_axis(axis, metadata_params)``
    after it.

    When no array is broadcast (``None``), the wrapper keeps one loop body per structure
    of its arguments, so calling it again on the same structure (and shapes) does not
    trace ``fun`` again, nor compile the loop again outside ``jit``; as with
    ``jax.lax.scan``, Python state ``fun`` reads while tracing is read once.

    ``length``, ``reverse`` and ``unroll`` are ``jax.lax.scan``'s; ``split_transpose``
    is its ``_split_transpose`` (an experimental option: the backward pass of the scan is
    split in two loops, one for the carry's cotangents and one for the rest).

    Typing: the scanned function has ``fun``'s parameters and return type (stacked
    outputs gain an axis the types do not show). Arguments are positional only.
    """
    if fun is None:
        return functools.partial(
            scan,
            in_axes=in_axes,
            out_axes=out_axes,
            length=length,
            reverse=reverse,
            unroll=unroll,
            metadata_params=metadata_params,
            split_transpose=split_transpose,
        )
    require_callable(fun, "scan")
    params = dict(metadata_params or {})
    opts = _Options(in_axes, out_axes, length, reverse, unroll, params, split_transpose)
    fun_ = fun
    cache: _Cache = {}

    @functools.wraps(fun)
    def wrapper(*args: Any) -> Any:
        return _run(fun_, args, opts, cache)

    return wrapper
