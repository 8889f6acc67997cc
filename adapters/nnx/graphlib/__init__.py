"""flax.nnx.graphlib: the object graph of NNX (split a graph into a GraphDef and States,
merge it back, and the contexts NNX transforms use to carry graphs through JAX).

- ``_nodes``: node registries (graph nodes with identity, pytree nodes), keys, RefMap/IndexMap.
- ``_defs``: the GraphDef and its node definitions.
- ``_state``: flat/nested states and the Variable operations the graph needs.
- ``_flatten``: flatten/unflatten in graph and tree mode; ``set_graph_mode``.
- ``_context``: update/split/merge contexts and ``cached_partial``.
- ``_api``: split, merge, update, state, pop, clone, unpack, map, call...
- ``_traverse``: iter_graph, iter_children, recursive_map, find_duplicates, with_vars.
"""

from collections.abc import Hashable, Sequence
from typing import TypeVar

from ._api import ApplyCaller as ApplyCaller
from ._api import CallableProxy as CallableProxy
from ._api import DelayedAccessor as DelayedAccessor
from ._api import GraphState as GraphState
from ._api import PureState as PureState
from ._api import _graph_pop as _graph_pop
from ._api import _graph_update_dynamic as _graph_update_dynamic
from ._api import as_pure as as_pure
from ._api import call as call
from ._api import clone as clone
from ._api import graph_pop as graph_pop
from ._api import graphdef as graphdef
from ._api import map as map
from ._api import merge as merge
from ._api import pop as pop
from ._api import pure as pure
from ._api import set_metadata as set_metadata
from ._api import split as split
from ._api import state as state
from ._api import unpack as unpack
from ._api import update as update
from ._api import variables as variables
from ._context import GRAPH_CONTEXT as GRAPH_CONTEXT
from ._context import GraphContext as GraphContext
from ._context import MergeContext as MergeContext
from ._context import SplitContext as SplitContext
from ._context import StaticCache as StaticCache
from ._context import UpdateContext as UpdateContext
from ._context import UpdateContextManager as UpdateContextManager
from ._context import _merge_to_flat_state as _merge_to_flat_state
from ._context import _split_state as _split_state
from ._context import _to_nested_state as _to_nested_state
from ._context import cached_partial as cached_partial
from ._context import current_update_context as current_update_context
from ._context import merge_context as merge_context
from ._context import split_context as split_context
from ._context import static_cache as static_cache
from ._context import update_context as update_context
from ._defs import LEAF_ATTR as LEAF_ATTR
from ._defs import NODE_ATTR as NODE_ATTR
from ._defs import ArrayRefDef as ArrayRefDef
from ._defs import AttrType as AttrType
from ._defs import GraphDef as GraphDef
from ._defs import LeafAttr as LeafAttr
from ._defs import NodeAttr as NodeAttr
from ._defs import NodeDef as NodeDef
from ._defs import NodeDefType as NodeDefType
from ._defs import NodeRef as NodeRef
from ._defs import TreeNodeDef as TreeNodeDef
from ._defs import VariableDef as VariableDef
from ._flatten import _check_valid_pytree as _check_valid_pytree
from ._flatten import _tree_mode_suggestion_api as _tree_mode_suggestion_api
from ._flatten import _tree_mode_suggestion_transform as _tree_mode_suggestion_transform
from ._flatten import flatten as flatten
from ._flatten import set_graph_mode as set_graph_mode
from ._flatten import set_graph_updates as set_graph_updates
from ._flatten import unflatten as unflatten
from ._nodes import GRAPH_REGISTRY as GRAPH_REGISTRY
from ._nodes import NO_UPDATE as NO_UPDATE
from ._nodes import PYTREE_NODE_IMPL as PYTREE_NODE_IMPL
from ._nodes import PYTREE_REGISTRY as PYTREE_REGISTRY
from ._nodes import REPEATED as REPEATED
from ._nodes import ArrayRefOutput as ArrayRefOutput
from ._nodes import DataElem as DataElem
from ._nodes import GenericPytree as GenericPytree
from ._nodes import GraphNode as GraphNode
from ._nodes import GraphNodeImpl as GraphNodeImpl
from ._nodes import HashableMapping as HashableMapping
from ._nodes import IndexesPytreeDef as IndexesPytreeDef
from ._nodes import IndexMap as IndexMap
from ._nodes import Key as Key
from ._nodes import NodeImpl as NodeImpl
from ._nodes import NodeImplBase as NodeImplBase
from ._nodes import NoUpdate as NoUpdate
from ._nodes import PathParts as PathParts
from ._nodes import PythonRefMap as PythonRefMap
from ._nodes import PytreeNodeImpl as PytreeNodeImpl
from ._nodes import RefMap as RefMap
from ._nodes import Repeated as Repeated
from ._nodes import Static as Static
from ._nodes import StaticElem as StaticElem
from ._nodes import _flatten_pytree as _flatten_pytree
from ._nodes import _key_path_to_key as _key_path_to_key
from ._nodes import _type_aware_sort as _type_aware_sort
from ._nodes import _unflatten_pytree as _unflatten_pytree
from ._nodes import get_node_impl as get_node_impl
from ._nodes import get_node_impl_for_type as get_node_impl_for_type
from ._nodes import is_array_ref as is_array_ref
from ._nodes import is_graph_node as is_graph_node
from ._nodes import is_node as is_node
from ._nodes import is_node_leaf as is_node_leaf
from ._nodes import is_node_module as is_node_module
from ._nodes import is_node_type as is_node_type
from ._nodes import is_pytree_node as is_pytree_node
from ._nodes import jax_to_nnx_path as jax_to_nnx_path
from ._nodes import register_graph_node_type as register_graph_node_type
from ._nodes import register_pytree_node_type as register_pytree_node_type
from ._state import FlatState as FlatState
from ._state import map_state as map_state
from ._state import update_variable as update_variable
from ._traverse import find_duplicates as find_duplicates
from ._traverse import iter_children as iter_children
from ._traverse import iter_graph as iter_graph
from ._traverse import iter_module_children as iter_module_children
from ._traverse import recursive_map as recursive_map
from ._traverse import vars_as as vars_as
from ._traverse import with_vars as with_vars

# Flax's type names, for programs that annotate with them (``nnx.graph.Key``, ...).
KeyT = TypeVar("KeyT", bound=Hashable)
Node = TypeVar("Node")
Leaf = TypeVar("Leaf")
AuxData = TypeVar("AuxData")
Index = int
Names = Sequence[int]


def is_key_like(x: object) -> bool:
    """Whether ``x`` can be a path key (hashable and ordered)."""
    return hasattr(x, "__hash__") and hasattr(x, "__lt__")
