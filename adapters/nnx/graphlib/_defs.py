"""The pieces of a GraphDef: one definition per node met, in traversal order.

A GraphDef holds ``nodes`` (a ``NodeDef`` per graph or pytree node, a ``VariableDef`` per
Variable, an ``ArrayRefDef`` per array ref, a ``NodeRef`` for a second reference to a node
with identity; or one ``TreeNodeDef`` in tree mode), ``attributes`` (``(key, kind)`` per
child of every NodeDef, in order: ``NODE_ATTR``, ``LEAF_ATTR`` or a ``Static`` value) and
``num_leaves``. ``outer_index`` records, inside a transform, the index the same object had
outside, so the result can be written back into the caller's objects.
"""

import dataclasses
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

import jax

from .. import reprlib
from ._nodes import HashableMapping, PathParts, Static

Node = TypeVar("Node")


def _fields_repr(obj: Any, fields: tuple[str, ...]) -> Iterator[Any]:
    yield reprlib.Object(type=type(obj))
    for name in fields:
        value = getattr(obj, name)
        if name == "type":
            value = value.__name__
        elif name == "metadata" and isinstance(value, HashableMapping):
            value = reprlib.PrettyMapping(value)
        yield reprlib.Attr(name, value)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, repr=False)
class NodeRef(reprlib.Representable, Generic[Node]):
    """A second reference to the node, Variable or ref numbered ``index``."""

    index: int

    def __nnx_repr__(self) -> Iterator[Any]:
        return _fields_repr(self, ("index",))


@dataclasses.dataclass(frozen=True, repr=False)
class ArrayRefDef(reprlib.Representable):
    """An array ref (its value is a leaf of the state)."""

    index: int
    outer_index: int | None

    def __nnx_repr__(self) -> Iterator[Any]:
        return _fields_repr(self, ("index", "outer_index"))

    def with_no_outer_index(self) -> "ArrayRefDef":
        """This definition with ``outer_index=None``."""
        return ArrayRefDef(self.index, None)

    def with_same_outer_index(self) -> "ArrayRefDef":
        """This definition with ``outer_index=index``."""
        return ArrayRefDef(self.index, self.index)

    def with_matching_outer_index(self, other: Any) -> "ArrayRefDef":
        """This definition with ``other``'s outer index."""
        return ArrayRefDef(self.index, other.outer_index)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, repr=False)
class VariableDef(reprlib.Representable, Generic[Node]):
    """A Variable: its type and metadata (its value is a leaf of the state)."""

    type: type
    index: int
    outer_index: int | None
    metadata: HashableMapping
    array_refdef: ArrayRefDef | NodeRef[Any] | None

    def __nnx_repr__(self) -> Iterator[Any]:
        return _fields_repr(self, ("type", "index", "outer_index", "metadata"))

    def _with(self, outer_index: int | None, refdef: Any) -> "VariableDef[Node]":
        return VariableDef(self.type, self.index, outer_index, self.metadata, refdef)

    def with_no_outer_index(self) -> "VariableDef[Node]":
        """This definition with ``outer_index=None``."""
        ref = self.array_refdef
        return self._with(None, ref.with_no_outer_index() if isinstance(ref, ArrayRefDef) else ref)

    def with_same_outer_index(self) -> "VariableDef[Node]":
        """This definition with ``outer_index=index``."""
        ref = self.array_refdef
        return self._with(
            self.index, ref.with_same_outer_index() if isinstance(ref, ArrayRefDef) else ref
        )

    def with_matching_outer_index(self, other: Any) -> "VariableDef[Node]":
        """This definition with ``other``'s outer index."""
        ref = self.array_refdef
        if isinstance(ref, ArrayRefDef):
            ref = ref.with_matching_outer_index(other.array_refdef)
        return self._with(other.outer_index, ref)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class NodeDef(reprlib.Representable, Generic[Node]):
    """A graph or pytree node: its type, index (None for pytrees), number of children and
    the aux data its ``flatten`` returned."""

    type: type
    index: int | None
    outer_index: int | None
    num_attributes: int
    metadata: Any

    def __nnx_repr__(self) -> Iterator[Any]:
        fields = ("type", "index", "outer_index", "num_attributes", "metadata")
        return _fields_repr(self, fields)

    def _with(self, outer_index: int | None) -> "NodeDef[Node]":
        return NodeDef(self.type, self.index, outer_index, self.num_attributes, self.metadata)

    def with_no_outer_index(self) -> "NodeDef[Node]":
        """This definition with ``outer_index=None``."""
        return self._with(None)

    def with_same_outer_index(self) -> "NodeDef[Node]":
        """This definition with ``outer_index=index``."""
        return self._with(self.index)

    def with_matching_outer_index(self, other: Any) -> "NodeDef[Node]":
        """This definition with ``other``'s outer index."""
        return self._with(other.outer_index)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class TreeNodeDef(Generic[Node]):
    """Tree mode: the JAX treedef of the whole node and, for each leaf in sorted-path order,
    ``(path, position in JAX's order)``."""

    type: type
    treedef: Any
    path_index: tuple[tuple[PathParts, int], ...]

    def with_no_outer_index(self) -> "TreeNodeDef[Node]":
        """Tree mode has no outer indices: itself."""
        return self

    def with_same_outer_index(self) -> "TreeNodeDef[Node]":
        """Tree mode has no outer indices: itself."""
        return self

    def with_matching_outer_index(self, other: Any) -> "TreeNodeDef[Node]":
        """Tree mode has no outer indices: itself."""
        del other
        return self


NodeDefType = NodeDef[Any] | NodeRef[Any] | VariableDef[Any] | ArrayRefDef | TreeNodeDef[Any]


@dataclasses.dataclass(frozen=True, slots=True)
class NodeAttr:
    """Attribute kind: the child is the next entry of ``GraphDef.nodes``."""


NODE_ATTR = NodeAttr()


@dataclasses.dataclass(frozen=True, slots=True)
class LeafAttr:
    """Attribute kind: the child is the next leaf of the state."""


LEAF_ATTR = LeafAttr()

AttrType = NodeAttr | LeafAttr | Static[Any]


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class GraphDef(Generic[Node]):
    """The static structure of a graph node (hashable: usable as a jit static argument)."""

    __module__ = "adapters.nnx.graphlib"  # its public home, as ``type(graphdef)`` shows

    nodes: list[Any]
    attributes: list[tuple[Any, Any]]
    num_leaves: int

    def __hash__(self) -> int:
        return hash((tuple(self.nodes), tuple(self.attributes)))

    def _map_nodes(self, fn: Any, others: Any = None) -> "GraphDef[Node]":
        if others is None:
            nodes = [n if isinstance(n, NodeRef) else fn(n) for n in self.nodes]
        else:
            nodes = [
                n if isinstance(n, NodeRef) else fn(n, o)
                for n, o in zip(self.nodes, others, strict=False)
            ]
        return GraphDef(nodes=nodes, attributes=self.attributes, num_leaves=self.num_leaves)

    def with_no_outer_index(self) -> "GraphDef[Node]":
        """This GraphDef with every outer index removed."""
        return self._map_nodes(lambda n: n.with_no_outer_index())

    def with_same_outer_index(self) -> "GraphDef[Node]":
        """This GraphDef with every node's outer index equal to its index."""
        return self._map_nodes(lambda n: n.with_same_outer_index())

    def with_matching_outer_index(self, other: "GraphDef[Any]") -> "GraphDef[Node]":
        """This GraphDef with the outer indices of ``other`` (node by node)."""
        return self._map_nodes(lambda n, o: n.with_matching_outer_index(o), other.nodes)

    def apply(self, state: Any, *states: Any, graph: bool | None = None) -> Any:
        """A proxy: ``graphdef.apply(state).method(*args)`` merges, calls the method and
        returns ``(output, (graphdef, state))`` of the updated node."""
        return _APPLY[0](self, state, *states, graph=graph)


# ``GraphDef.apply`` needs merge/flatten, defined above this file; the API module fills this.
_APPLY: list[Any] = [None]
