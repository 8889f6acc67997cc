"""``tabulate``: a table of a model's submodules, their calls, variables and FLOPs.

The model is run once under ``jax.eval_shape`` (no FLOPs spent, nothing allocated). While
it runs, a call hook (``hooked_calls`` below sets ``_module.call_hook``, a context
variable every Module ``__call__`` reads; no class is patched) records a call on one of
the model's submodules, its inputs and outputs (as ``ShapeDtypeStruct``s), under the
submodule's path; every other call runs straight through. Variables are counted from the
model itself, per collection. FLOPs come from XLA's cost analysis of the lowered call
(``jax.jit(f).lower(...)``), for the whole model and for each recorded call.
"""

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._apply import apply
from ._filters import FilterLike
from ._meta import slot_value
from ._module import BoundMethod, CallHook, Module, call_hook
from ._pack import pack, unpack
from ._repr import short_dtype, tree_pformat
from ._tree import Path, flatten_one_level, format_path, is_array, path_keys
from ._variables import Variable, collection_of

__all__ = ["Row", "Summary", "tabulate"]

Counts = dict[str, tuple[int, int]]  # collection -> (number of entries, bytes)


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of a summary: a submodule (or a repeated call of one).

    ``inputs``/``outputs`` are ``(args, kwargs)``/the output of the call with every array
    replaced by a ``jax.ShapeDtypeStruct`` (``None`` if the module was not called);
    ``variables`` maps each collection to the module's own variables (``name -> shapes``,
    submodules excluded); ``own`` and ``total`` give ``(count, bytes)`` per collection of
    the module's own variables and of its whole subtree; ``flops`` is XLA's estimate for
    the call and ``vjp_flops`` for its forward and backward pass (``None`` if not
    computed or not available).
    """

    path: Path
    module_type: type
    method: str
    depth: int
    inputs: tuple[tuple[Any, ...], dict[str, Any]] | None
    outputs: Any
    variables: dict[str, dict[str, str]]
    own: Counts
    total: Counts
    flops: int | None
    repeated: bool = False
    vjp_flops: int | None = None

    @property
    def name(self) -> str:
        """The path as attribute syntax (``.blocks[3].mlp``); ``""`` for the model itself."""
        return format_path(self.path) if self.path else ""


@dataclasses.dataclass(frozen=True)
class Summary:
    """What ``tabulate`` returns: the rows, the collections, totals and FLOPs.

    ``str(summary)`` (and ``print(summary)``) is the rendered table as plain text;
    ``summary.print()`` prints it with colours; rich consoles render it directly.
    """

    model_type: type
    rows: tuple[Row, ...]
    collections: tuple[str, ...]
    totals: Counts
    flops: int | None
    vjp_flops: int | None
    render_options: dict[str, Any] = dataclasses.field(repr=False, compare=False)

    def row(self, path: str) -> Row:
        """The first row whose path reads ``path`` (``".blocks[3].mlp"``, ``""`` for root)."""
        for r in self.rows:
            if r.name == path:
                return r
        known = ", ".join(repr(r.name) for r in self.rows)
        raise KeyError(f"No row with path {path!r}; the rows are: {known}.")

    def __rich__(self) -> Any:
        from ._tabulate_render import rich_table

        return rich_table(self)

    def __str__(self) -> str:
        from ._tabulate_render import render_text

        return render_text(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # IPython and Jupyter show the table, not the dataclass fields.
        printer.text(str(self))

    def print(self, **console_kwargs: Any) -> None:
        """Print the table to a ``rich.console.Console(**console_kwargs)`` (stdout)."""
        import rich.console

        rich.console.Console(**console_kwargs).print(self.__rich__())


# ---------------------------------------------------------------------------------------
# Walking the model: submodules, their paths and their variables.


@dataclasses.dataclass
class _Node:
    path: Path
    module: Any
    depth: int
    own: list[tuple[Path, Any]]  # (path relative to the module, leaf or Variable)
    children: list["_Node"]


def _is_leaf(x: Any) -> bool:
    return isinstance(x, Variable) or is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def _walk(module: Any, path: Path, depth: int, seen: dict[int, Path]) -> _Node:
    node = _Node(path, module, depth, [], [])
    seen[id(module)] = path

    def visit(x: Any, rel: Path) -> None:
        if isinstance(x, Module) and rel:
            if id(x) not in seen:  # a shared submodule is listed at its first path
                node.children.append(_walk(x, (*path, *rel), depth + 1, seen))
            return
        if _is_leaf(x):
            node.own.append((rel, x))
            return
        split = flatten_one_level(x)
        if split is not None:
            for key, child in split[0]:
                visit(child, (*rel, *path_keys((key,))))

    visit(module, ())
    return node


def _nodes(root: _Node) -> Iterator[_Node]:
    yield root
    for child in root.children:
        yield from _nodes(child)


def _arrays(x: Any) -> list[Any]:
    return [a for a in jax.tree.leaves(slot_value(x)) if _is_leaf(a)]


def _nbytes(a: Any) -> int:
    return math.prod(a.shape) * a.dtype.itemsize


def _add(counts: Counts, leaves: list[tuple[Path, Any]], seen: set[int]) -> None:
    for _, x in leaves:
        if id(x) in seen:  # a Variable shared by several places counts once
            continue
        seen.add(id(x))
        arrays = _arrays(x)
        n, b = counts.get(collection_of(x), (0, 0))
        n += sum(math.prod(a.shape) for a in arrays)
        counts[collection_of(x)] = (n, b + sum(_nbytes(a) for a in arrays))


def _own_counts(node: _Node) -> Counts:
    counts: Counts = {}
    _add(counts, node.own, set())
    return counts


def _total_counts(node: _Node) -> Counts:
    counts: Counts = {}
    seen: set[int] = set()
    for n in _nodes(node):
        _add(counts, n.own, seen)
    return counts


def _listing(node: _Node) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for rel, x in node.own:
        shapes = ", ".join(
            f"{short_dtype(a.dtype)}[{', '.join(map(str, a.shape))}]" for a in _arrays(x)
        )
        out.setdefault(collection_of(x), {})[format_path(rel).lstrip(".")] = shapes
    return out


# ---------------------------------------------------------------------------------------
# Recording calls while the model runs under eval_shape.


@dataclasses.dataclass
class _Call:
    path: Path
    inputs: tuple[tuple[Any, ...], dict[str, Any]]
    outputs: Any


class _Recorder:
    def __init__(self, model: Any):
        self.paths: dict[int, Path] = {}
        _walk(model, (), 0, self.paths)
        self.active: set[int] = set()
        self.calls: list[_Call] = []
        self.noted: set[int] = set()

    def call(self, fn: Callable[..., Any], module: Any, args: Any, kwargs: Any) -> Any:
        path = self.paths[id(module)]
        self.active.add(id(module))
        try:
            out = fn(*args, **kwargs)
        except Exception as err:
            if id(err) not in self.noted:  # the innermost recorded call names itself
                self.noted.add(id(err))
                where = format_path(path) if path else "the model"
                err.add_note(
                    f"(raised while pm.tabulate ran {where}, a {type(module).__name__}, "
                    f"on inputs {_signature(args, kwargs)})"
                )
            raise
        finally:
            self.active.discard(id(module))
        inputs = _abstract((tuple(args), dict(kwargs)))
        self.calls.append(_Call(path, inputs, _abstract(out)))  # no tracer is kept
        return out


def _signature(args: Any, kwargs: Any) -> str:
    args, kwargs = _abstract((tuple(args), dict(kwargs)))
    parts = [tree_pformat(a) for a in args]
    parts += [f"{k}={tree_pformat(v)}" for k, v in kwargs.items()]
    return f"({', '.join(parts)})"


def _abstract(tree: Any) -> Any:
    """``tree`` with every array (tracers included) replaced by a ``ShapeDtypeStruct``."""

    def leaf(x: Any) -> Any:
        if is_array(x) or isinstance(x, jax.ShapeDtypeStruct):
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        return x

    return jax.tree.map(leaf, tree)


def _record(recorder: _Recorder) -> Callable[..., Any]:
    """The call hook: a call on one of the model's submodules (not already running) is
    recorded; every other call runs as it would."""

    def hook(func: Callable[..., Any], module: Any, *args: Any, **kwargs: Any) -> Any:
        if id(module) not in recorder.paths or id(module) in recorder.active:
            return func(module, *args, **kwargs)
        return recorder.call(functools.partial(func, module), module, args, kwargs)

    return hook


@contextlib.contextmanager
def hooked_calls(hook: CallHook) -> Iterator[None]:
    """Route every Module ``__call__`` made in this context through ``hook``.

    Nothing is patched: the ``__call__`` descriptor of every Module class reads the hook
    (a context variable, so threads and other contexts are unaffected) when the call is
    looked up, ``model(x)`` and ``model.__call__`` alike.
    """
    token = call_hook.set(hook)
    try:
        yield
    finally:
        call_hook.reset(token)


def _trace(
    model: Any, method: str, mutable: FilterLike, args: Any, kwargs: Any
) -> tuple[list[_Call], Any]:
    skeleton, arrays, _ = pack((model, args, kwargs))
    cell: dict[str, list[_Call]] = {}

    def run(arrays: list[Any]) -> list[Any]:
        m, a, k = unpack(skeleton, arrays)
        recorder = _Recorder(m)
        with hooked_calls(_record(recorder)):
            out = recorder.call(lambda *a, **k: _call(m, method, mutable, a, k), m, a, k)
        cell["calls"] = recorder.calls
        return pack(out)[1]

    jax.eval_shape(run, arrays)
    return cell["calls"], skeleton


def _call(module: Any, method: str, mutable: FilterLike, args: Any, kwargs: Any) -> Any:
    fn = getattr(module, method)
    return apply(fn, *args, mutable=mutable, **kwargs)[0]


# ---------------------------------------------------------------------------------------
# FLOPs from XLA's cost analysis.


def _cost_flops(cost: Any) -> int | None:
    """The ``flops`` entry of a cost analysis, in any of the forms JAX versions return."""
    if isinstance(cost, (list, tuple)):  # older JAX: one dict per computation
        cost = cost[0] if cost else None
    if not isinstance(cost, Mapping) or "flops" not in cost:
        return None
    flops = float(cost["flops"])
    return int(flops) if flops >= 0 else None


def _inexact(x: Any) -> bool:
    return bool(jnp.issubdtype(x.dtype, jnp.inexact))


def _flops(
    fn: Callable[..., Any],
    tree: Any,
    cache: dict[Any, int | None] | None = None,
    tag: Any = None,
    vjp: bool = False,
) -> int | None:
    """FLOPs of ``fn(*tree)`` on abstract arrays, or ``None`` if the backend gives none.

    With ``vjp``, of the forward and backward pass: ``jax.vjp`` with respect to every
    floating-point array of ``tree``, pulled back with the output as cotangent. ``cache``
    (keyed by ``tag``, which names ``fn``, the tree's skeleton and the array shapes)
    spares lowering identical calls again: the blocks of a deep model often are.
    """
    skeleton, arrays, _ = pack(tree)
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
    key = (tag, vjp, skeleton, tuple((a.shape, str(a.dtype)) for a in shapes))
    if cache is not None and key in cache:
        return cache[key]

    def forward(arrays: list[Any]) -> list[Any]:
        return pack(fn(*unpack(skeleton, arrays)))[1]

    def forward_backward(arrays: list[Any]) -> Any:
        wrt = [i for i, a in enumerate(arrays) if _inexact(a)]

        def of(values: list[Any]) -> list[Any]:
            full = list(arrays)
            for i, v in zip(wrt, values):
                full[i] = v
            return forward(full)

        out, pullback = jax.vjp(of, [arrays[i] for i in wrt])
        zero = jax.dtypes.float0
        return pullback([o if _inexact(o) else np.zeros(o.shape, zero) for o in out])

    lowered = jax.jit(forward_backward if vjp else forward).lower(shapes)
    flops = _cost_flops(lowered.cost_analysis())
    if flops is None:
        flops = _cost_flops(lowered.compile().cost_analysis())
    if cache is not None:
        cache[key] = flops
    return flops


def _call_flops(
    module: Any,
    method: str,
    mutable: FilterLike,
    inputs: Any,
    cache: dict[Any, int | None],
    vjp: bool = False,
) -> int | None:
    args, kwargs = inputs
    run = lambda m, a, k: _call(m, method, mutable, a, k)
    try:
        return _flops(run, (module, args, kwargs), cache, method, vjp)
    except Exception:
        # A call that only works in its context (inside a transform, with an axis name
        # bound...) has no FLOPs of its own here; the model's total is still exact.
        return None


# ---------------------------------------------------------------------------------------


def tabulate(
    model: Module | Callable[..., Any],
    *inputs: Any,
    depth: int | None = None,
    method: str = "__call__",
    mutable: FilterLike = True,
    compute_flops: bool = True,
    compute_vjp_flops: bool = False,
    show_repeated: bool = False,
    console_kwargs: Mapping[str, Any] | None = None,
    table_kwargs: Mapping[str, Any] | None = None,
    column_kwargs: Mapping[str, Any] | None = None,
    **input_kwargs: Any,
) -> Summary:
    """Summarise a model as a table: one row per submodule, with its path, type, the
    shapes of the inputs and outputs of its call, its variables per collection and the
    FLOPs of the call.

    The model runs once under ``jax.eval_shape`` (nothing is computed or allocated), on
    ``inputs`` and ``input_kwargs``, which may be arrays or ``jax.ShapeDtypeStruct``s;
    abstract models (``jax.eval_shape(Model, ...)``) work too. Randomness is explicit, so
    a stochastic model gets its key as usual (``key=jax.random.key(0)``).

    **Arguments:**

    - ``model``: a Module, or a bound method of one (``model.encode``).
    - ``*inputs``, ``**input_kwargs``: the arguments of the call (an argument of the
      call named like one of the options below must be passed positionally).
    - ``depth``: show submodules down to this nesting depth (``0``: the model only);
      default all. A row's totals always include everything below it.
    - ``method``: the method of ``model`` to call (default ``"__call__"``).
    - ``mutable``: collections the call may write, as in ``pm.apply`` (default ``True``:
      all, so layers that update state in training, like BatchNorm, run; the updates are
      discarded).
    - ``compute_flops``: add XLA's FLOP estimate of each call (default ``True``). Each row
      is lowered (not compiled) once more; turn it off for very large models.
    - ``compute_vjp_flops``: add the FLOPs of each call's forward and backward pass
      (``jax.vjp`` with respect to every floating-point array of the module and the
      inputs); default ``False``.
    - ``show_repeated``: also list the second and later calls of a submodule.
    - ``console_kwargs``, ``table_kwargs``, ``column_kwargs``: passed to
      ``rich.console.Console`` (when rendering to text), ``rich.table.Table`` and its
      ``add_column``.

    **Returns:** a ``Summary``: ``print(summary)`` shows the table; ``summary.rows`` holds
    the data (``summary.row(".blocks[0]").total["params"]`` is ``(count, bytes)``).

    Only ``__call__`` of submodules is recorded (other methods run, but get no row
    data of their own), and only on the model's own submodules: calls made inside a
    transform over the model (a ``pm.scan`` over stacked layers) run on rebuilt copies.
    """
    model, method = _target(model, method, depth)
    calls, _ = _trace(model, method, mutable, inputs, input_kwargs)
    root = _walk(model, (), 0, {})
    flops = _FlopsOptions(compute_flops, compute_vjp_flops, mutable, {})
    rows = _rows(root, calls, method, depth, show_repeated, flops)
    options = {
        "console_kwargs": dict(console_kwargs or {}),
        "table_kwargs": dict(table_kwargs or {}),
        "column_kwargs": dict(column_kwargs or {}),
        "compute_flops": compute_flops,
        "compute_vjp_flops": compute_vjp_flops,
    }
    return Summary(
        model_type=type(model),
        rows=tuple(rows),
        collections=_collections(root),
        totals=_total_counts(root),
        flops=rows[0].flops if rows else None,
        vjp_flops=rows[0].vjp_flops if rows else None,
        render_options=options,
    )


def _target(model: Any, method: str, depth: int | None) -> tuple[Module, str]:
    """The model and the name of the method to call, checked (a bound method gives both)."""
    if isinstance(model, BoundMethod):
        model, method = model.__self__, model.__func__.__name__
    if not isinstance(model, Module):
        raise TypeError(
            f"pm.tabulate summarises a pytreemod Module (or a bound method of one); got "
            f"{type(model).__name__}. Pass the model itself: pm.tabulate(model, *inputs)."
        )
    if depth is not None and depth < 0:
        raise ValueError(f"pm.tabulate: depth must be None or >= 0, got {depth}.")
    if not callable(getattr(model, method, None)):
        raise AttributeError(
            f"pm.tabulate: {type(model).__name__} has no method {method!r} to call; pass "
            "method= the name of one of its methods."
        )
    return model, method


@dataclasses.dataclass(frozen=True)
class _FlopsOptions:
    """Which FLOPs to compute for each row, and the cache shared by all rows."""

    forward: bool
    vjp: bool
    mutable: FilterLike
    cache: dict[Any, int | None]  # per (method, skeleton, shapes)


def _rows(
    root: _Node,
    calls: list[_Call],
    method: str,
    depth: int | None,
    show_repeated: bool,
    flops: _FlopsOptions,
) -> list[Row]:
    """One row per submodule down to ``depth`` (per call with ``show_repeated``)."""
    by_path: dict[Path, list[_Call]] = {}
    for c in calls:
        by_path.setdefault(c.path, []).append(c)
    rows: list[Row] = []
    for node in _nodes(root):
        if depth is not None and node.depth > depth:
            continue
        name = method if not node.path else "__call__"
        node_calls = by_path.get(node.path, [])
        for i, c in enumerate(node_calls[: None if show_repeated else 1] or [None]):
            rows.append(_row(node, name, c, bool(i), flops))
    return rows


def _row(node: _Node, method: str, call: _Call | None, repeated: bool, opts: _FlopsOptions) -> Row:
    """The row of one call of ``node`` (a later call lists no variables of its own)."""
    flops = vjp_flops = None
    if opts.forward and call is not None:
        flops = _call_flops(node.module, method, opts.mutable, call.inputs, opts.cache)
    if opts.vjp and call is not None:
        vjp_flops = _call_flops(node.module, method, opts.mutable, call.inputs, opts.cache, True)
    return Row(
        path=node.path,
        module_type=type(node.module),
        method=method,
        depth=node.depth,
        inputs=None if call is None else call.inputs,
        outputs=None if call is None else call.outputs,
        variables={} if repeated else _listing(node),
        own={} if repeated else _own_counts(node),
        total={} if repeated else _total_counts(node),
        flops=flops,
        repeated=repeated,
        vjp_flops=vjp_flops,
    )


def _collections(root: _Node) -> tuple[str, ...]:
    """Every collection of the model's variables, in order of appearance, params first."""
    collections: list[str] = []
    for node in _nodes(root):
        for col in _listing(node):
            if col not in collections:
                collections.append(col)
    if "params" in collections:
        collections.remove("params")
        collections.insert(0, "params")
    return tuple(collections)
