"""``flax.nnx.summary``: ``tabulate``, a rich table of an NNX object's method calls.

The object is cloned, then every public method (and ``__call__``) of every Pytree type in
its graph is replaced for the duration of one call by a recorder: it notes the caller's
path in the graph, its inputs and outputs (shapes and dtypes), optionally the XLA cost
analysis of the call (``flops``) and of its VJP (``vjp_flops``), and runs the original
method under ``jax.jit``. Each row then lists the Variables the object owns, grouped by
Variable type, with their sizes. The text rendering (YAML-like cells, byte counts, rich
console) is Linen's ``tabulate``'s.
"""

import dataclasses
import functools
import inspect
import io
import itertools
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..linen import summary as linen_summary
from . import graphlib, pytreelib, rnglib
from .rnglib import RngState
from .variablelib import Variable

try:  # the same default as Flax: render for Jupyter when running inside IPython
    from IPython import get_ipython  # type: ignore[import-not-found]

    _IN_IPYTHON = get_ipython() is not None
except ImportError:
    _IN_IPYTHON = False


@dataclasses.dataclass(frozen=True)
class SizeBytes:
    """Number of elements and of bytes of some arrays; ``+`` adds them up."""

    size: int
    bytes: int

    @classmethod
    def from_any(cls, value: Any) -> "SizeBytes":
        """The totals over the array leaves of ``value``."""
        arrays = [x for x in jax.tree.leaves(value) if hasattr(x, "size")]
        size = sum(int(x.size) for x in arrays)
        return cls(size, sum(int(x.size) * x.dtype.itemsize for x in arrays))

    def __add__(self, other: "SizeBytes") -> "SizeBytes":
        return SizeBytes(self.size + other.size, self.bytes + other.bytes)

    def __repr__(self) -> str:
        return f"{self.size:,} [dim]({linen_summary._bytes_repr(self.bytes)})[/dim]"

    __str__ = __repr__


class ObjectInfo(NamedTuple):
    """A graph object's path, its Variable totals per type (its subtree's), and its own
    Variables grouped by type."""

    path: tuple[Any, ...]
    stats: dict[type, SizeBytes]
    variable_groups: dict[type, dict[Any, Variable]]


@dataclasses.dataclass
class CallInfo:
    """One recorded method call (a table row)."""

    call_order: int
    object_id: int
    type: type
    path: tuple[Any, ...]
    inputs_repr: str
    outputs: Any
    flops: int | None
    vjp_flops: int | None


@dataclasses.dataclass(frozen=True, repr=False)
class ArrayRepr:
    """An array shown as ``dtype[shape]``."""

    shape: tuple[int, ...]
    dtype: Any

    @classmethod
    def from_array(cls, x: Any) -> "ArrayRepr":
        return cls(tuple(jnp.shape(x)), jnp.result_type(x))

    def __str__(self) -> str:
        return f"[dim]{self.dtype}[/dim][{','.join(str(d) for d in self.shape)}]"


class SimpleObjectRepr:
    """A graph node shown as ``Type(...)``."""

    def __init__(self, obj: Any) -> None:
        self.type = type(obj)

    def __str__(self) -> str:
        return f"{self.type.__name__}(...)"

    __repr__ = __str__


# ---------------------------------------------------------------------------- the graph


def _is_node(x: Any) -> bool:
    return bool(graphlib.is_node(x))


def _node_items(node: Any) -> Iterator[tuple[Any, Any]]:
    """The ``(key, child)`` pairs of a graph node, as the graph walks them."""
    impl = graphlib.get_node_impl(node)
    assert impl is not None
    yield from impl.node_dict(node).items()


def _stat_type(variable: Variable) -> type:
    return RngState if isinstance(variable, RngState) else type(variable)


def _collect_stats(
    path: tuple[Any, ...], node: Any, infos: dict[int, Any], types: set[type]
) -> None:
    """Fill ``infos[id(x)]`` for ``node`` and everything below it (first path wins), and
    note the types whose methods are to be recorded."""
    if not _is_node(node) and not isinstance(node, Variable):
        raise ValueError(f"Expected a graph node or Variable, got {type(node)!r}.")
    if id(node) in infos:
        return
    stats: dict[type, SizeBytes] = {}
    groups: dict[type, dict[Any, Variable]] = {}
    infos[id(node)] = ObjectInfo(path, stats, groups)
    if isinstance(node, pytreelib.Pytree):
        node._nnx_tabulate_id = id(node)  # type: ignore[attr-defined]
        types.add(type(node))
    for key, value in list(_node_items(node)):
        if id(value) in infos:
            continue
        if isinstance(value, Variable):
            var_type = _stat_type(value)
            _accumulate(stats, var_type, SizeBytes.from_any(value.get_value()))
            groups.setdefault(var_type, {})[key] = value
            infos[id(value)] = None
        elif _is_node(value):
            _collect_stats((*path, key), value, infos, types)
            for var_type, size in infos[id(value)].stats.items():
                _accumulate(stats, var_type, size)


def _accumulate(stats: dict[type, SizeBytes], var_type: type, size: SizeBytes) -> None:
    stats[var_type] = stats[var_type] + size if var_type in stats else size


# ------------------------------------------------------------------------ recording calls


def filter_rng_streams(row: CallInfo) -> bool:
    """The default ``row_filter``: hide the calls of ``RngStream`` objects."""
    return not issubclass(row.type, rnglib.RngStream)


def _methods(types: set[type]) -> dict[tuple[type, str], Callable[..., Any]]:
    """``{(type, name): function}`` for the public methods and ``__call__`` of ``types``."""
    found = {}
    for obj_type in types:
        for name, function in inspect.getmembers(obj_type, inspect.isfunction):
            if not name.startswith("_") or name == "__call__":
                found[(obj_type, name)] = function
    return found


def _to_dummy(x: Any) -> Any:
    if isinstance(x, jax.ShapeDtypeStruct):
        return ArrayRepr(tuple(x.shape), x.dtype)
    if isinstance(x, (jax.Array, np.ndarray)):
        return ArrayRepr.from_array(x)
    if graphlib.is_graph_node(x):
        return SimpleObjectRepr(x)
    return x


def _inputs_repr(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    shown_args, shown_kwargs = jax.tree.map(_to_dummy, (args, kwargs))
    text = ""
    if shown_args:
        single = len(shown_args) == 1 and not shown_kwargs
        text += _as_yaml_str(shown_args[0] if single else shown_args)
        if shown_kwargs:
            text += "\n"
    if shown_kwargs:
        text += _as_yaml_str(shown_kwargs)
    return text


def _flops(lowered: Any) -> int:
    cost = lowered.cost_analysis() or lowered.compile().cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    return 0 if cost is None or "flops" not in cost else int(cost["flops"])


@dataclasses.dataclass
class _Recording:
    counter: Iterator[int]
    rows: list[CallInfo]
    infos: dict[int, Any]
    compute_flops: bool
    compute_vjp_flops: bool
    seen: set[tuple[str, int]]


def _recorder(function: Callable[..., Any], rec: _Recording) -> Callable[..., Any]:
    """``function`` (a method) that records a row for each new (inputs, object) pair and
    runs under ``jax.jit``."""
    name = function.__name__

    @jax.jit
    def jitted(graphdef: Any, state: Any) -> Any:
        args, kwargs = graphlib.merge(graphdef, state)
        return function(*args, **kwargs)

    def forward_and_back(*args: Any, **kwargs: Any) -> Any:
        primals, pullback = jax.vjp(function, *args, **kwargs)
        return pullback(primals)

    @functools.wraps(function)
    def wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
        inputs_repr = _inputs_repr(args, kwargs)
        object_id = obj._nnx_tabulate_id
        path = rec.infos[object_id].path
        if name != "__call__":
            path = (*path, name)
        order = next(rec.counter)
        graphdef, state = graphlib.split(((obj, *args), kwargs))
        if rec.compute_flops:
            lowered = jitted.lower(graphdef, state)
            flops: int | None = _flops(lowered)
            outputs = lowered.out_info
        else:
            flops = None
            outputs = jitted(graphdef, state)
        key = (inputs_repr, object_id)
        if key not in rec.seen:
            rec.seen.add(key)
            vjp_flops = None
            if rec.compute_vjp_flops:
                vjp_flops = _flops(jax.jit(forward_and_back).lower(obj, *args, **kwargs))
            shown = jax.tree.map(_to_dummy, outputs)
            rec.rows.append(
                CallInfo(order, object_id, type(obj), path, inputs_repr, shown, flops, vjp_flops)
            )
        return jitted(graphdef, state)

    return wrapper


def _install(methods: Mapping[tuple[type, str], Callable[..., Any]]) -> None:
    for (obj_type, name), function in methods.items():
        setattr(obj_type, name, function)


# ------------------------------------------------------------------------------- the table


def _shown(x: Any) -> Any:
    """A leaf as its cell text: types as ``type[Name]``, arrays and objects by ``str``,
    anything else by ``repr``."""
    if isinstance(x, type):
        return f"type[{x.__name__}]"
    if isinstance(x, (ArrayRepr, SimpleObjectRepr)):
        return str(x)
    return repr(x)


def _raw_key(entry: Any) -> Any:
    """A JAX key-path entry as the plain key (dict key, index, attribute name)."""
    for attr in ("key", "idx", "name"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return entry


def _slot(original: Any, path: tuple[Any, ...]) -> Any:
    """What ``original`` holds at ``path``: ``[]``/``{}`` for a container, else ``None``."""
    try:
        for key in path:
            original = original[key]
    except Exception:
        return None
    if isinstance(original, (list, tuple)):
        return []
    return {} if isinstance(original, dict) else None


def _to_simple(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return [_to_simple(e) for e in x]
    if isinstance(x, dict):
        return {k: _to_simple(v) for k, v in x.items()}
    return x


def _pad(cursor: list[Any], upto: int, original: Any, prefix: tuple[Any, ...]) -> None:
    while len(cursor) <= upto:
        cursor.append(_slot(original, (*prefix, len(cursor))))


def _simple_structure(value: Any) -> Any:
    """A pytree of cell strings as plain dicts and lists, rebuilt from its leaves' key
    paths (JAX's order); list slots without leaves keep what ``value`` had there (an
    empty container or ``None``)."""
    leaves = [
        (tuple(_raw_key(k) for k in path), leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]
    ]
    if not leaves or (len(leaves) == 1 and leaves[0][0] == ()):
        return value
    result: Any = [] if isinstance(leaves[0][0][0], int) else {}
    for path, leaf in leaves:
        cursor = result
        for i, key in enumerate(path[:-1]):
            if isinstance(cursor, list):
                _pad(cursor, key, value, path[:i])
                if cursor[key] is None:
                    cursor[key] = [] if isinstance(path[i + 1], int) else {}
            elif key not in cursor:
                cursor[key] = [] if isinstance(path[i + 1], int) else {}
            cursor = cursor[key]
        if isinstance(cursor, list):
            _pad(cursor, path[-1], value, path[:-1])
        cursor[path[-1]] = leaf
    if isinstance(value, (list, tuple)) and isinstance(result, list):
        result += [_to_simple(v) for v in value[len(result) :]]
    return result


def _none_as_text(x: Any) -> Any:
    """``None`` written ``None`` (Flax's YAML dumper), inside containers too."""
    if x is None:
        return "None"
    if isinstance(x, dict):
        return {k: _none_as_text(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_none_as_text(v) for v in x]
    return x


def _as_yaml_str(value: Any) -> str:
    """``value`` as Flax's YAML-like cell text (nothing for ``None`` or an empty value)."""
    if value is None or (hasattr(value, "__len__") and len(value) == 0):
        return ""
    shown = jax.tree.map(_shown, value)
    return linen_summary._as_yaml_str(_none_as_text(_simple_structure(shown)))


def _render_array(x: Any) -> str:
    return str(ArrayRepr.from_array(x))


def _variables_cell(info: ObjectInfo, var_type: type) -> str:
    """An object's Variables of one type (name: shape, with metadata) and their total."""
    required = getattr(var_type, "required_metadata", frozenset())
    listed: dict[Any, Any] = {}
    for name, variable in info.variable_groups.get(var_type, {}).items():
        value = variable.get_value()
        value_repr = (
            _render_array(value) if hasattr(value, "shape") and hasattr(value, "dtype") else ""
        )
        metadata = {k: v for k, v in variable.get_metadata().items() if k not in required}
        if metadata:
            listed[name] = {"value": value_repr, **metadata}
        elif value_repr:
            listed[name] = value_repr
    cell = _as_yaml_str(listed) + "\n\n" if listed else ""
    size = info.stats.get(var_type)
    if size:
        cell += f"[bold]{size}[/bold]"
    return cell


def tabulate(
    obj: Any,
    *input_args: Any,
    depth: int | None = None,
    method: str = "__call__",
    row_filter: Callable[[CallInfo], bool] = filter_rng_streams,
    table_kwargs: Mapping[str, Any] = MappingProxyType({}),
    column_kwargs: Mapping[str, Any] = MappingProxyType({}),
    console_kwargs: Mapping[str, Any] = MappingProxyType({}),
    compute_flops: bool = False,
    compute_vjp_flops: bool = False,
    **input_kwargs: Any,
) -> str:
    """A table of the calls that ``obj.<method>(*input_args, **input_kwargs)`` makes.

    Columns: the caller's path in the graph, its type, inputs, outputs, optionally
    ``flops``/``vjp_flops``, then one column per Variable type (RNG state counted as
    ``RngState``) listing the object's own Variables and the total of its subtree. ``obj``
    is cloned first, so the call leaves it unchanged.

    Args:
      obj: an NNX Module or any graph object.
      *input_args: positional arguments of the method.
      depth: show only calls at most this deep in the graph (``None``: all).
      method: name of the method to call (default ``__call__``).
      row_filter: keep the rows for which it is true (default: hide ``RngStream`` calls).
      table_kwargs: extra arguments of ``rich.table.Table``.
      column_kwargs: extra arguments of ``rich.table.Table.add_column``.
      console_kwargs: extra arguments of ``rich.console.Console`` (default
        ``force_terminal=True``).
      compute_flops: add each call's estimated FLOPs (XLA cost analysis).
      compute_vjp_flops: add each call's estimated backward-pass FLOPs.
      **input_kwargs: keyword arguments of the method.

    Returns:
      The rendered table.
    """
    import rich.console
    import rich.table
    import rich.text

    obj = graphlib.clone(obj)
    infos: dict[int, Any] = {}
    types: set[type] = set()
    _collect_stats((), obj, infos, types)
    root: ObjectInfo = infos[id(obj)]
    variable_types = sorted(root.stats, key=lambda t: t.__name__)
    originals = _methods(types)
    rec = _Recording(itertools.count(0), [], infos, compute_flops, compute_vjp_flops, set())
    recorders = {k: _recorder(v, rec) for k, v in originals.items()}
    _install(recorders)
    try:
        recorders[(type(obj), method)](obj, *input_args, **input_kwargs)
    finally:
        _install(originals)
    rows = sorted(rec.rows, key=lambda r: r.call_order)
    rows = [r for r in rows if (depth is None or len(r.path) <= depth) and row_filter(r)]

    table = rich.table.Table(
        show_header=True,
        show_lines=True,
        show_footer=True,
        title=f"{type(obj).__name__} Summary",
        **table_kwargs,
    )
    names = ["path", "type", "inputs", "outputs"]
    names += ["flops"] * compute_flops + ["vjp_flops"] * compute_vjp_flops
    for column in [*names, *(t.__name__ for t in variable_types)]:
        table.add_column(column, **column_kwargs)
    for row in rows:
        cells = ["/".join(map(str, row.path)), row.type.__name__, row.inputs_repr]
        cells.append(_as_yaml_str(row.outputs))
        cells += [str(row.flops)] * compute_flops + [str(row.vjp_flops)] * compute_vjp_flops
        cells += [_variables_cell(infos[row.object_id], t) for t in variable_types]
        table.add_row(*cells)
    offset = len(names) - 1
    table.columns[offset].footer = rich.text.Text.from_markup("Total", justify="right")
    for i, var_type in enumerate(variable_types):
        table.columns[offset + 1 + i].footer = str(root.stats[var_type])
    table.caption_style = "bold"
    total = sum(root.stats.values(), SizeBytes(0, 0))
    table.caption = f"\nTotal Parameters: {total}"
    console = {"force_terminal": True, "force_jupyter": _IN_IPYTHON, **console_kwargs}
    out = io.StringIO()
    rich.console.Console(file=out, **console).print(table)
    return out.getvalue()
