"""The state side of the graph: flat and nested states, and the Variable operations the
graph needs (statelib's and variablelib's API, in one place)."""

from collections.abc import Mapping, Sequence
from typing import Any

import jax

from .. import traversals
from ..statelib import FlatState, State, from_flat_state, map_state
from ..variablelib import Variable, is_array_ref
from ._nodes import (
    ArrayRefOutput,
    NoUpdate,
    PathParts,
    Repeated,
    _mapping_pop_key,
    _mapping_set_key,
    _sorted_items,
    register_pytree_node_type,
)

__all__ = [
    "FlatState",
    "copy_variable",
    "flatten_nested",
    "from_flat_state",
    "make_flat_state",
    "map_state",
    "set_variable_value",
    "update_variable",
    "var_type",
]


def make_flat_state(paths: Sequence[PathParts], leaves: list[Any]) -> FlatState[Any]:
    """A FlatState of sorted paths and their leaves."""
    return FlatState.from_sorted_keys_values(tuple(paths), leaves)


def flatten_nested(nested: Mapping[Any, Any]) -> list[tuple[PathParts, Any]]:
    """``[(path, leaf)]`` of nested mappings (States or dicts)."""
    raw = nested.raw_mapping if isinstance(nested, State) else nested
    return list(traversals.flatten_to_sequence(raw))


def var_type(v: Variable[Any]) -> type:
    """The Variable type recorded in a VariableDef."""
    return v.var_type


def copy_variable(v: Variable[Any]) -> Variable[Any]:
    """A new Variable like ``v`` (a ref-valued one keeps a marker value as is)."""
    copy_ref = not isinstance(v.get_raw_value(), (NoUpdate, Repeated, ArrayRefOutput))
    return v.copy(_copy_ref=copy_ref)


def update_variable(target: Variable[Any], source: Variable[Any]) -> None:
    """Give ``target`` the value and metadata of ``source`` (in place)."""
    target.update_from_state(source)


def set_variable_value(target: Variable[Any], value: Any) -> None:
    """Write a raw value into ``target`` (through an array ref when it holds one)."""
    if is_array_ref(target.get_raw_value()) and (
        isinstance(value, jax.Array) or is_array_ref(value)
    ):
        target[...] = value[...]
    else:
        target.set_raw_value(value, _unsafe_bypass_check=True)


register_pytree_node_type(
    State,
    flatten=lambda x: (_sorted_items(x.raw_mapping), None),
    unflatten=lambda nodes, _: State(dict(nodes)),
    set_key=_mapping_set_key,
    pop_key=_mapping_pop_key,
)
