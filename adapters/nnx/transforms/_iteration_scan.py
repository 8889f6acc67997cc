"""``nnx.scan``: ``pm.scan`` over the lowered graph state.

State with axis ``Carry`` (the carry argument's) and ``None`` (broadcast: read and updated
in every step, as in Flax) is the loop carry; state with an int axis is scanned over that
axis, and its per-step values are stacked back on it. The output's ``Carry`` position
returns the carry argument itself (the caller's objects, updated).
"""

import functools
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

import pytreemod as pm

from ._iteration_axes import Carry, carry_index, check_out_axes, check_prefix, is_node
from ._iteration_lift import Entry, Lowered, Split, lower, metadata_hook, split_nodes, write_back
from ._iteration_map import (
    check_inputs,
    check_outputs,
    default_mode,
    reject_bound_method,
    rebuild_output,
    resolve_kwargs,
)

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
    order; each Variable must be the object the step started with) and the scanned rest."""
    by_path: dict[Any, tuple[Entry, list[Any]]] = {}
    i = 0
    for e in after.entries:
        by_path[e.path] = (e, list(after_values[i : i + e.count]))
        i += e.count
    carried: list[Any] = []
    for e, (path, leaf) in zip(entries, before, strict=True):
        found = by_path.pop(e.path, None)
        if found is None or found[0].vdef != e.vdef:
            raise identity_error(fn_name, graph_updates)
        carried.extend(found[1])
        del leaf
    scanned_entries: list[Entry] = []
    scanned: list[Any] = []
    for e, values in by_path.values():
        if not isinstance(e.axis, int):
            raise identity_error(fn_name, graph_updates)
        scanned_entries.append(e)
        scanned.extend(values)
    return carried, scanned_entries, scanned


def check_variables_kept(
    fn_name: str, graph_updates: bool, nodes: Sequence[Any], rebuilt: Sequence[tuple[Any, Any]], split: Split
) -> None:
    """The carried Variables merged into ``nodes`` are still the objects found there."""
    del split
    from .. import graphlib

    present = {id(v) for _, v in graphlib.iter_graph(tuple(nodes))}
    for _, leaf in rebuilt:
        if hasattr(leaf, "get_raw_value") and id(leaf) not in present:
            raise identity_error(fn_name, graph_updates)


def _split_entries(split: Split, values: Sequence[Any], carried: Callable[[Any], bool]) -> tuple[list[int], list[int]]:
    """Indices of ``values`` belonging to carried entries and to scanned ones."""
    carry_idx: list[int] = []
    scan_idx: list[int] = []
    i = 0
    for e in split.entries:
        (carry_idx if carried(e.axis) else scan_idx).extend(range(i, i + e.count))
        i += e.count
    del values
    return carry_idx, scan_idx


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


class _Scan:
    """One call of a scanned function: the lowered arguments and the traced step."""

    def __init__(self, f: Callable[..., Any], args: tuple[Any, ...], spec: Any, opts: dict[str, Any]) -> None:
        self.f, self.spec, self.opts = f, spec, opts
        self.low: Lowered = lower(args, spec)
        self.split, self.values = split_nodes(self.low.nodes, self.low.prefixes)
        axes = self.split.axes()
        self.carry_idx, self.scan_idx = _split_entries(self.split, self.values, _is_carried)
        self.scan_axes = [axes[i] for i in self.scan_idx]
        self.carry_entries = [e for e in self.split.entries if _is_carried(e.axis)]
        self.plain_carry = [i for i, a in enumerate(self.low.plain_axes) if a is Carry]
        self.plain_scan = [i for i, a in enumerate(self.low.plain_axes) if isinstance(a, int)]
        self.record: dict[str, Any] = {}

    def step(self, carry: Any, xs: Any) -> Any:
        o = self.opts
        state_carry, plain_carry = carry
        state_xs, plain_xs = xs
        values: list[Any] = [None] * len(self.values)
        for i, v in zip(self.carry_idx, state_carry, strict=True):
            values[i] = v
        for i, v in zip(self.scan_idx, state_xs, strict=True):
            values[i] = v
        plain = list(self.low.plain)
        for i, v in zip(self.plain_carry + self.plain_scan, [*plain_carry, *plain_xs], strict=True):
            plain[i] = v
        rebuilt = self.split.pairs(values, o["remove"])
        nodes = self.split.rebuild(values, o["remove"]) if False else _merge(self.split, rebuilt)
        args = self.low.unflatten(nodes, plain)
        out = self.f(*args)
        carry_in = args[0] if o["in_carry"] == "all" else args[o["in_carry"]] if o["in_carry"] is not None else None
        carry_out, ys = _take_carry(out, o["out_carry"])
        check_same_nodes("scan", o["graph_updates"], carry_in, carry_out)
        check_variables_kept("scan", o["graph_updates"], nodes, [rebuilt[k] for k, e in enumerate(self.split.entries) if _is_carried(e.axis)], self.split)
        ys_spec = _ys_spec(o["out_axes"], o["out_carry"])
        check_outputs("scan", o["graph"], o["graph_updates"], args, self.spec, ys, ys_spec)
        after, after_values = split_nodes(nodes, self.low.prefixes, o["add"])
        carried_entries_before = [rebuilt[k] for k, e in enumerate(self.split.entries) if _is_carried(e.axis)]
        carried, scanned_entries, scanned = carried_values(
            "scan", o["graph_updates"], self.carry_entries, carried_entries_before, after, after_values
        )
        ys_low = lower(ys, ys_spec, known=nodes)
        ys_split, ys_values = split_nodes(ys_low.nodes, ys_low.prefixes, o["add"])
        carry_plain_out = [
            leaf for leaf in jax.tree_util.tree_leaves(carry_out, is_leaf=is_node) if not is_node(leaf)
        ]
        self.record.update(scanned=scanned_entries, ys_low=ys_low, ys_split=ys_split)
        return (carried, carry_plain_out), (scanned, ys_values, list(ys_low.plain))

    def run(self) -> Any:
        o = self.opts
        carry = (
            [self.values[i] for i in self.carry_idx],
            [self.low.plain[i] for i in self.plain_carry],
        )
        xs = (
            _moved([self.values[i] for i in self.scan_idx], self.scan_axes, True),
            _moved([self.low.plain[i] for i in self.plain_scan], [self.low.plain_axes[i] for i in self.plain_scan], True),
        )
        (state_carry, plain_carry), (scanned, ys_values, ys_plain) = pm.scan(
            self.step,
            length=o["length"],
            reverse=o["reverse"],
            unroll=o["unroll"],
        )(carry, xs)
        scanned_entries: list[Entry] = self.record["scanned"]
        scanned = _moved(scanned, [e.axis for e in scanned_entries for _ in range(e.count)], False)
        final = Split(self.split.graphdef, [*self.carry_entries, *scanned_entries])
        write_back(self.low.nodes, final, [*state_carry, *scanned])
        ys_low: Lowered = self.record["ys_low"]
        ys_split: Split = self.record["ys_split"]
        ys_values = _moved(ys_values, ys_split.axes(), False)
        ys_plain = _moved(ys_plain, ys_low.plain_axes, False)
        ys = rebuild_output(ys_low, ys_split, ys_values, self.low.nodes, ys_plain)
        plain = list(self.low.plain)
        for i, v in zip(self.plain_carry, plain_carry, strict=True):
            plain[i] = v
        args_out = self.low.unflatten(self.low.nodes, plain)
        if o["out_carry"] == "all":
            return args_out[0] if o["in_carry"] == "all" else args_out[o["in_carry"]]
        if isinstance(o["out_carry"], int):
            carry_arg = args_out[0] if o["in_carry"] == "all" else args_out[o["in_carry"]]
            k = o["out_carry"]
            return (*ys[:k], carry_arg, *ys[k + 1 :])
        return ys


def _merge(split: Split, pairs: Sequence[tuple[Any, Any]]) -> tuple[Any, ...]:
    from .. import graphlib
    from ..statelib import State

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
    Variables are seen by the caller: scanned state is stacked, carried and broadcast
    state keeps the last step's value.
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
        "length": length,
        "reverse": reverse,
        "unroll": unroll,
        "in_carry": 0 if in_carry == "all" else in_carry,
        "out_carry": out_carry,
        "out_axes": out_axes,
        "graph": graph,
        "graph_updates": graph_updates,
        "remove": metadata_hook(transform_metadata, add=False),
        "add": metadata_hook(transform_metadata, add=True),
    }

    @functools.wraps(f)
    def scan_wrapper(*args: Any, **kwargs: Any) -> Any:
        call_args = resolve_kwargs(f, args, kwargs)
        if in_axes is Carry and len(call_args) != 1:
            raise ValueError(
                "When in_axes=Carry, the function must take exactly one argument, "
                f"got {len(call_args)} arguments."
            )
        check_inputs("scan", graph, call_args, spec)
        return _Scan(f, call_args, spec, opts).run()

    return scan_wrapper
