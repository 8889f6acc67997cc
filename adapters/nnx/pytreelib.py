"""``nnx.Pytree`` and ``nnx.Object``: mutable Python objects that are graph nodes.

Every attribute of a Pytree is either *data* (traversed: its arrays and Variables are
state, and it is a JAX pytree child) or *static* (kept in the GraphDef / treedef). The
status is decided on assignment, as in Flax 0.12: a value that is an array, Variable,
graph node or registered data type is data; anything else is static unless wrapped in
``nnx.data(...)`` (or annotated ``x: T = nnx.data()`` on the class), and ``nnx.static``
forces static. A static attribute must not hold data (an error says how to fix it).
``pytree=False`` classes (``nnx.Object``) are graph nodes but not JAX pytrees.
"""

import copy
import dataclasses
import inspect
import threading
import typing
import warnings
from abc import ABCMeta
from collections.abc import Callable, Iterator
from typing import Annotated, Any, NamedTuple, TypeVar

import jax
import numpy as np

from .. import config
from ..errors import TraceContextError
from ..typing import MISSING, Missing
from . import _structure, graphlib, reprlib
from .graphlib import HashableMapping, is_graph_node, is_node_leaf
from .tracers import TraceState
from .variablelib import RngState, Variable

A = TypeVar("A")
P = TypeVar("P", bound="Pytree")
T = TypeVar("T", bound=type)

DataAnnotation = "__data__"
Data = Annotated[A, DataAnnotation]
StaticAnnotation = "__static__"
Static = Annotated[A, StaticAnnotation]

DATA_REGISTRY: set[type] = set()


def _marker(kind: str, value: Any, kwargs: dict[str, Any]) -> Any:
    if not isinstance(value, Missing) and kwargs:
        raise TypeError(
            f"nnx.{kind}() accepts either a single positional argument or keyword"
            " arguments, but not both."
        )
    metadata: dict[str, Any] = {"nnx_value": value}
    extra = kwargs.pop("metadata", None)
    if extra is not None:
        if "static" in extra:
            raise ValueError(f"Cannot use 'static' key in metadata argument for nnx.{kind}.")
        metadata.update(extra)
    metadata["static"] = kind == "static"
    return dataclasses.field(**kwargs, metadata=metadata)


def data(value: Any = MISSING, /, **kwargs: Any) -> Any:
    """Mark a value as pytree data on assignment (``self.x = nnx.data(v)``), or declare a
    data field on the class (``x: T = nnx.data(default=...)``, dataclass field options)."""
    return _marker("data", value, kwargs)


def static(value: Any = MISSING, /, **kwargs: Any) -> Any:
    """Mark a value as static on assignment (``self.x = nnx.static(v)``), or declare a
    static field on the class (``x: T = nnx.static(default=...)``)."""
    return _marker("static", value, kwargs)


def register_data_type(type_: T, /) -> T:
    """Make values of ``type_`` data when assigned to a Pytree attribute (a decorator too)."""
    DATA_REGISTRY.add(type_)
    return type_


def is_data(value: Any, /) -> bool:
    """Whether ``value`` is data by itself: an array, Variable, array ref, graph node, or
    an instance of a type given to ``register_data_type``."""
    return is_node_leaf(value) or is_graph_node(value) or type(value) in DATA_REGISTRY


def has_data(value: Any, /) -> list[Any]:
    """The data values found in ``value`` (searched as a pytree)."""
    visited: set[int] = set()

    def is_leaf(x: Any) -> bool:
        if id(x) in visited:
            return True
        visited.add(id(x))
        return is_data(x)

    return [leaf for leaf in jax.tree.leaves(value, is_leaf=is_leaf) if is_data(leaf)]


@typing.dataclass_transform(field_specifiers=(dataclasses.field, data, static))
def dataclass(
    cls: Any = None,
    /,
    *,
    init: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
) -> Any:
    """``dataclasses.dataclass`` for Pytree subclasses (keeps the Pytree repr)."""
    return dataclasses.dataclass(  # type: ignore[call-overload]
        cls,
        init=init,
        eq=eq,
        order=order,
        unsafe_hash=unsafe_hash,
        match_args=match_args,
        kw_only=kw_only,
        slots=slots,
        weakref_slot=weakref_slot,
        repr=False,
    )


# ----------------------------------------------------------------------------- trace state


class PytreeState:
    """Per-object bookkeeping (``_pytree__state``): the trace it belongs to."""

    __slots__ = ("_initializing", "_is_setup", "_trace_state")

    def __init__(self, initializing: bool = False, is_setup: bool = False) -> None:
        self._trace_state = TraceState()
        self._initializing = initializing
        self._is_setup = is_setup

    @property
    def trace_state(self) -> TraceState:
        """The trace the object was created (or last rebuilt) under."""
        return self._trace_state

    @property
    def initializing(self) -> bool:
        """Flax's flag (unused here): always as constructed."""
        return self._initializing

    @property
    def is_setup(self) -> bool:
        """Flax's flag (unused here): always as constructed."""
        return self._is_setup

    def __repr__(self) -> str:
        return "PytreeState()"


jax.tree_util.register_pytree_node(
    PytreeState,
    lambda s: ((), (s.initializing, s.is_setup)),
    lambda aux, _: PytreeState(*aux),
)


def check_pytree(pytree: Any) -> None:
    """Check every attribute of ``pytree`` against its data/static status."""
    if not isinstance(pytree, Pytree):
        raise TypeError(f"Expected a Pytree, got {type(pytree)}.")
    for name, value in vars(pytree).items():
        pytree._check_value(name, value, new_status=None)


class AttributeStatus(NamedTuple):
    """How an assignment classifies its value: data or not, explicitly or not."""

    is_data: bool
    explicit: bool


class PytreeMeta(ABCMeta):
    """Metaclass: sets up the bookkeeping before ``__init__`` and checks after it."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        node: Any = cls.__new__(cls, *args, **kwargs)  # type: ignore[call-overload]
        object.__setattr__(node, "_pytree__state", PytreeState())
        object.__setattr__(node, "_pytree__nodes", cls._pytree__nodes)  # type: ignore[attr-defined]
        cls._pytree_meta_construct(node, *args, **kwargs)
        if cls._pytree__is_pytree:  # type: ignore[attr-defined]
            missing = {
                name: is_data(value)
                for name, value in vars(node).items()
                if name not in node._pytree__nodes
            }
            if missing:
                object.__setattr__(node, "_pytree__nodes", node._pytree__nodes.update(missing))
            check_pytree(node)
        return node

    def _pytree_meta_construct(cls, self: Any, *args: Any, **kwargs: Any) -> None:
        self.__init__(*args, **kwargs)


ObjectMeta = PytreeMeta


def _class_nodes(cls: type) -> dict[str, bool]:
    """The data/static status the class declares through annotations and nnx.data/static."""
    nodes: dict[str, bool] = dict(getattr(cls, "_pytree__nodes", ()))
    nodes["_pytree__state"] = True
    try:
        hints = typing.get_type_hints(cls, None, {cls.__name__: cls}, include_extras=True)
    except Exception:
        hints = dict(inspect.get_annotations(cls))
    for name, hint in hints.items():
        status = _annotation_status(hint)
        if status is not None:
            kind = "Data" if status else "Static"
            warnings.warn(
                f"'{kind}' is deprecated, please replace:\n\n"
                f"  some_field: nnx.{kind}[SomeType]\n\n"
                "with:\n\n"
                f"  some_field: SomeType = nnx.{kind.lower()}()\n\n",
                DeprecationWarning,
                stacklevel=4,
            )
            nodes[name] = status
    for name, value in vars(cls).items():
        if isinstance(value, dataclasses.Field) and "static" in value.metadata:
            flag = value.metadata["static"]
            if not isinstance(flag, bool):
                raise ValueError(
                    f"Invalid 'static' metadata for attribute '{cls.__name__}.{name}': "
                    f"expected bool, got {type(flag).__name__}."
                )
            is_node = not flag
            if name in nodes and nodes[name] != is_node:
                raise ValueError(
                    f"Conflicting pytree annotation for attribute '{cls.__name__}.{name}': "
                    f"previously registered as {'data' if nodes[name] else 'static'}, but "
                    f"found nnx.{'data' if is_node else 'static'}(...) annotation."
                )
            nodes[name] = is_node
    return nodes


def _annotation_status(hint: Any) -> bool | None:
    if isinstance(hint, str):
        if hint.startswith("nnx.Data"):
            return True
        if hint.startswith("nnx.Static"):
            return False
        return None
    meta = getattr(hint, "__metadata__", ())
    if DataAnnotation in meta:
        return True
    if StaticAnnotation in meta:
        return False
    return None


def _maybe_int(x: Any) -> Any:
    try:
        return int(x)
    except (ValueError, TypeError):
        return x


def _get_str(x: Any) -> str:
    return x if isinstance(x, str) else str(x)


def _base_pytree_name(obj: Any) -> str:
    for t in type(obj).mro()[1:]:
        if issubclass(t, Pytree):
            return t.__name__
    return "Pytree"


def _fix_options(obj: Any, key: str, value: Any) -> str:
    name, base = type(obj).__name__, _base_pytree_name(obj)
    return (
        f"annotate the class attribute with nnx.data:\n\n  class {name}({base}):\n"
        f"    {key}: {type(value).__name__} = nnx.data()\n\n"
    )


def _static_with_data_error(obj: Any, key: str, value: Any, data_leaves: list[Any]) -> ValueError:
    name, base = type(obj).__name__, _base_pytree_name(obj)
    type_names = ", ".join(sorted({type(leaf).__name__ for leaf in data_leaves}))
    return ValueError(
        f"Found data on value of type '{type(value)}' assigned to static attribute '{key}' of "
        f"Pytree type '{type(obj)}'. Static attributes should not contain data values. "
        "Consider one of the following options:\n\n1. If the attribute is meant to be "
        f"static, remove the data values of type(s):\n\n  {type_names}\n\n2. If the "
        "attribute is meant to be data, wrap the value with nnx.data  on assignment:\n\n"
        f"  _.{key} = nnx.data(...)\n\n3. Alternatively, "
        + _fix_options(obj, key, value)
        + "4. If the container is a list or dict, try using nnx.List(...) or nnx.Dict(...) "
        f"instead.\n\n5. Disable pytree for this class:\n\n  class {name}({base}, "
        "pytree=False):\n\n"
    )


def _unexpected_data_error(obj: Any, key: str, value: Any) -> ValueError:
    name, base = type(obj).__name__, _base_pytree_name(obj)
    return ValueError(
        f"Found unexpected data on value of type {type(value)} in static attribute '{key}' "
        f"of Pytree type '{type(obj)}'. This is an error starting from Flax version 0.12.0."
        "\nConsider one of the following options:\n\n1. If the attribute is meant to be "
        "static, either remove the data value or wrap it in a static container.\n2. Wrap "
        f"the value with nnx.data on assignment:\n\n  _.{key} = nnx.data(...)\n\n3. "
        "Annotate the class attribute with nnx.data:\n\n"
        f"  class {name}({base}):\n    {key}: {type(value).__name__} = nnx.data()\n\n4. If "
        "the container is a list or dict, try using nnx.List(...) or nnx.Dict(...) instead."
        f"\n5. Disable pytree for this class:\n\n  class {name}({base}, pytree=False):\n\n"
    )


class Pytree(reprlib.Representable, metaclass=PytreeMeta):
    """Base class of NNX objects: graph nodes, and JAX pytrees unless ``pytree=False``."""

    _pytree__nodes: HashableMapping
    _pytree__state: PytreeState
    _pytree__is_pytree: bool
    _pytree__has_int_keys: bool = False

    def __init_subclass__(cls, *, pytree: bool | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if pytree is None:
            pytree = bool(config.flax_pytree_module)
        if slots := cls.__dict__.get("__slots__", ()):
            raise TypeError(
                "Pytree currently does not support __slots__, "
                f"found __slots__={slots} in '{cls.__name__}'."
            )
        cls._pytree__is_pytree = pytree
        graphlib.register_graph_node_type(
            type=cls,
            flatten=cls._graph_node_flatten,
            set_key=cls._graph_node_set_key,
            pop_key=cls._graph_node_pop_key,
            create_empty=cls._graph_node_create_empty,
            clear=cls._graph_node_clear,
            init=cls._graph_node_init,
        )
        cls._pytree__nodes = HashableMapping(_class_nodes(cls), copy=False)
        if pytree:
            jax.tree_util.register_pytree_with_keys(
                cls,
                flatten_with_keys=cls._pytree__flatten_with_paths,
                unflatten_func=cls._pytree__unflatten,
                flatten_func=cls._pytree__flatten,
            )

    if not typing.TYPE_CHECKING:

        def __setattr__(self, name: str, value: Any) -> None:
            self._setattr(name, value)

    def _setattr(self, name: str, value: Any) -> None:
        self._check_valid_context(
            lambda: f"Cannot mutate '{type(self).__name__}' from different trace level"
        )
        is_pytree = self._pytree__is_pytree
        is_data_, explicit = False, False
        if isinstance(value, dataclasses.Field) and "nnx_value" in value.metadata:
            static_ = value.metadata["static"]
            value = value.metadata["nnx_value"]
            if is_pytree:
                is_data_, explicit = not static_, True
        elif is_pytree:
            is_data_ = is_data(value)
        if is_pytree:
            self._check_value(name, value, AttributeStatus(is_data_, explicit))
            nodes = self._pytree__nodes
            if name not in nodes or (explicit and nodes[name] != is_data_):
                object.__setattr__(self, "_pytree__nodes", nodes.update({name: is_data_}))
        _structure.touched(self)
        object.__setattr__(self, name, value)

    def _check_value(self, key: str, value: Any, new_status: AttributeStatus | None) -> None:
        nodes = self._pytree__nodes
        current_is_data = nodes[key] if key in nodes else False
        if (
            new_status is not None
            and not new_status.explicit
            and new_status.is_data
            and key in vars(self)
            and not current_is_data
        ):
            raise ValueError(
                f"Cannot assign data value of type '{type(value)}' to static"
                f" attribute '{key}' of Pytree type '{type(self)}'. To override the"
                " status explicitly wrap the value with nnx.data on assignment:\n\n "
                f" _.{key} = nnx.data(...)\n\n"
            )
        visited: set[int] = set()

        def is_leaf(x: Any) -> bool:
            if id(x) in visited:
                return True
            visited.add(id(x))
            return is_data(x)

        leaves = jax.tree.leaves(value, is_leaf=is_leaf)
        data_leaves = [leaf for leaf in leaves if is_data(leaf)]
        if data_leaves:
            if new_status is not None:
                if not new_status.is_data and new_status.explicit:
                    raise ValueError(
                        f"Found data in value of type '{type(value)}' annotated with "
                        f"nnx.static(...) when setting attribute '{key}' of Pytree type "
                        f"'{type(self)}'."
                    )
                if not new_status.is_data and not current_is_data:
                    raise _static_with_data_error(self, key, value, data_leaves)
            elif not current_is_data:
                raise _unexpected_data_error(self, key, value)
        tags = {
            "static" if leaf.metadata["static"] else "data"
            for leaf in leaves
            if isinstance(leaf, dataclasses.Field) and "nnx_value" in leaf.metadata
        }
        if tags:
            raise ValueError(
                f"Found unexpected tags {tags} on attribute '{type(self).__name__}.{key}'. "
                "Values from nnx.data(...) and\nnnx.static(...) should be assigned to "
                "nnx.Pytree attributes directly, they should not be inside other structures. "
                f"Got value of type '{type(value)}' on Pytree of type '{type(self)}'."
            )

    def _check_valid_context(self, error_msg: Callable[[], str]) -> None:
        state = vars(self).get("_pytree__state")
        if state is not None and not state.trace_state.is_valid():
            raise TraceContextError(error_msg())

    def __deepcopy__(self: P, memo: Any = None) -> P:
        graphdef, state = graphlib.split(self, graph=True)
        return graphlib.merge(copy.deepcopy(graphdef), copy.deepcopy(state))

    def __getstate__(self) -> dict[str, Any]:
        return vars(self).copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)

    def __delattr__(self, name: str) -> None:
        _structure.touched(self)
        if name in self._pytree__nodes:
            kept = {k: v for k, v in self._pytree__nodes.items() if k != name}
            object.__setattr__(self, "_pytree__nodes", HashableMapping(kept, copy=False))
        object.__delattr__(self, name)

    def __nnx_repr__(self) -> Iterator[Any]:
        return _pytree_nnx_repr(self)

    def __treescope_repr__(self, path: Any, subtree_renderer: Any) -> Any:
        import treescope  # optional: only needed to render

        nodes = self._pytree__nodes
        children = {
            name: value
            for name, value in vars(self).items()
            if not name.startswith("_pytree__")
            and (not name.startswith("_") or nodes.get(name, False))
        }
        return treescope.repr_lib.render_object_constructor(
            object_type=type(self),
            attributes=children,
            path=path,
            subtree_renderer=subtree_renderer,
        )

    # ------------------------------------------------------------------ pytree protocol

    def _pytree__items(self) -> list[tuple[Any, Any]]:
        items = list(vars(self).items())
        if self._pytree__has_int_keys:
            return sorted(((_maybe_int(k), v) for k, v in items), key=graphlib._type_aware_sort)
        return sorted(items, key=lambda kv: kv[0])

    def _pytree__split(self) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
        nodes = self._pytree__nodes
        data_items, static_keys, static_values = [], [], []
        for key, value in self._pytree__items():
            if nodes.get(_get_str(key), False):
                data_items.append((key, value))
            else:
                static_keys.append(key)
                static_values.append(value)
        keys = tuple(k for k, _ in data_items)
        return data_items, (keys, tuple(static_keys), tuple(static_values))

    def _pytree__flatten_with_paths(self) -> tuple[list[tuple[Any, Any]], Any]:
        data_items, aux = self._pytree__split()
        children = [
            (
                jax.tree_util.GetAttrKey(k) if isinstance(k, str) else jax.tree_util.SequenceKey(k),
                v,
            )
            for k, v in data_items
        ]
        return children, aux

    def _pytree__flatten(self) -> tuple[list[Any], Any]:
        data_items, aux = self._pytree__split()
        return [v for _, v in data_items], aux

    @classmethod
    def _pytree__unflatten(cls, static: Any, node_attrs: Any) -> Any:
        node_keys, static_keys, static_values = static
        obj = object.__new__(cls)
        for name, value in zip(node_keys, node_attrs, strict=True):
            object.__setattr__(obj, _get_str(name), value)
        for name, value in zip(static_keys, static_values, strict=True):
            object.__setattr__(obj, _get_str(name), value)
        return obj

    # ------------------------------------------------------------------ graph protocol

    def _graph_node_flatten(self) -> tuple[list[tuple[Any, Any]], type]:
        items: list[tuple[Any, Any]] = list(vars(self).items())
        if self._pytree__is_pytree:
            nodes = self._pytree__nodes
            items = [
                (k, graphlib.DataElem(v) if nodes.get(k, False) else graphlib.StaticElem(v))
                for k, v in items
            ]
        if self._pytree__has_int_keys:
            items = [(_maybe_int(k), v) for k, v in items]
            return sorted(items, key=graphlib._type_aware_sort), type(self)
        return sorted(items, key=lambda kv: kv[0]), type(self)

    def _graph_node_set_key(self, key: Any, value: Any) -> None:
        if self._pytree__has_int_keys and isinstance(key, int):
            key = str(key)
        if not isinstance(key, str):
            raise KeyError(f"Invalid key: {key!r}")
        current = vars(self).get(key)
        if isinstance(current, Variable) and isinstance(value, Variable):
            graphlib.update_variable(current, value)
        else:
            setattr(self, key, value)

    def _graph_node_pop_key(self, key: Any) -> Any:
        if self._pytree__has_int_keys and isinstance(key, int):
            key = str(key)
        value = getattr(self, key)
        delattr(self, key)
        return value

    @staticmethod
    def _graph_node_create_empty(node_type: type) -> Any:
        return object.__new__(node_type)

    def _graph_node_clear(self) -> None:
        _structure.touched(self)
        vars(self).clear()

    def _graph_node_init(self, attributes: Any) -> None:
        _structure.touched(self)
        for name, value in attributes:
            object.__setattr__(self, _get_str(name), value)


class Object(Pytree, pytree=False):
    """Base class of NNX objects that are graph nodes but not JAX pytrees."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        pytree = kwargs.pop("pytree", False)
        if pytree is not False:
            raise ValueError(
                "Object is not a pytree, but 'pytree' was explicitly set to "
                f"{pytree!r} for type {cls}."
            )
        super().__init_subclass__(pytree=pytree, **kwargs)


# ----------------------------------------------------------------------------- repr


def _bytes_text(nbytes: int) -> str:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if nbytes > scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes:,} B"


def _size_of(value: Any) -> tuple[int, int]:
    size = nbytes = 0
    for leaf in jax.tree.leaves(value):
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            n = int(np.prod(leaf.shape))
            size += n
            dtype = np.dtype(leaf.dtype) if isinstance(leaf.dtype, str) else leaf.dtype
            nbytes += n * int(getattr(dtype, "itemsize", 0))
    return size, nbytes


def _collect_stats(node: Any, stats: dict[int, dict[type, tuple[int, int]]]) -> None:
    """Per object: ``{Variable type: (elements, bytes)}`` over its subgraph."""
    if id(node) in stats:
        return
    own: dict[type, tuple[int, int]] = {}
    stats[id(node)] = own
    if isinstance(node, Variable):
        var_type = node.var_type
        if issubclass(var_type, RngState):
            var_type = RngState
        size = _size_of(node.get_raw_value())
        if size[0]:
            own[var_type] = size
        return
    impl = graphlib.get_node_impl(node)
    if impl is None:
        return
    for value in impl.node_dict(node).values():
        if id(value) in stats or not (graphlib.is_node(value) or isinstance(value, Variable)):
            continue
        _collect_stats(value, stats)
        for t, (n, b) in stats[id(value)].items():
            n0, b0 = own.get(t, (0, 0))
            own[t] = (n0 + n, b0 + b)


class _ReprContext(threading.local):
    def __init__(self) -> None:
        self.seen: set[int] | None = None
        self.stats: dict[int, dict[type, tuple[int, int]]] | None = None


_REPR = _ReprContext()


def _stats_comment(stats: dict[type, tuple[int, int]]) -> str:
    if not stats:
        return ""
    parts = [f"{t.__name__}: {n:,} ({_bytes_text(b)})" for t, (n, b) in stats.items()]
    text = " # " + ", ".join(parts)
    if len(stats) > 1:
        n = sum(v[0] for v in stats.values())
        b = sum(v[1] for v in stats.values())
        text += f", Total: {n:,} ({_bytes_text(b)})"
    return text


class _ArrayRepr(reprlib.Representable):
    def __init__(self, shape: tuple[int, ...], dtype: Any, kind: str) -> None:
        self.shape, self.dtype, self.kind = shape, dtype, kind

    def __nnx_repr__(self) -> Iterator[Any]:
        yield reprlib.Object(type=self.kind, same_line=True)
        yield reprlib.Attr("shape", self.shape)
        yield reprlib.Attr("dtype", self.dtype)


def _to_shape_dtype(x: Any) -> Any:
    if isinstance(x, Variable):
        value = jax.tree.map(_to_shape_dtype, x.get_raw_value())
        # A plain Variable for the repr (from_metadata would lift a hijax one into a
        # JAX value, which a shape stand-in is not).
        return x.var_type._new(value, dict(x.get_metadata()))
    if isinstance(x, (np.ndarray, jax.Array)) and np.prod(x.shape) > 1:
        kind = "ArrayRef" if graphlib.is_array_ref(x) else "Array"
        return _ArrayRepr(x.shape, x.dtype, kind)
    return x


def _pytree_nnx_repr(obj: Any) -> Iterator[Any]:
    clear_stats = _REPR.stats is None or id(obj) not in _REPR.stats
    if clear_stats:
        _REPR.stats = {}
        _collect_stats(obj, _REPR.stats)
    assert _REPR.stats is not None
    stats = _REPR.stats[id(obj)]
    clear_seen = _REPR.seen is None
    if clear_seen:
        _REPR.seen = set()
    assert _REPR.seen is not None
    try:
        if id(obj) in _REPR.seen:
            yield reprlib.Object(type=type(obj), empty_repr="...")
            return
        yield reprlib.Object(type=type(obj), comment=_stats_comment(stats))
        _REPR.seen.add(id(obj))
        nodes = obj._pytree__nodes
        for name, value in vars(obj).items():
            if name.startswith("_pytree__"):
                continue
            if name.startswith("_") and not nodes.get(name, False):
                continue
            value = jax.tree.map(_to_shape_dtype, value, is_leaf=graphlib.is_graph_node)
            yield reprlib.Attr(name, value)
    finally:
        if clear_seen:
            _REPR.seen = None
        if clear_stats:
            _REPR.stats = None
