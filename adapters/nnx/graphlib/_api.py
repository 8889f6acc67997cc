"""The functional API of the graph: split, merge, update, state, pop, clone, unpack, map..."""

import dataclasses
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

import jax

from .. import filterlib, statelib
from ..statelib import State
from ..variablelib import Variable
from ._context import _merge_to_flat_state, _split_state, _to_nested_state
from ._defs import _APPLY, GraphDef
from ._flatten import flatten, set_graph_mode, unflatten
from ._nodes import (
    ArrayRefOutput,
    NoUpdate,
    PathParts,
    Repeated,
    get_node_impl,
    is_array_ref,
    is_node,
    is_node_leaf,
)
from ._state import (
    copy_variable,
    from_flat_state,
    map_state,
    set_variable_value,
    update_variable,
)

A = TypeVar("A")

PureState = tuple[GraphDef[A], State]


def _graph(graph: bool | None) -> bool:
    return set_graph_mode.current_value() if graph is None else graph


def split(node: Any, *filters: Any, graph: bool | None = None) -> tuple[Any, ...]:
    """``(graphdef, state)``, or ``(graphdef, state_1, ..., state_n)`` with one State per
    filter (each Variable goes to the first filter it matches; all must match one).

    ``graph=False`` (tree mode) treats the node as a JAX pytree: no shared Variables.
    """
    graphdef, flat_state = flatten(node, graph=_graph(graph))
    states = _to_nested_state(graphdef, _split_state(flat_state, filters))
    return (graphdef, *states)


def merge(
    graphdef_or_graphstate: Any,
    /,
    *states: Any,
    copy: bool = False,
    recreate_variables: bool = True,
) -> Any:
    """The inverse of ``split``: a new node of ``graphdef``'s structure holding the
    states' Variables (copies of them with ``copy=True``). GraphStates may be passed alone."""
    if isinstance(graphdef_or_graphstate, GraphState):
        graphdef = graphdef_or_graphstate._graphdef
        all_states: tuple[Any, ...] = (graphdef_or_graphstate, *states)
        for graph_state in all_states:
            if not isinstance(graph_state, GraphState):
                raise ValueError(f"Expected GraphState object, got {type(graph_state)}")
            if graph_state._graphdef != graphdef:
                raise ValueError("GraphDef must be the same for all GraphState objects")
        all_states = tuple(s._state for s in all_states)
    elif isinstance(graphdef_or_graphstate, GraphDef):
        graphdef = graphdef_or_graphstate
        all_states = states
    else:
        raise TypeError(
            f"Expected a GraphDef or GraphState object, got: {graphdef_or_graphstate!r}"
        )
    if not all_states:
        raise TypeError("merge() missing 1 required positional argument: 'state'")
    if isinstance(all_states[0], list):
        if len(all_states) != 1:
            raise ValueError("Only one state can be passed as a list.")
        leaves = all_states[0]
    else:
        leaves = _merge_to_flat_state(all_states)
    return unflatten(graphdef, leaves, copy_variables=copy, recreate_variables=recreate_variables)


# ----------------------------------------------------------------------------- update


def _update_variable(var: Variable, value: Any) -> None:
    if isinstance(value, Variable):
        update_variable(var, value)
    elif isinstance(value, State) and not value:
        pass  # a NodeRef's empty state (a standalone Variable seen twice)
    else:
        set_variable_value(var, value)


def _copy_new(value: Any) -> Any:
    if isinstance(value, Variable) and not isinstance(
        value.get_raw_value(), (NoUpdate, Repeated, ArrayRefOutput)
    ):
        return copy_variable(value)
    return value


def _graph_update_dynamic(node: Any, state: Any) -> None:
    if isinstance(node, Variable):
        _update_variable(node, state)
        return
    if not is_node(node):
        raise RuntimeError(f"Unsupported type: {type(node)}")
    impl = get_node_impl(node)
    if impl is None:
        raise TypeError(f"Unknown node type: {type(node)}")
    node_dict = impl.node_dict(node)
    for key, value in state.items():
        if key not in node_dict:
            if impl.set_key is None:
                raise ValueError(
                    f"Cannot set key {key!r} on immutable node of type {type(node).__name__}"
                )
            impl.set_key(node, key, _copy_new(value))
            continue
        current = node_dict[key]
        if is_array_ref(current):
            current[...] = value
        elif is_node(current):
            if is_node_leaf(value):
                raise ValueError(f"Expected a subgraph for {key!r}, but got: {value!r}")
            _graph_update_dynamic(current, value)
        elif isinstance(current, Variable):
            _update_variable(current, value)
        elif impl.set_key is not None:
            impl.set_key(node, key, value)
        else:
            raise ValueError(
                f"Cannot set key {key!r} on immutable node of type {type(node).__name__}"
            )


def update(node: Any, state: Any, /, *states: Any) -> None:
    """Write the states' values into ``node`` in place (its Variables keep their identity)."""
    if states:
        if isinstance(node, Variable):
            non_empty = [s for s in (state, *states) if not isinstance(s, Mapping) or s]
            if len(non_empty) != 1:
                raise ValueError(f"Expected exactly one non-empty state, got: {(state, *states)!r}")
            state = non_empty[0]
        else:
            state = statelib.merge_state(state, *states)
    if isinstance(state, GraphState):
        state = state._state
    _graph_update_dynamic(node, state)


# ----------------------------------------------------------------------------- state, pop


def state(node: Any, *filters: Any, graph: bool | None = None) -> Any:
    """The State of ``node`` (its Variables themselves, not copies), or one State per
    filter (leaves matching no filter are left out)."""
    _, flat_state = flatten(node, graph=_graph(graph))
    full = from_flat_state(list(flat_state))
    if not filters:
        return full
    return statelib.filter_state(full, *filters)


variables = state


def graphdef(node: Any, /, *, graph: bool | None = None) -> GraphDef[Any]:
    """The GraphDef of ``node``."""
    return flatten(node, graph=_graph(graph))[0]


def _graph_pop(
    node: Any,
    seen: set[int],
    path: PathParts,
    flat_states: tuple[dict[PathParts, Any], ...],
    predicates: tuple[Any, ...],
) -> None:
    if not is_node(node):
        raise RuntimeError(f"Unsupported type: {type(node)}, this is a bug.")
    if id(node) in seen:
        return
    seen.add(id(node))
    impl = get_node_impl(node)
    if impl is None:
        raise TypeError(f"Unknown node type: {type(node)}")
    for name, value in impl.node_dict(node).items():
        if is_node(value):
            _graph_pop(value, seen, (*path, name), flat_states, predicates)
            continue
        if not is_node_leaf(value) or id(value) in seen:
            continue
        node_path = (*path, name)
        for flat_state, predicate in zip(flat_states, predicates, strict=True):
            if predicate(node_path, value):
                if impl.pop_key is None:
                    raise ValueError(
                        f"Cannot pop key {name!r} from node of type {type(node).__name__}"
                    )
                seen.add(id(value))
                impl.pop_key(node, name)
                flat_state[node_path] = value
                break


def pop(node: Any, *filters: Any) -> Any:
    """Remove the Variables matching each filter from ``node`` and return them (one State
    per filter)."""
    if not filters:
        raise ValueError("Expected at least one filter")
    predicates = tuple(filterlib.to_predicate(f) for f in filters)
    flat_states: tuple[dict[PathParts, Any], ...] = tuple({} for _ in predicates)
    _graph_pop(node, set(), (), flat_states, predicates)
    states = tuple(from_flat_state(fs) for fs in flat_states)
    return states[0] if len(states) == 1 else states


def graph_pop(node: Any, filters: tuple[Any, ...]) -> tuple[State, ...]:
    """``pop`` with the filters as one tuple, always returning a tuple of States (one per
    filter): Flax's lower-level spelling."""
    predicates = tuple(filterlib.to_predicate(f) for f in filters)
    flat_states: tuple[dict[PathParts, Any], ...] = tuple({} for _ in predicates)
    _graph_pop(node, set(), (), flat_states, predicates)
    return tuple(from_flat_state(fs) for fs in flat_states)


def clone(
    node: Any, variables: bool = True, *, arrays: bool = False, graph: bool | None = None
) -> Any:
    """A deep copy of ``node``'s graph: new Variables (unless ``variables=False``) holding
    the same arrays (copies of them with ``arrays=True``)."""
    graphdef_, state_ = split(node, graph=graph)
    if arrays:
        if not variables:
            raise ValueError("If arrays is True, variables should be also True")
        state_ = jax.tree.map(jax.numpy.copy, state_)
        variables = False
    return merge(graphdef_, state_, copy=variables)


# ----------------------------------------------------------------------------- GraphState


@dataclasses.dataclass(slots=True, repr=False)
class GraphState(MutableMapping[Any, Any], Generic[A]):
    """A State bundled with the GraphDef it belongs to (``nnx.merge`` takes it alone)."""

    _graphdef: GraphDef[A]
    _state: State

    def __post_init__(self) -> None:
        if not isinstance(self._state, State):
            raise ValueError(f"Expected a State object, got {type(self._state).__name__}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_state", "_graphdef"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._state, name, value)

    def __getitem__(self, key: Any) -> Any:
        return self._state[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._state[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._state[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def __contains__(self, key: object) -> bool:
        return key in self._state

    def __repr__(self) -> str:
        return f"GraphState(_graphdef={self._graphdef!r}, _state={self._state!r})"


def _state_children(x: "GraphState[Any]") -> tuple[list[tuple[Any, Any]], Any]:
    state_ = x._state
    return jax.tree_util.tree_flatten_with_path(state_, is_leaf=lambda y: y is not state_)


def _graph_state_flatten_with_keys(x: "GraphState[Any]") -> tuple[Any, Any]:
    children, treedef = _state_children(x)
    return [(path[0], c) for path, c in children], (x._graphdef, treedef)


def _graph_state_unflatten(aux: Any, children: Any) -> "GraphState[Any]":
    return GraphState(aux[0], aux[1].unflatten(list(children)))


def _graph_state_flatten(x: "GraphState[Any]") -> tuple[list[Any], Any]:
    children, treedef = _state_children(x)
    return [c for _, c in children], (x._graphdef, treedef)


jax.tree_util.register_pytree_with_keys(
    GraphState, _graph_state_flatten_with_keys, _graph_state_unflatten, _graph_state_flatten
)


def unpack(node: Any, *filters: Any, graph: bool | None = None) -> Any:
    """``split`` with the GraphDef bundled into each State (a GraphState per filter)."""
    graphdef_, *states = split(node, *filters, graph=graph)
    if len(states) == 1:
        return GraphState(graphdef_, states[0])
    return tuple(GraphState(graphdef_, s) for s in states)


def map(
    f: Callable[[PathParts, Any], Any],
    node: Any,
    /,
    *,
    graph: bool | None = None,
    recreate_variables: bool = True,
) -> Any:
    """A new node whose leaves are ``f(path, variable)`` of ``node``'s."""
    graphdef_, state_ = split(node, graph=graph)
    state_ = map_state(f, state_) if isinstance(state_, State) else f((), state_)
    return merge(graphdef_, state_, recreate_variables=recreate_variables)


# ----------------------------------------------------------------------------- proxies


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class DelayedAccessor:
    """A recorded chain of attribute and item accesses, replayed on an object."""

    actions: tuple[tuple[str, Any], ...] = ()

    def __call__(self, x: Any) -> Any:
        for kind, key in self.actions:
            x = getattr(x, key) if kind == "attr" else x[key]
        return x

    def __getattr__(self, name: str) -> "DelayedAccessor":
        if name.startswith("__"):
            raise AttributeError(name)
        return DelayedAccessor((*self.actions, ("attr", name)))

    def __getitem__(self, key: Any) -> "DelayedAccessor":
        return DelayedAccessor((*self.actions, ("item", key)))


class CallableProxy:
    """``proxy.a.b[0](*args)`` calls ``fn(accessor_of_a.b[0], *args)``."""

    def __init__(self, fn: Callable[..., Any], accessor: DelayedAccessor | None = None) -> None:
        self._callable = fn
        self._accessor = DelayedAccessor() if accessor is None else accessor

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._callable(self._accessor, *args, **kwargs)

    def __getattr__(self, name: str) -> "CallableProxy":
        if name.startswith("__"):
            raise AttributeError(name)
        return CallableProxy(self._callable, getattr(self._accessor, name))

    def __getitem__(self, key: Any) -> "CallableProxy":
        return CallableProxy(self._callable, self._accessor[key])


ApplyCaller = CallableProxy


def call(graphdef_state: tuple[GraphDef[Any], Any], /) -> Any:
    """A proxy on the node of a ``(graphdef, state)`` pair: ``call(pair).method(*args)``
    returns ``(output, (graphdef, state))`` of the node after the call."""

    def pure_caller(accessor: DelayedAccessor, *args: Any, **kwargs: Any) -> Any:
        node = merge(*graphdef_state)
        out = accessor(node)(*args, **kwargs)
        return out, split(node)

    return CallableProxy(pure_caller)


def _apply(
    graphdef_: GraphDef[Any], state_: Any, *states: Any, graph: bool | None = None
) -> CallableProxy:
    def _call(accessor: DelayedAccessor, *args: Any, **kwargs: Any) -> Any:
        module = merge(graphdef_, state_, *states)
        out = accessor(module)(*args, **kwargs)
        new_graphdef, flat_state = flatten(module, graph=_graph(graph))
        return out, (new_graphdef, from_flat_state(list(flat_state)))

    return CallableProxy(_call)


_APPLY[0] = _apply


# ----------------------------------------------------------------------------- conversions


def set_metadata(node: Any, /, *, only: Any = Variable, **metadata: Any) -> None:
    """Set ``metadata`` on every Variable of ``node`` matching ``only`` (in place)."""
    for _, leaf in statelib.to_flat_state(state(node, only)):
        if isinstance(leaf, Variable):
            leaf.set_metadata(**metadata)


def as_pure(tree: Any) -> Any:
    """``tree`` with every Variable replaced by its value (array refs by their array)."""

    def pure_fn(x: Any) -> Any:
        if isinstance(x, Variable):
            return as_pure(x.get_raw_value())
        if is_array_ref(x):
            return x[...]
        return x

    return jax.tree.map(pure_fn, tree, is_leaf=lambda x: isinstance(x, Variable))


pure = as_pure
