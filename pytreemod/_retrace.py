"""Retrace detection for ``jit``: warn once when one function compiles again and again.

Each trace of a ``jit`` function records, per argument, its tree structure and for each
leaf either the shape and dtype (arrays) or the value (everything else, a compile-time
constant). When a function reaches its ``warn_retraces``-th trace, the recorded traces are
compared: the arguments that differ between them are what made JAX compile again, and the
``RetraceWarning`` names them, with what they held and the fix. Recording happens only
while tracing, so calls that reuse a compiled version pay nothing.
"""

import inspect
import os
import sys
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import jax.tree_util as jtu

from ._errors import RetraceWarning
from ._module import Module, fields
from ._tree import Path, format_path, is_array, path_keys

DEFAULT_WARN_RETRACES = 10

# An argument: ("fun",), ("arg", index) or ("kw", name). A leaf: ("array", shape, dtype),
# ("static", type name, value) or, for a static field of a module, ("field", type, value).
ArgKey = tuple[Any, ...]
Leaf = tuple[Any, ...]
Signature = dict[ArgKey, tuple[Any, tuple[tuple[Path, Leaf], ...]]]


def _package_dir(name: str) -> str | None:
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    return os.path.dirname(file) + os.sep if file else None


_SKIP_DIRS = tuple(
    d for d in (_package_dir("jax"), _package_dir("jaxlib"), _package_dir("pytreemod")) if d
)


def _leaf(x: Any) -> Leaf:
    if is_array(x):  # tracers included
        return ("array", tuple(x.shape), str(x.dtype))
    value = x if isinstance(x, Hashable) else id(x)
    return ("static", type(x).__name__, value)


def _static_fields(tree: Any, prefix: Path, out: list[tuple[Path, Leaf]]) -> None:
    """The static fields of the modules in ``tree`` (part of the treedef, not leaves)."""
    flat, _ = jtu.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, Module))
    for kp, node in flat:
        if not isinstance(node, Module):
            continue
        where = (*prefix, *path_keys(kp))
        for f in fields(node):
            value = getattr(node, f.name, None)
            if f.metadata.get("static"):
                out.append(((*where, f.name), ("field", *_leaf(value)[1:])))
            else:
                _static_fields(value, (*where, f.name), out)


def _describe_arg(tree: Any) -> tuple[Any, tuple[tuple[Path, Leaf], ...]]:
    flat, treedef = jtu.tree_flatten_with_path(tree)
    leaves = [(path_keys(kp), _leaf(x)) for kp, x in flat]
    _static_fields(tree, (), leaves)
    return treedef, tuple(leaves)


def _signature(fun: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Signature:
    sig: Signature = {}
    if fun is not None:
        sig[("fun",)] = _describe_arg(fun)
    for i, a in enumerate(args):
        sig[("arg", i)] = _describe_arg(a)
    for name, v in kwargs.items():
        sig[("kw", name)] = _describe_arg(v)
    return sig


def _arg_name(fun: Callable[..., Any], key: ArgKey) -> str:
    if key[0] == "fun":
        return "the function itself (a module or bound method: its fields)"
    if key[0] == "kw":
        return f"keyword argument `{key[1]}`"
    index = key[1]
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if index < len(params) and params[index].kind in positional:
        return f"`{params[index].name}` (argument {index})"
    return f"argument {index}"


def _show(leaf: Leaf) -> str:
    if leaf[0] == "array":
        return f"{leaf[2]}{list(leaf[1])}"
    return repr(leaf[2])


def _distinct(items: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def _explain(fun: Callable[..., Any], key: ArgKey, history: Sequence[Signature]) -> str:
    """What changed in argument ``key`` over ``history``, and how to stop it."""
    name = _arg_name(fun, key)
    entries = [sig.get(key) for sig in history]
    leaves_by_path: dict[Path, list[Leaf]] = {}
    for entry in entries:
        if entry is None:
            continue
        for path, leaf in entry[1]:
            leaves_by_path.setdefault(path, []).append(leaf)
    changing = [(p, v) for p, v in leaves_by_path.items() if len(_distinct(v)) > 1]
    if not changing:
        return (
            f"the tree structure or static fields of {name} changed between calls. A new "
            "structure or static field value is a new program: keep them fixed, or store a "
            "changing value in an array field."
        )
    path, values = changing[0]
    where = name + (f" at `{format_path(path)}`" if path else "")
    shown = _distinct(values)
    listed = ", ".join(_show(v) for v in shown[:4]) + (", ..." if len(shown) > 4 else "")
    if all(v[0] == "field" for v in shown):
        return (
            f"{where} is a static field that took {len(shown)} values ({listed}); a static "
            "field is part of the compiled program. Declare it without static=True and "
            "store an array if it changes from call to call, or keep its values few."
        )
    if all(v[0] != "array" for v in shown):
        kinds = _distinct([v[1] for v in shown])
        return (
            f"{where} is a Python {'/'.join(kinds)} (a compile-time constant) that took "
            f"{len(shown)} values ({listed}). Pass it as an array (e.g. jnp.asarray(...)) so "
            "it is traced once, or keep its values few."
        )
    return (
        f"{where} had {len(shown)} shapes/dtypes ({listed}). Every new shape or dtype "
        "compiles a new version: pad inputs to a few fixed shapes, or keep them fixed."
    )


def _stacklevel() -> int:
    """The stack level of the first frame outside jax and pytreemod (the user's call)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP_DIRS):
        frame = frame.f_back
        level += 1
    return level


class TraceLog:
    """The traces of one ``jit`` function, and whether it has warned."""

    __slots__ = ("count", "fun", "history", "limit", "warned")

    def __init__(self, fun: Callable[..., Any], limit: int | None):
        self.fun = fun
        self.limit = limit
        self.count = 0
        self.history: list[Signature] = []
        self.warned = False

    def reset(self) -> None:
        self.count = 0
        self.history.clear()

    def note(self, fun: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Record one trace (called while tracing); warn on the ``limit``-th."""
        if self.limit is None or self.warned:
            return
        self.count += 1
        self.history.append(_signature(fun, args, kwargs))
        del self.history[: -self.limit]
        if self.count < self.limit:
            return
        keys = _distinct([k for sig in self.history for k in sig])
        changed = [k for k in keys if len(_distinct([s.get(k) for s in self.history])) > 1]
        if not changed:
            return  # retraced for a reason the arguments do not show (cleared caches...)
        self.warned = True
        name = getattr(self.fun, "__name__", None) or type(self.fun).__name__
        reasons = "; ".join(_explain(self.fun, k, self.history) for k in changed[:2])
        warnings.warn(
            f"pytreemod.jit: `{name}` has been traced and compiled {self.count} times: "
            f"{reasons} (Warned once per function; pm.jit(..., warn_retraces=None) turns "
            "this off.)",
            RetraceWarning,
            stacklevel=_stacklevel(),
        )
