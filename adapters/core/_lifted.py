"""The lifted ``vmap``, ``scan``, ``remat``/``remat_scan``, ``jit``, ``fold_rngs`` and
``map_variables``: ``pack`` plus one pytreemod transform each (control flow is in
``_lifted_control.py``, autodiff in ``_lifted_autodiff.py``).

Every transform here is a small ``inner(scope_fn, repack_fn, variable_groups, rng_groups,
*args)`` handed to ``pack``. The variable groups are plain dicts, so they go straight into
pytreemod's transforms as arguments, each with its own spec: ``lift.vmap`` gives each
group its axis from ``variable_axes`` (``None`` broadcasts) in ``pm.vmap``'s ``in_axes``;
``lift.scan`` passes carried groups as ``pm.Carry``, scanned groups with their axis and
broadcast groups as ``None`` to ``pm.scan``. The pytreemod transform calls
``add_axis``/``remove_axis`` on axis-metadata boxes with ``metadata_params``; there is no
second implementation of vmap or scan here.

Limit (the lifting note's table): carry variables cannot be created inside a ``scan``
body (``CarryVariableInitError``).
"""

import dataclasses
import functools
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import jax
from jax import lax

import pytreemod as pm

from . import _filters, meta
from ._errors import LiftError, PartitioningUnspecifiedError
from ._frozen_dict import unfreeze
from ._lift import pack
from ._lift_util import (
    NO_AXES,
    is_scope,
    merge_carry,
    py_numbers_to_arrays,
    scope_paths,
    unzip2,
)
from ._scope import LazyRng, Scope


class _Broadcast:
    """Marks a ``scan`` argument (in ``in_axes``) that every iteration sees whole."""

    def __repr__(self) -> str:
        return "broadcast"


broadcast: _Broadcast = _Broadcast()
"""``in_axes`` entry of ``lift.scan`` for an argument that is not scanned over."""


_A = TypeVar("_A")


@dataclasses.dataclass(frozen=True)
class In(Generic[_A]):
    """``variable_axes`` value used only for the transform's inputs."""

    axis: _A


@dataclasses.dataclass(frozen=True)
class Out(Generic[_A]):
    """``variable_axes`` value used only for the transform's outputs."""

    axis: _A


def _split_in_out_axes(xs: Mapping[Any, Any]) -> tuple[dict[Any, Any], dict[Any, Any]]:
    unwrap = lambda v: v.axis if isinstance(v, (In, Out)) else v
    ins = {k: unwrap(v) for k, v in xs.items() if not isinstance(v, Out)}
    outs = {k: unwrap(v) for k, v in xs.items() if not isinstance(v, In)}
    return ins, outs


def _per_arg(spec: Any, nargs: int, what: str) -> tuple[Any, ...]:
    """One spec per positional argument (a single spec applies to all of them)."""
    if isinstance(spec, (tuple, list)):
        if len(spec) != nargs:
            raise LiftError(
                f"{what} has {len(spec)} entries but {nargs} positional argument(s) were "
                "given (after the scope); give one entry per argument or a single axis."
            )
        return tuple(spec)
    return (spec,) * nargs


def _axis_leaves(spec: Any, tree: Any, what: str) -> list[tuple[Any, Any]]:
    """``(axis, array)`` for every array under ``tree``, with ``spec`` as a prefix."""
    pairs: list[tuple[Any, Any]] = []

    def visit(axis: Any, sub: Any) -> None:
        pairs.extend((axis, leaf) for leaf in jax.tree.leaves(sub) if pm.is_array(leaf))

    try:
        jax.tree.map(visit, spec, tree, is_leaf=lambda x: x is None or x is broadcast)
    except (ValueError, TypeError) as e:
        raise LiftError(
            f"{what} {spec!r} is not a prefix of the arguments' structure ({e})."
        ) from None
    return pairs


def _mapped_size(given: int | None, pairs: list[tuple[Any, Any]], what: str, name: str) -> int:
    sizes = {leaf.shape[ax] for ax, leaf in pairs if isinstance(ax, int)}
    if given is not None:
        return given
    if len(sizes) > 1:
        raise LiftError(f"lift.{name}: inconsistent {what}s {sorted(sizes)} of the inputs.")
    if not sizes:
        raise LiftError(
            f"lift.{name}: the {what} cannot be inferred (no input is mapped); pass "
            f"{'axis_size' if name == 'vmap' else 'length'}=... ."
        )
    return sizes.pop()


def _split_keys(group: tuple[dict[str, Any], ...], n: int) -> tuple[dict[str, Any], ...]:
    # The keys inside each LazyRng are split (its path suffix is kept), as in Flax.
    return tuple(jax.tree.map(lambda k: jax.random.split(k, n), g) for g in group)


def _no_broadcast(spec: Any) -> Any:
    """``broadcast`` entries of a scan spec become ``None`` (pytreemod's spelling)."""
    if spec is broadcast:
        return None
    if isinstance(spec, (tuple, list)):
        return type(spec)(_no_broadcast(s) for s in spec)
    if isinstance(spec, Mapping):
        return {k: _no_broadcast(v) for k, v in spec.items()}
    return spec


def _contains(spec: Any, marker: Any) -> bool:
    if spec is marker:
        return True
    if isinstance(spec, (tuple, list)):
        return any(_contains(s, marker) for s in spec)
    if isinstance(spec, Mapping):
        return any(_contains(s, marker) for s in spec.values())
    return False


# ----------------------------------------------------------------------------- boxes


def _remove_axes(groups: Sequence[Any], axes: Sequence[Any], params: Any) -> tuple[Any, ...]:
    """As in Flax, boxes of a mapped group lose the axis before the transform sees the
    (still stacked) values; a box may change its value there (e.g. broadcast it)."""
    return tuple(
        g if ax is None else meta.remove_axis(g, ax, params) for g, ax in zip(groups, axes)
    )


def _add_axes(groups: Sequence[Any], axes: Sequence[Any], params: Any) -> tuple[Any, ...]:
    """The boxes of a mapped output group gain the axis after the values are stacked."""
    return tuple(g if ax is None else meta.add_axis(g, ax, params) for g, ax in zip(groups, axes))


def _hide_boxes(groups: Sequence[Any]) -> tuple[tuple[list[Any], ...], tuple[Any, ...]]:
    """The leaves and tree structures of ``groups``: the pytreemod transform sees plain
    arrays, so it does not touch the boxes' metadata a second time."""
    flat = [jax.tree.flatten(g) for g in groups]
    return tuple(f[0] for f in flat), tuple(f[1] for f in flat)


def _show_boxes(leaves: Sequence[Any], treedefs: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(jax.tree.unflatten(t, list(x)) for t, x in zip(treedefs, leaves))


# ----------------------------------------------------------------------------- vmap


def _check_partition_name(groups: Iterable[Any], axes: Iterable[Any], params: Any) -> None:
    """Flax's rule: a ``Partitioned`` box that gains or loses a mapped axis needs the
    axis's name in ``metadata_params`` (``PartitioningUnspecifiedError`` otherwise)."""
    if pm.PARTITION_NAME in params:
        return
    for group, axis in zip(groups, axes):
        if axis is None:
            continue
        for leaf in jax.tree.leaves(group, is_leaf=pm.is_box):
            if isinstance(leaf, pm.Partitioned):
                raise PartitioningUnspecifiedError(leaf)


def vmap(
    fn: Callable[..., Any],
    variable_axes: Mapping[Any, Any],
    split_rngs: Mapping[Any, bool],
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: str | None = None,
    spmd_axis_name: str | None = None,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[..., Any]:
    """A lifted ``jax.vmap``: ``pack`` plus ``pytreemod.vmap``.

    **Arguments:**

    - ``fn``: a scope function ``fn(scope, *args)``.
    - ``variable_axes``: ``{collection_filter: axis}``; each group is lifted with that
      axis (``None``: shared/broadcast). Wrap an axis in ``In``/``Out`` to use it only for
      inputs/outputs. Collections no filter matches are not available inside.
    - ``split_rngs``: ``{rng_filter: bool}``; split streams get a different key per
      index, the others the same key.
    - ``in_axes``/``out_axes``: as in ``jax.vmap``, for the arguments after the scope and
      for the output.
    - ``axis_size``, ``axis_name``, ``spmd_axis_name``: as in ``jax.vmap``.
    - ``metadata_params``: passed to ``add_axis``/``remove_axis`` of axis-metadata boxes
      (e.g. ``{pm.PARTITION_NAME: 'heads'}``).

    >>> import jax, jax.numpy as jnp
    >>> from adapters.core import init, lift, nn
    >>> batch_dense = lift.vmap(nn.dense, variable_axes={'params': 0},
    ...                         split_rngs={'params': True}, in_axes=(0, None))
    >>> y, v = init(batch_dense)(jax.random.key(0), jnp.ones((3, 2)), 4)
    >>> v['params']['kernel'].shape
    (3, 2, 4)
    """
    var_in, var_out = _split_in_out_axes(variable_axes)
    in_groups, in_axes_v = unzip2(var_in.items())
    out_groups, out_axes_v = unzip2(var_out.items())
    rng_filters, rng_splits = unzip2(split_rngs.items())
    rng_axes = tuple(0 if split else None for split in rng_splits)
    params = dict(metadata_params or {})

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
    ) -> Any:
        arg_axes = _per_arg(in_axes, len(args), "lift.vmap in_axes")
        if any(rng_splits):
            pairs = _axis_leaves(tuple(in_axes_v), tuple(variable_groups), "variable_axes")
            pairs += _axis_leaves(arg_axes, args, "in_axes")
            size = _mapped_size(axis_size, pairs, "mapped axis size", "vmap")
            rng_groups = tuple(
                _split_keys(g, size) if split else g for g, split in zip(rng_groups, rng_splits)
            )

        _check_partition_name(variable_groups, in_axes_v, params)
        in_leaves, in_trees = _hide_boxes(_remove_axes(variable_groups, in_axes_v, params))
        out_trees: list[Any] = []

        def mapped(leaves: Any, rng_groups: Any, *args: Any) -> Any:
            scope = scope_fn(_show_boxes(leaves, in_trees), rng_groups)
            y = fn(scope, *args)
            out_leaves, trees = _hide_boxes(repack_fn(scope))
            out_trees[:] = trees
            return y, out_leaves

        y, out_leaves = pm.vmap(
            mapped,
            in_axes=(tuple(in_axes_v), rng_axes, *arg_axes),
            out_axes=(out_axes, tuple(out_axes_v)),
            axis_size=axis_size,
            axis_name=axis_name,
            spmd_axis_name=spmd_axis_name,
            metadata_params=params,
        )(in_leaves, tuple(rng_groups), *args)
        out_groups = _show_boxes(out_leaves, out_trees)
        _check_partition_name(out_groups, out_axes_v, params)
        return y, _add_axes(out_groups, out_axes_v, params)

    return pack(inner, in_groups, out_groups, rng_filters, name="vmap")


# ----------------------------------------------------------------------------- scan


def _take(x: Any, axis: int, index: int) -> Any:
    return lax.index_in_dim(x, index, axis, keepdims=False) if pm.is_array(x) else x


def _slice_tree(tree: Any, axis: int, index: int, params: Mapping[Any, Any]) -> Any:
    """Element ``index`` along ``axis`` of every array (boxes lose the axis's metadata)."""

    def one(x: Any) -> Any:
        if pm.is_box(x):
            return jax.tree.map(lambda v: _take(v, axis, index), x).remove_axis(axis, params)
        return _take(x, axis, index)

    return jax.tree.map(one, tree, is_leaf=pm.is_box)


def _slice_prefix(spec: Any, tree: Any, index: int, params: Mapping[Any, Any]) -> Any:
    return jax.tree.map(
        lambda ax, sub: sub if ax is None else _slice_tree(sub, ax, index, params),
        spec,
        tree,
        is_leaf=lambda x: x is None,
    )


def scan(
    fn: Callable[..., Any],
    variable_axes: Mapping[Any, Any] = NO_AXES,
    variable_broadcast: Any = False,
    variable_carry: Any = False,
    split_rngs: Mapping[Any, bool] = NO_AXES,
    in_axes: Any = 0,
    out_axes: Any = 0,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    _split_transpose: bool = False,
    data_transform: Callable[..., Any] | None = None,
    metadata_params: Mapping[Any, Any] | None = None,
    check_constancy_invariants: bool = True,
) -> Callable[..., Any]:
    """A lifted ``jax.lax.scan``: ``pack`` plus ``pytreemod.scan``.

    The body is ``fn(scope, carry, *xs) -> (carry, ys)``; the result is a scope function
    ``(scope, carry, *xs) -> (carry, ys)``.

    **Arguments:**

    - ``variable_axes``: ``{collection_filter: axis}`` of collections scanned over (one
      slice per iteration; created variables are stacked along ``axis``).
    - ``variable_broadcast``: collections every iteration sees whole and read-only. When
      they may be created (during ``init``), the body runs once before the loop to create
      them, so they must not depend on the carry or on ``xs``.
    - ``variable_carry``: collections carried from one iteration to the next; they must
      exist before the scan (``CarryVariableInitError`` otherwise).
    - ``split_rngs``: ``{rng_filter: bool}``; split streams differ per iteration.
    - ``in_axes``/``out_axes``: scanned axis of each argument after the carry (a prefix;
      ``broadcast`` for an argument seen whole) and of the outputs.
    - ``length``, ``reverse``, ``unroll``: as in ``jax.lax.scan``.
    - ``data_transform``: optional ``(variable_groups, rng_groups) -> (variable_groups,
      rng_groups)`` applied inside each iteration.
    - ``metadata_params``: passed to the boxes' ``add_axis``/``remove_axis``.

    - ``check_constancy_invariants``: as in Flax, the body is traced once more outside the
      loop (``False`` saves that trace; broadcast variables are then created by that
      extra run only when they may be created).

    ``_split_transpose`` is accepted for signature compatibility with Flax; broadcast
    outputs (``broadcast`` in ``out_axes``) are not supported.
    """
    var_in, var_out = _split_in_out_axes(variable_axes)
    in_groups, in_axes_v = unzip2(var_in.items())
    out_groups, out_axes_v = unzip2(var_out.items())
    for ax in (*in_axes_v, *out_axes_v):
        if not isinstance(ax, int) or isinstance(ax, bool):
            raise LiftError(
                f"lift.scan variable_axes values must be int axes, got {ax!r}; use "
                "variable_broadcast for collections shared by every iteration."
            )
    if _contains(out_axes, broadcast):
        raise LiftError(
            "lift.scan: broadcast outputs (broadcast in out_axes) are not supported; return "
            "the value from outside the scan instead."
        )
    rng_filters, rng_splits = unzip2(split_rngs.items())
    rng_axes = tuple(0 if split else None for split in rng_splits)
    params = dict(metadata_params or {})
    bcast_filter = _filters.to_filter(variable_broadcast)
    read_only_broadcast = _filters.to_filter(pm.Not(bcast_filter))

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        init: Any,
        *args: Any,
    ) -> Any:
        arg_axes = tuple(_no_broadcast(a) for a in _per_arg(in_axes, len(args), "in_axes"))
        n = _mapped_size(length, _axis_leaves(arg_axes, args, "in_axes"), "scan length", "scan")
        rng_groups = tuple(
            _split_keys(g, n) if split else g for g, split in zip(rng_groups, rng_splits)
        )
        bcast_in, carry_in = variable_groups[0], variable_groups[1]
        scan_in = tuple(variable_groups[2:])
        _check_partition_name(scan_in, in_axes_v, params)
        scan_leaves, scan_trees = _hide_boxes(_remove_axes(scan_in, in_axes_v, params))
        scan_out_trees: list[Any] = []
        bcast_out: tuple[dict[str, Any], ...] = tuple({} for _ in bcast_in)

        probe = scope_fn(variable_groups, rng_groups)
        scopes = [s for s in jax.tree.leaves(probe, is_leaf=is_scope) if is_scope(s)]
        where = scope_paths(probe)
        for s in scopes:
            s.invalidate()
        creates_bcast = any(
            _filters.may_overlap(s.mutable, bcast_filter, tuple(s._variables)) for s in scopes
        )
        if creates_bcast or check_constancy_invariants:
            # One run of the body outside the loop (Flax's extra trace): it creates the
            # broadcast variables when they may be created, else it is only traced.
            first = n - 1 if reverse else 0

            def run_first() -> Any:
                xs0 = tuple(_slice_prefix(a, x, first, params) for a, x in zip(arg_axes, args))
                scan0 = _show_boxes(
                    [[_take(x, ax, first) for x in g] for g, ax in zip(scan_leaves, in_axes_v)],
                    scan_trees,
                )
                rngs0 = tuple(
                    jax.tree.map(lambda k: k[first], g) if split else g
                    for g, split in zip(rng_groups, rng_splits)
                )
                groups0: Any = (bcast_in, carry_in, *scan0)
                if data_transform is not None:
                    groups0, rngs0 = data_transform(groups0, rngs0)
                scope0 = scope_fn(groups0, rngs0)
                fn(scope0, init, *xs0)
                return repack_fn(scope0)[0]

            if creates_bcast:
                bcast_out = run_first()
                bcast_in = tuple({**b, **o} for b, o in zip(bcast_in, bcast_out))
            else:
                jax.eval_shape(run_first)

        def body(carry: Any, bcast: Any, scan_vars: Any, rngs: Any, *xs: Any) -> Any:
            carry_vars, c = carry
            groups = (bcast, carry_vars, *_show_boxes(scan_vars, scan_trees))
            if data_transform is not None:
                groups, rngs = data_transform(groups, rngs)
            scope = scope_fn(groups, rngs, mutable_filter=read_only_broadcast)
            c, y = fn(scope, c, *xs)
            out = repack_fn(scope)
            new_carry = merge_carry("scan", where, carry_vars, out[1])
            out_leaves, trees = _hide_boxes(out[2:])
            scan_out_trees[:] = trees
            return (new_carry, c), (y, out_leaves)

        (carry_out, c), (ys, scan_out) = pm.scan(
            body,
            in_axes=(pm.Carry, None, tuple(in_axes_v), rng_axes, *arg_axes),
            out_axes=(pm.Carry, (out_axes, tuple(out_axes_v))),
            length=n,
            reverse=reverse,
            unroll=unroll,
            metadata_params=params,
        )((carry_in, init), bcast_in, scan_leaves, rng_groups, *args)
        scan_out = _show_boxes(scan_out, scan_out_trees)
        _check_partition_name(scan_out, out_axes_v, params)
        return (c, ys), (bcast_out, carry_out, *_add_axes(scan_out, out_axes_v, params))

    return pack(
        inner,
        (bcast_filter, variable_carry, *in_groups),
        (bcast_filter, variable_carry, *out_groups),
        rng_filters,
        name="scan",
    )


def remat_scan(
    body_fn: Callable[..., Any],
    lengths: Sequence[int],
    policy: Callable[..., bool] | None = None,
    variable_broadcast: Any = False,
    variable_carry: Any = False,
    variable_axes: Mapping[Any, Any] = types.MappingProxyType({True: 0}),
    split_rngs: Mapping[Any, bool] = types.MappingProxyType({True: True}),
) -> Callable[..., Any]:
    """``body_fn`` repeated ``prod(lengths)`` times by nested, rematerialized scans.

    ``body_fn(scope, carry) -> carry``. Each level of nesting is a ``lift.scan`` whose body
    is a ``lift.remat``, so gradient memory grows like ``n ** (1 / len(lengths))`` and the
    compiled program does not grow with depth. Variables get one leading axis per level:
    ``lengths=(10, 10)`` gives kernels of shape ``(10, 10, ...)``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters.core import init, lift, nn
    >>> def body(scope, x):
    ...     return nn.dense(scope, x, x.shape[-1])
    >>> net = lambda scope, x: lift.remat_scan(body, lengths=(2, 3))(scope, x)
    >>> _, v = init(net)(jax.random.key(0), jnp.ones((1, 4)))
    >>> v['params']['kernel'].shape
    (2, 3, 4, 4)
    """
    if not lengths:
        raise LiftError("lift.remat_scan needs at least one length.")
    scan_fn = functools.partial(
        scan,
        variable_broadcast=variable_broadcast,
        variable_carry=variable_carry,
        variable_axes=variable_axes,
        split_rngs=split_rngs,
    )
    if len(lengths) == 1:

        def wrapper(scope: Scope, carry: Any) -> Any:
            return body_fn(scope, carry), ()

        return lambda scope, c: scan_fn(
            remat(wrapper, policy=policy, prevent_cse=False), length=lengths[0]
        )(scope, c)[0]

    def inner_loop(scope: Scope, carry: Any) -> Any:
        carry = remat_scan(
            body_fn,
            lengths[1:],
            policy,
            variable_broadcast,
            variable_carry,
            variable_axes,
            split_rngs,
        )(scope, carry)
        return carry, ()

    looped = remat(inner_loop, policy=policy, prevent_cse=False)
    return lambda scope, c: scan_fn(looped, length=lengths[0])(scope, c)[0]


# ----------------------------------------------------------------------------- remat, jit


def _static_indices(static_argnums: int | Iterable[int]) -> tuple[int, ...]:
    return (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)


def checkpoint(
    fn: Callable[..., Any],
    variables: Any = True,
    rngs: Any = True,
    concrete: bool = False,
    prevent_cse: bool = True,
    static_argnums: int | tuple[int, ...] = (),
    policy: Callable[..., bool] | None = None,
) -> Callable[..., Any]:
    """A lifted ``jax.checkpoint`` (``pack`` plus ``pytreemod.remat``); alias ``remat``.

    ``static_argnums`` index the arguments after the scope (0 is the first of them, as
    in Flax's core); those arguments are closed over as compile-time constants.
    ``policy`` and ``prevent_cse`` are ``jax.checkpoint``'s.
    """
    if concrete:
        raise LiftError(
            "lift.remat(concrete=True) is not supported (JAX removed it); mark the "
            "arguments Python control flow depends on with static_argnums instead."
        )
    static = _static_indices(static_argnums)

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        fixed = {i % len(args): args[i] for i in static if -len(args) <= i < len(args)}
        # As with jax.checkpoint, Python numbers in the other arguments are traced.
        dynamic = [py_numbers_to_arrays(a) for i, a in enumerate(args) if i not in fixed]
        kwargs = py_numbers_to_arrays(kwargs)

        def rematted(variable_groups: Any, rng_groups: Any, *dyn: Any, **kw: Any) -> Any:
            it = iter(dyn)
            full = [fixed[i] if i in fixed else next(it) for i in range(len(args))]
            s = scope_fn(variable_groups, rng_groups)
            y = fn(s, *full, **kw)
            return y, repack_fn(s)

        return pm.remat(rematted, policy=policy, prevent_cse=prevent_cse)(
            variable_groups, rng_groups, *dynamic, **kwargs
        )

    return pack(inner, (variables,), (variables,), (rngs,), name="remat", enable_kwargs=True)


remat = checkpoint


class _Static:
    """A hashable holder making one argument a compile-time constant of ``lift.jit``."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Static)
            and type(self.value) is type(other.value)
            and bool(self.value == other.value)
        )

    def __hash__(self) -> int:
        return hash(self.value)


def _flat_counts(counters: Mapping[Any, Any], prefix: tuple[Any, ...] = ()) -> dict[Any, int]:
    """``{path: count}`` of a scope's nested rng counters."""
    flat: dict[Any, int] = {}
    for k, v in counters.items():
        if isinstance(v, Mapping):
            flat.update(_flat_counts(v, (*prefix, k)))
        else:
            flat[(*prefix, k)] = v
    return flat


def _set_count(counters: dict[Any, Any], path: tuple[Any, ...], n: int) -> None:
    for k in path[:-1]:
        counters = counters.setdefault(k, {})
    counters[path[-1]] = n


class _JitContext(threading.local):
    def __init__(self) -> None:
        self.stack: list[tuple[Callable[..., Any], Callable[..., Any]]] = []


def jit(
    fn: Callable[..., Any],
    variables: Any = True,
    rngs: Any = True,
    static_argnums: int | Iterable[int] = (),
    static_argnames: str | Iterable[str] = (),
    donate_argnums: int | Iterable[int] = (),
    device: Any = None,
    backend: str | None = None,
) -> Callable[..., Any]:
    """A lifted ``jax.jit`` (``pack`` plus ``pytreemod.jit``).

    ``fn(scope, *args)`` is compiled once per input structure, static values and scope
    configuration (mutable collections, flags, rng counters). As in Flax, the path is not
    part of the key, so the same module at several paths is traced once (the trace's
    error messages name the first path); the rng streams go in without their path
    suffix, and the counters advance on every call as the first trace advanced them.
    Non-array arguments are static automatically; ``static_argnums`` (positions in
    ``fn``'s signature, the scope being 0) and ``static_argnames`` force hashable values
    to be static. ``donate_argnums`` (same positions) donate argument buffers. Unlike
    Flax's core ``jit``, ``fn`` takes no module hash key.
    """
    static = {i for i in _static_indices(static_argnums) if i > 0}
    names = {static_argnames} if isinstance(static_argnames, str) else set(static_argnames)
    donate = tuple(pm.DonateState(i + 2) for i in _static_indices(donate_argnums) if i > 0)
    jit_kwargs: dict[str, Any] = {}
    if device is not None:
        jit_kwargs["device"] = device
    if backend is not None:
        jit_kwargs["backend"] = backend
    context = _JitContext()

    def jitted(
        fingerprint: Any, variable_groups: Any, rng_groups: Any, *args: Any, **kwargs: Any
    ) -> Any:
        del fingerprint  # keys the compilation cache only
        scope_fn, repack_fn = context.stack[-1]
        args = tuple(a.value if isinstance(a, _Static) else a for a in args)
        kwargs = {k: v.value if isinstance(v, _Static) else v for k, v in kwargs.items()}
        s = scope_fn(variable_groups, rng_groups)
        y = fn(s, *args, **kwargs)
        return y, repack_fn(s)

    # Flax's nn.jit never warns about retracing (its tests turn warnings into errors).
    compiled = pm.jit(jitted, donate_argnums=donate, warn_retraces=None, **jit_kwargs)
    draws: dict[Any, list[dict[tuple[Any, ...], int]]] = {}

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        probe = scope_fn(variable_groups, rng_groups)
        scopes = jax.tree.leaves(probe, is_leaf=is_scope)
        fingerprint = _Static(
            (
                jax.tree.structure(probe, is_leaf=is_scope),
                tuple(
                    (
                        s.mutable,
                        s.flags,
                        s._lift.key() if s._lift else None,
                        # Keys drawn inside fold the counters in as constants.
                        frozenset(_flat_counts(s.rng_counters).items()),
                    )
                    for s in scopes
                ),
            )
        )
        for s in scopes:
            s.invalidate()
        args = tuple(_Static(a) if i + 1 in static else a for i, a in enumerate(args))
        kwargs = {k: _Static(v) if k in names else v for k, v in kwargs.items()}
        # As in Flax: the keys go in without their path suffix (so one trace serves every
        # path), and the rng counters advance as the first trace advanced them even when
        # the call reuses a compiled program (the body does not run then).
        rng_groups = jax.tree.map(
            lambda r: r.clear_suffix() if isinstance(r, LazyRng) else r,
            rng_groups,
            is_leaf=lambda r: isinstance(r, LazyRng),
        )
        before = [_flat_counts(s.rng_counters) for s in scopes]
        context.stack.append((scope_fn, repack_fn))
        try:
            out = compiled(fingerprint, variable_groups, rng_groups, *args, **kwargs)
        finally:
            context.stack.pop()
        if fingerprint not in draws:
            draws[fingerprint] = [
                {k: v - old.get(k, 0) for k, v in _flat_counts(s.rng_counters).items()}
                for s, old in zip(scopes, before)
            ]
        for s, old, delta in zip(scopes, before, draws[fingerprint]):
            for path, n in delta.items():
                _set_count(s.rng_counters, path, old.get(path, 0) + n)
        return out

    return pack(inner, (variables,), (variables,), (rngs,), name="jit", enable_kwargs=True)


def fold_rngs(
    fn: Callable[..., Any], variables: Any = True, rngs: Any = True
) -> Callable[..., Any]:
    """Run ``fn`` on a lifted scope whose rng streams lose their path suffix (Flax's
    ``fold_rngs``): the keys drawn inside depend on the caller's keys and counters,
    not on where the scope sits in the tree.
    """

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        rng_groups = jax.tree.map(
            lambda r: r.clear_suffix() if isinstance(r, LazyRng) else r,
            rng_groups,
            is_leaf=lambda r: isinstance(r, LazyRng),
        )
        s = scope_fn(variable_groups, rng_groups)
        y = fn(s, *args, **kwargs)
        return y, repack_fn(s)

    return pack(inner, (variables,), (variables,), (rngs,), name="fold_rngs", enable_kwargs=True)


# ----------------------------------------------------------------------------- variables


def _identity(x: Any) -> Any:
    return x


def map_variables(
    fn: Callable[..., Any],
    mapped_collections: Any,
    map_in_fn: Callable[..., Any] = _identity,
    map_out_fn: Callable[..., Any] = _identity,
    init: bool = False,
    mutable: bool = False,
    rngs: Any = True,
    variables: Any = True,
) -> Callable[..., Any]:
    """Give ``fn`` a view of the ``mapped_collections`` transformed by ``map_in_fn``.

    ``map_in_fn``/``map_out_fn`` take and return a ``{collection: ...}`` dict. With
    ``init=True`` the variables are first created (when anything is mutable) by running
    ``fn`` on the untransformed scope and mapped back with ``map_out_fn``; with
    ``mutable=True`` updates made through the view are mapped back with ``map_out_fn``.
    Otherwise the mapped collections are read-only inside. A tied auto-encoder maps the
    encoder's kernel to its transpose this way.
    """
    target_out = mutable or init
    mapped_filter = _filters.to_filter(mapped_collections)

    def wrapper(
        scope_fn: Callable[..., Any],
        repack: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        target, rest = variable_groups
        if init:
            scopes = scope_fn((target, rest), rng_groups)
            leaves = [s for s in jax.tree.leaves(scopes, is_leaf=is_scope) if is_scope(s)]
            if any(not _filters.is_filter_empty(s.mutable) for s in leaves):
                fn(scopes, *args, **kwargs)
                target, _ = repack(scopes)
                target = tuple(map_out_fn(x) for x in target)
            else:
                for s in leaves:
                    s.invalidate()
        target = tuple(map_in_fn(unfreeze(x)) for x in target)
        mfilter: Any = True if target_out else pm.Not(mapped_filter)
        scopes = scope_fn((target, rest), rng_groups, mutable_filter=mfilter)
        y = fn(scopes, *args, **kwargs)
        out_target, out_rest = repack(scopes)
        if target_out:
            out_target = tuple(map_out_fn(x) for x in out_target)
        return y, (out_target, out_rest)

    in_vars = (mapped_collections, variables)
    out_vars = in_vars if target_out else (False, _filters.subtract(variables, mapped_collections))
    return pack(wrapper, in_vars, out_vars, (rngs,), name="map_variables", enable_kwargs=True)


def swap_collection(fn: Callable[..., Any], col_a: str, col_b: str) -> Callable[..., Any]:
    """``fn`` sees collection ``col_a`` as ``col_b`` and vice versa (both mutable)."""

    def swap(target: dict[str, Any]) -> dict[str, Any]:
        a, b = target.get(col_a, {}), target.get(col_b, {})
        target[col_b], target[col_a] = a, b
        return target

    return map_variables(fn, (col_a, col_b), swap, swap, mutable=True)
