"""The lifted ``remat``, ``jit``, ``fold_rngs`` and ``map_variables``: ``pack`` plus
one pytreemod transform each, a scope at a time (``vmap`` is in ``_lifted_vmap.py``,
``scan`` in ``_lifted_scan.py``, control flow in ``_lifted_control.py``, autodiff in
``_lifted_autodiff.py``).

Every transform here is a small ``inner(scope_fn, repack_fn, variable_groups, rng_groups,
*args)`` handed to ``pack``.
"""

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax

import pytreemod as pm

from . import _filters
from ._errors import LiftError
from ._frozen_dict import unfreeze
from ._lift import pack
from ._lift_util import as_arrays, is_scope
from ._scope import LazyRng


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
        dynamic = [as_arrays(a) for i, a in enumerate(args) if i not in fixed]
        kwargs = as_arrays(kwargs)

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


def _fingerprint(probe: Any, scopes: list[Any]) -> _Static:
    """What a compiled ``lift.jit`` program depends on besides its arguments: the scopes'
    structure, mutable collections, flags, lifting and rng counters (keys drawn inside
    fold the counters in as constants)."""
    return _Static(
        (
            jax.tree.structure(probe, is_leaf=is_scope),
            tuple(
                (
                    s.mutable,
                    s.flags,
                    s._lift.key() if s._lift else None,
                    frozenset(_flat_counts(s.rng_counters).items()),
                )
                for s in scopes
            ),
        )
    )


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
        fingerprint = _fingerprint(probe, scopes)
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
