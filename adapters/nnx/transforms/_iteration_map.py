"""``nnx.vmap`` and ``nnx.pmap``: ``pm.vmap``/``pm.pmap`` over the lowered graph state.

The state of every graph node in the arguments is lowered to flat arrays, one axis each
(see ``_iteration_lift``); the mapped function merges fresh objects from them, runs the
user function, and returns the nodes' new state with the outputs. The outputs are grouped
by axis, so the axes the transform needs up front are the distinct axes of the specs; an
output's name holds its path, so JAX's "got axis spec None but output was batched" error
(which ``pm.vmap`` lets name the output by key) says which Variable it was. ``pmap``'s
donated arguments' state is its own argument of the mapped function, donated to
``pm.pmap``; its static arguments stay out of the lowering.
"""

import collections
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax

import pytreemod as pm

from .. import graphlib
from ..extract import sort_attributes
from ..module import Module
from ._iteration_axes import Carry, StateAxes, axis_of, check_prefix, is_prefix_leaf, is_tree_state
from ._iteration_lift import (
    Lowered,
    Split,
    check_aliasing,
    check_no_duplicates,
    lower,
    metadata_hook,
    node_occurrences,
    split_nodes,
    write_back,
)
from .general import trace_numbers, traced


def default_mode(graph: bool | None, graph_updates: bool | None) -> tuple[bool, bool]:
    """``graph``/``graph_updates`` with ``None`` read from graphlib's current settings."""
    if graph is None:
        setting = getattr(graphlib, "set_graph_mode", None)
        graph = True if setting is None else bool(setting.current_value())
    if graph_updates is None:
        setting = getattr(graphlib, "set_graph_updates", None)
        graph_updates = True if setting is None else bool(setting.current_value())
    return graph, graph_updates


def reject_bound_method(f: Any, name: str) -> None:
    """Flax's error for a bound method of a Module passed to a transform."""
    inner = f
    while isinstance(inner, functools.partial):
        inner = inner.func
    if inspect.ismethod(inner) and isinstance(inner.__self__, Module):
        raise ValueError(
            f"nnx.{name} does not support bound methods. "
            f"Use the decorator form @nnx.{name} or call "
            f"nnx.{name}(MyClass.method)(instance, ...) with the unbound method."
        )


def resolve_kwargs(
    f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """``kwargs`` moved to their positions in ``f``'s signature."""
    if not kwargs:
        return args
    if isinstance(f, functools.partial):
        raise TypeError("keyword arguments could not be resolved to positions")
    bound = inspect.signature(f).bind(*args, **kwargs)
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError("keyword arguments could not be resolved to positions")
    return tuple(bound.args)


def spec_axes(*specs: Any) -> list[Any]:
    """The distinct ints and ``None``s used by axes specs (StateAxes included)."""
    found: list[Any] = [0]
    for spec in specs:
        for leaf in jax.tree_util.tree_leaves(spec, is_leaf=is_prefix_leaf):
            if isinstance(leaf, StateAxes):
                axes: Sequence[Any] = leaf.axes
            elif is_tree_state(leaf) and not hasattr(leaf.state, "flat_state"):
                axes = [axis_of(leaf, (), None)]  # a Variable's prefix: one axis
            elif is_tree_state(leaf):
                axes = [axis_of(leaf, tuple(p), None) for p, _ in leaf.state.flat_state()]
            else:
                axes = (leaf,)
            for axis in axes:
                if axis is not Carry and axis not in found:
                    found.append(axis)
    if None not in found:
        found.append(None)
    return found


def labels(after: Split, out_split: Split, out_low: Lowered) -> list[str]:
    """A unique name per output value, holding its path: JAX's errors about an output
    (``got axis spec None but output was batched``) then say which Variable it was."""
    names = [repr(("args", *e.path[1:])) for e in after.entries for _ in range(e.count)]
    names += [repr(("out", *e.path)) for e in out_split.entries for _ in range(e.count)]
    names += [f"out{jax.tree_util.keystr(tuple(p))}" for p in out_low.plain_paths]
    return [f"{i}:{name}" for i, name in enumerate(names)]


def group(
    values: Sequence[Any], axes: Sequence[Any], names: Sequence[str], known: Sequence[Any]
) -> tuple[dict[str, Any], ...]:
    """``values`` sorted into one dict (by name) per axis of ``known``."""
    groups: tuple[dict[str, Any], ...] = tuple({} for _ in known)
    for v, a, name in zip(values, axes, names, strict=True):
        groups[known.index(a)][name] = v
    return groups


def ungroup(
    groups: Sequence[dict[str, Any]],
    axes: Sequence[Any],
    names: Sequence[str],
    known: Sequence[Any],
) -> list[Any]:
    """The inverse of ``group``."""
    return [groups[known.index(a)][name] for a, name in zip(axes, names, strict=True)]


def rebuild_output(
    out_low: Lowered,
    split: Split,
    values: Sequence[Any],
    inputs: Sequence[Any],
    plain: Sequence[Any],
) -> Any:
    """The output tree: new nodes merged from ``values``; inputs returned are the caller's."""
    new_nodes = split.rebuild(values)
    leaves = []
    for is_node_slot, i in out_low.slots:
        if not is_node_slot:
            leaves.append(plain[i])
        elif i < 0:
            leaves.append(inputs[-1 - i])
        else:
            leaves.append(new_nodes[i])
    return out_low.treedef.unflatten(leaves)


def check_outputs(
    fn_name: str, graph: bool, graph_updates: bool, args: Any, in_axes: Any, out: Any, out_axes: Any
) -> None:
    """Aliasing rules between inputs and outputs (Flax's consistent-aliasing rules).

    With graph updates, every alias of a Variable (inputs and outputs) needs one axis.
    Without, an input Variable may not be returned; in graph mode the outputs may still
    share Variables among themselves (with one axis), in tree mode not even that.
    """
    out_occurrences = node_occurrences(out, out_axes)
    in_occurrences = node_occurrences(args, in_axes)
    if graph and graph_updates:
        check_aliasing(in_occurrences + out_occurrences)
        return
    if not graph:
        check_no_duplicates(fn_name, [("args", in_occurrences), ("out", out_occurrences)])
        return
    check_aliasing(out_occurrences, check_trace=False)
    firsts: list[tuple[Any, Any, Any]] = []
    seen: set[int] = set()
    for occurrence in out_occurrences:
        if id(occurrence[2]) not in seen:
            seen.add(id(occurrence[2]))
            firsts.append(occurrence)
    inputs = [("args", in_occurrences)] if in_occurrences else []
    check_no_duplicates(fn_name, [*inputs, ("out", firsts)], within=False)


def check_inputs(fn_name: str, graph: bool, args: Any, in_axes: Any) -> None:
    occurrences = node_occurrences(args, in_axes)
    if graph:
        check_aliasing(occurrences)
    else:
        check_no_duplicates(fn_name, [("args", occurrences)])


def _head(path: Any) -> Any:
    """The positional argument a lowered key path starts in."""
    return getattr(path[0], "idx", None) if path else None


def map_call(
    mapper: Callable[..., Callable[..., Any]],
    fn_name: str,
    f: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    in_axes: Any,
    out_axes: Any,
    graph: bool,
    graph_updates: bool,
    transform_metadata: Any,
    donated: frozenset[int] = frozenset(),
) -> Any:
    """Run ``f`` under ``mapper(fn, in_axes=, out_axes=, donate_argnums=)`` (``pm.vmap``
    or ``pm.pmap``) on lowered state; the state and plain values of the arguments at
    ``donated`` positions are the mapped function's donated (second and fourth) arguments."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    check_inputs(fn_name, graph, args, in_axes)
    low = lower(args, in_axes)
    if graph and graph_updates:
        sort_attributes(low.nodes)
    split, values = split_nodes(low.nodes, low.prefixes)
    check_sizes(fn_name, f, low, split, values)
    mapped = [i for i, a in enumerate(low.plain_axes) if a is not None]
    don_nodes = {i for i, p in enumerate(low.paths) if _head(p) in donated}
    value_don = [e.path[0] in don_nodes for e in split.entries for _ in range(e.count)]
    plain_don = [_head(low.plain_paths[i]) in donated for i in mapped]
    known = spec_axes(in_axes, out_axes)
    remove = metadata_hook(transform_metadata, add=False)
    add = metadata_hook(transform_metadata, add=True)
    record: dict[str, Any] = {}

    def pure(
        values_kept: list[Any], values_don: list[Any], plain_kept: list[Any], plain_don_: list[Any]
    ) -> tuple[dict[str, Any], ...]:
        state_values = _interleave(value_don, values_kept, values_don)
        plain_values = _interleave(plain_don, plain_kept, plain_don_)
        plain = list(low.plain)
        for i, v in zip(mapped, plain_values, strict=True):
            plain[i] = v
        nodes = split.rebuild(state_values, remove)
        inner_args = low.unflatten(nodes, plain)
        out = f(*inner_args)
        check_outputs(fn_name, graph, graph_updates, inner_args, in_axes, out, out_axes)
        after, after_values = split_nodes(nodes, low.prefixes, add)
        out_low = lower(out, out_axes, known=nodes)
        out_split, out_values = split_nodes(out_low.nodes, out_low.prefixes, add)
        axes = after.axes() + out_split.axes() + list(out_low.plain_axes)
        names = labels(after, out_split, out_low)
        record.update(after=after, out_low=out_low, out_split=out_split, axes=axes, names=names)
        return group(after_values + out_values + list(out_low.plain), axes, names, known)

    value_axes = split.axes()
    plain_axes = [low.plain_axes[i] for i in mapped]
    plain_values = [low.plain[i] for i in mapped]
    groups = mapper(
        pure,
        in_axes=(
            *_partition(value_don, value_axes),
            *_partition(plain_don, plain_axes),
        ),
        out_axes=tuple(known),
        donate_argnums=(1, 3) if any(value_don) or any(plain_don) else (),
    )(*_partition(value_don, values), *_partition(plain_don, plain_values))
    flat = ungroup(groups, record["axes"], record["names"], known)
    after: Split = record["after"]
    out_split: Split = record["out_split"]
    n_after = sum(e.count for e in after.entries)
    n_out = sum(e.count for e in out_split.entries)
    write_back(low.nodes, after, flat[:n_after])
    return rebuild_output(
        record["out_low"],
        out_split,
        flat[n_after : n_after + n_out],
        low.nodes,
        flat[n_after + n_out :],
    )


def mapped_sizes(
    f: Callable[..., Any], low: Lowered, split: Split, values: Sequence[Any]
) -> list[tuple[int, int, str]]:
    """``(size, axis, "argument x.kernel of type float32[4,2]")`` of every mapped array
    among the lowered arguments, named as the user wrote them (a Variable by its node's
    argument and its path in the node); arrays without the axis are left out (the
    ``pm`` transform's own check reports them)."""
    found: list[tuple[int, int, str]] = []
    name = _argument_namer(f)
    i = 0
    for e in split.entries:
        # A Variable holds ``e.count`` leaves (none for an empty pytree value).
        leaves, i = values[i : i + e.count], i + e.count
        inner = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in e.path[1:])
        for value in leaves:
            if isinstance(e.axis, int) and hasattr(value, "shape"):
                found.append(_mapped(value, e.axis, name(low.paths[e.path[0]]) + inner))
    for path, axis, value in zip(low.plain_paths, low.plain_axes, low.plain):
        if isinstance(axis, int) and hasattr(value, "shape"):
            found.append(_mapped(value, axis, name(path)))
    return [x for x in found if x[0] >= 0]


def check_sizes(
    fn_name: str, f: Callable[..., Any], low: Lowered, split: Split, values: Sequence[Any]
) -> None:
    """JAX's error for mapped axes of different sizes, naming the user's arguments,
    before the lowered values reach ``pm.vmap``/``pm.pmap`` (whose own error would name
    the lowered lists)."""
    found = mapped_sizes(f, low, split, values)
    sizes = [size for size, _, _ in found]
    if len(set(sizes)) <= 1:
        return
    lines = []
    for k, (size, count) in enumerate(collections.Counter(sizes).most_common()):
        _, axis, where = next(x for x in found if x[0] == size)
        if count == 1:
            lines.append(f"  * one axis had size {size}: axis {axis} of {where}")
        else:
            which = "most" if k == 0 else "some"
            lines.append(
                f"  * {which} axes ({count} of them) had size {size}, e.g. axis {axis} of {where}"
            )
    raise ValueError(
        f"{fn_name} got inconsistent sizes for array axes to be mapped:\n" + ";\n".join(lines)
    )


def _mapped(value: Any, axis: int, where: str) -> tuple[int, int, str]:
    """``(size, axis, description)`` of a mapped value (size -1: no such axis, which
    ``pm.vmap``'s own check reports)."""
    shape = value.shape
    if not -len(shape) <= axis < len(shape):
        return -1, axis, where
    kind = f"{value.dtype}[{','.join(map(str, shape))}]"
    return shape[axis], axis % len(shape), f"{where} of type {kind}"


def _argument_namer(f: Callable[..., Any]) -> Callable[[Any], str]:
    """A key path into the arguments, written as JAX writes it: ``argument x['a']`` (by
    the parameter's name where the signature gives one), else ``args[0]['a']``."""
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in params if p.kind in positional]

    def name(path: Any) -> str:
        i = getattr(path[0], "idx", None) if path else None
        if i is not None and i < len(names):
            return f"argument {names[i]}{jax.tree_util.keystr(tuple(path[1:]))}"
        return f"args{jax.tree_util.keystr(tuple(path))}"

    return name


def _partition(mask: Sequence[bool], items: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """``items`` split into (those where ``mask`` is false, those where it is true)."""
    kept = [x for m, x in zip(mask, items, strict=True) if not m]
    gave = [x for m, x in zip(mask, items, strict=True) if m]
    return kept, gave


def _interleave(mask: Sequence[bool], kept: Sequence[Any], gave: Sequence[Any]) -> list[Any]:
    """The inverse of ``_partition``."""
    it_k, it_g = iter(kept), iter(gave)
    return [next(it_g) if m else next(it_k) for m in mask]


def vmap_mapper(axis_name: Any, axis_size: int | None, spmd_axis_name: Any) -> Callable[..., Any]:
    """``pm.vmap`` on the lowered state: numbers among the mapped values and the outputs
    are arrays (JAX's semantics: a number is mapped, or broadcast as an output)."""

    def mapper(
        fn: Callable[..., Any], *, in_axes: Any, out_axes: Any, donate_argnums: Any
    ) -> Callable[..., Any]:
        del donate_argnums  # nothing to donate without a compilation
        mapped = pm.vmap(
            traced(fn),
            in_axes=in_axes,
            out_axes=out_axes,
            axis_name=axis_name,
            axis_size=axis_size,
            spmd_axis_name=spmd_axis_name,
        )
        return lambda *args: mapped(*trace_numbers(args))

    return mapper


def pmap_mapper(**options: Any) -> Callable[..., Any]:
    """``pm.pmap`` on the lowered state, numbers as arrays as for ``vmap``."""

    def mapper(
        fn: Callable[..., Any], *, in_axes: Any, out_axes: Any, donate_argnums: Any
    ) -> Callable[..., Any]:
        mapped = pm.pmap(
            traced(fn),
            in_axes=in_axes,
            out_axes=out_axes,
            donate_argnums=donate_argnums,
            **options,
        )
        return lambda *args: mapped(*trace_numbers(args))

    return mapper


def make_mapped(
    f: Callable[..., Any],
    fn_name: str,
    mapper: Callable[..., Callable[..., Any]],
    *,
    in_axes: Any,
    out_axes: Any,
    graph: bool,
    graph_updates: bool,
    transform_metadata: Any,
    static_argnums: tuple[int, ...] = (),
    donate_argnums: tuple[int, ...] = (),
) -> Callable[..., Any]:
    """The wrapper ``nnx.vmap``/``nnx.pmap`` return. The arguments at ``static_argnums``
    reach ``f`` as they are (not lowered, not traced; their ``in_axes`` entry is ignored);
    those at ``donate_argnums`` have their lowered state donated."""
    reject_bound_method(f, fn_name)
    check_prefix(in_axes, "in_axes", fn_name, graph, graph_updates)
    check_prefix(out_axes, "out_axes", fn_name, graph, graph_updates)
    if set(static_argnums) & set(donate_argnums):
        raise ValueError(
            f"nnx.{fn_name}: argument(s) {sorted(set(static_argnums) & set(donate_argnums))} "
            "are both in static_broadcasted_argnums and donate_argnums; a static argument "
            "cannot be donated."
        )

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call_args = resolve_kwargs(f, args, kwargs)
        n = len(call_args)
        fixed = {i % n: call_args[i] for i in static_argnums if -n <= i < n}
        fn, axes = f, in_axes
        if fixed:
            dynamic = [i for i in range(n) if i not in fixed]

            def fn(*dyn: Any) -> Any:
                it = iter(dyn)
                return f(*(fixed[i] if i in fixed else next(it) for i in range(n)))

            if isinstance(in_axes, (tuple, list)) and len(in_axes) == n:
                axes = tuple(in_axes[i] for i in dynamic)
            call_args = tuple(call_args[i] for i in dynamic)
            donated = frozenset(dynamic.index(i % n) for i in donate_argnums if -n <= i < n)
        else:
            donated = frozenset(i % n for i in donate_argnums if -n <= i < n)
        return map_call(
            mapper,
            fn_name,
            fn,
            call_args,
            in_axes=axes,
            out_axes=out_axes,
            graph=graph,
            graph_updates=graph_updates,
            transform_metadata=transform_metadata,
            donated=donated,
        )

    return wrapper
