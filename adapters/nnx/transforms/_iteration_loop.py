"""``nnx.while_loop``, ``nnx.fori_loop`` and ``nnx.transform_metadata``.

The loops are ``pm.while_loop`` and ``pm.fori_loop`` carrying the whole lowered loop state
(see ``_iteration_lift``), its Python numbers as arrays (JAX traces them; pytreemod would
keep them static). The body must return the graph nodes it received (the same objects,
with the same Variables), and the caller's objects hold the final state afterwards.
"""

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax

import pytreemod as pm

from .. import graphlib
from ..extract import sort_attributes
from ..statelib import State
from ._iteration_axes import check_prefix, is_node
from ._iteration_lift import Lowered, Split, lower, metadata_hook, split_nodes, write_back
from ._iteration_map import check_inputs, default_mode, resolve_kwargs
from ._iteration_scan import carried_values, check_same_nodes, check_variables_kept
from .general import trace_numbers

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class _Loop:
    """The loop state lowered once; ``enter``/``leave`` convert one step's carry."""

    def __init__(self, fn_name: str, graph: bool, graph_updates: bool, init_val: Any) -> None:
        self.fn_name, self.graph_updates = fn_name, graph_updates
        check_inputs(fn_name, graph, (init_val,), 0)
        self.low: Lowered = lower(init_val, 0)
        if graph and graph_updates:
            sort_attributes(self.low.nodes)
        self.split, self.values = split_nodes(self.low.nodes, self.low.prefixes)

    def init(self) -> tuple[list[Any], list[Any]]:
        return trace_numbers((list(self.values), list(self.low.plain)))

    def enter(self, carry: tuple[list[Any], list[Any]]) -> tuple[Any, tuple[Any, ...], list[Any]]:
        values, plain = carry
        pairs = self.split.pairs(values)
        nodes: tuple[Any, ...] = ()
        if self.split.graphdef is not None:
            nodes = tuple(graphlib.merge(self.split.graphdef, State.from_flat_path(pairs)))
        return self.low.unflatten(nodes, plain), nodes, pairs

    def leave(
        self, val: Any, out: Any, nodes: tuple[Any, ...], pairs: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        check_same_nodes(self.fn_name, self.graph_updates, val, out)
        check_variables_kept(self.fn_name, self.graph_updates, nodes, pairs)
        after, after_values = split_nodes(nodes, self.low.prefixes)
        carried, _, rest = carried_values(
            self.fn_name, self.graph_updates, self.split.entries, pairs, after, after_values
        )
        if rest:
            raise ValueError(
                f"nnx.{self.fn_name} requires body function's input and output to have the "
                "same reference and pytree structure, but they differ."
            )
        plain = [
            leaf for leaf in jax.tree_util.tree_leaves(out, is_leaf=is_node) if not is_node(leaf)
        ]
        return trace_numbers((carried, plain))

    def finish(self, carry: tuple[list[Any], list[Any]]) -> Any:
        values, plain = carry
        write_back(self.low.nodes, self.split, values)
        return self.low.unflatten(self.low.nodes, plain)


def while_loop(
    cond_fun: Callable[[T], Any],
    body_fun: Callable[[T], T],
    init_val: T,
    *,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> T:
    """Reference-aware ``jax.lax.while_loop`` (``pm.while_loop`` on the lowered state):
    Modules and Variables in ``init_val`` are loop state, updated in place when the loop
    ends. ``body_fun`` must return the same
    objects (and Variables) it receives, in the same structure."""
    graph, graph_updates = default_mode(graph, graph_updates)
    loop = _Loop("while_loop", graph, graph_updates, init_val)

    def cond(carry: Any) -> Any:
        return cond_fun(loop.enter(carry)[0])

    def body(carry: Any) -> Any:
        val, nodes, pairs = loop.enter(carry)
        return loop.leave(val, body_fun(val), nodes, pairs)

    return loop.finish(pm.while_loop(cond, body, loop.init()))


def fori_loop(
    lower: int,
    upper: int,
    body_fun: Callable[[int, T], T],
    init_val: T,
    *,
    unroll: int | bool | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> T:
    """Reference-aware ``jax.lax.fori_loop`` (``pm.fori_loop`` on the lowered state):
    ``body_fun(i, val)`` for ``i`` in ``range(lower, upper)``, with ``while_loop``'s
    rules for the loop state."""
    graph, graph_updates = default_mode(graph, graph_updates)
    loop = _Loop("fori_loop", graph, graph_updates, init_val)

    def body(i: Any, carry: Any) -> Any:
        val, nodes, pairs = loop.enter(carry)
        return loop.leave(val, body_fun(i, val), nodes, pairs)

    return loop.finish(pm.fori_loop(lower, upper, body, loop.init(), unroll=unroll))


def transform_metadata(
    f: Callable[..., Any] | None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    partition: str | None,
    graph: bool | None = None,
) -> Any:
    """Call ``f`` on the arguments as a mapped transform would see them: the axis
    ``in_axes`` gives each Variable is removed from its sharding metadata (under the name
    ``partition``) during the call, and added back, at ``out_axes`` for the outputs."""
    if f is None:
        return functools.partial(
            transform_metadata, in_axes=in_axes, out_axes=out_axes, partition=partition, graph=graph
        )
    graph, _ = default_mode(graph, True)
    check_prefix(in_axes, "in_axes", "transform_metadata", graph, True)
    check_prefix(out_axes, "out_axes", "transform_metadata", graph, True)
    from .. import spmd

    metadata = {getattr(spmd, "PARTITION_NAME", "partition_name"): partition}
    remove = metadata_hook(metadata, add=False)
    add = metadata_hook(metadata, add=True)
    fn = f

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call_args = resolve_kwargs(fn, args, kwargs)
        check_inputs("transform_metadata", graph, call_args, in_axes)
        low = lower(call_args, in_axes)
        split, values = split_nodes(low.nodes, low.prefixes)
        nodes = split.rebuild(values, remove)
        out = fn(*low.unflatten(nodes, low.plain))
        after, after_values = split_nodes(nodes, low.prefixes, add)
        write_back(low.nodes, after, after_values)
        out_low = lower(out, out_axes, known=nodes)
        out_split, out_values = split_nodes(out_low.nodes, out_low.prefixes, add)
        from ._iteration_map import rebuild_output

        return rebuild_output(out_low, out_split, out_values, low.nodes, out_low.plain)

    return wrapper


__all__ = ["Split", "fori_loop", "transform_metadata", "while_loop"]
