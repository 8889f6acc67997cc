"""The split/merge contexts NNX transforms are built on.

A transform splits its inputs outside (1), merges them inside (2), splits the outputs
inside (3) and merges them outside (4). ``update_context(tag)`` keeps the bookkeeping that
lets (4) write the results back into the caller's own objects: (1) records the outer
objects by index, (2) records the inner objects, (3) flattens the inner objects with their
outer indices, and (4) reuses the outer objects those indices name. ``split_context`` and
``merge_context`` share one ``RefMap``/``IndexMap`` across several calls, so references
shared between arguments stay shared.
"""

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Generator, Hashable, Iterable, Mapping, MutableMapping
from typing import Any, NamedTuple

import jax

from .. import _structure
from ..statelib import State
from ..variablelib import Variable
from ._defs import GraphDef, NodeDef, NodeRef, VariableDef
from ._flatten import _sort_key, flatten, set_graph_mode, set_graph_updates, unflatten
from ._nodes import IndexMap, PathParts, PythonRefMap, RefMap, is_graph_node
from ._state import FlatState, flatten_nested, from_flat_state, make_flat_state, update_variable

# ----------------------------------------------------------------------------- state helpers


def _split_state(flat_state: Any, filters: tuple[Any, ...]) -> tuple[Any, ...]:
    if not filters:
        return (flat_state,)
    states = flat_state.split(*filters)
    return states if isinstance(states, tuple) else (states,)


def _to_nested_state(graphdef: GraphDef[Any], flat_states: Iterable[Any]) -> tuple[Any, ...]:
    del graphdef

    def nested_or_leaf(flat_state: Any) -> Any:
        pairs = list(flat_state)
        if not pairs:
            return State({})
        if len(pairs) == 1 and pairs[0][0] == ():
            return pairs[0][1]
        return from_flat_state(pairs)

    return tuple(nested_or_leaf(fs) for fs in flat_states)


def _merge_to_flat_state(states: Iterable[Any]) -> list[Any]:
    """The leaves of ``states`` in path order (a non-mapping state is the root's leaf)."""
    pairs: list[tuple[PathParts, Any]] = []
    for state in states:
        if isinstance(state, Mapping) and not isinstance(state, Variable):
            pairs.extend(flatten_nested(state))
        elif isinstance(state, FlatState):
            pairs.extend(state)
        else:
            pairs.append(((), state))
    pairs.sort(key=lambda kv: _sort_key(kv[0]))
    return [value for _, value in pairs]


# ----------------------------------------------------------------------------- contexts


class StaticCache(NamedTuple):
    """What ``cached_partial`` remembers about one cached node."""

    graphdef: GraphDef[Any]
    final_graphdef: GraphDef[Any]
    paths: tuple[PathParts, ...]
    variables: list[Variable]
    new_ref_index: RefMap
    new_index_ref: IndexMap

    @staticmethod
    def create(
        graphdef: GraphDef[Any],
        paths: tuple[PathParts, ...],
        variables: list[Variable],
        new_ref_index: RefMap,
    ) -> "StaticCache":
        """The cache entry of a node flattened to ``graphdef``."""
        return StaticCache(
            graphdef=graphdef,
            final_graphdef=graphdef.with_same_outer_index(),
            paths=paths,
            variables=variables,
            new_ref_index=new_ref_index,
            new_index_ref=IndexMap.from_refmap(new_ref_index),
        )


class GraphContext(threading.local):
    """Per-thread stacks of the active update, split and merge contexts, and the static
    cache offered to the next update context (each open context and the offer are
    counted by ``_structure.enter``/``leave``: ``nnx.jit``'s fast path needs none)."""

    def __init__(self) -> None:
        self.update_context_stacks: dict[Hashable, list[UpdateContext]] = {}
        self.ref_index_stack: list[SplitContext] = []
        self.index_ref_stack: list[MergeContext] = []
        self.offer: MutableMapping[Any, StaticCache] | None = None
        self.caching: bool = False

    @property
    def tmp_static_cache(self) -> MutableMapping[Any, StaticCache] | None:
        return self.offer

    @tmp_static_cache.setter
    def tmp_static_cache(self, cache: MutableMapping[Any, StaticCache] | None) -> None:
        if (cache is None) != (self.offer is None):
            (_structure.leave if cache is None else _structure.enter)()
        self.offer = cache


GRAPH_CONTEXT = GraphContext()


class static_cache:  # Flax's name; a class: entered on every cached call
    """``with static_cache(cache):`` offers ``cache`` to the next ``update_context``
    entered (the transform's), which must consume it. Reusable."""

    __slots__ = ("cache", "offered")

    def __init__(self, cache: MutableMapping[Any, StaticCache]) -> None:
        self.cache = cache
        self.offered = False

    def __enter__(self) -> None:
        self.offered = not GRAPH_CONTEXT.caching
        if self.offered:
            GRAPH_CONTEXT.tmp_static_cache = self.cache

    def __exit__(self, *exc: object) -> None:
        if self.offered and GRAPH_CONTEXT.tmp_static_cache is not None:
            GRAPH_CONTEXT.tmp_static_cache = None
            raise ValueError(
                "GRAPH_CONTEXT.tmp_static_cache should be None, no context consumed it."
            )


@jax.tree_util.register_static
@dataclasses.dataclass(eq=False)
class UpdateContext:
    """The bookkeeping of one transform call (see the module docstring)."""

    tag: Hashable
    outer_ref_outer_index: RefMap | None
    outer_index_inner_ref: IndexMap | None
    outer_index_outer_ref: IndexMap | None
    inner_ref_outer_index: RefMap | None
    static_cache: MutableMapping[Any, StaticCache] | None

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UpdateContext)

    def flatten_end(self, ref_index: RefMap) -> None:
        """End of a split: the outer split (1) records the outer objects; the inner split
        (3) drops the inner maps."""
        if self.outer_ref_outer_index is None:
            self.outer_ref_outer_index = ref_index
            self.outer_index_outer_ref = IndexMap.from_refmap(ref_index)
        else:
            self.outer_index_inner_ref = None
            self.inner_ref_outer_index = None

    def unflatten_end(self, index_ref: IndexMap, inner_merge: bool) -> None:
        """End of a merge: the inner merge (2) records the inner objects."""
        if inner_merge:
            self.outer_index_inner_ref = index_ref
            self.inner_ref_outer_index = RefMap.from_indexmap(index_ref)


@dataclasses.dataclass
class UpdateContextManager:
    """``with update_context(tag):`` or ``@update_context(tag)``."""

    tag: Hashable

    def __enter__(self) -> UpdateContext:
        cache = GRAPH_CONTEXT.tmp_static_cache
        GRAPH_CONTEXT.tmp_static_cache = None
        ctx = UpdateContext(self.tag, None, None, None, None, cache)
        GRAPH_CONTEXT.update_context_stacks.setdefault(self.tag, []).append(ctx)
        _structure.enter()
        return ctx

    def __exit__(self, *exc: object) -> None:
        _structure.leave()
        stacks = GRAPH_CONTEXT.update_context_stacks
        if self.tag not in stacks:
            raise RuntimeError(f"No update context found for tag {self.tag!r}, this is a bug.")
        ctx = stacks[self.tag].pop()
        del ctx.outer_ref_outer_index
        del ctx.outer_index_inner_ref
        del ctx.outer_index_outer_ref
        del ctx.inner_ref_outer_index
        if not stacks[self.tag]:
            del stacks[self.tag]

    def __call__(self, f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def update_context_manager_wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return f(*args, **kwargs)

        return update_context_manager_wrapper


def update_context(tag: Hashable) -> UpdateContextManager:
    """A context (or decorator) in which ``split_context(tag)``/``merge_context(tag, inner)``
    carry a transform's inputs in and its outputs back into the same Python objects, with
    new attributes, changed static values and new shared references preserved."""
    return UpdateContextManager(tag=tag)


def current_update_context(tag: Hashable) -> UpdateContext:
    """The innermost active UpdateContext of ``tag``."""
    if tag not in GRAPH_CONTEXT.update_context_stacks:
        raise ValueError(f"No update context found for tag {tag!r}.")
    return GRAPH_CONTEXT.update_context_stacks[tag][-1]


@dataclasses.dataclass
class SplitContext:
    """Splits sharing one ``RefMap`` (see ``split_context``)."""

    ctxtag: Hashable | None
    ref_index: RefMap
    is_inner: bool | None

    def _ctx(self) -> UpdateContext | None:
        return current_update_context(self.ctxtag) if self.ctxtag is not None else None

    def split(self, node: Any, *filters: Any) -> tuple[Any, ...]:
        """``nnx.split`` sharing this context's references."""
        ctx = self._ctx()
        inner = ctx.inner_ref_outer_index if ctx and ctx.inner_ref_outer_index else None
        graphdef, flat_state = flatten(
            node, ref_index=self.ref_index, ref_outer_index=inner, graph=True
        )
        states = _to_nested_state(graphdef, _split_state(flat_state, filters))
        return (graphdef, *states)

    def flatten(self, node: Any, *filters: Any, with_paths: bool = True) -> tuple[Any, ...]:
        """``flatten`` sharing this context's references (and the static cache of a
        ``cached_partial`` call)."""
        if not with_paths and filters:
            raise ValueError("Cannot use filters with with_paths=False")
        ctx = self._ctx()
        cache = ctx.static_cache if ctx is not None and self.is_inner is False else None
        outer = ctx.inner_ref_outer_index if ctx and ctx.inner_ref_outer_index else None
        if node not in self.ref_index and cache is not None and node in cache:
            entry = cache[node]
            graphdef = entry.graphdef
            self.ref_index.update(entry.new_ref_index)
            if not with_paths:
                return graphdef, [v.get_raw_value() for v in entry.variables]
            flat_state = make_flat_state(entry.paths, list(entry.variables))
        else:
            graphdef, flat_state = flatten(
                node,
                ref_index=self.ref_index,
                ref_outer_index=outer,
                with_paths=with_paths,
                graph=True,
            )
            if not with_paths:
                return graphdef, flat_state
        return (graphdef, *_split_state(flat_state, filters))


@contextlib.contextmanager
def split_context(ctxtag: Hashable | None = None) -> Generator[SplitContext, None, None]:
    """A SplitContext whose splits share references (a node seen twice is a NodeRef)."""
    ctx = current_update_context(ctxtag) if ctxtag is not None else None
    is_inner = ctx.outer_ref_outer_index is not None if ctx is not None else None
    GRAPH_CONTEXT.ref_index_stack.append(SplitContext(ctxtag, RefMap(), is_inner))
    _structure.enter()
    try:
        yield GRAPH_CONTEXT.ref_index_stack[-1]
    finally:
        _structure.leave()
        split_ctx = GRAPH_CONTEXT.ref_index_stack.pop()
        if ctxtag is not None:
            current_update_context(ctxtag).flatten_end(split_ctx.ref_index)
        del split_ctx.ref_index
        del split_ctx.ctxtag


@dataclasses.dataclass
class MergeContext:
    """Merges sharing one ``IndexMap`` (see ``merge_context``)."""

    ctxtag: Hashable | None
    index_ref: IndexMap
    is_inner: bool | None

    def _ctx(self) -> UpdateContext | None:
        return current_update_context(self.ctxtag) if self.ctxtag is not None else None

    def merge(self, graphdef: GraphDef[Any], state: Any, /, *states: Any) -> Any:
        """``nnx.merge`` sharing this context's references (Variables are copied)."""
        ctx = self._ctx()
        outer = ctx.outer_index_outer_ref if ctx and ctx.outer_index_outer_ref else None
        return unflatten(
            graphdef,
            _merge_to_flat_state((state, *states)),
            index_ref=self.index_ref,
            outer_index_outer_ref=outer,
            copy_variables=True,
        )

    def unflatten(self, graphdef: GraphDef[Any], flat_state: Any, /, *flat_states: Any) -> Any:
        """``unflatten`` sharing this context's references (and ``cached_partial``'s
        static cache)."""
        ctx = self._ctx()
        cache = ctx.static_cache if ctx is not None and self.is_inner is False else None
        if type(flat_state) is list:
            if flat_states:
                raise ValueError(
                    "Cannot use multiple flat_states when flat_state is a list, "
                    f"got flat_state: {flat_state!r}, flat_states: {flat_states!r}"
                )
            state: Any = flat_state
        else:
            state = FlatState.merge(flat_state, *flat_states) if flat_states else flat_state
        first = graphdef.nodes[0] if graphdef.nodes else None
        if type(first) is NodeRef:
            return unflatten(graphdef, state, index_ref=self.index_ref)
        outer = ctx.outer_index_outer_ref if ctx and ctx.outer_index_outer_ref else None
        if cache is not None and isinstance(first, (NodeDef, VariableDef)):
            if first.outer_index is None:
                return unflatten(graphdef, state, index_ref=self.index_ref)
            assert outer is not None
            node = outer[first.outer_index]
            if node in cache:
                self._update_cached(node, cache[node], graphdef, state)
                return node
        return unflatten(graphdef, state, index_ref=self.index_ref, outer_index_outer_ref=outer)

    def _update_cached(
        self, node: Any, entry: StaticCache, graphdef: GraphDef[Any], state: Any
    ) -> None:
        if entry.final_graphdef != graphdef:
            raise ValueError(
                "The graph structure of a node added to cached_partial was mutated inside "
                f"the transformation, this is not allowed.\nNode: {node}\nOuput graphdef: "
                f"{graphdef}\nExpected graphdef: {entry.final_graphdef}"
            )
        leaves = state if type(state) is list else list(state.leaves)
        if len(leaves) != len(entry.variables):
            raise ValueError(
                f"Incorrect number of leaves: expected {len(entry.variables)} "
                f"leaves in the state, got {len(leaves)}"
            )
        for variable, leaf in zip(entry.variables, leaves, strict=True):
            if isinstance(leaf, Variable):
                update_variable(variable, leaf)
            else:
                variable.set_raw_value(leaf)
        self.index_ref.update(entry.new_index_ref)


@contextlib.contextmanager
def merge_context(
    ctxtag: Hashable | None = None, inner: bool | None = None
) -> Generator[MergeContext, None, None]:
    """A MergeContext whose merges share references; with ``ctxtag``, ``inner`` says
    whether this is the merge inside the transform (2) or outside (4)."""
    GRAPH_CONTEXT.index_ref_stack.append(MergeContext(ctxtag, IndexMap(), inner))
    _structure.enter()
    try:
        yield GRAPH_CONTEXT.index_ref_stack[-1]
    finally:
        _structure.leave()
        merge_ctx = GRAPH_CONTEXT.index_ref_stack.pop()
        if ctxtag is not None:
            if inner is None:
                raise ValueError("inner_merge must be specified when using ctxtag")
            current_update_context(ctxtag).unflatten_end(merge_ctx.index_ref, inner)
        del merge_ctx.index_ref
        del merge_ctx.ctxtag


# ----------------------------------------------------------------------------- cached_partial


def cached_partial(
    f: Callable[..., Any],
    *cached_args: Any,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., Any]:
    """``functools.partial(f, *cached_args)`` for an NNX-transformed ``f`` that skips
    re-traversing the cached graph nodes on each call (their structure must not change
    inside ``f``; their Variables are shared with the originals, so updates reach them)."""
    if graph is None:
        graph = set_graph_mode.current_value()
    if graph_updates is None:
        graph_updates = set_graph_updates.current_value()
    if not graph or not graph_updates:
        raise ValueError("cached_partial is a graph-mode-only API and requires graph_updates=True.")
    cache: MutableMapping[Any, StaticCache] = PythonRefMap()  # type: ignore[assignment]
    original_ref_index = RefMap()
    index_ref = IndexMap()
    cached_ref_index = RefMap()

    def create_static_cache(x: Any) -> Any:
        if not (is_graph_node(x) or isinstance(x, Variable)):
            return x
        graphdef, flat_state = flatten(x, ref_index=original_ref_index, graph=True)
        node_cache = unflatten(graphdef, flat_state, index_ref=index_ref, copy_variables=False)
        start = len(cached_ref_index)
        flatten(node_cache, ref_index=cached_ref_index, with_paths=False, graph=True)
        new_refs = RefMap((k, v) for k, v in cached_ref_index.items() if v >= start)
        cache[node_cache] = StaticCache.create(
            graphdef, tuple(flat_state.paths), list(flat_state.leaves), new_refs
        )
        return node_cache

    cached = jax.tree.map(
        create_static_cache,
        cached_args,
        is_leaf=lambda x: is_graph_node(x) or isinstance(x, Variable),
    )

    if getattr(f, "ignores_static_cache", False):
        # nnx.jit serves repeated calls from plans of its own and discards the offer:
        # no handshake is needed, and none makes the call take the slower way.
        bound = functools.partial(f, *cached)
        functools.update_wrapper(bound, f)
        return bound

    offer = static_cache(cache)

    @functools.wraps(f)
    def cache_args_wrapper(*args: Any, **kwargs: Any) -> Any:
        with offer:
            return f(*cached, *args, **kwargs)

    return cache_args_wrapper
