"""The module graph: split a graph into a static GraphDef plus State, and merge back.

``GraphNode`` is the base of every object whose attributes form graph nodes (``Module``
derives from it one layer up), so this file needs no import of ``_module``.
"""

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np

import pytreemod as pm

from .statelib import Path, State, filter_state, flatten_mapping, merge_state, split_state
from .variablelib import Variable

_CONTAINERS = (list, tuple, dict)


class GraphNode:
    """An object whose attributes are graph children (the base of ``nnx.Module``).

    Every subclass is a JAX pytree of its State: ``jax.tree.map`` over a node maps its
    Variables' values and rebuilds the graph (shared references stay shared).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)


def is_graph_node(x: Any) -> bool:
    """Whether ``x`` is traversed as a node: a GraphNode (Module), list, tuple or dict."""
    return isinstance(x, (GraphNode, *_CONTAINERS))


def _is_data(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


def _children(node: Any) -> list[tuple[Any, Any]]:
    if isinstance(node, GraphNode):
        items = vars(node)
        return [(k, items[k]) for k in sorted(items)]
    if isinstance(node, dict):
        try:
            keys = sorted(node)
        except TypeError:
            keys = list(node)
        return [(k, node[k]) for k in keys]
    return list(enumerate(node))


@dataclasses.dataclass(frozen=True)
class Static:
    """An attribute value kept in the GraphDef (not in the State)."""

    value: Any

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Static) or type(self.value) is not type(other.value):
            return False
        try:
            return bool(self.value == other.value)
        except Exception:
            return self.value is other.value

    def __hash__(self) -> int:
        try:
            return hash(self.value)
        except TypeError:
            return hash(type(self.value))


@dataclasses.dataclass(frozen=True)
class LeafDef:
    """A raw array attribute; its value lives in the State."""


@dataclasses.dataclass(frozen=True)
class NodeRef:
    """A second reference to the node or Variable numbered ``index``."""

    index: int


@dataclasses.dataclass(frozen=True)
class VariableDef:
    """A Variable: its type and metadata; its value lives in the State."""

    type: type
    index: int
    metadata: tuple[tuple[str, Static], ...]


@dataclasses.dataclass(frozen=True)
class NodeDef:
    """A Module or container: its type and its attributes' definitions."""

    type: type
    index: int
    attributes: tuple[tuple[Any, Any], ...]


@dataclasses.dataclass(frozen=True)
class GraphDef:
    """The static structure of a module graph (hashable; equal for equal structures)."""

    root: NodeDef

    def merge(self, state: Mapping[Any, Any], /, *states: Mapping[Any, Any]) -> Any:
        """Same as ``nnx.merge(self, state, *states)``."""
        return merge(self, state, *states)

    def __repr__(self) -> str:
        return f"GraphDef(type={self.root.type.__name__}, attributes={len(self.root.attributes)})"


class _Flattener:
    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.leaves: dict[Path, Any] = {}

    def _number(self, obj: Any) -> int:
        i = len(self.index)
        self.index[id(obj)] = i
        return i

    def node(self, node: Any, path: Path) -> NodeDef:
        i = self._number(node)
        attributes = tuple((k, self.attr(v, (*path, k))) for k, v in _children(node))
        return NodeDef(type(node), i, attributes)

    def attr(self, value: Any, path: Path) -> Any:
        if id(value) in self.index and (isinstance(value, Variable) or is_graph_node(value)):
            return NodeRef(self.index[id(value)])
        if isinstance(value, Variable):
            self.leaves[path] = value
            meta = tuple((k, Static(v)) for k, v in sorted(value.get_metadata().items()))
            return VariableDef(type(value), self._number(value), meta)
        if is_graph_node(value):
            return self.node(value, path)
        if _is_data(value):
            self.leaves[path] = value
            return LeafDef()
        return Static(value)


def _flatten(node: Any) -> tuple[GraphDef, State]:
    if not is_graph_node(node):
        raise TypeError(
            f"Expected a graph node (Module, list, tuple or dict), got {type(node).__name__}"
        )
    flattener = _Flattener()
    root = flattener.node(node, ())
    return GraphDef(root), State.from_flat_path(flattener.leaves)


def split(node: Any, *filters: pm.FilterLike) -> tuple[Any, ...]:
    """``(graphdef, state)``, or ``(graphdef, state_1, ..., state_n)`` for n filters.

    Each leaf goes to the first filter that matches it; every leaf must match one.
    """
    graphdef, state = _flatten(node)
    if not filters:
        return graphdef, state
    parts = split_state(state, *filters)
    return (graphdef, *(parts if isinstance(parts, tuple) else (parts,)))


def graphdef(node: Any, /) -> GraphDef:
    """The GraphDef of ``node``."""
    return _flatten(node)[0]


def state(node: Any, *filters: pm.FilterLike) -> Any:
    """The State of ``node`` (holding its Variables), or one State per filter."""
    full = _flatten(node)[1]
    if not filters:
        return full
    return filter_state(full, *filters)


class _Builder:
    def __init__(self, leaves: dict[Path, Any]) -> None:
        self.leaves = leaves
        self.objects: dict[int, Any] = {}

    def leaf(self, path: Path) -> Any:
        try:
            return self.leaves[path]
        except KeyError:
            raise ValueError(f"merge: the state has no value at path {path}") from None

    def build(self, d: Any, path: Path) -> Any:
        if isinstance(d, Static):
            return d.value
        if isinstance(d, NodeRef):
            return self.objects[d.index]
        if isinstance(d, LeafDef):
            leaf = self.leaf(path)
            return leaf.get_value() if isinstance(leaf, Variable) else leaf
        if isinstance(d, VariableDef):
            leaf = self.leaf(path)
            if not isinstance(leaf, Variable):
                leaf = d.type.from_metadata(leaf, {k: s.value for k, s in d.metadata})
            self.objects[d.index] = leaf
            return leaf
        return self.node(d, path)

    def node(self, d: NodeDef, path: Path) -> Any:
        if issubclass(d.type, tuple):
            items = [self.build(a, (*path, k)) for k, a in d.attributes]
            obj = d.type(*items) if hasattr(d.type, "_fields") else d.type(items)
            self.objects[d.index] = obj
            return obj
        obj = d.type() if issubclass(d.type, (list, dict)) else object.__new__(d.type)
        self.objects[d.index] = obj
        for k, a in d.attributes:
            value = self.build(a, (*path, k))
            if isinstance(obj, list):
                obj.append(value)
            elif isinstance(obj, dict):
                obj[k] = value
            else:
                vars(obj)[k] = value
        return obj


def merge(graphdef: GraphDef, state: Mapping[Any, Any], /, *states: Mapping[Any, Any]) -> Any:
    """A new object graph of ``graphdef``'s structure holding the states' Variables."""
    if not isinstance(graphdef, GraphDef):
        raise TypeError(f"merge expects a GraphDef first, got {type(graphdef).__name__}")
    flat = flatten_mapping(merge_state(state, *states))
    return _Builder(flat).build(graphdef.root, ())


def _lookup(node: Any, key: Any, path: Path) -> Any:
    try:
        if isinstance(node, GraphNode):
            return vars(node)[key]
        return node[key]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"update: no attribute or item {key!r} at path {path}") from None


def _assign(node: Any, key: Any, value: Any, path: Path) -> None:
    if isinstance(node, GraphNode):
        setattr(node, key, value)
    elif isinstance(node, (list, dict)):
        node[key] = value
    else:
        raise ValueError(
            f"update: cannot assign path {path} inside an immutable {type(node).__name__}"
        )


def update(node: Any, state: Mapping[Any, Any], /, *states: Mapping[Any, Any]) -> None:
    """Write the states' values into ``node``'s Variables (and raw array attributes) in place."""
    for path, leaf in flatten_mapping(merge_state(state, *states)).items():
        parent = node
        for i, key in enumerate(path[:-1]):
            parent = _lookup(parent, key, path[: i + 1])
        target = _lookup(parent, path[-1], path)
        value = leaf.get_raw_value() if isinstance(leaf, Variable) else leaf
        if isinstance(target, Variable):
            target.set_raw_value(value)
        else:
            _assign(parent, path[-1], value, path)


def clone(node: Any) -> Any:
    """A deep copy of ``node``'s graph (new Variables, same static values)."""
    graph, full = _flatten(node)
    copied = {p: v.copy() if isinstance(v, Variable) else v for p, v in full.flat_state()}
    return merge(graph, State.from_flat_path(copied))


def iter_graph(node: Any, /) -> Iterator[tuple[Path, Any]]:
    """``(path, value)`` for every node, Variable and leaf under ``node``, children first.

    A node or Variable reachable twice is visited once.
    """
    seen: set[int] = set()

    def walk(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
        if isinstance(value, Variable) or is_graph_node(value):
            if id(value) in seen:
                return
            seen.add(id(value))
        if is_graph_node(value):
            for k, child in _children(value):
                yield from walk(child, (*path, k))
        yield path, value

    yield from walk(node, ())


def _flatten_node_with_keys(node: GraphNode) -> tuple[list[tuple[Any, Any]], Any]:
    graph, full = _flatten(node)
    flat = full.flat_state()
    keys = [(jax.tree_util.DictKey(path), leaf) for path, leaf in flat]
    return keys, (graph, tuple(path for path, _ in flat))


def _flatten_node(node: GraphNode) -> tuple[list[Any], Any]:
    children, aux = _flatten_node_with_keys(node)
    return [leaf for _, leaf in children], aux


def _unflatten_node(aux: Any, children: Any) -> GraphNode:
    graph, paths = aux
    return merge(graph, State.from_flat_path(dict(zip(paths, children, strict=True))))


def _register(cls: type[GraphNode]) -> None:
    jax.tree_util.register_pytree_with_keys(
        cls, _flatten_node_with_keys, _unflatten_node, _flatten_node
    )


_register(GraphNode)
