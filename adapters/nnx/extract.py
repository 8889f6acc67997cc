"""``flax.nnx.extract``: moving object graphs across a JAX transform boundary.

Every NNX transform runs the same three steps around a JAX (or pytreemod) transform:

1. **lower** (outside): the graph nodes and Variables among the arguments are split
   *jointly* with ``graphlib.split`` (so a Variable reachable from two arguments is one
   value) and each is replaced by a ``NodeSlot``: a pytree whose leaves are that node's
   Variables and whose static part records where they go (``SlotInfo``).
2. **raise** (inside): the slots are merged back into fresh objects (``graphlib.merge``),
   the user function runs on them, and its changes are lowered again: the raw values of
   the Variables it changed (``Updates``), and, where the structure of an input changed
   or an output refers to an input in graph-update mode, the whole joint state (``Joint``).
3. **finish** (outside): the changed values are written into the caller's Variables, a
   changed structure is grafted onto the caller's objects, and output nodes are rebuilt.

Modes (Flax's): ``graph=True, graph_updates=True`` propagates every change, structural
ones included, and an output that is an input is the caller's object; ``graph_updates=False``
propagates Variable values only and refuses Variables returned from the transform;
``graph=False`` (tree mode) also refuses a Variable reachable twice in the inputs.
"""

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, cast

import jax

import pytreemod as pm

from . import _structure, graphlib
from ._extract_api import NodeStates as NodeStates
from ._extract_api import clear_non_graph_nodes as clear_non_graph_nodes
from ._extract_api import default_split_fn as default_split_fn
from ._extract_api import from_tree as from_tree
from ._extract_api import is_tree_node as is_tree_node
from ._extract_api import merge_tree_node as merge_tree_node
from ._extract_api import prefix as prefix
from ._extract_api import to_tree as to_tree
from ._extract_api import to_tree_states as to_tree_states
from ._extract_prefix import KeyPath as KeyPath
from ._extract_prefix import Missing as Missing
from ._extract_prefix import PathParts as PathParts
from ._extract_prefix import PrefixMapping as PrefixMapping
from ._extract_prefix import TreeState as TreeState
from ._extract_prefix import _keystr, _Static
from ._extract_prefix import alias_error as alias_error
from ._extract_prefix import broadcast_prefix as broadcast_prefix
from ._extract_prefix import check_consistent_aliasing as check_consistent_aliasing
from ._extract_prefix import check_no_aliases as check_no_aliases
from ._extract_prefix import check_prefix as check_prefix
from ._extract_prefix import check_prefix_aliasing as check_prefix_aliasing
from ._extract_prefix import is_node_leaf as is_node_leaf
from ._extract_prefix import resolve_modes as resolve_modes
from .statelib import State, to_flat_state
from .variablelib import Variable, lower_hijax

# --------------------------------------------------------------------------- slots


@dataclasses.dataclass(frozen=True, eq=False)
class SlotInfo:
    """The static part of one lowered node: its index among the call's nodes, the state
    paths of its Variables (per group), the joint GraphDef (first slot only), and whether
    all its Variables come back (donated)."""

    index: int
    paths: tuple[tuple[PathParts, ...], ...]
    graphdef: Any
    keep_all: bool = False
    # jit hashes the slots' static parts on every call: hash once.
    _hash: int = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = (self.index, self.paths, self.keep_all)
        try:
            key += (hash(self.graphdef),)
        except TypeError:
            # A static attribute that is not hashable (a dict, a list): JAX compares
            # aux data with == and never hashes it, so such modules go through
            # transforms; equality still compares the GraphDef.
            pass
        object.__setattr__(self, "_hash", hash(key))

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, SlotInfo)
            and self._hash == other._hash
            and (self.index, self.paths, self.keep_all)
            == (other.index, other.paths, other.keep_all)
            and self.graphdef == other.graphdef
        )

    def __hash__(self) -> int:
        return self._hash


class NodeSlot:
    """A lowered graph node: ``groups`` (one tuple of Variables per filter group) are the
    pytree children; ``info`` and ``meta`` (the prefix that split it) are static.

    As a prefix (shardings, axes), a slot has no info; its first child is then ``head``
    (None: it broadcasts over the info's empty subtree)."""

    __slots__ = ("groups", "head", "info", "meta")

    def __init__(
        self, info: Any, groups: tuple[Any, ...], meta: Any = None, head: Any = None
    ) -> None:
        self.info = info
        self.groups = groups
        self.meta = meta
        self.head = head

    def __repr__(self) -> str:
        return f"NodeSlot(index={getattr(self.info, 'index', None)}, groups={self.groups!r})"


def _slot_flatten(s: NodeSlot) -> tuple[tuple[Any, ...], Any]:
    return (s.head if s.info is None else _Static(s.info), s.groups), s.meta


def _slot_unflatten(meta: Any, children: Any) -> NodeSlot:
    first, groups = children
    if isinstance(first, _Static):
        return NodeSlot(first.value, groups, meta)
    return NodeSlot(None, groups, meta, head=first)


jax.tree_util.register_pytree_node(NodeSlot, _slot_flatten, _slot_unflatten)


def is_slot(x: Any) -> bool:
    return isinstance(x, NodeSlot)


@dataclasses.dataclass
class Lowered:
    """The outside half of one transformed call (see the module docstring)."""

    nodes: tuple[Any, ...]
    leaves: list[Any]  # the joint state's leaves, in flat order (the caller's Variables)
    paths: list[PathParts]  # their paths: (node index, *path in the node)
    graph: bool
    graph_updates: bool
    name: str

    def finish(self, updates: "Updates", out: Any) -> Any:
        """Write ``updates`` into the caller's objects and rebuild ``out``'s nodes."""
        joint = updates.joint
        if joint is not None or updates.raw_paths:
            _structure.bump()  # the caller's graph changes shape: cached plans are stale
        if joint is not None:
            fresh_in, fresh_out = _merge_joint(joint)
            mapping = graft((fresh_in, fresh_out), self.nodes, joint.info.value[2])
            outs = [_remap(x, mapping) for x in fresh_out]
            return _fill_out(out, outs)
        for i, value in zip(updates.indices, updates.values):
            target = self.leaves[i]
            if isinstance(target, Variable):
                target.set_raw_value(value)
        if updates.raw_paths:
            graphlib.update(
                self.nodes,
                State.from_flat_path(dict(zip(updates.raw_paths, updates.raw_values))),
            )
        return raise_outputs(out)


def sort_attributes(roots: Iterable[Any]) -> None:
    """Put the attributes of every graph node under ``roots`` in name order.

    Flax's graph-update transforms rebuild the caller's nodes from their GraphDef, whose
    attributes are sorted by name, so after ``nnx.jit``, ``nnx.grad``... a Module's
    ``vars()`` and repr list its attributes alphabetically. Here the transforms sort the
    nodes when they lower them (graph-update mode). Only the order of the instance
    dicts changes: no attribute is set, the structure is the same."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, Variable):
            continue
        seen.add(id(obj))
        if type(obj) in (list, tuple):
            stack.extend(obj)
        elif type(obj) is dict:
            stack.extend(obj.values())
        elif graphlib.is_graph_node(obj) and hasattr(obj, "__dict__"):
            attrs = vars(obj)
            keys = list(attrs)
            if all(type(k) is str for k in keys) and keys != sorted(keys):
                items = sorted(attrs.items())
                attrs.clear()
                attrs.update(items)
            stack.extend(attrs.values())


def lower(
    tree: Any,
    *,
    graph: bool,
    graph_updates: bool,
    name: str,
    group: Callable[[KeyPath, PathParts, Any], int] | None = None,
    n_groups: Callable[[KeyPath], int] | None = None,
    keep_all: Callable[[KeyPath], bool] | None = None,
    meta: Callable[[KeyPath], Any] | None = None,
) -> tuple[Any, Lowered]:
    """Replace each graph node / Variable in ``tree`` by a ``NodeSlot``.

    The callbacks get the node's key path in ``tree``: ``group(keypath, path, leaf)`` puts
    a leaf in one of ``n_groups(keypath)`` groups (filters: ``DiffState``,
    ``StateSharding``); ``keep_all(keypath)`` marks a node whose Variables all come back
    (donation); ``meta(keypath)`` is the slot's static prefix.
    """
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_node_leaf)
    where = [i for i, (_, x) in enumerate(flat) if is_node_leaf(x)]
    nodes = tuple(flat[i][1] for i in where)
    if not nodes:
        return tree, Lowered((), [], [], graph, graph_updates, name)
    if not graph:
        check_no_aliases(name, args=[flat[i][1] for i in where])
    elif graph_updates:
        sort_attributes(nodes)
    graphdef, state = graphlib.split(nodes)
    joint = list(to_flat_state(state))
    per_node: list[list[tuple[int, PathParts, Any]]] = [[] for _ in nodes]
    for j, (path, leaf) in enumerate(joint):
        per_node[_head(path)].append((j, path[1:], leaf))
    leaves = [leaf for _, leaf in joint]
    out_leaves = [x for _, x in flat]
    for k, i in enumerate(where):
        keypath = flat[i][0]
        count = n_groups(keypath) if n_groups else 1
        buckets: list[list[Any]] = [[] for _ in range(count)]
        paths: list[list[PathParts]] = [[] for _ in range(count)]
        for _, path, leaf in per_node[k]:
            g = group(keypath, path, leaf) if group else 0
            buckets[g].append(leaf)
            paths[g].append(path)
        info = SlotInfo(
            k,
            tuple(tuple(p) for p in paths),
            graphdef if k == 0 else None,
            bool(keep_all(keypath)) if keep_all else False,
        )
        slot_meta = meta(keypath) if meta else None
        out_leaves[i] = NodeSlot(info, tuple(tuple(b) for b in buckets), slot_meta)
    lowered = Lowered(nodes, leaves, [p for p, _ in joint], graph, graph_updates, name)
    return jax.tree_util.tree_unflatten(treedef, out_leaves), lowered


def _group_sharding(meta: Any, group: int) -> Any:
    shardings = getattr(meta, "shardings", None)
    return shardings[group] if shardings is not None else meta


def _head(path: Any) -> int:
    """The node index a joint state path starts with."""
    return cast(int, path[0])


def _raw(x: Any) -> Any:
    if not isinstance(x, Variable):
        return x
    raw = x.get_raw_value()
    return _Contents(raw) if type(raw) in (dict, list) else raw


class _Contents:
    """A Variable's container value (``sow``'s and ``capture``'s dicts) with the leaves it
    held on entry: an item set in place (``v[key] = x``) is a change of the Variable."""

    __slots__ = ("leaves", "treedef", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.leaves, self.treedef = jax.tree_util.tree_flatten(value)

    def changed(self, now: Any) -> bool:
        if now is not self.value:
            return True
        leaves, treedef = jax.tree_util.tree_flatten(now)
        return treedef != self.treedef or any(a is not b for a, b in zip(leaves, self.leaves))


def _changed(now: Any, before: Any) -> bool:
    return before.changed(now) if type(before) is _Contents else now is not before


@dataclasses.dataclass
class Raised:
    """The inside half of one transformed call: the rebuilt nodes and what they held."""

    nodes: tuple[Any, ...]
    graphdef: Any
    entry: list[tuple[PathParts, Any]]
    entry_raw: list[Any]
    keep: frozenset[int]
    graph: bool
    graph_updates: bool
    name: str
    shardings: dict[PathParts, Any]  # joint path -> sharding of its returned value
    origins: dict[int, PathParts] = dataclasses.field(default_factory=dict)

    def _constrain(self, path: PathParts, value: Any) -> Any:
        sharding = self.shardings.get(path)
        if sharding is None:
            return value
        return pm.sharding.apply_sharding(value, sharding)

    def lower_outputs(self, out: Any) -> tuple["Updates", Any]:
        """The Variables' changes and ``out`` with its nodes lowered (see ``Lowered``)."""
        changed: list[int] = []
        values: list[Any] = []
        for j, ((_, leaf), before) in enumerate(zip(self.entry, self.entry_raw)):
            if isinstance(leaf, Variable):
                now = leaf.get_raw_value()
                if _changed(now, before) or j in self.keep:
                    changed.append(j)
                    values.append(self._constrain(self.entry[j][0], now))
        structural = False
        if self.graph_updates and self.nodes:
            graphdef, state = graphlib.split(self.nodes)
            after = list(to_flat_state(state))
            structural = graphdef != self.graphdef or len(after) != len(self.entry)
            if not structural:
                structural = any(a[1] is not b[1] for a, b in zip(after, self.entry))
        out_nodes, aliased = _output_nodes(self, out)
        if structural or aliased:
            graphdef, state = graphlib.split((self.nodes, tuple(out_nodes)))
            flat = list(to_flat_state(state))
            leaves = [
                self._constrain(p[1:], v) if p[0] == 0 and not isinstance(v, Variable) else v
                for p, v in flat
            ]
            if self.shardings:
                leaves = [
                    v.replace(self._constrain(p[1:], v.get_raw_value()))
                    if p[0] == 0 and isinstance(v, Variable)
                    else v
                    for p, v in zip((p for p, _ in flat), leaves)
                ]
            # Where each object of the joint graph was among the inputs: the caller's
            # object at that place is the one it stands for (identity follows objects,
            # not places: swapped Variables stay swapped).
            origins = tuple(
                (path, self.origins[id(obj)])
                for path, obj in graphlib.iter_graph((self.nodes, tuple(out_nodes)), graph=True)
                if id(obj) in self.origins
            )
            info = _Static((graphdef, tuple(p for p, _ in flat), origins))
            joint = Joint(info, leaves)
            return Updates((), [], joint=joint), _mark_out(out)
        return Updates(tuple(changed), values), lower_outputs(out)


def _output_nodes(raised: Raised, out: Any) -> tuple[list[Any], bool]:
    """The graph nodes among ``out``, and whether one reaches a node or Variable of the
    inputs (graph updates). Where Flax refuses them: a Variable of another trace (a
    captured one), and without graph updates, an input's Variable returned (and in tree
    mode a Variable returned twice), each with Flax's error in Flax's order."""
    placed = [
        (keypath, x)
        for keypath, x in jax.tree_util.tree_flatten_with_path(out, is_leaf=is_node_leaf)[0]
        if is_node_leaf(x)
    ]
    out_nodes = [x for _, x in placed]
    if not out_nodes:
        return out_nodes, False
    inside = {
        id(v): p
        for p, v in graphlib.iter_graph(raised.nodes)
        if isinstance(v, Variable) or is_node_leaf(v)
    }
    returned: dict[int, str] = {}
    aliased = False
    for keypath, node in placed:
        for path, value in graphlib.iter_graph(node):
            is_variable = isinstance(value, Variable)
            where = f".out{_keystr(keypath)}{_attr_path(path)}"
            if is_variable and not value._can_update:
                if raised.graph_updates:
                    raise ValueError(
                        f"Cannot extract graph node from different trace level, got {value}"
                    )
                raise ValueError(
                    f"Cannot return captured Variable of type {type(value).__name__} "
                    f"from nnx.{raised.name}.\nFound at path: {where}"
                )
            if id(value) in inside and (is_variable or is_node_leaf(value)):
                if raised.graph_updates:
                    aliased = True
                elif is_variable:
                    first = f".args{_attr_path(inside[id(value)])}"
                    raise alias_error(raised.name, value, first, where)
            if is_variable and not raised.graph:
                if id(value) in returned:
                    raise alias_error(raised.name, value, returned[id(value)], where)
                returned[id(value)] = where
    return out_nodes, aliased


def _attr_path(path: PathParts) -> str:
    """A path inside a node as Flax prints it: attributes as ``.name``, items as ``[i]``."""
    return "".join(f".{p}" if isinstance(p, str) else f"[{p!r}]" for p in path)


def raise_inputs(
    pure: Any, *, graph: bool, graph_updates: bool, name: str, constrain: bool = False
) -> tuple[Any, Raised]:
    """Rebuild the nodes of a lowered tree (inside the transform).

    With ``constrain`` (jit), a slot whose prefix is a sharding (or a ``StateSharding``)
    gives its Variables' returned values that sharding, as their inputs had."""
    flat, treedef = jax.tree_util.tree_flatten(pure, is_leaf=is_slot)
    slots = [(i, x) for i, x in enumerate(flat) if isinstance(x, NodeSlot)]
    if not slots:
        return pure, Raised((), None, [], [], frozenset(), graph, graph_updates, name, {})
    graphdef = slots[0][1].info.graphdef
    joint: dict[PathParts, Any] = {}
    keep_paths: set[PathParts] = set()
    shardings: dict[PathParts, Any] = {}
    for _, slot in slots:
        info = slot.info
        if constrain and slot.meta is not None:
            for g, paths in enumerate(info.paths):
                sharding = _group_sharding(slot.meta, g)
                for path in paths:
                    shardings[(info.index, *path)] = sharding
        # Fresh Variables at this trace level (a non-differentiated argument of jax.grad,
        # a closed-over one, is the caller's own object).
        groups = jax.tree.map(lambda x: x, slot.groups)
        for paths, values in zip(info.paths, groups):
            for path, value in zip(paths, values):
                joint[(info.index, *path)] = value
                if info.keep_all:
                    keep_paths.add((info.index, *path))
    nodes = graphlib.merge(graphdef, State.from_flat_path(joint))
    _, entry_state = graphlib.split(nodes)
    entry = list(to_flat_state(entry_state))
    keep = frozenset(j for j, (p, _) in enumerate(entry) if p in keep_paths)
    for (i, _), node in zip(slots, nodes):
        flat[i] = node
    raised = Raised(
        tuple(nodes),
        graphdef,
        entry,
        [_raw(v) for _, v in entry],
        keep,
        graph,
        graph_updates,
        name,
        shardings,
        _objects_by_id(nodes) if graph_updates else {},
    )
    return jax.tree_util.tree_unflatten(treedef, flat), raised


class Updates:
    """What a transformed function changed: raw values of the changed Variables (by index
    in the joint state), or the whole ``Joint`` state when the structure changed."""

    __slots__ = ("indices", "joint", "raw_paths", "raw_values", "values")

    def __init__(
        self,
        indices: tuple[int, ...],
        values: list[Any],
        *,
        joint: "Joint | None" = None,
        raw_paths: tuple[PathParts, ...] = (),
        raw_values: list[Any] | None = None,
    ) -> None:
        self.indices = indices
        self.values = values
        self.joint = joint
        self.raw_paths = raw_paths
        self.raw_values = raw_values or []


jax.tree_util.register_pytree_node(
    Updates,
    lambda u: ((u.values, u.joint, u.raw_values), (u.indices, u.raw_paths)),
    lambda aux, ch: Updates(aux[0], ch[0], joint=ch[1], raw_paths=aux[1], raw_values=ch[2]),
)


class Joint:
    """The joint state of the inputs and outputs (static GraphDef and paths, leaves)."""

    __slots__ = ("info", "leaves")

    def __init__(self, info: _Static, leaves: list[Any]) -> None:
        self.info = info
        self.leaves = leaves


jax.tree_util.register_pytree_node(
    Joint, lambda j: ((j.info, j.leaves), None), lambda _, ch: Joint(ch[0], ch[1])
)


def _merge_joint(joint: Joint) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    graphdef, paths, _ = joint.info.value
    fresh_in, fresh_out = graphlib.merge(
        graphdef, State.from_flat_path(dict(zip(paths, joint.leaves)))
    )
    return tuple(fresh_in), tuple(fresh_out)


class _OutRef:
    """Placeholder for output node ``k`` (rebuilt outside from the joint state)."""

    __slots__ = ("k",)

    def __init__(self, k: int) -> None:
        self.k = k


jax.tree_util.register_pytree_node(_OutRef, lambda r: ((), r.k), lambda k, _: _OutRef(k))


def _mark_out(out: Any) -> Any:
    count = iter(range(1 << 30))
    return jax.tree.map(
        lambda x: _OutRef(next(count)) if is_node_leaf(x) else x, out, is_leaf=is_node_leaf
    )


def _fill_out(out: Any, nodes: list[Any]) -> Any:
    return jax.tree.map(
        lambda x: nodes[x.k] if isinstance(x, _OutRef) else x,
        out,
        is_leaf=lambda x: isinstance(x, _OutRef),
    )


def lower_outputs(out: Any) -> Any:
    """``out`` with its nodes split into ``NodeSlot``s (new objects: no link to inputs)."""
    flat, treedef = jax.tree_util.tree_flatten(out, is_leaf=is_node_leaf)
    where = [i for i, x in enumerate(flat) if is_node_leaf(x)]
    if not where:
        return out
    graphdef, state = graphlib.split(tuple(flat[i] for i in where))
    per_node: list[tuple[list[PathParts], list[Any]]] = [([], []) for _ in where]
    for path, leaf in to_flat_state(state):
        per_node[_head(path)][0].append(path[1:])
        per_node[_head(path)][1].append(lower_hijax(leaf))  # JAX cannot return hijax
    for k, i in enumerate(where):
        paths, values = per_node[k]
        info = SlotInfo(k, (tuple(paths),), graphdef if k == 0 else None)
        flat[i] = NodeSlot(info, (tuple(values),))
    return jax.tree_util.tree_unflatten(treedef, flat)


def raise_outputs(out: Any) -> Any:
    """Rebuild the nodes of ``lower_outputs(out)`` as new objects (sharing kept)."""
    flat, treedef = jax.tree_util.tree_flatten(out, is_leaf=is_slot)
    slots = [(i, x) for i, x in enumerate(flat) if isinstance(x, NodeSlot)]
    if not slots:
        return out
    joint: dict[PathParts, Any] = {}
    for _, slot in slots:
        for paths, values in zip(slot.info.paths, slot.groups):
            for path, value in zip(paths, values):
                joint[(slot.info.index, *path)] = value
    nodes = graphlib.merge(slots[0][1].info.graphdef, State.from_flat_path(joint))
    for (i, _), node in zip(slots, nodes):
        flat[i] = node
    return jax.tree_util.tree_unflatten(treedef, flat)


# --------------------------------------------------------------------------- graft


def _is_object(x: Any) -> bool:
    return isinstance(x, Variable) or is_node_leaf(x) or type(x) in (list, dict)


def _objects_by_id(root: Any) -> dict[int, PathParts]:
    return {id(v): p for p, v in graphlib.iter_graph(root, graph=True) if _is_object(v)}


def graft(
    fresh: Any, original: Any, origins: tuple[tuple[PathParts, PathParts], ...]
) -> dict[int, Any]:
    """Make the caller's objects (under ``original``) look like ``fresh`` (the joint graph
    rebuilt from a transform's output). ``origins`` pairs a path in ``fresh`` with the
    path in ``original`` of the input object it stands for: that object receives the
    fresh one's contents. New objects are kept, their references to fresh objects
    redirected to the caller's. Returns the map from fresh ids to targets."""
    before = {p: v for p, v in graphlib.iter_graph(original, graph=True) if _is_object(v)}
    pairs = {p: v for p, v in graphlib.iter_graph(fresh, graph=True) if _is_object(v)}
    mapping: dict[int, Any] = {}
    for path, origin in origins:
        obj, old = pairs.get(path), before.get(origin)
        if obj is not None and old is not None and type(old) is type(obj):
            mapping[id(obj)] = old
    for obj in pairs.values():
        _copy_into(mapping.get(id(obj), obj), obj, mapping)
    return mapping


def _remap(value: Any, mapping: dict[int, Any]) -> Any:
    if id(value) in mapping:
        return mapping[id(value)]
    if type(value) is tuple:
        return tuple(_remap(v, mapping) for v in value)
    if is_node_leaf(value) and not isinstance(value, Variable):
        _copy_into(value, value, mapping)
    return value


def _copy_into(target: Any, source: Any, mapping: dict[int, Any]) -> None:
    if isinstance(source, Variable):
        if target is not source:
            target.set_raw_value(source.get_raw_value())
        return
    if hasattr(source, "__dict__"):
        items = {k: _remap(v, mapping) for k, v in vars(source).items()}
        vars(target).clear()
        vars(target).update(items)
    if isinstance(source, list):
        target[:] = [_remap(v, mapping) for v in source]
    elif isinstance(source, dict):
        new = {k: _remap(v, mapping) for k, v in source.items()}
        target.clear()
        target.update(new)
