"""Rendering a ``Summary`` (``pytreemod._tabulate``) as a ``rich`` table or plain text."""

import io
from typing import Any

from ._repr import tree_pformat

_CELL_WIDTH = 48  # inputs/outputs wider than this break over several lines


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,} B"


def _count(n: int, nbytes: int) -> str:
    return f"{n:,} ({_bytes(nbytes)})" if n else ""


def _flops(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def _values(inputs: Any) -> str:
    if inputs is None:
        return ""
    args, kwargs = inputs
    lines = [tree_pformat(a, _CELL_WIDTH) for a in args]
    lines += [f"{k}={tree_pformat(v, _CELL_WIDTH)}" for k, v in kwargs.items()]
    return "\n".join(lines)


def _collection_cell(row: Any, col: str) -> Any:
    import rich.text

    text = rich.text.Text()
    listing = row.variables.get(col, {})
    for name, shapes in listing.items():
        text.append(f"{name}: {shapes}\n")
    n, nbytes = row.total.get(col, (0, 0))
    if n:
        if listing:
            text.append("\n")
        text.append(_count(n, nbytes), style="bold")
    return text


def rich_table(summary: Any) -> Any:
    """The summary as a ``rich.table.Table`` (title, one row per ``Row``, totals footer)."""
    import rich.table
    import rich.text

    options = summary.render_options
    table_kwargs: dict[str, Any] = {
        "show_header": True,
        "show_lines": True,
        "show_footer": True,
        "title": f"{summary.model_type.__name__} Summary",
        **options["table_kwargs"],
    }
    table = rich.table.Table(**table_kwargs)
    columns = ["path", "type", "inputs", "outputs"]
    flop_columns = [c for c in ("flops", "vjp_flops") if options[f"compute_{c}"]]
    columns += flop_columns
    for name in [*columns, *summary.collections]:
        table.add_column(name, **options["column_kwargs"])
    for row in summary.rows:
        kind = row.module_type.__name__
        if row.method != "__call__":
            kind += f" ({row.method})"
        if row.repeated:
            kind += " (repeated call)"
        cells: list[Any] = [
            rich.text.Text(row.name),
            rich.text.Text(kind),
            rich.text.Text(_values(row.inputs)),
            rich.text.Text("" if row.inputs is None else tree_pformat(row.outputs, _CELL_WIDTH)),
        ]
        for c in flop_columns:
            cells.append(rich.text.Text(_flops(getattr(row, c))))
        cells += [_collection_cell(row, col) for col in summary.collections]
        table.add_row(*cells)
    table.columns[3].footer = rich.text.Text("Total", justify="right")
    for i, c in enumerate(flop_columns):
        table.columns[4 + i].footer = _flops(getattr(summary, c))
    for i, col in enumerate(summary.collections):
        table.columns[len(columns) + i].footer = _count(*summary.totals.get(col, (0, 0)))
    n = sum(c for c, _ in summary.totals.values())
    nbytes = sum(b for _, b in summary.totals.values())
    caption = f"Total variables: {n:,} ({_bytes(nbytes)})"
    if options["compute_flops"] and summary.flops is not None:
        caption += f"\nFLOPs: {summary.flops:,}"
    if options["compute_vjp_flops"] and summary.vjp_flops is not None:
        caption += f"\nFLOPs of forward and backward pass: {summary.vjp_flops:,}"
    table.caption = caption
    table.caption_style = "bold"
    return table


def render_text(summary: Any) -> str:
    """The table as plain text, as wide as it needs (``console_kwargs`` may change that)."""
    import rich.console

    table = rich_table(summary)
    kwargs: dict[str, Any] = {"force_terminal": False, "force_jupyter": False, "width": 10_000}
    kwargs.update(summary.render_options["console_kwargs"])
    if "width" not in summary.render_options["console_kwargs"]:
        probe = rich.console.Console(file=io.StringIO(), **kwargs)
        kwargs["width"] = max(40, probe.measure(table).maximum)
    out = io.StringIO()
    rich.console.Console(file=out, **kwargs).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
