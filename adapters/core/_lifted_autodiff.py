"""Lifted autodiff: ``vjp``, ``jvp``, ``value_and_grad``, ``custom_vjp``.

``value_and_grad`` is ``pack`` plus ``pytreemod.value_and_grad``; ``jvp``, ``vjp`` and
``custom_vjp`` use JAX's transforms directly (pytreemod has no counterpart; the variable
groups are plain PyTrees).
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import pytreemod as pm

from ._errors import LiftError
from ._lift import pack
from ._lift_util import is_scope

# ----------------------------------------------------------------------------- autodiff


def vjp(
    fn: Callable[..., Any],
    scope: Any,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: tuple[Any, ...] = (),
    vjp_variables: Any = "params",
    variables: Any = True,
    rngs: Any = True,
) -> Any:
    """A lifted ``jax.vjp``: ``(y, vjp_fn)`` (``(y, vjp_fn, aux)`` with ``has_aux``).

    ``vjp_fn(y_cotangent)`` returns ``(variables_cotangent, *primals_cotangents)``, the
    first for the ``vjp_variables`` collections (a ``{collection: ...}`` dict per scope).
    """
    if reduce_axes:
        raise LiftError("lift.vjp: reduce_axes is not supported (JAX removed it).")

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
    ) -> Any:
        vjp_vars, other_vars = variable_groups

        def wrapper(vjp_vars: Any, *args: Any) -> Any:
            s = scope_fn((vjp_vars, other_vars), rng_groups)
            if has_aux:
                y, aux = fn(s, *args)
            else:
                y, aux = fn(s, *args), ()
            return y, (aux, repack_fn(s))

        y, bwd, (aux, out_vars) = jax.vjp(wrapper, vjp_vars, *args, has_aux=True)
        treedef = jax.tree.structure(scope, is_leaf=is_scope)
        bwd = jax.tree_util.Partial(functools.partial(_bwd_wrapper, treedef), bwd)
        return ((y, bwd, aux) if has_aux else (y, bwd)), out_vars

    return pack(inner, (vjp_variables, variables), (variables,), (rngs,), name="vjp")(
        scope, *primals
    )


def _bwd_wrapper(treedef: Any, bwd_fn: Callable[..., Any], tangent: Any) -> Any:
    vars_grad, *inputs_grad = bwd_fn(tangent)
    return (treedef.unflatten(vars_grad), *inputs_grad)


def jvp(
    fn: Callable[..., Any],
    scope: Any,
    primals: Sequence[Any],
    tangents: Sequence[Any],
    variable_tangents: Any,
    variables: Any = True,
    rngs: Any = True,
) -> tuple[Any, Any]:
    """A lifted ``jax.jvp``: ``(fn(scope, *primals), tangent_out)``.

    ``variable_tangents`` is ``{collection: tangents}`` (per scope for a tree of scopes);
    the collections it names are differentiated, the others held constant.
    """
    treedef = jax.tree.structure(scope, is_leaf=is_scope)
    var_tangents = tuple(
        {k: v for k, v in vt.items() if v} for vt in treedef.flatten_up_to(variable_tangents)
    )
    target = tuple(var_tangents[0].keys()) if var_tangents else ()

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
    ) -> Any:
        jvp_vars, other_vars = variable_groups

        def wrapper(vars_primals: Any, args: Any) -> Any:
            s = scope_fn((vars_primals, other_vars), rng_groups)
            y = fn(s, *args)
            return y, repack_fn(s)

        (y, out_vars), out_tangents = jax.jvp(
            wrapper, (jvp_vars, tuple(args)), (var_tangents, tuple(tangents))
        )
        return (y, out_tangents[0]), out_vars

    return pack(inner, (target, variables), (variables,), (rngs,), name="jvp")(scope, *primals)


def value_and_grad(
    fn: Callable[..., Any],
    scope: Any,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: tuple[Any, ...] = (),
    variables: Any = True,
    rngs: Any = True,
) -> Any:
    """A lifted ``jax.value_and_grad`` with respect to the inputs (``pytreemod.value_and_grad``).

    Returns ``(y, grads)`` (``(y, aux, grads)`` with ``has_aux``), ``grads`` a tuple with
    one entry per primal. Variables are not differentiated (use ``vjp`` for that).
    """
    if reduce_axes:
        raise LiftError("lift.value_and_grad: reduce_axes is not supported (JAX removed it).")

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
    ) -> Any:
        def wrapper(*args: Any) -> Any:
            s = scope_fn(variable_groups, rng_groups)
            if has_aux:
                y, aux = fn(s, *args)
            else:
                y, aux = fn(s, *args), ()
            return y, (aux, repack_fn(s))

        (y, (aux, out_vars)), grads = pm.value_and_grad(
            wrapper, argnums=tuple(range(len(args))), has_aux=True
        )(*args)
        grads = tuple(jax.tree.map(_float0_if_integer, a, g) for a, g in zip(args, grads))
        return ((y, aux, grads) if has_aux else (y, grads)), out_vars

    return pack(inner, (variables,), (variables,), (rngs,), name="value_and_grad")(scope, *primals)


def _float0_if_integer(primal: Any, grad: Any) -> Any:
    """The gradient JAX gives an integer or boolean input: float0 zeros of its shape
    (``pm.value_and_grad`` leaves such inputs out, with ``None``)."""
    if grad is None and isinstance(primal, jax.Array | np.ndarray):
        if not jnp.issubdtype(primal.dtype, jnp.inexact):
            return np.zeros(primal.shape, jax.dtypes.float0)
    return grad


def custom_vjp(
    fn: Callable[..., Any],
    forward_fn: Callable[..., Any],
    backward_fn: Callable[..., Any],
    grad_vars: Any = "params",
    nondiff_argnums: tuple[int, ...] = (),
) -> Callable[..., Any]:
    """A lifted ``jax.custom_vjp``.

    ``forward_fn(scope, *args) -> (y, residuals)``; ``backward_fn(*nondiff_args,
    residuals, y_cotangent) -> (variables_cotangent, *args_cotangents)`` where the first
    entry is a ``{collection: ...}`` dict (per scope) for the ``grad_vars`` collections.
    ``nondiff_argnums`` are positions in ``fn``'s signature (the scope being 0).
    """

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
    ) -> Any:
        grad_variables, other_variables = variable_groups
        treedef_cell: list[Any] = []

        def f(grad_variables: Any, *args: Any) -> Any:
            s = scope_fn((grad_variables, other_variables), rng_groups)
            y = fn(s, *args)
            return y, repack_fn(s)

        def f_fwd(grad_variables: Any, *args: Any) -> Any:
            s = scope_fn((grad_variables, other_variables), rng_groups)
            treedef_cell[:] = [jax.tree.structure(s, is_leaf=is_scope)]
            y, res = forward_fn(s, *args)
            return (y, repack_fn(s)), res

        def f_bwd(*bwd_args: Any) -> Any:
            nondiff, (res, g) = bwd_args[:-2], bwd_args[-2:]
            g_y, _ = g
            var_t, *inputs_t = backward_fn(*nondiff, res, g_y)
            return (tuple(treedef_cell[0].flatten_up_to(var_t)), *inputs_t)

        custom = jax.custom_vjp(f, nondiff_argnums=nondiff_argnums)
        custom.defvjp(f_fwd, f_bwd)
        return custom(grad_variables, *args)

    return pack(inner, (grad_vars, True), (grad_vars, True), (True,), name="custom_vjp")
