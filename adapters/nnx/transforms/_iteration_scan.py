"""``nnx.scan``: ``pm.scan`` over the lowered graph state.

The lowered state is one ``(carry, xs) -> (carry, ys)`` function for ``pm.scan`` with
``in_axes=(Carry, 0)``, its Python numbers as arrays (JAX traces them).

State with axis ``Carry`` (the carry argument's) and ``None`` (broadcast: with graph
updates the same value in every step, changes dropped; without, carried from step to
step, as in Flax) is the loop carry; state with an int axis is scanned over that
axis, and its per-step values are stacked back on it. The output's ``Carry`` position
returns the carry argument itself (the caller's objects, updated).
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import pytreemod as pm

from .. import graphlib
from ..extract import sort_attributes
from ..statelib import State
from ..variablelib import Variable
from ._iteration_axes import Carry, carry_index, check_out_axes, check_prefix, is_node
from ._iteration_lift import Entry, Lowered, Split, lower, metadata_hook, split_nodes, write_back
from ._iteration_map import (
    check_inputs,
    check_outputs,
    default_mode,
    mapped_sizes,
    rebuild_output,
    reject_bound_method,
    resolve_kwargs,
)
from .general import trace_numbers, traced

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def identity_error(fn_name: str, graph_updates: bool) -> ValueError:
    if graph_updates:
        return ValueError(
            f"nnx.{fn_name} requires the loop state's Variables and graph nodes to keep their "
            "identity between iterations: Carry references must be the same between "
            "iterations."
        )
    return ValueError(f"{fn_name} Variable identity must be preserved across iterations.")


def check_same_nodes(fn_name: str, graph_updates: bool, before: Any, after: Any) -> None:
    """The loop state's graph nodes after a step are the objects it started with."""
    leaves_in, def_in = jax.tree_util.tree_flatten(before, is_leaf=is_node)
    leaves_out, def_out = jax.tree_util.tree_flatten(after, is_leaf=is_node)
    if def_in != def_out:
        raise ValueError(
            f"nnx.{fn_name} requires the body function's input and output to have the same "
            f"pytree structure, but they differ: {def_in} vs {def_out}"
        )
    for a, b in zip(leaves_in, leaves_out, strict=True):
        if (is_node(a) or is_node(b)) and a is not b:
            raise identity_error(fn_name, graph_updates)


def carried_values(
    fn_name: str,
    graph_updates: bool,
    entries: Sequence[Entry],
    before: Sequence[tuple[Any, Any]],
    after: Split,
    after_values: Sequence[Any],
) -> tuple[list[Any], list[Entry], list[Any]]:
    """Split the state after a step into the carried entries' values (in ``entries``'
    order, same paths and Variable types as ``before``) and the scanned rest."""
    del before
    by_path: dict[Any, tuple[Entry, list[Any]]] = {}
    i = 0
    for e in after.entries:
        by_path[e.path] = (e, list(after_values[i : i + e.count]))
        i += e.count
    carried: list[Any] = []
    for e in entries:
        found = by_path.pop(e.path, None)
        if found is None or found[0].vdef != e.vdef:
            raise identity_error(fn_name, graph_updates)
        carried.extend(found[1])
    scanned_entries: list[Entry] = []
    scanned: list[Any] = []
    for e, values in by_path.values():
        if not isinstance(e.axis, int):
            raise identity_error(fn_name, graph_updates)
        scanned_entries.append(e)
        scanned.extend(values)
    return carried, scanned_entries, scanned


def check_variables_kept(
    fn_name: str, graph_updates: bool, nodes: Sequence[Any], carried: Sequence[tuple[Any, Any]]
) -> None:
    """The carried Variables merged into ``nodes`` are still the objects found there."""
    present = {id(v) for _, v in graphlib.iter_graph(tuple(nodes))}
    for _, leaf in carried:
        if isinstance(leaf, Variable) and id(leaf) not in present:
            raise identity_error(fn_name, graph_updates)


def _is_carried(axis: Any) -> bool:
    return axis is None or axis is Carry


def _moved(values: Sequence[Any], axes: Sequence[Any], to_front: bool) -> list[Any]:
    out = []
    for v, a in zip(values, axes, strict=True):
        if isinstance(a, int) and a != 0:
            v = jnp.moveaxis(v, a, 0) if to_front else jnp.moveaxis(v, 0, a)
        out.append(v)
    return out


def _ys_spec(out_axes: Any, out_carry: Any) -> Any:
    if out_carry == "all":
        return 0
    if isinstance(out_carry, int):
        return tuple(0 if i == out_carry else a for i, a in enumerate(out_axes))
    return out_axes


def _take_carry(out: Any, out_carry: Any) -> tuple[Any, Any]:
    if out_carry == "all":
        return out, None
    if isinstance(out_carry, int):
        if not isinstance(out, tuple):
            raise ValueError(
                f"nnx.scan: out_axes marks output {out_carry} as the Carry, so the function "
                f"must return a tuple; got {type(out).__name__}"
            )
        return out[out_carry], (*out[:out_carry], None, *out[out_carry + 1 :])
    return None, out


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic, int, float, complex, bool))


class _Plan:
    """The static description of one call's lowered arguments (hashable: it keys JAX's
    tracing cache, so calling a scanned function again with the same structure does not
    trace it again)."""

    def __init__(self, low: Lowered, split: Split) -> None:
        self.low, self.split = low, split
        self.carry_idx: list[int] = []
        self.scan_idx: list[int] = []
        i = 0
        for e in split.entries:
            (self.carry_idx if _is_carried(e.axis) else self.scan_idx).extend(range(i, i + e.count))
            i += e.count
        self.n_values = i
        axes = split.axes()
        self.scan_axes = [axes[k] for k in self.scan_idx]
        self.carry_entries = [e for e in split.entries if _is_carried(e.axis)]
        plain_axes = low.plain_axes
        self.plain_carry = [k for k, a in enumerate(plain_axes) if a is Carry]
        self.plain_scan = [k for k, a in enumerate(plain_axes) if isinstance(a, int)]
        self.plain_bcast = [
            k for k, a in enumerate(plain_axes) if a is None and _is_array(low.plain[k])
        ]
        passed = {*self.plain_carry, *self.plain_scan, *self.plain_bcast}
        self.statics = tuple((k, low.plain[k]) for k in range(len(plain_axes)) if k not in passed)
        self.key = (
            low.treedef,
            tuple(low.slots),
            tuple(low.prefixes),
            tuple(low.plain_axes),
            split.graphdef,
            tuple((e.path, e.axis, e.vdef, e.count) for e in split.entries),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Plan) or self.key != other.key:
            return False
        try:
            return all(
                a is b or bool(a == b) for a, b in zip(self.statics, other.statics, strict=True)
            )
        except Exception:
            return False

    def __hash__(self) -> int:
        try:
            return hash(self.key)
        except TypeError:
            return hash(self.key[0])


class _Static:
    """A pytree with no leaves carrying ``value`` in its treedef."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Static) and (
            self.value is other.value or self.value == other.value
        )

    def __hash__(self) -> int:
        return hash(self.value) if isinstance(self.value, _Plan) else id(self.value)


jax.tree_util.register_pytree_node(_Static, lambda s: ((), s), lambda aux, _: aux)


def _keep_broadcast(
    entries: Sequence[Entry], carried: list[Any], before: Sequence[Any]
) -> list[Any]:
    """With graph updates, broadcast (``None``) state is the same in every step, as in
    Flax: changes a step makes to it are dropped (without, they are carried)."""
    out: list[Any] = []
    i = 0
    for e in entries:
        out.extend(before[i : i + e.count] if e.axis is None else carried[i : i + e.count])
        i += e.count
    return out


def _make_body(f: Callable[..., Any], spec: Any, opts: dict[str, Any]) -> Callable[..., Any]:
    """The scan body, built once per scanned function."""

    def body(carry: Any, xs: Any) -> Any:
        static, state_carry, plain_carry, bcast = carry
        state_xs, plain_xs = xs
        plan: _Plan = static.value
        values: list[Any] = [None] * plan.n_values
        for k, v in zip([*plan.carry_idx, *plan.scan_idx], [*state_carry, *state_xs], strict=True):
            values[k] = v
        plain = list(plan.low.plain)
        for k, v in plan.statics:
            plain[k] = v
        passed = [*plan.plain_carry, *plan.plain_scan, *plan.plain_bcast]
        for k, v in zip(passed, [*plain_carry, *plain_xs, *bcast], strict=True):
            plain[k] = v
        rebuilt = plan.split.pairs(values, opts["remove"])
        nodes = _merge(plan.split, rebuilt)
        args = plan.low.unflatten(nodes, plain)
        out = f(*args)
        in_carry, out_carry = opts["in_carry"], opts["out_carry"]
        carry_in = None if in_carry is None else args[in_carry]
        carry_out, ys = _take_carry(out, out_carry)
        gu = opts["graph_updates"]
        check_same_nodes("scan", gu, carry_in, carry_out)
        carried_before = [
            rebuilt[k] for k, e in enumerate(plan.split.entries) if _is_carried(e.axis)
        ]
        check_variables_kept("scan", gu, nodes, carried_before)
        ys_spec = _ys_spec(opts["out_axes"], out_carry)
        check_outputs("scan", opts["graph"], gu, args, spec, ys, ys_spec)
        after, after_values = split_nodes(nodes, plan.low.prefixes, opts["add"])
        carried, scanned_entries, scanned = carried_values(
            "scan", gu, plan.carry_entries, carried_before, after, after_values
        )
        if opts["graph"] and gu:
            carried = _keep_broadcast(plan.carry_entries, carried, state_carry)
        ys_low = lower(ys, ys_spec, known=nodes)
        ys_split, ys_values = split_nodes(ys_low.nodes, ys_low.prefixes, opts["add"])
        carry_plain_out = [
            leaf
            for leaf in jax.tree_util.tree_leaves(carry_out, is_leaf=is_node)
            if not is_node(leaf)
        ]
        shape = dataclasses.replace(ys_low, nodes=[], plain=[])
        # The GraphDef after the step: a scanned node may gain Variables (a lazily
        # initialised layer), which come back stacked like its other scanned state.
        record = _Static((scanned_entries, shape, ys_split, after.graphdef))
        return (static, carried, carry_plain_out, bcast), (
            scanned,
            ys_values,
            list(ys_low.plain),
            record,
        )

    return body


def _check_lengths(f: Any, low: Lowered, split: Split, values: list[Any]) -> None:
    """``lax.scan``'s error for scanned inputs of different lengths, then where each
    length was found, named as the user wrote the arguments."""
    found = mapped_sizes(f, low, split, values)
    if len({size for size, _, _ in found}) > 1:
        where = "; ".join(f"{w} has {size} along axis {axis}" for size, axis, w in found)
        raise ValueError(
            "scan got values with different leading axis sizes: "
            f"{', '.join(str(size) for size, _, _ in found)}. ({where})"
        )


def _run(args: tuple[Any, ...], spec: Any, opts: dict[str, Any]) -> Any:
    low = lower(args, spec)
    if opts["graph"] and opts["graph_updates"]:
        sort_attributes(low.nodes)
    split, values = split_nodes(low.nodes, low.prefixes)
    _check_lengths(opts["f"], low, split, values)
    plan = _Plan(low, split)
    carry = (
        _Static(plan),
        [values[k] for k in plan.carry_idx],
        [low.plain[k] for k in plan.plain_carry],
        [low.plain[k] for k in plan.plain_bcast],
    )
    xs = (
        _moved([values[k] for k in plan.scan_idx], plan.scan_axes, True),
        _moved(
            [low.plain[k] for k in plan.plain_scan],
            [low.plain_axes[k] for k in plan.plain_scan],
            True,
        ),
    )
    (_, state_carry, plain_carry, _), (scanned, ys_values, ys_plain, record) = opts["scan"](
        trace_numbers(carry), trace_numbers(xs)
    )
    scanned_entries, ys_low, ys_split, after_graphdef = record.value
    scanned = _moved(scanned, [e.axis for e in scanned_entries for _ in range(e.count)], False)
    graphdef = after_graphdef if opts["graph"] and opts["graph_updates"] else split.graphdef
    write_back(
        low.nodes,
        Split(graphdef, [*plan.carry_entries, *scanned_entries]),
        [*state_carry, *scanned],
    )
    ys = rebuild_output(
        ys_low,
        ys_split,
        _moved(ys_values, ys_split.axes(), False),
        low.nodes,
        _moved(ys_plain, ys_low.plain_axes, False),
    )
    plain = list(low.plain)
    for k, v in zip(plan.plain_carry, plain_carry, strict=True):
        plain[k] = v
    args_out = low.unflatten(low.nodes, plain)
    out_carry = opts["out_carry"]
    carry_arg = None if opts["in_carry"] is None else args_out[opts["in_carry"]]
    if out_carry == "all":
        return carry_arg
    if isinstance(out_carry, int):
        return (*ys[:out_carry], carry_arg, *ys[out_carry + 1 :])
    return ys


def _merge(split: Split, pairs: Sequence[tuple[Any, Any]]) -> tuple[Any, ...]:
    if split.graphdef is None:
        return ()
    return tuple(graphlib.merge(split.graphdef, State.from_flat_path(list(pairs))))


def scan(
    f: Callable[..., Any] | None = None,
    *,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    _split_transpose: bool = False,
    in_axes: Any = (Carry, 0),
    out_axes: Any = (Carry, 0),
    transform_metadata: Mapping[str, Any] = _EMPTY,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Reference-aware ``jax.lax.scan`` over the arguments' leading (or given) axes.

    ``in_axes`` marks each argument as the loop carry (``nnx.Carry``, at most one, at the
    top level), scanned over an axis (an int), or broadcast to every step (``None``);
    ``StateAxes({filter: axis})`` does so per substate of a graph node. ``out_axes`` marks
    the output the same way (the carry output must be the carry argument's objects), and
    stacks the other outputs on the given axes. Changes made to the arguments' Modules and
    Variables are seen by the caller: scanned state is stacked, carried state keeps the
    last step's value; broadcast state does too with ``graph_updates=False``, and is left
    unchanged with graph updates (Flax's behaviour in each mode).
    """
    if f is None:
        return functools.partial(
            scan,
            length=length,
            reverse=reverse,
            unroll=unroll,
            _split_transpose=_split_transpose,
            in_axes=in_axes,
            out_axes=out_axes,
            transform_metadata=transform_metadata,
            graph=graph,
            graph_updates=graph_updates,
        )
    reject_bound_method(f, "scan")
    graph, graph_updates = default_mode(graph, graph_updates)
    check_prefix(out_axes, "out_axes", "scan", graph, graph_updates)
    check_prefix(in_axes, "in_axes", "scan", graph, graph_updates)
    check_out_axes(out_axes)
    in_carry = carry_index(in_axes, "in_axes")
    out_carry = carry_index(out_axes, "out_axes")
    if (in_carry is None) != (out_carry is None):
        raise ValueError(
            "If one of in_axes or out_axes has Carry, the other must also have Carry. "
            f"Got {in_axes=!r} and {out_axes=!r}"
        )
    spec = (Carry,) if in_axes is Carry else in_axes
    opts = {
        "f": f,
        "length": length,
        "reverse": reverse,
        "unroll": unroll,
        "_split_transpose": _split_transpose,
        "in_carry": 0 if in_carry == "all" else in_carry,
        "out_carry": out_carry,
        "out_axes": out_axes,
        "graph": graph,
        "graph_updates": graph_updates,
        "remove": metadata_hook(transform_metadata, add=False),
        "add": metadata_hook(transform_metadata, add=True),
    }

    # One pm.scan per scanned function: (carry, xs) -> (carry, ys) over the lowered state.
    opts["scan"] = pm.scan(
        traced(_make_body(f, spec, opts)),
        in_axes=(pm.Carry, 0),
        out_axes=(pm.Carry, 0),
        length=length,
        reverse=reverse,
        unroll=unroll,
        split_transpose=_split_transpose,
    )

    @functools.wraps(f)
    def scan_wrapper(*args: Any, **kwargs: Any) -> Any:
        call_args = resolve_kwargs(f, args, kwargs)
        if in_axes is Carry and len(call_args) != 1:
            raise ValueError(
                "When in_axes=Carry, the function must take exactly one argument, "
                f"got {len(call_args)} arguments."
            )
        check_inputs("scan", graph, call_args, spec)
        return _run(call_args, spec, opts)

    return scan_wrapper
