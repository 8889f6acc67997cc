"""``nnx.vjp`` and ``nnx.jvp``: ``pm.vjp``/``pm.jvp`` over the lowered primals' leaves
(``general.flat_leaves``: an NNX Variable keeps its metadata in the treedef), in graph
mode without graph updates or tree mode; and ``rebuild``, the call's nodes rebuilt
holding gradients (shared with ``grad``)."""

import functools
from collections.abc import Sequence
from typing import Any

import jax

import pytreemod as pm

from .. import extract, graphlib
from ..extract import NodeSlot
from ..statelib import State
from .general import check_unbound, flat_leaves


def rebuild(grads: Any, pargs: Sequence[Any]) -> tuple[Any, ...]:
    """All the call's nodes rebuilt jointly, holding gradients where there are some."""
    joint: dict[Any, Any] = {}
    graphdef = None
    for tree in (pargs, grads):
        for s in jax.tree.leaves(tree, is_leaf=extract.is_slot):
            if not isinstance(s, NodeSlot):
                continue
            if s.info.graphdef is not None:
                graphdef = s.info.graphdef
            for paths, values in zip(s.info.paths, s.groups):
                for path, value in zip(paths, values):
                    joint[(s.info.index, *path)] = value
    return tuple(graphlib.merge(graphdef, State.from_flat_path(joint)))


def _no_graph_updates(name: str, graph: bool, updates: bool) -> None:
    if graph and updates:
        raise NotImplementedError(
            f"graph-mode with graph_updates is not supported for nnx.{name}. "
            "Set graph=False or graph_updates=False."
        )


def vjp(
    f: Any = extract.Missing,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: Sequence[Any] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.vjp`` over functions of Modules (``graph_updates=False`` or tree mode).

    Returns ``(out, vjp_fn)`` (``(out, vjp_fn, aux)`` with ``has_aux``); ``vjp_fn(g)``
    gives a cotangent per primal, a Module of cotangents for a Module.
    """
    graph, updates = extract.resolve_modes(graph, graph_updates)
    _no_graph_updates("vjp", graph, updates)
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to vjp is deprecated")
    if f is extract.Missing:
        return functools.partial(vjp, has_aux=has_aux, graph=graph, graph_updates=False)
    check_unbound(f, "vjp")
    if not primals:
        return functools.partial(vjp, f, has_aux=has_aux, graph=graph, graph_updates=False)
    fun = f
    pprimals, lowered = extract.lower(primals, graph=graph, graph_updates=False, name="vjp")

    def pure(*pprimals: Any) -> Any:
        args, raised = extract.raise_inputs(pprimals, graph=graph, graph_updates=False, name="vjp")
        out = fun(*args)
        out, aux = out if has_aux else (out, None)
        changes, (out, aux) = raised.lower_outputs((out, aux))
        return out, (changes, aux)

    # pm.vjp over the primals' leaves (an NNX Variable keeps its metadata in the treedef).
    treedef, leaves = flat_leaves(tuple(pprimals))
    out_def: list[Any] = []

    def pure_leaves(leaves: list[Any]) -> Any:
        out, (changes, aux) = pure(*treedef.unflatten(leaves))
        out_leaves, defn = jax.tree_util.tree_flatten(out)
        out_def.append(defn)
        return out_leaves, (changes, aux)

    out_leaves, vjp_fn, (changes, aux) = pm.vjp(pure_leaves, leaves, has_aux=True)
    out = out_def[0].unflatten(out_leaves)
    out, aux = lowered.finish(changes, (out, aux))

    def cotangents(g: Any) -> Any:
        g_leaves, g_def = jax.tree_util.tree_flatten(extract.lower_outputs(g))
        if g_def != out_def[0]:
            raise TypeError(
                f"Tree structure of cotangent input {g_def}, does not match structure of "
                f"primal output {out_def[0]}."
            )
        (grads,) = vjp_fn(g_leaves)
        return tuple(_rebuild_tree(x, pprimals) for x in treedef.unflatten(grads))

    return (out, cotangents, aux) if has_aux else (out, cotangents)


def _rebuild_tree(grads: Any, pargs: Any) -> Any:
    """``grads`` (a tree of slots of cotangents) with each slot rebuilt as its object."""
    if not any(extract.is_slot(x) for x in jax.tree.leaves(grads, is_leaf=extract.is_slot)):
        return grads
    nodes = rebuild(grads, pargs)
    return jax.tree.map(
        lambda x: nodes[x.info.index] if isinstance(x, NodeSlot) else x,
        grads,
        is_leaf=extract.is_slot,
    )


def jvp(
    f: Any = extract.Missing,
    primals: Any = extract.Missing,
    tangents: Any = extract.Missing,
    *,
    has_aux: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.jvp`` over functions of Modules (``graph_updates=False`` or tree mode):
    ``(out, tangent_out)`` (and ``aux`` with ``has_aux``); Module tangents are Modules."""
    graph, updates = extract.resolve_modes(graph, graph_updates)
    _no_graph_updates("jvp", graph, updates)
    if f is extract.Missing:
        return functools.partial(jvp, has_aux=has_aux, graph=graph, graph_updates=False)
    check_unbound(f, "jvp")
    if primals is extract.Missing or tangents is extract.Missing:
        return functools.partial(jvp, f, has_aux=has_aux, graph=graph, graph_updates=False)
    fun = f
    pprimals, lowered = extract.lower(tuple(primals), graph=graph, graph_updates=False, name="jvp")
    ptangents, _ = extract.lower(tuple(tangents), graph=graph, graph_updates=False, name="jvp")

    def pure(*pprimals: Any) -> Any:
        args, raised = extract.raise_inputs(pprimals, graph=graph, graph_updates=False, name="jvp")
        out = fun(*args)
        out, aux = out if has_aux else (out, None)
        changes, out = raised.lower_outputs(out)
        return (out, changes), aux

    # pm.jvp over the leaves (an NNX Variable keeps its metadata in the treedef).
    primal_def, primal_leaves = flat_leaves(tuple(pprimals))
    tangent_def, tangent_leaves = flat_leaves(tuple(ptangents))
    if primal_def != tangent_def:
        raise TypeError(
            "primal and tangent arguments to jax.jvp must have the same tree structure; "
            f"primals have tree structure {primal_def} whereas tangents have tree "
            f"structure {tangent_def}."
        )
    out_def: list[Any] = []

    def pure_leaves(leaves: list[Any]) -> Any:
        result, aux = pure(*primal_def.unflatten(leaves))
        result_leaves, defn = jax.tree_util.tree_flatten(result)
        out_def.append(defn)
        return result_leaves, aux

    result, tangent_result, aux = pm.jvp(
        pure_leaves, (primal_leaves,), (tangent_leaves,), has_aux=True
    )
    out, changes = out_def[0].unflatten(result)
    tangent_out, _ = out_def[0].unflatten(tangent_result)
    out = lowered.finish(changes, out)
    tangent_out = extract.raise_outputs(tangent_out)
    return (out, tangent_out, aux) if has_aux else (out, tangent_out)
