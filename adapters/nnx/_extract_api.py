"""Flax's own ``extract`` API: ``NodeStates``, ``to_tree``/``from_tree`` (a tree of
graph nodes as a tree of ``NodeStates`` and back), ``prefix``, ``to_tree_states``;
re-exported by ``extract``."""

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import jax

from . import filterlib, graphlib
from ._extract_prefix import (
    KeyPath,
    Missing,
    PathParts,
    TreeState,
    _Static,
    broadcast_prefix,
    check_consistent_aliasing,
    is_node_leaf,
    resolve_modes,
)
from .variablelib import Variable


class NodeStates:
    """Flax's lowered node: a GraphDef (static) and one or more states."""

    def __init__(self, graphdef: Any, states: tuple[Any, ...], metadata: Any = None) -> None:
        self._graphdef = graphdef
        self.states = states
        self.metadata = metadata

    @property
    def graphdef(self) -> Any:
        if self._graphdef is None:
            raise ValueError("No graphdef available")
        return self._graphdef

    @property
    def state(self) -> Any:
        if len(self.states) != 1:
            raise ValueError(f"Expected exactly one GraphDefState, got {len(self.states)}")
        return self.states[0]

    @classmethod
    def from_split(
        cls, graphdef: Any, state: Any, /, *states: Any, metadata: Any = None
    ) -> "NodeStates":
        return cls(graphdef, (state, *states), metadata)

    @classmethod
    def from_states(cls, state: Any, *states: Any) -> "NodeStates":
        return cls(None, (state, *states))

    @classmethod
    def from_prefixes(cls, prefixes: Iterable[Any], /, *, metadata: Any = None) -> "NodeStates":
        return cls(None, tuple(prefixes), metadata)


jax.tree_util.register_pytree_node(
    NodeStates,
    # No GraphDef (a prefix's NodeStates) is None, a prefix leaf over the GraphDef.
    lambda n: ((None if n._graphdef is None else _Static(n._graphdef), n.states), n.metadata),
    lambda meta, ch: NodeStates(ch[0].value if isinstance(ch[0], _Static) else ch[0], ch[1], meta),
)


def _is_graph_leaf(x: Any) -> bool:
    return isinstance(x, Variable) or graphlib.is_graph_node(x)


def default_split_fn(ctx: Any, path: KeyPath, prefix: Any, leaf: Any) -> "NodeStates":
    """``to_tree``'s default: the node split whole by the shared context."""
    return NodeStates.from_split(*ctx.split(leaf))


def merge_tree_node(ctx: Any, path: KeyPath, prefix: Any, leaf: Any) -> Any:
    """``from_tree``'s default: a ``NodeStates`` merged by the shared context."""
    if not isinstance(leaf, NodeStates):
        raise ValueError(f"Expected TreeNode, got {type(leaf)} at path {path}")
    return ctx.merge(leaf.graphdef, *leaf.states)


def is_tree_node(x: Any) -> bool:
    return isinstance(x, NodeStates)


def to_tree(
    tree: Any,
    /,
    *,
    prefix: Any = Missing,
    split_fn: Callable[[Any, KeyPath, Any, Any], Any] = default_split_fn,
    map_non_graph_nodes: bool = False,
    ctxtag: Hashable | None = None,
    check_aliasing: bool = True,
) -> Any:
    """Each graph node (and Variable) of ``tree`` as ``split_fn``'s result, by default a
    ``NodeStates``: the nodes are split in one ``split_context``, so a node met again is
    a ``NodeRef`` in its GraphDef and its state is empty. With ``prefix``, each node's
    prefix is passed to ``split_fn``, and a Variable given two prefixes is an error."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_graph_leaf)
    if prefix is Missing or prefix is None:
        prefixes: list[Any] = [prefix] * len(flat)
        keypaths: list[Any] = [()] * len(flat)
        check_aliasing = False
    else:
        prefixes = broadcast_prefix(
            prefix,
            tree,
            prefix_is_leaf=lambda x: x is None or _is_graph_leaf(x),
            tree_is_leaf=_is_graph_leaf,
        )
        keypaths = [keypath for keypath, _ in flat]
    node_prefixes: dict[int, list[tuple[PathParts, Any]]] = {}
    out: list[Any] = []
    with graphlib.split_context(ctxtag) as ctx:
        for keypath, (_, leaf), leaf_prefix in zip(keypaths, flat, prefixes, strict=True):
            if _is_graph_leaf(leaf):
                if check_aliasing:
                    check_consistent_aliasing(leaf, leaf_prefix, node_prefixes=node_prefixes)
                leaf = split_fn(ctx, keypath, leaf_prefix, leaf)
            elif map_non_graph_nodes:
                leaf = split_fn(ctx, keypath, leaf_prefix, leaf)
            out.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, out)


def from_tree(
    tree: Any,
    /,
    *,
    prefix: Any = Missing,
    merge_fn: Callable[[Any, KeyPath, Any, Any], Any] = merge_tree_node,
    is_node_leaf: Callable[[Any], bool] = is_tree_node,
    is_leaf: Callable[[Any], bool] = is_tree_node,
    map_non_graph_nodes: bool = False,
    is_inner: bool | None = None,
    ctxtag: Hashable | None = None,
) -> Any:
    """Inverse of ``to_tree``: every ``NodeStates`` (``is_node_leaf``) merged in one
    ``merge_context``, so references split as ``NodeRef`` are the same object again."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    if prefix is Missing or prefix is None:
        prefixes: list[Any] = [prefix] * len(flat)
        keypaths: list[Any] = [()] * len(flat)
    else:
        prefixes = broadcast_prefix(
            prefix, tree, prefix_is_leaf=lambda x: x is None or is_leaf(x), tree_is_leaf=is_leaf
        )
        keypaths = [keypath for keypath, _ in flat]
    out: list[Any] = []
    with graphlib.merge_context(ctxtag, is_inner) as ctx:
        for keypath, (_, leaf), leaf_prefix in zip(keypaths, flat, prefixes, strict=True):
            if map_non_graph_nodes or is_node_leaf(leaf) or isinstance(leaf, Variable):
                leaf = merge_fn(ctx, keypath, leaf_prefix, leaf)
            out.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, out)


def clear_non_graph_nodes(tree: Any) -> Any:
    """``tree`` with every leaf that is not a graph node or Variable replaced by None."""
    return jax.tree.map(lambda x: x if is_node_leaf(x) else None, tree, is_leaf=is_node_leaf)


def prefix(
    node: Any,
    filter_map: Mapping[Any, Any] | Callable[..., Any],
    /,
    *,
    graph: bool | None = None,
) -> Any:
    """``node`` with each Variable replaced by its prefix: ``filter_map(path, variable)``,
    or the value of the first filter of a ``{filter: prefix}`` mapping that matches."""
    if isinstance(filter_map, Mapping):
        table = [(filterlib.to_predicate(f), v) for f, v in filter_map.items()]
        filters = list(filter_map.keys())

        def fn(path: PathParts, leaf: Any) -> Any:
            for predicate, value in table:
                if predicate(path, leaf):
                    return value
            raise ValueError(
                f"No filter matched leaf at path {path!r} with value {leaf!r}. Filters: {filters}"
            )

    else:
        fn = filter_map
    graph = resolve_modes(graph, None)[0]

    def on_leaf(jax_path: Any, leaf: Any) -> Any:
        return fn(_nnx_path(jax_path), leaf)

    if graph:
        node = to_tree_states(node)
    return jax.tree_util.tree_map_with_path(
        on_leaf, node, is_leaf=lambda x: isinstance(x, Variable)
    )


def to_tree_states(tree: Any) -> Any:
    """Each graph node in ``tree`` as a ``TreeState`` (its own GraphDef and State)."""
    return jax.tree.map(
        lambda x: TreeState(*graphlib.split(x)) if is_node_leaf(x) else x,
        tree,
        is_leaf=is_node_leaf,
    )


def _nnx_path(jax_path: Any) -> PathParts:
    out: list[Hashable] = []
    for k in jax_path:
        if isinstance(k, jax.tree_util.DictKey) and isinstance(k.key, tuple):
            out.extend(k.key)  # a State's leaf is keyed by its whole path
        elif isinstance(k, jax.tree_util.DictKey):
            out.append(k.key)
        elif isinstance(k, jax.tree_util.SequenceKey):
            out.append(k.idx)
        elif isinstance(k, jax.tree_util.GetAttrKey):
            out.append(k.name)
        elif isinstance(k, jax.tree_util.FlattenedIndexKey):
            continue  # TreeState's single child
        else:
            out.append(str(k))
    return tuple(k for k in out if k != "__state__")
