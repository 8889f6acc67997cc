"""The lifted ``scan`` and ``remat_scan``: ``pack`` plus ``pytreemod.scan``.

``lift.scan`` passes carried groups as ``pm.Carry``, scanned groups with their axis and
broadcast groups as ``None`` to ``pm.scan``, boxes and ``metadata_params`` as they are:
``pm.scan`` removes the scanned axis from the boxes of scanned groups before the loop and
adds it to the boxes of stacked outputs after it. There is no second implementation of
scan, or of the box axes, here. Limit (docs/design/lifting.md): carry variables cannot
be created inside a ``scan`` body (``CarryVariableInitError``).
"""

import dataclasses
import functools
import inspect
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
from jax import lax

import pytreemod as pm

from . import _filters
from ._errors import LiftError
from ._lift import pack
from ._lift_util import NO_AXES, is_scope, merge_carry, scope_paths, unzip2
from ._lifted import remat
from ._lifted_axes import (
    axis_leaves,
    broadcast,
    check_partition_name,
    contains,
    mapped_size,
    no_broadcast,
    per_arg,
    split_in_out_axes,
    split_keys,
)
from ._scope import Scope


def _take(x: Any, axis: int, index: int) -> Any:
    if not pm.is_array(x):
        return x
    return lax.index_in_dim(pm.replicate_axis(x, axis), index, axis, keepdims=False)


def _slice_tree(tree: Any, axis: int, index: int, params: Mapping[Any, Any]) -> Any:
    """Element ``index`` along ``axis`` of every array, as ``pm.scan`` hands iteration
    ``index`` its slice: boxes lose the axis first (``pm.remove_axis``), then the values
    are sliced."""
    return jax.tree.map(lambda v: _take(v, axis, index), pm.remove_axis(tree, axis, params))


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
    - ``metadata_params``: passed to ``pm.scan``, which calls the boxes'
      ``remove_axis`` on the way in and ``add_axis`` on the way out with it.

    - ``check_constancy_invariants``: as in Flax, the body is traced once more outside the
      loop (``False`` saves that trace; broadcast variables are then created by that
      extra run only when they may be created).

    ``_split_transpose`` is accepted for signature compatibility with Flax; broadcast
    outputs (``broadcast`` in ``out_axes``) are not supported.
    """
    var_in, var_out = split_in_out_axes(variable_axes)
    in_groups, in_axes_v = unzip2(var_in.items())
    out_groups, out_axes_v = unzip2(var_out.items())
    for ax in (*in_axes_v, *out_axes_v):
        if not isinstance(ax, int) or isinstance(ax, bool):
            raise LiftError(
                f"lift.scan variable_axes values must be int axes, got {ax!r}; use "
                "variable_broadcast for collections shared by every iteration."
            )
    if contains(out_axes, broadcast):
        raise LiftError(
            "lift.scan: broadcast outputs (broadcast in out_axes) are not supported; return "
            "the value from outside the scan instead."
        )
    rng_filters, rng_splits = unzip2(split_rngs.items())
    bcast_filter = _filters.to_filter(variable_broadcast)
    inner = _Scan(
        fn=fn,
        in_axes=in_axes,
        out_axes=out_axes,
        var_in_axes=in_axes_v,
        var_out_axes=out_axes_v,
        rng_splits=rng_splits,
        length=length,
        reverse=reverse,
        unroll=unroll,
        data_transform=data_transform,
        params=dict(metadata_params or {}),
        bcast_filter=bcast_filter,
        check_constancy_invariants=check_constancy_invariants,
    )
    return pack(
        inner,
        (bcast_filter, variable_carry, *in_groups),
        (bcast_filter, variable_carry, *out_groups),
        rng_filters,
        name="scan",
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _Scan:
    """The body ``lift.scan`` hands to ``pack``: its configuration, and one method per
    part of a call (the probe, the run outside the loop, the loop body)."""

    fn: Callable[..., Any]
    in_axes: Any
    out_axes: Any
    var_in_axes: tuple[int, ...]
    var_out_axes: tuple[int, ...]
    rng_splits: tuple[bool, ...]
    length: int | None
    reverse: bool
    unroll: int | bool
    data_transform: Callable[..., Any] | None
    params: dict[Any, Any]
    bcast_filter: Any
    check_constancy_invariants: bool

    def __call__(
        self,
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        init: Any,
        *args: Any,
    ) -> Any:
        arg_axes = tuple(no_broadcast(a) for a in per_arg(self.in_axes, len(args), "in_axes"))
        pairs = axis_leaves(arg_axes, args, "in_axes")
        sizes = {leaf.shape[ax] for ax, leaf in pairs if isinstance(ax, int)}
        if len(sizes) > 1 or (self.length is not None and sizes - {self.length}):
            self._raise_length_error(init, args, arg_axes)
        n = mapped_size(self.length, pairs, "scan length", "scan")
        rng_groups = tuple(
            split_keys(g, n) if split else g for g, split in zip(rng_groups, self.rng_splits)
        )
        bcast_in, carry_in = variable_groups[0], variable_groups[1]
        scan_in = tuple(variable_groups[2:])
        check_partition_name(scan_in, self.var_in_axes, self.params)
        bcast_out: tuple[dict[str, Any], ...] = tuple({} for _ in bcast_in)
        where, creates_bcast = self._probe(scope_fn, variable_groups, rng_groups)
        if creates_bcast or self.check_constancy_invariants:
            # One run of the body outside the loop (Flax's extra trace): it creates the
            # broadcast variables when they may be created, else it is only traced.
            index = n - 1 if self.reverse else 0
            scan0 = tuple(
                _slice_tree(g, ax, index, self.params) for g, ax in zip(scan_in, self.var_in_axes)
            )
            run_first = functools.partial(
                self._run_once,
                scope_fn,
                repack_fn,
                index,
                (bcast_in, carry_in, *scan0),
                rng_groups,
                init,
                tuple(_slice_prefix(a, x, index, self.params) for a, x in zip(arg_axes, args)),
            )
            if creates_bcast:
                bcast_out = run_first()
                bcast_in = tuple({**b, **o} for b, o in zip(bcast_in, bcast_out))
            else:
                jax.eval_shape(run_first)
        body = functools.partial(self._body, scope_fn, repack_fn, where)
        (carry_out, c), (ys, scan_out) = pm.scan(
            body,
            in_axes=(
                pm.Carry,
                None,
                self.var_in_axes,
                tuple(0 if split else None for split in self.rng_splits),
                *arg_axes,
            ),
            out_axes=(pm.Carry, (self.out_axes, self.var_out_axes)),
            length=n,
            reverse=self.reverse,
            unroll=self.unroll,
            metadata_params=self.params,
        )((carry_in, init), bcast_in, scan_in, rng_groups, *args)
        check_partition_name(scan_out, self.var_out_axes, self.params)
        return (c, ys), (bcast_out, carry_out, *scan_out)

    def _raise_length_error(self, init: Any, args: tuple[Any, ...], arg_axes: Any) -> None:
        """The scanned inputs disagree in length (with each other or with ``length``):
        ``pm.scan`` names them by ``fn``'s parameters (the scope left out, so the carry is
        positional 0, as the caller passes it)."""

        def named(*call_args: Any) -> None:
            del call_args  # never runs: pm.scan checks the lengths first

        try:
            params = list(inspect.signature(self.fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        if params and params[0].kind is not inspect.Parameter.VAR_POSITIONAL:
            params = params[1:]
        named.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        scan = pm.scan(named, in_axes=(None, *arg_axes), out_axes=None, length=self.length)
        try:
            jax.eval_shape(lambda: scan(init, *args))
        except pm.TransformError as error:
            raise LiftError(f"lift.{error}") from None

    def _probe(
        self, scope_fn: Callable[..., Any], variable_groups: Any, rng_groups: Any
    ) -> tuple[str, bool]:
        """The scopes' paths (for messages) and whether the body may create broadcast
        variables (some are mutable and missing)."""
        probe = scope_fn(variable_groups, rng_groups)
        scopes = [s for s in jax.tree.leaves(probe, is_leaf=is_scope) if is_scope(s)]
        for s in scopes:
            s.invalidate()
        creates = any(
            _filters.may_overlap(s.mutable, self.bcast_filter, tuple(s._variables)) for s in scopes
        )
        return scope_paths(probe), creates

    def _run_once(
        self,
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        index: int,
        groups: Any,
        rng_groups: Any,
        init: Any,
        xs: tuple[Any, ...],
    ) -> Any:
        """The body on iteration ``index``'s slices, outside the loop; returns the
        broadcast groups it wrote."""
        rngs = tuple(
            jax.tree.map(lambda k: k[index], g) if split else g
            for g, split in zip(rng_groups, self.rng_splits)
        )
        if self.data_transform is not None:
            groups, rngs = self.data_transform(groups, rngs)
        scope = scope_fn(groups, rngs)
        self.fn(scope, init, *xs)
        return repack_fn(scope)[0]

    def _body(
        self,
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        where: str,
        carry: Any,
        bcast: Any,
        scan_vars: Any,
        rngs: Any,
        *xs: Any,
    ) -> Any:
        """One iteration inside ``pm.scan``; broadcast variables are read-only here."""
        carry_vars, c = carry
        groups = (bcast, carry_vars, *scan_vars)
        if self.data_transform is not None:
            groups, rngs = self.data_transform(groups, rngs)
        read_only_broadcast = _filters.to_filter(pm.Not(self.bcast_filter))
        scope = scope_fn(groups, rngs, mutable_filter=read_only_broadcast)
        c, y = self.fn(scope, c, *xs)
        out = repack_fn(scope)
        new_carry = merge_carry("scan", where, carry_vars, out[1])
        return (new_carry, c), (y, out[2:])


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
