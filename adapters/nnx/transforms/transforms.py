"""``nnx.eval_shape``, ``cond``, ``switch``, ``checkify`` and ``make_jaxpr``.

``eval_shape``, ``cond`` and ``switch`` are ``pm.eval_shape``/``pm.cond``/``pm.switch``
applied to a pure function of the lowered arguments (``general.lifted_call``), the
object graph split before and merged after: graph nodes keep their identity and the
changes a branch makes to its operands are applied to the caller's objects.
``cond``/``switch`` return every operand Variable from each branch so the branches'
outputs agree. The lowered operands and results reach pytreemod as their leaves (NNX's
Variable metadata stays in the treedef), Python numbers as arrays, as JAX traces them
(``general.flat_leaves``). ``checkify`` is ``pm.checkify`` the same way; ``make_jaxpr``
has no pytreemod counterpart and applies ``jax.make_jaxpr`` to the pure function.
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax
from jax.experimental import checkify as jax_checkify

import pytreemod as pm

from .. import extract, graphlib, spmd, variablelib
from .general import Purify, check_unbound, flat_leaves, from_leaves, lifted_call, on_leaves

A = TypeVar("A")


def eval_shape(
    f: Callable[..., A],
    *args: Any,
    graph: bool | None = None,
    graph_updates: bool | None = None,
    **kwargs: Any,
) -> A:
    """``f(*args, **kwargs)`` evaluated abstractly: no FLOPs, no memory for arrays.

    Modules in the result hold ``jax.ShapeDtypeStruct`` values. The arguments are not
    changed (a ``Rngs`` counter advanced inside stays where it was).
    """
    check_unbound(f, "eval_shape")
    graph, updates = extract.resolve_modes(graph, graph_updates)
    (pargs, pkwargs), _ = extract.lower(
        (args, kwargs), graph=graph, graph_updates=updates, name="eval_shape"
    )

    def pure(*pargs: Any, **pkwargs: Any) -> Any:
        (a, k), _ = extract.raise_inputs(
            (pargs, pkwargs), graph=graph, graph_updates=updates, name="eval_shape"
        )
        out = f(*a, **k)
        if not updates:
            extract.check_no_aliases("eval_shape", args=(a, k), out=out)
        # Outputs never alias the (unchanged) inputs here: lower them on their own.
        return extract.lower_outputs(out)

    treedef, leaves = flat_leaves((pargs, pkwargs))
    call = on_leaves(lambda a, k: pure(*a, **k), treedef)
    out = extract.raise_outputs(from_leaves(pm.eval_shape(call, leaves)))
    if graph and updates:
        _attach_abstract_shardings(out)
    return out


def _attach_abstract_shardings(out: Any) -> None:
    """Give each abstract Variable value without a sharding the ``NamedSharding`` its
    metadata asks for, on the Variable's ``mesh`` or else the active mesh (as
    ``flax.nnx.eval_shape`` does: an Auto mesh does not put shardings on the shapes)."""
    active = jax.sharding.get_abstract_mesh()
    active = None if active.empty else active
    for _, node in graphlib.iter_graph(out):
        if not isinstance(node, variablelib.Variable):
            continue
        value = node.get_raw_value()
        mesh = node.get_metadata("mesh", None) or active
        if mesh is None or not isinstance(value, jax.ShapeDtypeStruct) or value.sharding:
            continue
        spec = spmd.get_var_pspec(node) or jax.sharding.PartitionSpec()
        sharding = jax.sharding.NamedSharding(mesh, spec)
        node.set_raw_value(jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding))


def cond(
    pred: Any,
    true_fun: Callable[..., A],
    false_fun: Callable[..., A],
    *operands: Any,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> A:
    """``jax.lax.cond`` with Modules among the operands (see the module docstring)."""
    graph, updates = extract.resolve_modes(graph, graph_updates)

    def transform(purify: Purify) -> Callable[..., Any]:
        def call(*ops: Any) -> Any:
            treedef, leaves = flat_leaves(ops)
            branches = on_leaves(purify(true_fun), treedef), on_leaves(purify(false_fun), treedef)
            return from_leaves(pm.cond(pred, *branches, leaves))

        return call

    return lifted_call(
        transform, operands, {}, graph=graph, graph_updates=updates, name="cond", keep_all=True
    )


def switch(
    index: Any,
    branches: Sequence[Callable[..., A]],
    *operands: Any,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> A:
    """``jax.lax.switch`` with Modules among the operands."""
    graph, updates = extract.resolve_modes(graph, graph_updates)

    def transform(purify: Purify) -> Callable[..., Any]:
        def call(*ops: Any) -> Any:
            treedef, leaves = flat_leaves(ops)
            fns = [on_leaves(purify(b), treedef) for b in branches]
            return from_leaves(pm.switch(index, fns, leaves))

        return call

    return lifted_call(
        transform, operands, {}, graph=graph, graph_updates=updates, name="switch", keep_all=True
    )


def checkify(
    f: Callable[..., A] | Any = extract.Missing,
    *,
    errors: Any = jax_checkify.user_checks,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.experimental.checkify.checkify`` over functions of Modules (``pm.checkify``
    on the lowered arguments): the wrapped function returns ``(error, out)``."""
    if f is extract.Missing:
        return functools.partial(checkify, errors=errors, graph=graph, graph_updates=graph_updates)
    check_unbound(f, "checkify")
    graph, updates = extract.resolve_modes(graph, graph_updates)
    fun = f

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        errors_out: list[Any] = []

        def transform(purify: Purify) -> Callable[..., Any]:
            def call(*pargs: Any, **pkwargs: Any) -> Any:
                treedef, leaves = flat_leaves((pargs, pkwargs))
                pure = on_leaves(lambda a, k: purify(fun)(*a, **k), treedef)
                error, result = pm.checkify(pure, errors=errors)(leaves)
                errors_out.append(error)
                return from_leaves(result)

            return call

        out = lifted_call(
            transform, args, kwargs, graph=graph, graph_updates=updates, name="checkify"
        )
        return errors_out[0], out

    return wrapper


def make_jaxpr(
    f: Callable[..., A] | Any = extract.Missing,
    *,
    graph: bool | None = None,
    graph_updates: bool | None = None,
    static_argnums: int | Sequence[int] = (),
) -> Any:
    """``jax.make_jaxpr`` over functions of Modules (not with ``graph_updates=True``)."""
    if f is extract.Missing:
        return functools.partial(
            make_jaxpr, graph=graph, graph_updates=graph_updates, static_argnums=static_argnums
        )
    if graph_updates is None:
        graph_updates = extract.resolve_modes(True, None)[1]
    if graph_updates:
        raise ValueError("nnx.make_jaxpr does not support graph_updates=True.")
    check_unbound(f, "make_jaxpr")
    graph = extract.resolve_modes(graph, False)[0]
    fun = f

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        (pargs, pkwargs), _ = extract.lower(
            (args, kwargs), graph=graph, graph_updates=False, name="make_jaxpr"
        )

        def pure(*pargs: Any, **pkwargs: Any) -> Any:
            (a, k), raised = extract.raise_inputs(
                (pargs, pkwargs), graph=graph, graph_updates=False, name="make_jaxpr"
            )
            return raised.lower_outputs(fun(*a, **k))

        return jax.make_jaxpr(pure, static_argnums=static_argnums)(*pargs, **pkwargs)

    return wrapper
