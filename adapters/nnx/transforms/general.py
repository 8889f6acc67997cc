"""Pieces shared by NNX's transforms: the lifted call (lower, transform, finish),
``split_inputs``/``merge_inputs``, ``resolve_kwargs`` and bound-method detection."""

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from .. import extract
from ..graphlib import GraphNode
from ..variablelib import Variable

F = TypeVar("F", bound=Callable[..., Any])


def resolve_bound_callable(f: Callable[..., Any]) -> tuple[Callable[..., Any], Any, bool]:
    """``(unbound function, bound object or None, whether f was a Module's bound method)``,
    looking through ``functools.partial`` layers (which are kept)."""
    layers: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    g: Any = f
    while isinstance(g, functools.partial):
        layers.append((g.args or (), g.keywords or {}))
        g = g.func
    bound = getattr(g, "__self__", None)
    was_bound = inspect.ismethod(g) and isinstance(bound, GraphNode)
    if not was_bound:
        return f, None, False
    g = g.__func__
    for args, kwargs in reversed(layers):
        g = functools.partial(g, *args, **kwargs)
    return g, bound, True


def raise_bound_method_error(transform_name: str) -> None:
    """Flax's error for a Module's bound method given to a transform."""
    raise ValueError(
        f"nnx.{transform_name} does not support bound methods. "
        f"Use the decorator form @nnx.{transform_name} or call "
        f"nnx.{transform_name}(MyClass.method)(instance, ...) with the unbound method."
    )


def check_unbound(f: Callable[..., Any], transform_name: str) -> Callable[..., Any]:
    """``f`` itself; Flax's error if it is a Module's bound method."""
    if resolve_bound_callable(f)[2]:
        raise_bound_method_error(transform_name)
    return f


def resolve_kwargs(
    fun: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """``args`` with ``kwargs`` moved to their positions in ``fun``'s signature."""
    if not kwargs:
        return args
    bound = inspect.signature(fun).bind(*args, **kwargs)
    bound.apply_defaults()
    if bound.kwargs:
        raise ValueError(f"Keyword-only arguments are not supported, got {sorted(bound.kwargs)}.")
    return tuple(bound.args)


def trace_numbers(tree: Any) -> Any:
    """``tree`` with its Python numbers as (weakly typed) arrays.

    JAX's transforms trace every leaf, Python numbers included; pytreemod's keep numbers
    static. NNX's transforms are pytreemod transforms with JAX's semantics, so they hand
    the lowered state to ``pm.*`` with its numbers already arrays (a ``while_loop``
    counting down a float, a branch returning a constant)."""
    return jax.tree.map(
        lambda x: jnp.asarray(x) if isinstance(x, (bool, int, float, complex)) else x, tree
    )


def traced(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` returning ``trace_numbers`` of its result."""
    return lambda *args, **kwargs: trace_numbers(f(*args, **kwargs))


def flat_leaves(tree: Any) -> tuple[Any, list[Any]]:
    """``(treedef, leaves)`` of a lowered tree, numbers as arrays.

    A pytreemod transform rebuilds a Variable from its type and value alone, while an NNX
    Variable's metadata lives in its pytree definition: NNX hands pytreemod the leaves, and
    the treedef (a static leaf to pytreemod, compared like the rest of the structure)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, trace_numbers(leaves)


def on_leaves(f: Callable[..., Any], treedef: Any) -> Callable[[list[Any]], Any]:
    """``f`` (of the arguments ``treedef`` describes) as a function of their leaves,
    returning ``flat_leaves`` of its result."""
    return lambda leaves: flat_leaves(f(*treedef.unflatten(leaves)))


def from_leaves(result: tuple[Any, list[Any]]) -> Any:
    """The tree ``flat_leaves`` took apart."""
    treedef, leaves = result
    return treedef.unflatten(leaves)


Purify = Callable[[Callable[..., Any]], Callable[..., Any]]


def lifted_call(
    transform: Callable[[Purify], Callable[..., Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    graph: bool,
    graph_updates: bool,
    name: str,
    keep_all: bool = False,
) -> Any:
    """Lower ``args``/``kwargs``, call ``transform(purify)`` on the lowered ones and
    apply the changes the call made to the caller's objects.

    ``purify(f)`` is ``f`` as a pure function of the lowered arguments: it rebuilds the
    objects, calls ``f`` and lowers its result and the arguments' changes. ``keep_all``
    returns every Variable (the branches of ``cond`` must return the same arrays).
    """
    (pargs, pkwargs), lowered = extract.lower(
        (args, kwargs),
        graph=graph,
        graph_updates=graph_updates,
        name=name,
        keep_all=(lambda _: True) if keep_all else None,
    )

    def purify(f: Callable[..., Any]) -> Callable[..., Any]:
        def pure(*pargs: Any, **pkwargs: Any) -> Any:
            (a, k), raised = extract.raise_inputs(
                (pargs, pkwargs), graph=graph, graph_updates=graph_updates, name=name
            )
            return raised.lower_outputs(f(*a, **k))

        return pure

    updates, out = transform(purify)(*pargs, **pkwargs)
    return lowered.finish(updates, out)


def split_inputs(f: Any = extract.Missing, *, ctxtag: str = "split_merge_inputs") -> Any:
    """Lift ``f`` (a JAX transform applied to functions of arrays) to take graph nodes:
    the nodes among its arguments are lowered; the functions it calls must be wrapped
    with ``merge_inputs``. ``f`` returns ``(arguments, out)`` in lowered form (so a
    ``vmap``'s ``out_axes`` is ``(in_axes, out_axes)``); the arguments' new Variable
    values are written into the caller's objects."""
    if f is extract.Missing:
        return functools.partial(split_inputs, ctxtag=ctxtag)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        (pargs, pkwargs), lowered = extract.lower(
            (args, kwargs), graph=True, graph_updates=True, name="split_inputs"
        )
        args_out, out = f(*pargs, **pkwargs)
        position = {path: j for j, path in enumerate(lowered.paths)}
        for slot in jax.tree.leaves(args_out, is_leaf=extract.is_slot):
            if not isinstance(slot, extract.NodeSlot):
                continue
            for paths, values in zip(slot.info.paths, slot.groups):
                for path, value in zip(paths, values):
                    target = lowered.leaves[position[(slot.info.index, *path)]]
                    if isinstance(target, Variable):
                        target.set_raw_value(value.get_raw_value())
        return extract.raise_outputs(out)

    return wrapper


def merge_inputs(f: Any = extract.Missing, *, ctxtag: str = "split_merge_inputs") -> Any:
    """The inner half of ``split_inputs``: rebuild the nodes, call ``f``, and return
    ``(arguments, out)`` lowered (the arguments with their Variables' current values)."""
    if f is extract.Missing:
        return functools.partial(merge_inputs, ctxtag=ctxtag)

    @functools.wraps(f)
    def wrapper(*pargs: Any, **pkwargs: Any) -> Any:
        (a, k), raised = extract.raise_inputs(
            (pargs, pkwargs), graph=True, graph_updates=True, name="merge_inputs"
        )
        out = f(*a, **k)
        current = dict(raised.entry)

        def refill(x: Any) -> Any:
            if not isinstance(x, extract.NodeSlot):
                return x
            groups = tuple(
                tuple(current[(x.info.index, *path)] for path in paths) for paths in x.info.paths
            )
            return extract.NodeSlot(x.info, groups, x.meta)

        args_out = jax.tree.map(refill, (pargs, pkwargs), is_leaf=extract.is_slot)
        return args_out[0] if not pkwargs else args_out, extract.lower_outputs(out)

    return wrapper
