"""Lowering graph arguments to flat arrays with one axis each, and raising them back.

The iteration transforms (vmap, pmap, scan, while_loop, fori_loop) share one mechanism:

1. ``lower`` walks the arguments with their axes spec (a JAX prefix); every graph node
   (Module, Rngs, Variable) met is collected, and all of them are split together with
   ``graphlib.split``, so a node or Variable reachable twice is lifted once. Each state leaf
   gets the axis of its node's spec (a ``StateAxes`` picks it by filter). Aliases given
   different axes are Flax's "Inconsistent aliasing" error.
2. Inside the JAX transform, ``Lowered.raise_`` merges fresh objects from the traced
   values, the user function runs on them, and ``split_nodes`` reads their state again.
3. Outside, ``write_back`` updates the caller's own objects in place with the results, so
   mutations made inside are seen by the caller, as in Flax.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax

from .. import graphlib, spmd
from ..statelib import State
from ..variablelib import Variable
from ._iteration_axes import (
    Path,
    StateAxes,
    aliasing_error,
    axis_of,
    duplicate_error,
    is_node,
    is_prefix_leaf,
)

Hook = Callable[[Any, Any], Any]


@dataclasses.dataclass
class Entry:
    """One leaf of the joint state: a Variable (``vdef`` its pytree def) or a raw array."""

    path: Path  # (node index, *path inside the node)
    axis: Any
    vdef: Any  # PyTreeDef of the Variable, None for a raw leaf
    count: int  # how many array values it flattens to


@dataclasses.dataclass
class Split:
    """Graph nodes split together: the static part and the entries of their state."""

    graphdef: Any
    entries: list[Entry]

    def axes(self) -> list[Any]:
        """The axis of every value, in order."""
        return [e.axis for e in self.entries for _ in range(e.count)]

    def pairs(self, values: Sequence[Any], hook: Hook | None = None) -> list[tuple[Path, Any]]:
        """``(path, leaf)`` pairs holding new Variables built around ``values``."""
        out: list[tuple[Path, Any]] = []
        i = 0
        for e in self.entries:
            chunk = list(values[i : i + e.count])
            i += e.count
            if e.vdef is None:
                out.append((e.path, chunk[0]))
                continue
            variable = jax.tree_util.tree_unflatten(e.vdef, chunk)
            if hook is not None:
                variable = hook(variable, e.axis)
            out.append((e.path, variable))
        return out

    def rebuild(self, values: Sequence[Any], hook: Hook | None = None) -> tuple[Any, ...]:
        """New node objects holding ``values``."""
        if self.graphdef is None:
            return ()
        state = State.from_flat_path(self.pairs(values, hook))
        return tuple(graphlib.merge(self.graphdef, state))


def _plain_path(key: Any) -> Any:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return getattr(key, attr)
    return key


def split_nodes(
    nodes: Sequence[Any], prefixes: Sequence[Any], hook: Hook | None = None
) -> tuple[Split, list[Any]]:
    """Split ``nodes`` together; each state leaf takes the axis of its node's prefix."""
    if not nodes:
        return Split(None, []), []
    graphdef, state = graphlib.split(tuple(nodes))
    entries: list[Entry] = []
    values: list[Any] = []
    for raw_path, leaf in state.flat_state():
        path = tuple(_plain_path(k) for k in raw_path)
        axis = axis_of(prefixes[path[0]], path[1:], leaf)
        if isinstance(leaf, Variable):
            if hook is not None:
                leaf = hook(leaf, axis)
            leaves, vdef = jax.tree_util.tree_flatten(leaf)
        else:
            leaves, vdef = [leaf], None
        entries.append(Entry(path, axis, vdef, len(leaves)))
        values.extend(leaves)
    return Split(graphdef, entries), values


@dataclasses.dataclass(frozen=True)
class TreeShape:
    """A tree's structure down to its graph nodes, where the axes spec is a prefix: the
    spec's structure, then each prefix leaf's subtree (graph nodes as leaves).

    In tree mode a node-shaped spec (``nnx.prefix(..., graph=False)``) reaches inside a
    Module, so the Module's own Variables are the leaves there."""

    prefix_def: Any
    sub_defs: tuple[Any, ...]

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        subtrees = []
        i = 0
        for sub in self.sub_defs:
            subtrees.append(sub.unflatten(leaves[i : i + sub.num_leaves]))
            i += sub.num_leaves
        return self.prefix_def.unflatten(subtrees)


@dataclasses.dataclass
class Lowered:
    """A pytree whose graph nodes were split together; its other leaves are ``plain``."""

    treedef: TreeShape
    slots: list[tuple[bool, int]]  # per leaf: (is a node, index in nodes or plain)
    nodes: list[Any]
    prefixes: list[Any]  # per node
    paths: list[Any]  # per node: its key path in the tree (first occurrence)
    plain: list[Any]
    plain_axes: list[Any]
    plain_paths: list[Any]

    def unflatten(self, nodes: Sequence[Any], plain: Sequence[Any]) -> Any:
        leaves = [nodes[i] if is_n else plain[i] for is_n, i in self.slots]
        return self.treedef.unflatten(leaves)


def _leaves_with_axes(tree: Any, prefix: Any) -> tuple[TreeShape, list[tuple[Any, Any, Any]]]:
    """The tree's shape (nodes as leaves) and ``(path, axis, leaf)`` for every leaf."""
    prefix_def = jax.tree_util.tree_structure(prefix, is_leaf=is_prefix_leaf)
    with_paths = jax.tree_util.tree_leaves_with_path(prefix, is_leaf=is_prefix_leaf)
    subtrees = prefix_def.flatten_up_to(tree)
    out: list[tuple[Any, Any, Any]] = []
    sub_defs = []
    for (base, axis), sub in zip(with_paths, subtrees, strict=True):
        leaves, sub_def = jax.tree_util.tree_flatten_with_path(sub, is_leaf=is_node)
        sub_defs.append(sub_def)
        for path, leaf in leaves:
            out.append(((*base, *path), axis, leaf))
    return TreeShape(prefix_def, tuple(sub_defs)), out


def lower(tree: Any, prefix: Any, *, known: Sequence[Any] = ()) -> Lowered:
    """Collect ``tree``'s graph nodes (deduplicated) and its other leaves with their axes.

    A node in ``known`` (by identity) is recorded by its negative index ``-1 - i`` there:
    it is an input returned as an output, not a new node.
    """
    treedef, leaves = _leaves_with_axes(tree, prefix)
    known_ids = {id(n): i for i, n in enumerate(known)}
    index: dict[int, int] = {}
    lowered = Lowered(treedef, [], [], [], [], [], [], [])
    for path, axis, leaf in leaves:
        if is_node(leaf):
            if id(leaf) in known_ids:
                lowered.slots.append((True, -1 - known_ids[id(leaf)]))
                continue
            if id(leaf) not in index:
                index[id(leaf)] = len(lowered.nodes)
                lowered.nodes.append(leaf)
                lowered.prefixes.append(axis)
                lowered.paths.append(path)
            lowered.slots.append((True, index[id(leaf)]))
        else:
            if isinstance(axis, StateAxes):
                raise ValueError(
                    "Cannot use StateAxes on non-graph nodes, "
                    f"found {axis} args{jax.tree_util.keystr(path)}"
                )
            lowered.slots.append((False, len(lowered.plain)))
            lowered.plain.append(leaf)
            lowered.plain_axes.append(axis)
            lowered.plain_paths.append(path)
    return lowered


def node_occurrences(tree: Any, prefix: Any) -> list[tuple[Any, Any, Any]]:
    """``(path, axis, node)`` for every graph node leaf of ``tree`` (repeats included)."""
    return [x for x in _leaves_with_axes(tree, prefix)[1] if is_node(x[2])]


def check_aliasing(
    occurrences: Sequence[tuple[Any, Any, Any]], *, check_trace: bool = True
) -> None:
    """Every Variable reachable from several places must get one axis everywhere (and,
    with ``check_trace``, belong to the current trace level). Like Flax, the check runs
    after each occurrence, so the error lists the places seen up to the first conflict."""
    seen: dict[int, list[tuple[Path, Any]]] = {}
    types: dict[int, str] = {}
    for _, prefix, node in occurrences:
        touched: set[int] = set()
        for path, value in graphlib.iter_graph(node):
            check_context = getattr(value, "_check_valid_context", None)
            if check_trace and check_context is not None and not isinstance(value, Variable):
                check_context(
                    lambda v=value: (
                        f"Trying to extract graph node from different trace level, got {v!r}"
                    )
                )
            if isinstance(value, Variable):
                if check_trace and not getattr(value, "_can_update", True):
                    raise ValueError(
                        f"Cannot extract graph node from different trace level, got {value!r}"
                    )
                seen.setdefault(id(value), []).append(
                    (tuple(path), axis_of(prefix, tuple(path), value))
                )
                types[id(value)] = type(value).__name__
                touched.add(id(value))
        # Earlier conflicts raised already: only the Variables this occurrence reached can
        # conflict now (listed in the order they were first seen, as Flax does).
        conflicts = [
            (types[key], entries)
            for key, entries in seen.items()
            if key in touched and _differ(entries)
        ]
        if conflicts:
            raise aliasing_error(conflicts)


def _differ(entries: list[tuple[Path, Any]]) -> bool:
    first = entries[0][1]
    return any(a != first for _, a in entries[1:])


def check_no_duplicates(
    fn_name: str, groups: Sequence[tuple[str, Sequence[Any]]], *, within: bool = True
) -> None:
    """No Variable may be reached twice (tree mode, or ``graph_updates=False``).

    ``groups`` are ``(label, [(path, axis, node), ...])``: the paths are reported as
    ``label[...]``. With ``within=False`` only a Variable of the first group met again in
    a later one is an error (graph mode: a graph may share Variables inside itself).
    """
    seen: dict[int, str] = {}
    for n, (label, occurrences) in enumerate(groups):
        local: dict[int, str] = {}
        for base, _, node in occurrences:
            for path, value in graphlib.iter_graph(node):
                if not isinstance(value, Variable):
                    continue
                where = f"{label}{jax.tree_util.keystr(tuple(base))}" + "".join(
                    f".{p}" if isinstance(p, str) else f"[{p}]" for p in path
                )
                if label == "out" and not getattr(value, "_can_update", True):
                    raise ValueError(
                        f"Cannot return captured Variable of type {type(value).__name__} "
                        f"from nnx.{fn_name}.\nFound at path: {where}"
                    )
                first = seen.get(id(value)) or (local.get(id(value)) if within else None)
                if first is not None:
                    raise duplicate_error(fn_name, value, first, where)
                if within or n == 0:
                    local.setdefault(id(value), where)
        seen.update(local)


def assign_variable(target: Any, source: Any) -> None:
    """Copy ``source``'s value (and metadata) into the Variable ``target`` in place."""
    update_from_state = getattr(target, "update_from_state", None)
    if update_from_state is not None:
        update_from_state(source)
    else:
        target.set_raw_value(source.get_raw_value())


def _transplant(outer: Any, new: Any, memo: dict[int, Any], added: list[Any]) -> Any:
    """``outer`` made to look like ``new`` in place (Variables keep their identity, changed
    or added attributes are taken from ``new``); returns what the parent should hold.
    ``added`` collects ``(dict, key)`` of the values taken from ``new`` as they are."""
    if id(new) in memo:
        return memo[id(new)]
    if isinstance(outer, Variable) and type(outer) is type(new):
        assign_variable(outer, new)
        memo[id(new)] = outer
        return outer
    if is_node(outer) and type(outer) is type(new) and hasattr(new, "__dict__"):
        memo[id(new)] = outer
        attrs = vars(outer)
        for key, value in list(vars(new).items()):
            if key in attrs and attrs[key] is value:
                continue
            if key in attrs:
                attrs[key] = _transplant(attrs[key], value, memo, added)
            else:
                attrs[key] = value
            if attrs[key] is value:
                added.append((attrs, key))
        return outer
    if type(outer) is type(new) and isinstance(new, (list, tuple, dict)) and len(outer) == len(new):
        if isinstance(new, dict):
            if set(outer) != set(new):
                return new
            for key in new:
                outer[key] = _transplant(outer[key], new[key], memo, added)
            return outer
        items = [_transplant(a, b, memo, added) for a, b in zip(outer, new, strict=True)]
        if isinstance(outer, list):
            outer[:] = items
            return outer
        return tuple(items) if type(new) is tuple else type(new)(*items)
    return new


def _redirect(value: Any, memo: dict[int, Any], seen: set[int]) -> Any:
    """``value`` (an object created inside the transform) with its references to the
    transform's copies of the caller's objects pointing at the caller's objects."""
    if id(value) in memo:
        return memo[id(value)]
    if id(value) in seen or isinstance(value, Variable):
        return value
    seen.add(id(value))
    if type(value) is tuple:
        return tuple(_redirect(v, memo, seen) for v in value)
    if type(value) is list:
        value[:] = [_redirect(v, memo, seen) for v in value]
    elif type(value) is dict:
        for key in list(value):
            value[key] = _redirect(value[key], memo, seen)
    elif is_node(value) and hasattr(value, "__dict__"):
        attrs = vars(value)
        for key, item in list(attrs.items()):
            fixed = _redirect(item, memo, seen)
            if fixed is not item:
                attrs[key] = fixed
    return value


def write_back(nodes: Sequence[Any], split: Split, values: Sequence[Any]) -> None:
    """Update the caller's ``nodes`` in place with the state ``split``/``values`` describe.

    The state is merged into new objects first, then transplanted into the caller's: their
    Variables get the new values, and attributes added or replaced inside the transform
    (a vmapped ``__init__`` creating submodules) are set on the caller's objects, their
    references to the inputs redirected to the caller's objects (a submodule created
    inside keeps sharing its parent's ``Rngs``, as in Flax).
    """
    if split.graphdef is None:
        return
    fresh = split.rebuild(values)
    memo: dict[int, Any] = {}
    added: list[Any] = []
    for outer, new in zip(nodes, fresh, strict=True):
        _transplant(outer, new, memo, added)
    seen: set[int] = set()
    for attrs, key in added:
        attrs[key] = _redirect(attrs[key], memo, seen)


def metadata_hook(transform_metadata: Any, add: bool) -> Hook | None:
    """``spmd.add_axis``/``remove_axis`` on the Variables of a mapped axis, when the
    transform names a partition (``transform_metadata={nnx.PARTITION_NAME: ...}``)."""
    name = getattr(spmd, "PARTITION_NAME", "partition_name")
    fn = getattr(spmd, "add_axis" if add else "remove_axis", None)
    if fn is None or name not in transform_metadata:
        return None

    def hook(variable: Any, axis: Any) -> Any:
        if isinstance(axis, int):
            result = fn(variable, axis, transform_metadata)
            return variable if result is None else result
        return variable

    return hook
