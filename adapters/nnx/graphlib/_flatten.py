"""flatten/unflatten: a node to ``(GraphDef, leaves)`` and back, in graph or tree mode.

Graph mode walks the registered node types depth first (children sorted by key) and numbers
every object with identity in ``ref_index``; tree mode hands the whole node to JAX's pytree
flattening, refusing shared Variables. ``unflatten`` rebuilds, reusing the objects of
``outer_index_outer_ref`` (the caller's objects, inside a transform's update context).
"""

import threading
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from ... import config
from ..statelib import State
from ..variablelib import Variable
from ._defs import (
    LEAF_ATTR,
    NODE_ATTR,
    ArrayRefDef,
    GraphDef,
    LeafAttr,
    NodeAttr,
    NodeDef,
    NodeRef,
    TreeNodeDef,
    VariableDef,
)
from ._nodes import (
    NO_UPDATE,
    REPEATED,
    ArrayRefOutput,
    DataElem,
    GraphNodeImpl,
    HashableMapping,
    IndexMap,
    NodeImpl,
    NoUpdate,
    PathParts,
    PytreeNodeImpl,
    RefMap,
    Repeated,
    Static,
    StaticElem,
    get_node_impl,
    get_node_impl_for_type,
    is_array_ref,
    jax_to_nnx_path,
)
from ._state import (
    FlatState,
    copy_variable,
    make_flat_state,
    update_variable,
    var_type,
)

# ----------------------------------------------------------------------------- modes


class _ModeStacks(threading.local):
    def __init__(self) -> None:
        self.graph_mode: list[bool] = []
        self.graph_updates: list[bool] = []


_MODES = _ModeStacks()


class _ConfigContext:
    """A config value set for a ``with`` block or a decorated function (Flax's
    ``BaseConfigContext``): ``set_x(v)`` takes effect at once; ``with``/decoration scope it."""

    _flag: str = ""
    _stack_name: str = ""

    @classmethod
    def _stack(cls) -> list[bool]:
        return getattr(_MODES, cls._stack_name)

    def __init__(self, value: bool, /) -> None:
        stack = self._stack()
        self.prev_value: bool | None
        if stack:
            self.prev_value = stack[-1]
            stack[-1] = value
        else:
            self.prev_value = None
            stack.append(value)
        self.new_value = value

    @classmethod
    def current_value(cls) -> bool:
        """The value in effect."""
        stack = cls._stack()
        return stack[-1] if stack else bool(getattr(config, cls._flag))

    def __enter__(self) -> None:
        if self.prev_value is not None:
            self._stack().insert(-1, self.prev_value)

    def __exit__(self, *exc: object) -> None:
        self._stack().pop()

    def __call__(self, f: Any) -> Any:
        stack = self._stack()
        stack.pop()
        if self.prev_value is not None:
            stack.append(self.prev_value)
        new_value = self.new_value

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._stack().append(new_value)
            try:
                return f(*args, **kwargs)
            finally:
                self._stack().pop()

        wrapper.__wrapped__ = f  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(f, "__name__", "wrapper")
        wrapper.__doc__ = getattr(f, "__doc__", None)
        return wrapper


class set_graph_mode(_ConfigContext):
    """Default of the ``graph=`` argument of the NNX APIs (graph mode vs tree mode)."""

    _flag = "nnx_graph_mode"
    _stack_name = "graph_mode"


class set_graph_updates(_ConfigContext):
    """Default of the ``graph_updates=`` argument of the NNX transforms."""

    _flag = "nnx_graph_updates"
    _stack_name = "graph_updates"


# ----------------------------------------------------------------------------- messages


def _tree_mode_suggestion_api(fn_name: str) -> str:
    return (
        "Consider the following options:\n\n"
        "1. Remove the duplicates and guarantee a tree structure.\n"
        f"2. Enable graph mode by passing graph=True to {fn_name} e.g.\n\n"
        f"  nnx.{fn_name}(..., graph=True)\n\n"
        f"3. Use nnx.compat.{fn_name} instead e.g.\n\n"
        f"  nnx.compat.{fn_name}(...)"
    )


def _tree_mode_suggestion_transform(fn_name: str) -> str:
    return (
        "Consider the following options:\n\n"
        "1. Remove the duplicates.\n"
        "2. Enable graph mode and graph updates by passing graph=True and "
        f"graph_updates=True to {fn_name} e.g.\n\n"
        f"  nnx.{fn_name}(..., graph=True, graph_updates=True)\n\n"
        f"3. Use nnx.compat.{fn_name} instead e.g.\n\n"
        f"  nnx.compat.{fn_name}(...)"
    )


def _check_valid_pytree(node: Any, fn_name: str, path: str = "") -> None:
    """Tree mode refuses a Pytree declared with ``pytree=False``."""
    if getattr(type(node), "_pytree__is_pytree", True) is not False:
        return
    if not hasattr(type(node), "_pytree__nodes"):
        return
    msg = (
        f"Cannot use '{fn_name}' with graph=False on a "
        f"'{type(node).__name__}' instance that has pytree=False. "
    )
    if path:
        msg += f"Found at path: {path}. "
    msg += (
        "Pytree subclasses with pytree=False are not registered as "
        "JAX pytrees and cannot be used in tree-mode. " + _tree_mode_suggestion_api(fn_name)
    )
    raise ValueError(msg)


def _duplicate_error(x: Any, first: str, second: str, fn_name: str) -> ValueError:
    return ValueError(
        f"Duplicate {x}\nfound at paths:\n\n  - {first}\n  - {second}\n\n"
        "Tree mode (graph=False) does not support shared references. "
        + _tree_mode_suggestion_api(fn_name)
    )


# ----------------------------------------------------------------------------- flatten


def _tree_flatten(
    node: Any, nodes: list[Any], leaves: list[Any], paths: list[PathParts] | None
) -> None:
    seen: dict[int, str] = {}

    def is_leaf(path: Any, x: Any) -> bool:
        if isinstance(x, Variable) or is_array_ref(x):
            where = jax.tree_util.keystr(path)
            if id(x) in seen:
                raise _duplicate_error(x, seen[id(x)], where, "split")
            seen[id(x)] = where
            return isinstance(x, Variable)
        _check_valid_pytree(x, "flatten", jax.tree_util.keystr(path))
        return False

    jax_leaves, treedef = jax.tree_util.tree_flatten_with_path(
        node, is_leaf=is_leaf, is_leaf_takes_path=True
    )
    pairs = [(jax_to_nnx_path(p), v) for p, v in jax_leaves]
    original = {p: i for i, (p, _) in enumerate(pairs)}
    order = sorted(range(len(pairs)), key=lambda i: _sort_key(pairs[i][0]))
    pairs = [pairs[i] for i in order]
    nodes.append(TreeNodeDef(type(node), treedef, tuple((p, original[p]) for p, _ in pairs)))
    for i, (path, value) in enumerate(pairs):
        if isinstance(value, Variable):
            meta = HashableMapping(value.get_metadata())
            nodes.append(VariableDef(var_type(value), i, None, meta, None))
        leaves.append(value)
        if paths is not None:
            paths.append(path)


def _key_rank(k: Any) -> tuple[int, Any]:
    if isinstance(k, int):
        return (0, k)
    return (1, k) if isinstance(k, str) else (2, k)


def _sort_key(path: PathParts) -> tuple[Any, ...]:
    """Sort key of a path: Python's order of its keys, ints before strings."""
    return tuple(_key_rank(k) for k in path)


def flatten(
    node: Any,
    /,
    *,
    with_paths: bool = True,
    ref_index: RefMap | None = None,
    ref_outer_index: RefMap | None = None,
    graph: bool | None = None,
) -> tuple[GraphDef[Any], Any]:
    """``(graphdef, flat_state)`` of ``node`` (``(graphdef, leaves)`` with
    ``with_paths=False``). ``ref_index`` numbers the objects with identity across several
    calls (shared references between them become NodeRefs); ``ref_outer_index`` gives the
    outer index of objects that came from outside a transform."""
    if graph is None:
        graph = set_graph_mode.current_value()
    if ref_index is None:
        ref_index = RefMap()
    leaves: list[Any] = []
    paths: list[PathParts] | None = [] if with_paths else None
    nodes: list[Any] = []
    attributes: list[tuple[Any, Any]] = []
    if graph:
        walker = _GraphFlattener(ref_index, ref_outer_index, nodes, attributes, leaves, paths)
        walker.visit(node, get_node_impl(node))
    else:
        _tree_flatten(node, nodes, leaves, paths)
    graphdef: GraphDef[Any] = GraphDef(nodes=nodes, attributes=attributes, num_leaves=len(leaves))
    if paths is not None:
        return graphdef, make_flat_state(paths, leaves)
    return graphdef, leaves


class _GraphFlattener:
    def __init__(
        self,
        ref_index: RefMap,
        ref_outer_index: RefMap | None,
        nodes: list[Any],
        attributes: list[tuple[Any, Any]],
        leaves: list[Any],
        paths: list[PathParts] | None,
    ) -> None:
        self.ref_index = ref_index
        self.ref_outer_index = ref_outer_index
        self.nodes = nodes
        self.attributes = attributes
        self.leaves = leaves
        self.paths = paths
        self.path: list[Any] = []

    def emit(self, leaf: Any) -> None:
        self.leaves.append(leaf)
        if self.paths is not None:
            self.paths.append(tuple(self.path))

    def outer(self, obj: Any) -> int | None:
        if self.ref_outer_index is None:
            return None
        return self.ref_outer_index.get(obj, None)

    def array_ref(self, ref: Any) -> tuple[Any, Any]:
        if ref in self.ref_index:
            return NodeRef(self.ref_index[ref]), REPEATED
        index = len(self.ref_index)
        self.ref_index[ref] = index
        if self.ref_outer_index is None:
            return ArrayRefDef(index, None), ref
        if ref in self.ref_outer_index:
            return ArrayRefDef(index, self.ref_outer_index[ref]), NO_UPDATE
        return ArrayRefDef(index, None), ArrayRefOutput(ref[...])

    def variable(self, var: Variable, index: int) -> None:
        raw = var.get_raw_value()
        refdef = None
        inner = raw
        if is_array_ref(raw):
            refdef, inner = self.array_ref(raw)
        if self.paths is None:
            leaf = inner
        else:
            leaf = var
            if inner is not raw:
                var.set_raw_value(inner)
        meta = HashableMapping(var.get_metadata())
        self.nodes.append(VariableDef(var_type(var), index, self.outer(var), meta, refdef))
        if type(inner) is not Repeated:
            self.emit(leaf)

    def visit(self, node: Any, impl: NodeImpl | None) -> None:
        is_pytree = type(impl) is PytreeNodeImpl
        if not is_pytree and node in self.ref_index:
            self.nodes.append(NodeRef(self.ref_index[node]))
            return
        is_graph = type(impl) is GraphNodeImpl
        is_var = isinstance(node, Variable)
        index: int | None = None
        if is_graph or is_var:
            index = len(self.ref_index)
            self.ref_index[node] = index
        if is_var:
            assert index is not None
            self.variable(node, index)
            return
        if is_array_ref(node):
            refdef, leaf = self.array_ref(node)
            if type(leaf) is not Repeated:
                self.emit(leaf)
            self.nodes.append(refdef)
            return
        if impl is None:
            self.emit(node)
            return
        values, metadata = impl.flatten(node)
        outer = self.outer(node) if is_graph else None
        self.nodes.append(NodeDef(impl.type, index, outer, len(values), metadata))
        for key, value in values:
            self.child(key, value)

    def child(self, key: Any, value: Any) -> None:
        is_data: bool | None = None
        if isinstance(value, DataElem):
            value, is_data = value.value, True
        elif isinstance(value, StaticElem):
            value, is_data = value.value, False
        if is_data is False:
            self.attributes.append((key, Static(value)))
            return
        impl = get_node_impl(value)
        self.path.append(key)
        if impl is not None or isinstance(value, Variable):
            self.attributes.append((key, NODE_ATTR))
            self.visit(value, impl)
        elif is_array_ref(value):
            self.attributes.append((key, NODE_ATTR))
            refdef, leaf = self.array_ref(value)
            if type(leaf) is not Repeated:
                self.emit(leaf)
            self.nodes.append(refdef)
        elif isinstance(value, (jax.Array, np.ndarray)) or is_data:
            self.attributes.append((key, LEAF_ATTR))
            self.emit(value)
        else:
            self.attributes.append((key, Static(value)))
        self.path.pop()


# ----------------------------------------------------------------------------- unflatten


def _sorted_leaves(xs: Any) -> list[Any]:
    leaves: list[Any] = []

    def walk(x: Any) -> None:
        if isinstance(x, (dict, State)):
            for _, value in sorted(x.items(), key=lambda kv: _sort_key((kv[0],))):
                walk(value)
        else:
            leaves.append(x)

    walk(xs)
    return leaves


def _tree_unflatten(graphdef: GraphDef[Any], leaves: list[Any], copy_variables: bool) -> Any:
    tree_def = graphdef.nodes[0]
    assert isinstance(tree_def, TreeNodeDef)
    var_defs = {n.index: n for n in graphdef.nodes[1:] if isinstance(n, VariableDef)}
    ordered: list[Any] = [None] * len(leaves)
    for i, (_, original) in enumerate(tree_def.path_index):
        leaf = leaves[i]
        vdef = var_defs.get(i)
        if vdef is not None:
            if isinstance(leaf, Variable):
                leaf = copy_variable(leaf) if copy_variables else leaf
            else:
                leaf = vdef.type.from_metadata(leaf, dict(vdef.metadata))
        ordered[original] = leaf
    return tree_def.treedef.unflatten(ordered)


def unflatten(
    graphdef: GraphDef[Any],
    state: Any,
    /,
    *,
    index_ref: IndexMap | None = None,
    outer_index_outer_ref: IndexMap | None = None,
    copy_variables: bool = False,
    recreate_variables: bool = True,
) -> Any:
    """Rebuild the node of ``graphdef`` from ``state`` (a State, dict, FlatState or list of
    leaves in order). ``index_ref`` collects the objects created by index (pass the same one
    to unflatten several graphdefs that share references); objects of
    ``outer_index_outer_ref`` are reused (cleared and refilled) where a definition names
    their outer index; ``copy_variables`` copies the Variables of ``state``."""
    if isinstance(state, (State, dict)):
        leaves = _sorted_leaves(state)
    elif isinstance(state, list):
        leaves = state
    elif isinstance(state, FlatState):
        leaves = list(state.leaves)
    else:
        raise ValueError(f"Unsupported state type: {type(state)}")
    if len(leaves) != graphdef.num_leaves:
        raise ValueError(
            f"Incorrect number of leaves, expected {graphdef.num_leaves} leaves, "
            f"but got {len(leaves)}."
        )
    if graphdef.nodes and isinstance(graphdef.nodes[0], TreeNodeDef):
        return _tree_unflatten(graphdef, leaves, copy_variables)
    if index_ref is None:
        index_ref = IndexMap()
    if not graphdef.nodes:
        return leaves[0]
    first = graphdef.nodes[0]
    if isinstance(first, NodeRef):
        return index_ref[first.index]
    builder = _Builder(
        iter(graphdef.nodes),
        iter(graphdef.attributes),
        iter(leaves),
        index_ref,
        outer_index_outer_ref,
        copy_variables,
        recreate_variables,
    )
    node = builder.build(next(builder.nodes))
    if next(builder.leaves, _END) is not _END:
        raise ValueError("Incorrect number of leaves in state.")
    return node


_END = object()


class _Builder:
    def __init__(
        self,
        nodes: Iterator[Any],
        attributes: Iterator[tuple[Any, Any]],
        leaves: Iterator[Any],
        index_ref: IndexMap,
        outer_refs: IndexMap | None,
        copy_variables: bool,
        recreate_variables: bool,
    ) -> None:
        self.nodes = nodes
        self.attributes = attributes
        self.leaves = leaves
        self.index_ref = index_ref
        self.outer_refs = outer_refs
        self.copy_variables = copy_variables
        self.recreate_variables = recreate_variables

    def existing(self, outer_index: int | None) -> Any:
        if self.outer_refs is None or outer_index is None:
            return _END
        return self.outer_refs.get(outer_index, _END)

    def array_ref(self, refdef: ArrayRefDef, leaf: Any) -> Any:
        ref = self.existing(refdef.outer_index)
        if ref is not _END:
            if not is_array_ref(ref):
                raise RuntimeError(f"Expected a ArrayRef type but got {ref}.")
            if type(leaf) is not NoUpdate:
                raise RuntimeError(f"Expected a no update for ArrayRef but got {leaf}.")
        elif type(leaf) in (NoUpdate, Repeated):
            raise ValueError(f"Expected a ArrayRefOutput type but got '{leaf}.'")
        elif type(leaf) is ArrayRefOutput:
            ref = jax.new_ref(leaf.value)
        else:
            ref = leaf
        self.index_ref[refdef.index] = ref
        return ref

    def _copy(self, value: Any) -> Any:
        if isinstance(value, Variable) and self.copy_variables:
            return copy_variable(value)
        return value

    def variable(self, vdef: VariableDef[Any]) -> Any:
        refdef = vdef.array_refdef
        if isinstance(refdef, NodeRef):
            value = self.index_ref[refdef.index]
        elif isinstance(refdef, ArrayRefDef):
            value = self._copy(next(self.leaves))
            if isinstance(value, Variable):
                inner = value.get_raw_value()
                ref = self.array_ref(refdef, inner)
                if ref is not inner:
                    value.set_raw_value(ref)
            else:
                value = self.array_ref(refdef, value)
        else:
            value = self._copy(next(self.leaves))
        target = self.existing(vdef.outer_index)
        if target is not _END:
            if not isinstance(target, Variable):
                raise ValueError(f"Expected a Variable type but got {type(target)}.")
            if isinstance(value, Variable):
                update_variable(target, value)
            else:
                target.set_raw_value(value)
            variable = target
        elif isinstance(value, Variable) or not self.recreate_variables:
            variable = value
        else:
            variable = vdef.type.from_metadata(value, dict(vdef.metadata))
        self.index_ref[vdef.index] = variable
        return variable

    def children(self, nodedef: NodeDef[Any]) -> list[tuple[Any, Any]]:
        out: list[tuple[Any, Any]] = []
        for _ in range(nodedef.num_attributes):
            key, kind = next(self.attributes)
            if type(kind) is Static:
                out.append((key, kind.value))
            elif type(kind) is LeafAttr:
                out.append((key, next(self.leaves)))
            elif type(kind) is NodeAttr:
                out.append((key, self.build(next(self.nodes))))
            elif type(kind) is NodeRef:
                out.append((key, self.index_ref[kind.index]))
            else:
                raise RuntimeError(f"Unknown static field: {key!r}")
        return out

    def build(self, nodedef: Any) -> Any:
        if type(nodedef) is NodeRef:
            return self.index_ref[nodedef.index]
        if type(nodedef) is VariableDef:
            return self.variable(nodedef)
        if type(nodedef) is ArrayRefDef:
            return self.array_ref(nodedef, next(self.leaves))
        if type(nodedef) is not NodeDef:
            raise RuntimeError(f"Unknown node definition: {nodedef!r}")
        impl = get_node_impl_for_type(nodedef.type)
        if impl is None:
            raise RuntimeError(f"Unsupported type: {nodedef.type}, this is a bug.")
        if nodedef.index is not None and nodedef.index in self.index_ref:
            raise RuntimeError(f"GraphDef index {nodedef.index} already used.")
        if isinstance(impl, GraphNodeImpl):
            node = self.existing(nodedef.outer_index)
            if node is not _END:
                if type(node) is not nodedef.type:
                    raise ValueError(
                        f"Expected a node of type {nodedef.type} for index "
                        f"{nodedef.index}, but got a node of type {type(node)}."
                    )
                impl.clear(node)
            else:
                node = impl.create_empty(nodedef.metadata)
            assert nodedef.index is not None
            self.index_ref[nodedef.index] = node
            impl.init(node, self.children(nodedef))
            return node
        return impl.unflatten(self.children(nodedef), nodedef.metadata)
