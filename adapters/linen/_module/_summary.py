"""``tabulate`` (face: ``adapters.linen.summary``): a table of a module's calls, inputs,
outputs, variables and (optionally) FLOPs, rendered with ``rich``.

The calls are recorded by the Module while ``_context._tabulate_context()`` is active, during
an abstract ``init`` (``jax.eval_shape``); each row is one call, its variables those of
its path minus those of the submodules listed in their own rows.
"""

import dataclasses
import enum
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
from jax.core import Tracer

from ...core import DenyList, LazyRng, unfreeze
from ._context import _context, _tabulate_context
from ._values import (
    _from_value_representation,
    _maybe_render,
    _represent_tree,
    _ValueRepresentation,
)

_ALL_BUT_INTERMEDIATES = DenyList("intermediates")


@dataclasses.dataclass
class Row:
    """One call: the module's path, an unbound copy of it, the method, its inputs and
    outputs (as value representations), its own variables, the variables counted towards
    its totals, and its FLOPs (``-1`` when not computed)."""

    path: tuple[str, ...]
    module_copy: Any
    method: str
    inputs: Any
    outputs: Any
    module_variables: dict[str, dict[str, Any]]
    counted_variables: dict[str, dict[str, Any]]
    flops: int
    vjp_flops: int

    def size_and_bytes(self, collections: Iterable[str]) -> dict[str, tuple[int, int]]:
        """``(number of entries, bytes)`` of the counted variables per collection."""
        return {
            col: _size_and_bytes(self.counted_variables[col])
            if col in self.counted_variables
            else (0, 0)
            for col in collections
        }


class Table(list[Row]):
    """The rows of a summary, with the module and the collections it has."""

    def __init__(self, module: Any, collections: Sequence[str], rows: Iterable[Row]) -> None:
        super().__init__(rows)
        self.module = module
        self.collections = collections


def tabulate(
    module: Any,
    rngs: Any,
    depth: int | None = None,
    show_repeated: bool = False,
    mutable: Any = _ALL_BUT_INTERMEDIATES,
    console_kwargs: Mapping[str, Any] | None = None,
    table_kwargs: Mapping[str, Any] = MappingProxyType({}),
    column_kwargs: Mapping[str, Any] = MappingProxyType({}),
    compute_flops: bool = False,
    compute_vjp_flops: bool = False,
    **kwargs: Any,
) -> Callable[..., str]:
    """A function that, called with the module's inputs, returns the summary table as a
    string: one row per call (submodules down to ``depth``; repeated calls with
    ``show_repeated``), their inputs, outputs and variables, and totals per collection.
    ``compute_flops``/``compute_vjp_flops`` add XLA's FLOP estimates of each call (and of
    its forward plus backward pass). ``kwargs`` go to ``init`` (``method=`` too)."""
    if mutable != _ALL_BUT_INTERMEDIATES:
        kwargs["mutable"] = mutable

    def tabulate_fn(*fn_args: Any, **fn_kwargs: Any) -> str:
        table_fn = _get_module_table(
            module,
            depth=depth,
            show_repeated=show_repeated,
            compute_flops=compute_flops,
            compute_vjp_flops=compute_vjp_flops,
        )
        table = table_fn(rngs, *fn_args, **fn_kwargs, **kwargs)
        columns = ["path", "module", "inputs", "outputs"]
        if compute_flops:
            columns.append("flops")
        if compute_vjp_flops:
            columns.append("vjp_flops")
        return _render_table(table, console_kwargs, table_kwargs, column_kwargs, columns)

    return tabulate_fn


def _get_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    cost = jax.jit(fn).lower(*args, **kwargs).cost_analysis()
    if cost is None:
        return 0
    if isinstance(cost, list | tuple):  # older JAX: one dict per computation
        cost = cost[0] if cost else {}
    return int(cost["flops"]) if "flops" in cost else 0


def _concrete_rng(rng: Any) -> Any:
    """The key of a recorded stream; a stand-in key of the same kind if it was traced
    inside a lifted transform (FLOPs do not depend on key values)."""
    root = rng.rng if isinstance(rng, LazyRng) else rng
    if isinstance(root, Tracer):
        if jnp.issubdtype(root.dtype, jax.dtypes.prng_key):
            return jax.random.key(0)
        return jax.random.PRNGKey(0)
    return rng.as_jax_rng() if isinstance(rng, LazyRng) else rng


def _get_call_flops(call: Any, compute_flops: bool, compute_vjp_flops: bool) -> tuple[int, int]:
    """FLOPs of one recorded call (its forward pass, and forward plus backward)."""
    if not compute_flops and not compute_vjp_flops:
        return -1, -1
    rngs = jax.tree_util.tree_map(
        _concrete_rng, call.rngs, is_leaf=lambda r: isinstance(r, LazyRng)
    )
    args = jax.tree_util.tree_map(_from_value_representation, call.args)
    kwargs = jax.tree_util.tree_map(_from_value_representation, call.kwargs)
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    dynamic = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.ShapeDtypeStruct)]

    def inputs(values: Sequence[Any]) -> Any:
        new = list(leaves)
        for i, v in zip(dynamic, values):
            new[i] = v
        return treedef.unflatten(new)

    def init(rngs: Any, values: Any) -> Any:
        a, k = inputs(values)
        return call.module.init(rngs, *a, method=call.method, mutable=call.mutable, **k)

    dynamic_leaves = [leaves[i] for i in dynamic]
    variables = jax.eval_shape(init, rngs, dynamic_leaves)

    def apply(variables: Any, rngs: Any, values: Any) -> Any:
        a, k = inputs(values)
        return call.module.apply(
            variables, *a, rngs=rngs, method=call.method, mutable=call.mutable, **k
        )

    flops = _get_flops(apply, variables, rngs, dynamic_leaves) if compute_flops else -1
    vjp_flops = -1
    if compute_vjp_flops:

        def apply_vjp(variables: Any, rngs: Any, values: Any) -> Any:
            out, vjp_fn = jax.vjp(apply, variables, rngs, values)
            return vjp_fn(out)

        vjp_flops = _get_flops(apply_vjp, variables, rngs, dynamic_leaves)
    return flops, vjp_flops


def _get_module_table(
    module: Any,
    depth: int | None,
    show_repeated: bool,
    compute_flops: bool,
    compute_vjp_flops: bool,
) -> Callable[..., Table]:
    """A function of ``init``'s arguments returning the summary ``Table``."""

    def table_fn(*args: Any, **kwargs: Any) -> Table:
        with _tabulate_context():

            def get_variables() -> Any:
                return module.init(*args, **kwargs)

            with jax.check_tracer_leaks(False):
                variables = jax.eval_shape(get_variables)
            calls = _context.call_info_stack[-1].calls
            calls.sort(key=lambda c: c.index)
        collections = tuple(variables.keys())
        all_paths = {c.path for c in calls}
        visited: set[tuple[str, ...]] = set()
        rows = []
        for c in calls:
            inputs = _process_inputs(c.args, c.kwargs)
            if c.path in visited or not hasattr(c.module, c.method):
                if not show_repeated:
                    continue
                module_vars: dict[str, Any] = {}
                counted_vars: dict[str, Any] = {}
            elif depth is not None:
                if len(c.path) > depth:
                    continue
                module_vars, _ = _get_module_variables(c.path, variables, all_paths)
                if len(c.path) == depth:
                    counted_vars = _get_path_variables(c.path, variables)
                else:
                    counted_vars = module_vars
            else:
                module_vars, _ = _get_module_variables(c.path, variables, all_paths)
                counted_vars = module_vars
            visited.add(c.path)
            rows.append(
                Row(
                    c.path,
                    c.module.copy(parent=None),
                    c.method,
                    inputs,
                    c.outputs,
                    module_vars,
                    counted_vars,
                    *_get_call_flops(c, compute_flops, compute_vjp_flops),
                )
            )
        return Table(module, collections, rows)

    return table_fn


def _get_module_variables(
    path: tuple[str, ...], variables: Any, all_paths: set[tuple[str, ...]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The variables at ``path`` split into the module's own and those of submodules
    that have their own rows."""
    own = _get_path_variables(path, variables)
    sub: dict[str, Any] = {col: {} for col in own}
    for key in {k for col in own.values() for k in col}:
        if (*path, key) in all_paths:
            for col in own:
                if key in own[col]:
                    sub[col][key] = own[col].pop(key)
    return own, sub


def _get_path_variables(path: tuple[str, ...], variables: Any) -> dict[str, Any]:
    """Every collection's subtree at ``path`` (collections without it are left out)."""
    out = {}
    for col in variables:
        node = variables[col]
        for name in path:
            if name not in node:
                node = None
                break
            node = node[name]
        if node is not None:
            out[col] = unfreeze(node)
    return out


def _process_inputs(args: Any, kwargs: Any) -> Any:
    if args and kwargs:
        return (*args, kwargs)
    if args:
        return args[0] if len(args) == 1 else args
    if kwargs:
        return kwargs
    return ()


def _render_table(
    table: Table,
    console_extras: Mapping[str, Any] | None,
    table_kwargs: Mapping[str, Any],
    column_kwargs: Mapping[str, Any],
    non_param_cols: list[str],
) -> str:
    import rich.table  # rendering is the only use: `import adapters.linen` stays light
    import rich.text

    console_kwargs: dict[str, Any] = {"force_terminal": True, "force_jupyter": False}
    if console_extras is not None:
        console_kwargs.update(console_extras)
    rich_table = rich.table.Table(
        show_header=True,
        show_lines=True,
        show_footer=True,
        title=f"{table.module.__class__.__name__} Summary",
        **table_kwargs,
    )
    for c in [*non_param_cols, *table.collections]:
        rich_table.add_column(c, **column_kwargs)
    for row in table:
        cells = []
        for col, size_bytes in row.size_and_bytes(table.collections).items():
            text = ""
            if col in row.module_variables:
                tree = _normalize_structure(_represent_tree(row.module_variables[col]))
                text += _as_yaml_str(_summary_tree_map(_maybe_render, tree))
                if text:
                    text += "\n\n"
            text += f"[bold]{_size_and_bytes_repr(*size_bytes)}[/bold]"
            cells.append(text)
        method = f" [dim]({row.method})[/dim]" if row.method not in ("__call__", "<lambda>") else ""
        rich_table.add_row(
            "/".join(row.path),
            type(row.module_copy).__name__ + method,
            *(
                _as_yaml_str(
                    _summary_tree_map(_maybe_render, _normalize_structure(getattr(row, c)))
                )
                for c in non_param_cols[2:]
            ),
            *cells,
        )
    n = len(non_param_cols)
    rich_table.columns[n - 1].footer = rich.text.Text.from_markup("Total", justify="right")
    totals = {col: (0, 0) for col in table.collections}
    for row in table:
        for col, (size, nbytes) in row.size_and_bytes(table.collections).items():
            totals[col] = (totals[col][0] + size, totals[col][1] + nbytes)
    for i, col in enumerate(table.collections):
        rich_table.columns[n + i].footer = _size_and_bytes_repr(*totals[col])
    size = sum(s for s, _ in totals.values())
    nbytes = sum(b for _, b in totals.values())
    rich_table.caption_style = "bold"
    rich_table.caption = f"\nTotal Parameters: {_size_and_bytes_repr(size, nbytes)}"
    return "\n" + _get_rich_repr(rich_table, console_kwargs) + "\n"


def _summary_tree_map(f: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    return jax.tree_util.tree_map(f, tree, *rest, is_leaf=lambda x: x is None)


def _size_and_bytes_repr(size: int, num_bytes: int) -> str:
    if not size:
        return ""
    return f"{size:,} [dim]({_bytes_repr(num_bytes)})[/dim]"


def _size_and_bytes(tree: Any) -> tuple[int, int]:
    leaves = [x for x in jax.tree_util.tree_leaves(tree) if hasattr(x, "size")]
    return sum(x.size for x in leaves), sum(x.size * x.dtype.itemsize for x in leaves)


def _get_rich_repr(obj: Any, console_kwargs: Mapping[str, Any]) -> str:
    import rich.console

    out = io.StringIO()
    rich.console.Console(file=out, **console_kwargs).print(obj)
    return out.getvalue()


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _yaml_lines(value: Any) -> list[str]:
    """Block-style YAML lines (2-space mappings, sequences not indented under keys)."""
    if isinstance(value, Mapping):
        if not value:
            return ["{}"]
        lines = []
        for k, v in value.items():
            key = _yaml_scalar(k)
            if isinstance(v, Mapping) and v:
                lines.append(f"{key}:")
                lines += ["  " + line for line in _yaml_lines(v)]
            elif isinstance(v, list | tuple) and v:
                lines.append(f"{key}:")
                lines += _yaml_lines(v)
            else:
                lines.append(f"{key}: {_yaml_lines(v)[0]}")
        return lines
    if isinstance(value, list | tuple):
        if not value:
            return ["[]"]
        lines = []
        for item in value:
            sub = _yaml_lines(item)
            lines.append("- " + sub[0])
            lines += ["  " + line for line in sub[1:]]
        return lines
    return [_yaml_scalar(value)]


def _as_yaml_str(value: Any) -> str:
    """``value`` as block YAML without quotes (Flax shows its YAML dump with quotes
    removed)."""
    if (hasattr(value, "__len__") and len(value) == 0) or value is None:
        return ""
    return "\n".join(_yaml_lines(value)).replace("'", "").strip()


def _normalize_structure(obj: Any) -> Any:
    if isinstance(obj, _ValueRepresentation):
        return obj
    if isinstance(obj, tuple | list):
        return tuple(_normalize_structure(o) for o in obj)
    if isinstance(obj, Mapping):
        return {_normalize_structure(k): _normalize_structure(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _normalize_structure(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj


def _bytes_repr(num_bytes: int) -> str:
    if num_bytes > 1e9:
        return f"{num_bytes / 1e9:,.1f} GB"
    if num_bytes > 1e6:
        return f"{num_bytes / 1e6:,.1f} MB"
    if num_bytes > 1e3:
        return f"{num_bytes / 1e3:,.1f} KB"
    return f"{num_bytes:,} B"
