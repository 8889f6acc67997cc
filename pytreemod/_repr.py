"""Readable reprs: arrays as ``f32[4, 32]``, variables as ``Param(f32[4, 32])``."""

import types
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from ._tree import is_array

_WIDTH = 88


def short_dtype(dtype: Any) -> str:
    """``float32 -> f32``, ``bfloat16 -> bf16``, ``int8 -> i8``, ``bool -> bool``."""
    if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        return str(dtype)  # typed PRNG keys: ``key<fry>``; np.dtype() rejects them
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "bool"
    if dtype.name == "bfloat16":
        return "bf16"
    kind = {"f": "f", "i": "i", "u": "u", "c": "c"}.get(dtype.kind)
    if kind is None:
        return dtype.name
    return f"{kind}{dtype.itemsize * 8}"


def array_summary(x: Any) -> str:
    """``f32[4, 32]`` for an array; NumPy arrays are marked ``(numpy)``."""
    shape = ", ".join(map(str, x.shape))
    text = f"{short_dtype(x.dtype)}[{shape}]"
    if isinstance(x, (np.ndarray, np.generic)):
        text += "(numpy)"
    return text


def tree_pformat(obj: Any, width: int = _WIDTH) -> str:
    """Pretty-format a tree: modules by field, variables by collection type, arrays by
    dtype and shape (never their values). Fits on one line when it can."""
    return format_node(obj, 0, width)


def format_node(obj: Any, indent: int, width: int, used: int = 0) -> str:
    """Format one node of a tree at ``indent`` (the ``tree_pformat`` recursion).

    ``used`` counts the characters that share a line with ``obj`` besides the indentation
    (a field name before it, a comma or closing bracket after it). A class formats its
    own instances by defining ``_pytreemod_pformat(self, indent, width, used) -> str``
    (``Module``, ``Variable`` and ``BoundMethod`` do), usually with ``format_node`` and
    ``format_group``; this module therefore knows none of them.
    """
    if is_array(obj) or isinstance(obj, jax.ShapeDtypeStruct):
        return array_summary(obj)
    own = getattr(type(obj), "_pytreemod_pformat", None)
    if own is not None:
        return own(obj, indent, width, used)
    if isinstance(obj, list):
        return format_group("[", "]", [(None, x) for x in obj], indent, width, used)
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        close = ",)" if len(obj) == 1 else ")"
        return format_group("(", close, [(None, x) for x in obj], indent, width, used)
    if isinstance(obj, dict):
        items = [(repr(k), v) for k, v in obj.items()]
        return format_group("{", "}", items, indent, width, used, ": ")
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)) or (
        callable(obj) and not isinstance(obj, type) and hasattr(obj, "__wrapped__")
    ):
        name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
        return f"<function {name}>"
    return repr(obj)


def format_group(
    open_: str,
    close: str,
    items: Sequence[tuple[str | None, Any]],
    indent: int,
    width: int,
    used: int = 0,
    sep: str = "=",
) -> str:
    """``open_ item, item close`` on one line if it fits in ``width``, else one item per
    line; ``items`` are ``(prefix, value)`` pairs (``prefix + sep`` is written before the
    value unless the prefix is ``None``)."""
    prefixes = ["" if k is None else f"{k}{sep}" for k, _ in items]
    inner = [format_node(v, indent + 2, width, len(p) + 1) for p, (_, v) in zip(prefixes, items)]
    parts = [p + v for p, v in zip(prefixes, inner)]
    one_line = f"{open_}{', '.join(parts)}{close}"
    if "\n" not in one_line and indent + used + len(one_line) <= width:
        return one_line
    pad = " " * (indent + 2)
    body = "".join(f"{pad}{p},\n" for p in parts)
    return f"{open_}\n{body}{' ' * indent}{close.lstrip(',')}"
