"""``adapters.linen.transforms``: Linen's lifted transforms (``flax.linen.transforms``).

Each transform applies to a Module class (``nn.vmap(Dense, ...)`` returns a subclass whose
``methods``, default ``__call__``, are transformed) or to a module method (as a
decorator), and is the matching ``adapters.core.lift`` transform run through the generic
lifting in ``_transforms_lift``. ``vjp``, ``jvp``, ``grad``, ``value_and_grad``,
``while_loop``, ``cond`` and ``switch`` are called directly on a bound module.
"""

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import jax

from ..core import FrozenDict, lift, meta
from ..core.lift import broadcast as broadcast
from ._module._base import Module
from ._module._context import _derive_profiling_name, _named_call_enabled
from ._transforms_lift import _HashableProxy as _HashableProxy
from ._transforms_lift import decorator_lift_transform as decorator_lift_transform
from ._transforms_lift import lift_direct_transform as lift_direct_transform
from ._transforms_lift import lift_transform as lift_transform
from ._transforms_lift import lift_transform_cached as lift_transform_cached
from ._transforms_lift import module_class_lift_transform as module_class_lift_transform
from ._transforms_scopes import get_module_scopes as get_module_scopes
from ._transforms_scopes import set_module_scopes as set_module_scopes

Target = TypeVar("Target")
C = TypeVar("C")
ModuleT = TypeVar("ModuleT", bound=Module)

_EMPTY: Mapping[Any, Any] = FrozenDict({})


def _id_fn(x: Any) -> Any:
    return x


def vmap(
    target: Target,
    variable_axes: Mapping[Any, Any] = _EMPTY,
    split_rngs: Mapping[Any, bool] = _EMPTY,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: str | None = None,
    spmd_axis_name: str | None = None,
    metadata_params: Mapping[Any, Any] = _EMPTY,
    methods: Any = None,
) -> Target:
    """A lifted ``jax.vmap``: ``variable_axes`` maps collections to the axis of their
    variables (``None``: broadcast), ``split_rngs`` which streams get a key per entry."""
    return lift_transform(
        lift.vmap,
        target,
        variable_axes,
        split_rngs,
        methods=methods,
        in_axes=in_axes,
        out_axes=out_axes,
        axis_size=axis_size,
        axis_name=axis_name,
        metadata_params=metadata_params,
        spmd_axis_name=spmd_axis_name,
    )


def jit(
    target: Target,
    variables: Any = True,
    rngs: Any = True,
    static_argnums: int | Iterable[int] = (),
    static_argnames: str | Iterable[str] = (),
    donate_argnums: int | Iterable[int] = (),
    device: Any = None,
    backend: str | None = None,
    methods: Any = None,
) -> Target:
    """A lifted ``jax.jit``, compiled once per module configuration and input structure.

    ``static_argnums``/``donate_argnums`` index the method's arguments (``self`` = 0).
    """
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    donates = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
    # Core positions: scope = 0, module key = 1, then the method's arguments.
    core_static = (1, *(i + 1 for i in statics if i > 0))
    core_donate = tuple(i + 1 for i in donates if i > 0)
    return lift_transform_cached(
        lift.jit,
        target,
        variables=variables,
        rngs=rngs,
        static_argnums=core_static,
        static_argnames=static_argnames,
        donate_argnums=core_donate,
        device=device,
        backend=backend,
        methods=methods,
    )


def checkpoint(
    target: Target,
    variables: Any = True,
    rngs: Any = True,
    concrete: bool = False,
    prevent_cse: bool = True,
    static_argnums: int | tuple[int, ...] = (),
    policy: Callable[..., bool] | None = None,
    methods: Any = None,
) -> Target:
    """A lifted ``jax.checkpoint`` (rematerialization); ``static_argnums`` index the
    method's arguments (``self`` = 0)."""
    shifted = jax.tree.map(lambda x: x - 1, static_argnums)
    return lift_transform(
        lift.checkpoint,
        target,
        variables=variables,
        rngs=rngs,
        concrete=concrete,
        static_argnums=shifted,
        prevent_cse=prevent_cse,
        policy=policy,
        methods=methods,
    )


remat = checkpoint


def remat_scan(
    target: Target,
    lengths: Sequence[int] | None = (),
    policy: Callable[..., bool] | None = None,
    variable_broadcast: Any = False,
    variable_carry: Any = False,
    variable_axes: Mapping[Any, Any] = FrozenDict({True: 0}),
    split_rngs: Mapping[Any, bool] = FrozenDict({True: True}),
) -> Target:
    """A stack of ``prod(lengths)`` layers as nested ``scan``s with ``remat``."""
    return lift_transform(
        lift.remat_scan,
        target,
        lengths=lengths,
        variable_broadcast=variable_broadcast,
        variable_carry=variable_carry,
        variable_axes=variable_axes,
        split_rngs=split_rngs,
        policy=policy,
    )


def scan(
    target: Target,
    variable_axes: Mapping[Any, Any] = _EMPTY,
    variable_broadcast: Any = False,
    variable_carry: Any = False,
    split_rngs: Mapping[Any, bool] = _EMPTY,
    in_axes: Any = 0,
    out_axes: Any = 0,
    length: int | None = None,
    reverse: bool = False,
    unroll: int = 1,
    data_transform: Callable[..., Any] | None = None,
    metadata_params: Mapping[Any, Any] = _EMPTY,
    methods: Any = None,
    _split_transpose: bool = False,
    check_constancy_invariants: bool = True,
) -> Target:
    """A lifted ``jax.lax.scan`` over a method ``(carry, *xs) -> (carry, ys)``."""
    return lift_transform(
        lift.scan,
        target,
        variable_axes=variable_axes,
        variable_broadcast=variable_broadcast,
        variable_carry=variable_carry,
        split_rngs=split_rngs,
        in_axes=in_axes,
        out_axes=out_axes,
        length=length,
        reverse=reverse,
        unroll=unroll,
        _split_transpose=_split_transpose,
        data_transform=data_transform,
        metadata_params=metadata_params,
        methods=methods,
        check_constancy_invariants=check_constancy_invariants,
    )


def map_variables(
    target: Target,
    mapped_collections: Any = True,
    trans_in_fn: Callable[..., Any] = _id_fn,
    trans_out_fn: Callable[..., Any] = _id_fn,
    init: bool = False,
    mutable: bool = False,
    rngs: Any = True,
    variables: Any = True,
    methods: Any = None,
) -> Target:
    """Map the variables of ``mapped_collections`` on the way in (``trans_in_fn``) and,
    when ``mutable``, on the way out (``trans_out_fn``)."""
    return lift_transform(
        lift.map_variables,
        target,
        mapped_collections,
        trans_in_fn,
        trans_out_fn,
        init,
        mutable,
        rngs,
        variables,
        methods=methods,
    )


def fold_rngs(target: Target, variables: Any = True, rngs: Any = True) -> Target:
    """Run with one fresh key per rng stream per call, without the path suffix (what
    ``jit`` does to them)."""

    def fold(fn: Callable[..., Any], variables: Any = True, rngs: Any = True) -> Any:
        return lift.fold_rngs(fn, variables=variables, rngs=rngs)

    fold.__name__ = "fold_rngs"
    return lift_transform_cached(fold, target, variables=variables, rngs=rngs)


def vjp(
    fn: Callable[..., Any],
    mdl: Module,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: Any = (),
    vjp_variables: Any = "params",
    variables: Any = True,
    rngs: Any = True,
    multi_scope: bool = False,
) -> Any:
    """A lifted ``jax.vjp`` of ``fn(mdl, *primals)``: returns ``(out, vjp_fn)`` where
    ``vjp_fn(cotangent)`` gives ``(variable grads, *input grads)``."""
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to vjp is deprecated")
    return lift_direct_transform(
        lift.vjp,
        (fn,),
        mdl,
        *primals,
        multi_scope=multi_scope,
        has_aux=has_aux,
        vjp_variables=vjp_variables,
        variables=variables,
        rngs=rngs,
    )


def value_and_grad(
    fn: Callable[..., Any],
    mdl: Module,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: Any = (),
    variables: Any = True,
    rngs: Any = True,
) -> Any:
    """A lifted ``jax.value_and_grad`` of a scalar ``fn(mdl, *primals)`` with respect to
    the inputs: ``(value, input grads)`` (``((value, aux), grads)`` with ``has_aux``)."""
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to value_and_grad is deprecated")
    run = functools.partial(
        lift_direct_transform,
        lift.value_and_grad,
        (fn,),
        mdl,
        *primals,
        has_aux=has_aux,
        variables=variables,
        rngs=rngs,
    )
    if has_aux:
        out, aux, argument_grads = run()
        return (out, aux), argument_grads
    out, argument_grads = run()
    return out, argument_grads


def grad(
    fn: Callable[..., Any],
    mdl: Module,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: Any = (),
    variables: Any = True,
    rngs: Any = True,
) -> Any:
    """A lifted ``jax.grad``: the input gradients of a scalar ``fn(mdl, *primals)``."""
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to grad is deprecated")
    out = value_and_grad(fn, mdl, *primals, has_aux=has_aux, variables=variables, rngs=rngs)
    if has_aux:
        (_, aux), argument_grads = out
        return argument_grads, aux
    return out[1]


def jvp(
    fn: Callable[..., Any],
    mdl: Module,
    primals: Any,
    tangents: Any,
    variable_tangents: Any,
    variables: Any = True,
    rngs: Any = True,
) -> Any:
    """A lifted ``jax.jvp`` of ``fn(mdl, *primals)`` with tangents for the inputs and
    ``variable_tangents`` (``{collection: tree}``) for the variables."""
    return lift_direct_transform(
        lift.jvp,
        (fn,),
        mdl,
        primals,
        tangents,
        variable_tangents,
        multi_scope=False,
        variables=variables,
        rngs=rngs,
    )


def while_loop(
    cond_fn: Callable[[ModuleT, C], bool],
    body_fn: Callable[[ModuleT, C], C],
    mdl: ModuleT,
    init: C,
    carry_variables: Any = False,
    broadcast_variables: Any = True,
    split_rngs: Mapping[Any, bool] = _EMPTY,
) -> C:
    """A lifted ``jax.lax.while_loop`` of ``body_fn(mdl, carry)`` while ``cond_fn``."""
    return lift_direct_transform(
        lift.while_loop,
        (cond_fn, body_fn),
        mdl,
        init,
        carry_variables,
        broadcast_variables,
        split_rngs,
    )


def _cond_wrapper(
    t_fn: Any, f_fn: Any, scope: Any, pred: Any, *ops: Any, variables: Any, rngs: Any
) -> Any:
    return lift.cond(pred, t_fn, f_fn, scope, *ops, variables=variables, rngs=rngs)


def cond(
    pred: Any,
    true_fun: Callable[..., C],
    false_fun: Callable[..., C],
    mdl: Module,
    *operands: Any,
    variables: Any = True,
    rngs: Any = True,
) -> C:
    """A lifted ``jax.lax.cond``: both branches are functions of the module."""
    return lift_direct_transform(
        _cond_wrapper, (true_fun, false_fun), mdl, pred, *operands, variables=variables, rngs=rngs
    )


def _switch_wrapper(*args: Any, variables: Any, rngs: Any, n_branches: int) -> Any:
    branches = args[:n_branches]
    scope, index, *operands = args[n_branches:]
    return lift.switch(index, branches, scope, *operands, variables=variables, rngs=rngs)


def switch(
    index: Any,
    branches: Sequence[Callable[..., C]],
    mdl: Module,
    *operands: Any,
    variables: Any = True,
    rngs: Any = True,
) -> C:
    """A lifted ``jax.lax.switch`` over functions of the module."""
    return lift_direct_transform(
        _switch_wrapper,
        tuple(branches),
        mdl,
        index,
        *operands,
        variables=variables,
        rngs=rngs,
        n_branches=len(branches),
    )


def _custom_vjp_single_scope_fn(
    fn: Callable[..., Any],
    backward_fn: Callable[..., Any],
    grad_vars: Any = "params",
    nondiff_argnums: Any = (),
) -> Any:
    nodiff_fn = functools.partial(fn, needs_residual=False)
    forward_fn = functools.partial(fn, needs_residual=True)
    return lift.custom_vjp(nodiff_fn, forward_fn, backward_fn, grad_vars, nondiff_argnums)


def custom_vjp(
    fn: Callable[..., Any],
    forward_fn: Callable[..., Any],
    backward_fn: Callable[..., Any],
    grad_vars: Any = "params",
    nondiff_argnums: Any = (),
) -> Callable[..., Any]:
    """A module method with a custom vjp: ``forward_fn(mdl, *args) -> (out, residuals)``,
    ``backward_fn(residuals, cotangent) -> (variable grads, *input grads)``."""

    def shared_forward_fn(*args: Any, needs_residual: bool, **kwargs: Any) -> Any:
        if needs_residual:
            return forward_fn(*args, **kwargs)
        return fn(*args, **kwargs)

    return decorator_lift_transform(
        _custom_vjp_single_scope_fn,
        shared_forward_fn,
        backward_fn=backward_fn,
        grad_vars=grad_vars,
        nondiff_argnums=nondiff_argnums,
        multi_scope=False,
    )


def named_call(class_fn: Callable[..., Any], force: bool = True) -> Callable[..., Any]:
    """Run a method under ``jax.named_call`` named after the module (and method)."""

    @functools.wraps(class_fn)
    def wrapped_fn(self: Module, *args: Any, **kwargs: Any) -> Any:
        if (not force and not _named_call_enabled()) or self._state.in_setup:
            return class_fn(self, *args, **kwargs)
        full_name = _derive_profiling_name(self, class_fn)
        return jax.named_call(class_fn, name=full_name)(self, *args, **kwargs)

    return wrapped_fn


def add_metadata_axis(
    target: Target,
    variable_axes: Mapping[Any, Any] = _EMPTY,
    metadata_params: Mapping[Any, Any] = _EMPTY,
) -> Target:
    """Add an axis to the metadata boxes of ``variable_axes``' collections (as a ``vmap``
    would), without mapping anything."""

    def add_fn(axis: int) -> Callable[[Any], Any]:
        return lambda x: meta.add_axis(x, axis, metadata_params)

    def remove_fn(axis: int) -> Callable[[Any], Any]:
        return lambda x: meta.remove_axis(x, axis, metadata_params)

    for col_name, axis in variable_axes.items():
        target = map_variables(
            target, col_name, trans_in_fn=remove_fn(axis), trans_out_fn=add_fn(axis), mutable=True
        )
    return target


__all__ = [
    "add_metadata_axis",
    "broadcast",
    "checkpoint",
    "cond",
    "custom_vjp",
    "fold_rngs",
    "grad",
    "jit",
    "jvp",
    "map_variables",
    "named_call",
    "remat",
    "remat_scan",
    "scan",
    "switch",
    "value_and_grad",
    "vjp",
    "vmap",
    "while_loop",
]
