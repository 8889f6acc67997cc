"""What a graph node is: the registries of node types, keys, identity maps and markers.

Two kinds of node exist, as in Flax. A *graph node* (a ``Pytree``/``Module``, registered
with ``register_graph_node_type``) has an identity: it is numbered once per traversal, a
second reference to it becomes a ``NodeRef``, and it can be created empty and filled later
(so cycles work). A *pytree node* (list, tuple, dict, ``None``, ``State``, or any type JAX
knows as a pytree) is a value: it is traversed each time it is met and rebuilt from its
children. Variables and array refs are neither: they are the leaves that carry state.
"""

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Generic, NamedTuple, TypeVar

import jax
import numpy as np

from ..variablelib import Variable

A = TypeVar("A")
Node = TypeVar("Node")
Key = Hashable
PathParts = tuple[Any, ...]
Index = int


# ----------------------------------------------------------------------------- values


class HashableMapping(Mapping[Any, Any], Hashable):
    """A read-only mapping that hashes by its sorted items (int keys before str keys)."""

    def __init__(self, mapping: Mapping[Any, Any] | Iterable[tuple[Any, Any]], copy: bool = True):
        self._mapping: Mapping[Any, Any] = (
            dict(mapping) if copy or not isinstance(mapping, Mapping) else mapping
        )

    def __contains__(self, key: object) -> bool:
        return key in self._mapping

    def __getitem__(self, key: Any) -> Any:
        return self._mapping[key]

    def get(self, key: Any, default: Any = None) -> Any:
        # The inner mapping's own get (Mapping.get goes through __getitem__ and a
        # KeyError): graph flattening asks once per attribute of every node.
        return self._mapping.get(key, default)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._mapping)

    def __len__(self) -> int:
        return len(self._mapping)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._mapping.items(), key=_type_aware_sort)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashableMapping) and dict(self._mapping) == dict(other._mapping)

    def __repr__(self) -> str:
        return repr(self._mapping)

    def update(self, other: Mapping[Any, Any]) -> "HashableMapping":
        """A new mapping with ``other``'s entries added."""
        return HashableMapping({**self._mapping, **other}, copy=False)


def _type_aware_sort(item: tuple[Any, Any]) -> tuple[int, Any]:
    """Sort key of a ``(key, value)`` pair: int keys first, then str keys."""
    key = item[0]
    if isinstance(key, int):
        return (0, key)
    if isinstance(key, str):
        return (1, key)
    raise ValueError(f"Unsupported key type: {type(key)!r}")


def is_key_like(x: Any) -> bool:
    """Whether ``x`` can be a path key (hashable and ordered)."""
    return hasattr(x, "__hash__") and hasattr(x, "__lt__")


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class NoUpdate:
    """Leaf placeholder: the array ref at this place was passed in and is unchanged."""


NO_UPDATE = NoUpdate()


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class Repeated:
    """Marker of an array ref already emitted earlier in the same flatten."""


REPEATED = Repeated()


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, slots=True)
class ArrayRefOutput:
    """The value of an array ref created inside a transform, carried out as an array."""

    value: Any


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class Static(Generic[A]):
    """An attribute kept in the GraphDef; ``value`` must be hashable and comparable."""

    value: A


@dataclasses.dataclass(frozen=True, slots=True)
class DataElem:
    """Wraps a child a graph node's ``flatten`` declares as data."""

    value: Any


@dataclasses.dataclass(frozen=True, slots=True)
class StaticElem:
    """Wraps a child a graph node's ``flatten`` declares static."""

    value: Any


# ----------------------------------------------------------------------------- refs


def is_array_ref(x: Any) -> bool:
    """Whether ``x`` is a JAX array ref (``jax.new_ref``)."""
    ref_type = getattr(jax, "Ref", None)
    return ref_type is not None and isinstance(x, ref_type)


LEAF_TYPES: tuple[type, ...] = (Variable, jax.Array, np.ndarray, ArrayRefOutput, NoUpdate)


def is_node_leaf(x: Any) -> bool:
    """Whether ``x`` is a state leaf: a Variable, an array, an array ref or a marker."""
    return isinstance(x, LEAF_TYPES) or is_array_ref(x)


class IndexMap(dict[Index, Any]):
    """``{index: object}``: the objects met while unflattening, by GraphDef index."""

    @staticmethod
    def from_refmap(refmap: "RefMap") -> "IndexMap":
        """The inverse of ``refmap``."""
        return IndexMap((index, obj) for obj, index in refmap.items())


class RefMap(MutableMapping[Any, int]):
    """``{object: index}`` keyed by object identity (objects need not be hashable)."""

    def __init__(self, mapping: Mapping[Any, int] | Iterable[tuple[Any, int]] | None = None, /):
        self._mapping: dict[int, tuple[Any, int]] = {}
        if mapping is not None:
            self.update(mapping)

    @staticmethod
    def from_indexmap(indexmap: IndexMap) -> "RefMap":
        """The inverse of ``indexmap``."""
        return RefMap((obj, index) for index, obj in indexmap.items())

    def get(self, key: Any, default: Any = None) -> Any:  # type: ignore[override]
        entry = self._mapping.get(id(key))
        return default if entry is None else entry[1]

    def __getitem__(self, key: Any) -> int:
        return self._mapping[id(key)][1]

    def __setitem__(self, key: Any, value: int) -> None:
        self._mapping[id(key)] = (key, value)

    def __delitem__(self, key: Any) -> None:
        del self._mapping[id(key)]

    def __len__(self) -> int:
        return len(self._mapping)

    def __contains__(self, key: object) -> bool:
        return id(key) in self._mapping

    def __iter__(self) -> Iterator[Any]:
        return (obj for obj, _ in self._mapping.values())

    def items(self) -> Any:  # type: ignore[override]
        return self._mapping.values()

    def __repr__(self) -> str:
        inner = ", ".join(f"{type(k).__name__}@{id(k):x}: {v}" for k, v in self.items())
        return f"RefMap({{{inner}}})"


PythonRefMap = RefMap


# ----------------------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True, slots=True)
class NodeImplBase(Generic[Node]):
    """How to take a node type apart: ``flatten(node) -> ([(key, child)...], aux)``."""

    type: type
    flatten: Callable[[Any], tuple[Any, Any]]

    def node_dict(self, node: Any) -> dict[Any, Any]:
        """``{key: child}`` with Data/Static wrappers removed."""
        children, _ = self.flatten(node)
        return {
            key: value.value if isinstance(value, (DataElem, StaticElem)) else value
            for key, value in children
        }


@dataclasses.dataclass(frozen=True, slots=True)
class GraphNodeImpl(NodeImplBase[Node]):
    """A node type with identity: built empty, then filled (``init``)."""

    set_key: Callable[[Any, Any, Any], None]
    pop_key: Callable[[Any, Any], Any]
    create_empty: Callable[[Any], Any]
    clear: Callable[[Any], None]
    init: Callable[[Any, Iterable[tuple[Any, Any]]], None]


@dataclasses.dataclass(frozen=True, slots=True)
class PytreeNodeImpl(NodeImplBase[Node]):
    """A value-like node type: rebuilt from its children (``unflatten``)."""

    unflatten: Callable[[Any, Any], Any]
    set_key: Callable[[Any, Any, Any], None] | None
    pop_key: Callable[[Any, Any], Any] | None


NodeImpl = GraphNodeImpl[Any] | PytreeNodeImpl[Any]

GRAPH_REGISTRY: dict[type, GraphNodeImpl[Any]] = {}
PYTREE_REGISTRY: dict[type, PytreeNodeImpl[Any]] = {}


def register_graph_node_type(
    type: type,
    flatten: Callable[[Any], tuple[Any, Any]],
    set_key: Callable[[Any, Any, Any], None],
    pop_key: Callable[[Any, Any], Any],
    create_empty: Callable[[Any], Any],
    clear: Callable[[Any], None],
    init: Callable[[Any, Iterable[tuple[Any, Any]]], None],
) -> None:
    """Make ``type`` a graph node (a node with identity, shared and cyclic references)."""
    if type in GRAPH_REGISTRY:
        raise ValueError(f"Node type {type} is already registered.")
    GRAPH_REGISTRY[type] = GraphNodeImpl(
        type=type,
        flatten=flatten,
        set_key=set_key,
        pop_key=pop_key,
        create_empty=create_empty,
        clear=clear,
        init=init,
    )


def register_pytree_node_type(
    type: type,
    flatten: Callable[[Any], tuple[Any, Any]],
    unflatten: Callable[[Any, Any], Any],
    *,
    set_key: Callable[[Any, Any, Any], None] | None = None,
    pop_key: Callable[[Any, Any], Any] | None = None,
) -> None:
    """Make ``type`` a pytree node of the graph (rebuilt from its children every time)."""
    if type in PYTREE_REGISTRY:
        raise ValueError(f"Node type {type} is already registered.")
    PYTREE_REGISTRY[type] = PytreeNodeImpl(
        type=type, flatten=flatten, unflatten=unflatten, set_key=set_key, pop_key=pop_key
    )


class _GraphNodeMeta(type):
    def __instancecheck__(cls, instance: object) -> bool:
        return type(instance) in GRAPH_REGISTRY


class GraphNode(metaclass=_GraphNodeMeta):
    """Transitional: ``isinstance(x, GraphNode)`` means "x is a registered graph node"
    (a Pytree/Module); new code should use ``is_node_module`` or ``nnx.Pytree``."""


class GenericPytree:
    """Stand-in type of the NodeDef of a pytree known to JAX but not registered here."""


def _jax_registered(x: Any) -> bool:
    """Whether JAX flattens ``x`` as an inner node (not a leaf)."""
    if x is None:
        return True
    t = type(x)
    cached = _JAX_NODE_TYPES.get(t)
    if cached is None:
        leaves, treedef = jax.tree_util.tree_flatten(x, is_leaf=lambda y: y is not x)
        cached = not (treedef.num_leaves == 1 and treedef.num_nodes == 1 and leaves[0] is x)
        _JAX_NODE_TYPES[t] = cached
    return cached


_JAX_NODE_TYPES: dict[type, bool] = {}


def is_pytree_node(x: Any, *, check_graph_registry: bool = True) -> bool:
    """Whether ``x`` is traversed as a pytree node (JAX knows it as one, or a tuple)."""
    if check_graph_registry and type(x) in GRAPH_REGISTRY:
        return False
    if isinstance(x, Variable) or is_array_ref(x):
        return False
    if type(x) in PYTREE_REGISTRY or isinstance(x, tuple):
        return True
    if isinstance(x, (jax.Array, np.ndarray, np.generic, int, float, complex, bool, str)):
        return False
    return _jax_registered(x)


def is_node(x: Any) -> bool:
    """Whether ``x`` is a graph node or a pytree node."""
    if isinstance(x, Variable):
        return False
    if type(x) in GRAPH_REGISTRY:
        return True
    return is_pytree_node(x)


def is_graph_node(x: Any) -> bool:
    """Whether ``x`` has identity in the graph: a registered graph node, Variable or ref."""
    return type(x) in GRAPH_REGISTRY or isinstance(x, Variable) or is_array_ref(x)


def is_node_type(x: type) -> bool:
    """Whether ``x`` is a registered node type."""
    return x in GRAPH_REGISTRY or x in PYTREE_REGISTRY or x is GenericPytree


def is_node_module(x: Any) -> bool:
    """Whether ``x`` is an instance of a registered graph node type (a Pytree/Module)."""
    return type(x) in GRAPH_REGISTRY


def get_node_impl(x: Any) -> NodeImpl | None:
    """The implementation that takes ``x`` apart, or None for a leaf."""
    if isinstance(x, Variable):
        return None
    t = type(x)
    if t in GRAPH_REGISTRY:
        return GRAPH_REGISTRY[t]
    if t in PYTREE_REGISTRY:
        return PYTREE_REGISTRY[t]
    if is_pytree_node(x):
        return PYTREE_NODE_IMPL
    return None


def get_node_impl_for_type(x: type) -> NodeImpl | None:
    """The implementation registered for ``x`` (GenericPytree: JAX's pytree protocol)."""
    if x is GenericPytree:
        return PYTREE_NODE_IMPL
    if x in PYTREE_REGISTRY:
        return PYTREE_REGISTRY[x]
    return GRAPH_REGISTRY.get(x)


# ----------------------------------------------------------------------------- JAX pytrees


def _key_path_to_key(key: Any) -> Any:
    if isinstance(key, jax.tree_util.SequenceKey):
        return key.idx
    if isinstance(key, (jax.tree_util.DictKey, jax.tree_util.FlattenedIndexKey)):
        if not is_key_like(key.key):
            raise ValueError(
                f"Invalid key: {key.key}. May be due to its type not being hashable or comparable."
            )
        return key.key
    if isinstance(key, jax.tree_util.GetAttrKey):
        return key.name
    return str(key)


def jax_to_nnx_path(jax_path: tuple[Any, ...], /) -> PathParts:
    """A JAX key path as an NNX path (names, indices and dict keys)."""
    return tuple(_key_path_to_key(part) for part in jax_path)


class IndexesPytreeDef(NamedTuple):
    """Aux data of a generic pytree: each key's position in JAX's order, and the treedef."""

    key_index: HashableMapping
    treedef: Any


def _flatten_pytree(pytree: Any) -> tuple[list[tuple[Any, Any]], IndexesPytreeDef]:
    children, treedef = jax.tree_util.tree_flatten_with_path(
        pytree, is_leaf=lambda x: x is not pytree
    )
    nodes = [(_key_path_to_key(path[0]), value) for path, value in children]
    key_index = HashableMapping({key: i for i, (key, _) in enumerate(nodes)}, copy=False)
    nodes.sort(key=lambda kv: _sortable(kv[0]))
    return nodes, IndexesPytreeDef(key_index, treedef)


def _sortable(key: Any) -> Any:
    return (0, key) if isinstance(key, int) else (1, key)


def _unflatten_pytree(nodes: Iterable[tuple[Any, Any]], metadata: IndexesPytreeDef) -> Any:
    key_index, treedef = metadata.key_index, metadata.treedef
    ordered = sorted(nodes, key=lambda kv: key_index[kv[0]])
    return treedef.unflatten([value for _, value in ordered])


PYTREE_NODE_IMPL: PytreeNodeImpl[Any] = PytreeNodeImpl(
    type=GenericPytree,
    flatten=_flatten_pytree,
    unflatten=_unflatten_pytree,
    set_key=None,
    pop_key=None,
)


def _list_set_key(x: list[Any], key: int, value: Any) -> None:
    x[key] = value


def _mapping_set_key(x: MutableMapping[Any, Any], key: Any, value: Any) -> None:
    x[key] = value


def _mapping_pop_key(x: MutableMapping[Any, Any], key: Any) -> Any:
    return x.pop(key)


def _sorted_items(x: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        return sorted(x.items())
    except TypeError:
        return sorted(x.items(), key=lambda kv: _sortable(kv[0]))


register_pytree_node_type(
    list,
    flatten=lambda x: (list(enumerate(x)), None),
    unflatten=lambda nodes, _: [value for _, value in nodes],
    set_key=_list_set_key,
)
register_pytree_node_type(
    tuple,
    flatten=lambda x: (list(enumerate(x)), None),
    unflatten=lambda nodes, _: tuple(value for _, value in nodes),
)
register_pytree_node_type(
    dict,
    flatten=lambda x: (_sorted_items(x), None),
    unflatten=lambda nodes, _: dict(nodes),
    set_key=_mapping_set_key,
    pop_key=_mapping_pop_key,
)
register_pytree_node_type(
    type(None),
    flatten=lambda x: ([], None),
    unflatten=lambda _, __: None,
)
