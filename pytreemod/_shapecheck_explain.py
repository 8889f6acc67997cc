"""What a failed type check means, in pytreemod's words (``_shapecheck``'s error path).

When jaxtyping and beartype reject a call, the annotations are walked again in parameter
order, then the return value's, and the first disagreement is described: the argument
(or the return value), what its annotation expects and what it got (a shape, a dtype, a
type), and how to fix it. Shapes are bound in one memo, so a dimension two arguments
share is reported with both. Nothing here runs on a call that passes its checks.

NumPy arrays given where a method of a typechecked module annotates ``jax.Array`` are
accepted: ``as_jax_arrays`` converts them (``jnp.asarray``, as ``pm.jit`` and every layer
do), so the method receives what its annotation says.
"""

import dataclasses
import functools
import inspect
import re
import typing
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._repr import array_summary, tree_pformat
from ._tree import is_array


def summary(x: Any) -> str:
    """``f32[2, 5]`` for an array, ``repr`` for anything else."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return array_summary(x)
    return repr(x)


@dataclasses.dataclass(frozen=True)
class Failure:
    """One disagreement: ``reason`` (what and where in the arguments), ``fix`` (how to
    repair it), ``arg`` (the parameter, ``None`` for the return value)."""

    reason: str
    fix: str
    arg: str | None
    returned: bool = False


_SHAPE_FIX = "shape"  # a placeholder the caller fills in: the fix depends on who is called


def hints_of(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """``fn``'s resolved annotations, or ``None`` when they cannot be resolved (a name
    local to the function that defined the class)."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return None


@functools.cache
def beartype_conf() -> Any:
    """beartype's configuration for every check: Python's numeric tower and NumPy's
    scalars (``float`` accepts ``int``, ``np.floating`` and ``np.integer``; ``int`` accepts
    ``np.integer``; ``complex`` any real or complex number), containers included."""
    from beartype import BeartypeConf, FrozenDict

    overrides = FrozenDict(
        {
            float: float | int | np.floating | np.integer,
            int: int | np.integer,
            complex: complex | float | int | np.number,
        }
    )
    return BeartypeConf(hint_overrides=overrides)


# ----------------------------------------------------------------------------- NumPy


def _array_types(hint: Any) -> set[Any] | None:
    """The array classes ``hint`` accepts (``jax.Array``, ``np.ndarray``), or ``None``
    when it accepts anything (``Any``, ``object``, an unannotated parameter)."""
    from jaxtyping import AbstractArray

    if hint is None or hint is Any or hint is object:
        return None
    if isinstance(hint, type) and issubclass(hint, AbstractArray):
        return {getattr(hint, "array_type", None)}
    if isinstance(hint, type):
        return {hint}
    found: set[Any] = set()
    for arg in typing.get_args(hint):
        inner = _array_types(arg)
        if inner is None:
            return None
        found |= inner
    return found


def _jax_only(hint: Any) -> bool:
    """Whether ``hint`` takes a ``jax.Array`` but no NumPy array."""
    types = _array_types(hint)
    return (
        types is not None
        and jax.Array in types
        and not any(isinstance(t, type) and issubclass(t, np.ndarray) for t in types)
    )


def as_jax_arrays(hints: dict[str, Any] | None, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """``arguments`` with the NumPy arrays (and NumPy scalars) given for parameters whose
    annotation takes a ``jax.Array`` but not a NumPy array converted by ``jnp.asarray``;
    ``None`` when there is none to convert."""
    if hints is None:
        return None
    converted = dict(arguments)
    changed = False
    for name, value in arguments.items():
        if isinstance(value, np.ndarray | np.generic) and _jax_only(hints.get(name)):
            converted[name] = jnp.asarray(value)
            changed = True
    return converted if changed else None


# ----------------------------------------------------------------------------- words


def hint_text(hint: Any) -> str:
    """An annotation as its author wrote it: ``Float[Array, "batch 8"]``, ``Array | None``,
    ``Float[Array | ndarray, "*batch in"]`` for the layers' own annotation."""
    from jaxtyping import AbstractArray

    if isinstance(hint, type) and issubclass(hint, AbstractArray):
        return _array_text(hint.dtype.__name__, [hint.array_type], hint.dim_str)  # type: ignore[attr-defined]
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if args and (origin is typing.Union or str(origin) == "<class 'types.UnionType'>"):
        arrays = [a for a in args if isinstance(a, type) and issubclass(a, AbstractArray)]
        same = {(a.dtype, a.dim_str) for a in arrays}  # type: ignore[attr-defined]
        rest = [hint_text(a) for a in args if a not in arrays]
        if len(arrays) > 1 and len(same) == 1:
            kind, dims = next(iter(same))
            rest.insert(0, _array_text(kind.__name__, [a.array_type for a in arrays], dims))  # type: ignore[attr-defined]
        else:
            rest = [hint_text(a) for a in args]
        return " | ".join(rest)
    if hint is type(None):
        return "None"
    if isinstance(hint, type):
        return _type_name(hint)
    return _clean(str(hint))


def _type_name(cls: type) -> str:
    if cls is jax.Array:
        return "jax.Array"
    if cls is np.ndarray:
        return "np.ndarray"
    return _clean(cls.__name__)


def _clean(text: str) -> str:
    """Annotation text without the modules JAX and jaxtyping print (``Array``)."""
    text = text.replace("jax.jaxlib._jax.Array", "Array").replace("jaxlib._jax.Array", "Array")
    return text.replace("jaxtyping.", "").replace("typing.", "")


def _array_text(kind: str, array_types: Sequence[Any], dims: str) -> str:
    names = " | ".join("Array" if t is jax.Array else _type_name(t) for t in array_types)
    return f'{kind}[{names}, "{dims}"]'


def short_text(value: Any, limit: int = 60) -> str:
    """``value`` on one line, arrays as ``f32[2, 5]`` (in containers too), cut at
    ``limit`` characters."""
    try:
        text = " ".join(tree_pformat(value).split())
    except Exception:  # a value whose repr fails: its type is enough
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def value_text(value: Any) -> str:
    """``f32[2, 5]``, ``f32[2, 5](numpy)``, ``1.0 (a float)``, ``'hi' (a str)``,
    ``Param(f32[]) (a Param)``."""
    if is_array(value) or isinstance(value, jax.ShapeDtypeStruct):
        return summary(value)
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{short_text(value)} ({'an' if name[:1] in 'aeiouAEIOU' else 'a'} {name})"


def _wants_array(hint: Any) -> bool:
    types = _array_types(hint)
    return bool(types) and any(
        isinstance(t, type) and issubclass(t, jax.Array | np.ndarray) for t in types
    )


def _type_failure(label: str, arg: str | None, value: Any, hint: Any) -> Failure:
    """``value`` is not of the type ``hint`` names at all (not a matter of shape)."""
    expected = hint_text(hint)
    got = value_text(value)
    if isinstance(value, np.ndarray | np.generic) and _wants_array(hint):
        reason = f"{label} is a NumPy array, {got}, but its annotation is {expected}"
        fix = (
            "return jnp.asarray(...) (a jax.Array)"
            if arg is None
            else "convert it with jnp.asarray"
        ) + ", or annotate the NumPy type too (pm.nn.AnyArray is jax.Array | np.ndarray)"
        return Failure(reason, fix, arg)
    reason = f"{label} is {got}, but its annotation is {expected}"
    if arg is not None and (arg.endswith("key") or arg == "rng") and _wants_array(hint):
        fix = f"pass a PRNG key: {arg}=jax.random.key(seed)"
    elif _wants_array(hint) and not hasattr(value, "shape"):
        what = "return" if arg is None else "pass"
        shaped = _array_annotation(hint) is not None
        fix = f"{what} {'an array of that shape and dtype' if shaped else 'an array'}, e.g. "
        fix += "jnp.asarray(...)"
    else:
        fix = f"{'return' if arg is None else 'pass'} a value of the annotated type"
    return Failure(reason, fix, arg)


# ----------------------------------------------------------------------------- explain


def explain(
    signature: inspect.Signature,
    arguments: dict[str, Any],
    hints: dict[str, Any] | None,
    returned: Any,
    has_returned: bool,
) -> Failure | None:
    """The first disagreement between the call and the annotations: each argument in
    order, then the return value (when ``has_returned``); ``None`` if none is found."""
    if hints is None:
        return None
    from beartype.door import is_bearable

    conf = beartype_conf()
    memo: dict[str, tuple[Any, str, Any, int, str]] = {}
    checks: list[tuple[str, str | None, Any, Any]] = [
        (f"argument {n!r}", n, arguments.get(n), hints.get(n)) for n in signature.parameters
    ]
    if has_returned:
        checks.append(("the return value", None, returned, hints.get("return")))
    for label, arg, value, hint in checks:
        if hint is None:
            continue
        annotation = _array_annotation(hint)
        if annotation is not None and hasattr(value, "shape") and _is_array_of(value, hint):
            short = repr(arg) if arg is not None else "the return value"
            reason = _bind(annotation, label, short, value, memo)
            if reason is not None:
                dtype = f"{label} has dtype " in reason
                fix = _dtype_fix(annotation, arg) if dtype else _SHAPE_FIX
                return Failure(reason, fix, arg, returned=arg is None)
            continue  # symbolic axes ("n+1") are left to jaxtyping's own words
        try:
            fits = is_bearable(value, hint, conf=conf)
        except Exception:  # a hint beartype cannot test on its own: jaxtyping decides
            fits = True
        if not fits:
            return _type_failure(label, arg, value, hint)
    return None


def _is_array_of(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of an array type ``hint`` accepts (its shape is then what
    to explain)."""
    types = _array_types(hint)
    return types is None or any(isinstance(t, type) and isinstance(value, t) for t in types)


class _Dims:
    """The dimension tokens of one jaxtyping annotation string."""

    def __init__(self, dim_str: str):
        self.text = dim_str
        self.tokens: list[tuple[str, bool, bool]] = []  # (name, variadic, broadcastable)
        for raw in dim_str.split():
            token, variadic, broadcast = raw, False, False
            while token[:1] in ("*", "#", "?"):
                variadic |= token[0] == "*"
                broadcast |= token[0] == "#"
                token = token[1:]
            if token == "...":
                variadic, token = True, "_"
            self.tokens.append((token, variadic, broadcast))

    def split(self, shape: Sequence[int]) -> list[tuple[int, Any]] | None:
        """Pair each token with its axis and size (a tuple for a variadic token), or None
        if the rank cannot fit."""
        n = len(self.tokens)
        var = [i for i, t in enumerate(self.tokens) if t[1]]
        if not var:
            if len(shape) != n:
                return None
            return [(i, shape[i]) for i in range(n)]
        v = var[0]
        after = n - v - 1
        if len(shape) < n - 1:
            return None
        end = len(shape) - after
        pairs: list[tuple[int, Any]] = [(i, shape[i]) for i in range(v)]
        pairs.append((v, tuple(shape[v:end])))
        pairs += [(end + k, shape[end + k]) for k in range(after)]
        return pairs


def _array_annotation(annotation: Any) -> Any:
    from jaxtyping import AbstractArray  # only on the error path

    if isinstance(annotation, type) and issubclass(annotation, AbstractArray):
        return annotation
    for arg in typing.get_args(annotation):
        found = _array_annotation(arg)
        if found is not None:
            return found
    return None


def axes_text(n: int) -> str:
    """``"1 axis"``, ``"3 axes"``."""
    return f"{n} axis" if n == 1 else f"{n} axes"


def _expected_rank(dims: _Dims) -> str:
    n = len(dims.tokens)
    if any(t[1] for t in dims.tokens):
        return f"at least {axes_text(n - 1)}"
    return axes_text(n)


def _bind(
    annotation: Any,
    label: str,
    arg: str,
    value: Any,
    memo: dict[str, tuple[Any, str, Any, int, str]],
) -> str | None:
    """Bind ``value``'s axes to ``annotation``'s names in ``memo``; describe the first
    that disagrees. ``label``: ``"argument 'x'"``; ``arg``: ``"'x'"`` (the short name)."""
    dims = _Dims(annotation.dim_str)
    shape = tuple(value.shape)
    pairs = dims.split(shape)
    if pairs is None:
        return (
            f"{label} is {summary(value)} ({axes_text(len(shape))}) but its annotation "
            f'"{dims.text}" needs {_expected_rank(dims)}'
        )
    for (token, _, broadcast), (axis, size) in zip(dims.tokens, pairs):
        if token.startswith("_") or token.isdigit() or not token.isidentifier():
            if token.isdigit() and size != int(token) and not (broadcast and size == 1):
                return (
                    f"axis {axis} of {label} ({summary(value)}) must be {token} "
                    f'(annotation "{dims.text}") but is {size}'
                )
            continue
        if token not in memo:
            memo[token] = (size, arg, value, axis, dims.text)
            continue
        seen, other, other_value, other_axis, other_text = memo[token]
        if _agree(seen, size, broadcast):
            if broadcast and _is_one(seen) and not _is_one(size):
                memo[token] = (size, arg, value, axis, dims.text)
            continue
        return (
            f"dimension {token!r} does not agree: it is {_fmt_size(size)} in {arg} "
            f'({summary(value)}, {_fmt_axis(axis, size)} of "{dims.text}") but '
            f"{_fmt_size(seen)} in {other} ({summary(other_value)}, "
            f'{_fmt_axis(other_axis, seen)} of "{other_text}")'
        )
    dtypes = getattr(annotation, "dtypes", None)
    if isinstance(dtypes, (list, tuple)) and str(value.dtype) not in dtypes:
        kind = annotation.__name__.split("[")[0]
        return f"{label} has dtype {value.dtype} ({summary(value)}); {kind} expected"
    return None


def _dtype_fix(annotation: Any, arg: str | None) -> str:
    """How to give ``arg`` (``None``: the return value) a dtype ``annotation`` allows."""
    kind = annotation.__name__.split("[")[0]
    cast = _CASTS.get(kind)
    if cast is None:
        return f"cast it to a {kind} dtype"
    target = f"{arg}.astype({cast})" if arg is not None else f"return ....astype({cast})"
    return f"cast it ({target})"


def _is_one(size: Any) -> bool:
    return size == 1 or (isinstance(size, tuple) and all(s == 1 for s in size))


def _agree(seen: Any, size: Any, broadcast: bool) -> bool:
    if seen == size:
        return True
    if not broadcast:
        return False
    if isinstance(seen, tuple) and isinstance(size, tuple):  # numpy broadcasting: align right
        return all(a == b or a == 1 or b == 1 for a, b in zip(seen[::-1], size[::-1]))
    return seen == 1 or size == 1


def _fmt_size(size: Any) -> str:
    return str(tuple(size)) if isinstance(size, tuple) else str(size)


def _fmt_axis(axis: int, size: Any) -> str:
    if not isinstance(size, tuple) or len(size) == 1:
        return f"axis {axis}"
    return f"axes {axis}..{axis + len(size) - 1}" if size else "no axes"


# ----------------------------------------------------------------------------- the rest


def returned_value(cause: BaseException) -> tuple[bool, Any]:
    """``(True, value)`` when ``cause`` (beartype's violation, or jaxtyping's error raised
    from one) rejected the return value ``value``; ``(False, None)`` otherwise, or when
    beartype kept only the value's text (objects it cannot refer to weakly)."""
    for error in (cause, cause.__cause__):
        if type(error).__name__ == "BeartypeCallHintReturnViolation":
            culprits = getattr(error, "culprits", ())
            if culprits and not isinstance(culprits[0], str):
                return True, culprits[0]
    return False, None


_PARAMETER = re.compile(r"typechecking parameter '(\w+)'|\) parameter (\w+)=")
_REASON = re.compile(r", as (.*?)\.?$", re.S)


def fallback(
    cause: BaseException,
    fn: Callable[..., Any],
    arguments: dict[str, Any],
    hints: dict[str, Any] | None,
) -> Failure:
    """The failure when ``explain`` cannot pin it down (a symbolic axis such as ``"n+1"``,
    an annotation that cannot be resolved, a returned value beartype kept as text only):
    the argument or return value the checkers name, its annotation and, when jaxtyping
    gives one, its one-line reason."""
    raw = hints if hints is not None else getattr(fn, "__annotations__", {})
    texts = [str(cause), str(cause.__cause__ or "")]
    found = next((m.group(1) or m.group(2) for t in texts if (m := _PARAMETER.search(t))), None)
    is_return = found is None and any("return" in t for t in texts)
    name = "return" if is_return else found
    label = "the return value" if is_return else f"argument {name!r}" if name else "the call"
    value = f" ({value_text(arguments[name])})" if name in arguments else ""
    culprits = [getattr(e, "culprits", ()) for e in (cause, cause.__cause__)]
    kept = next((c[0] for c in culprits if c and isinstance(c[0], str)), None)
    if is_return and kept is not None:  # beartype kept the value's repr
        kept = kept.strip('"')
        value = f" ({kept if len(kept) <= 60 else kept[:57] + '...'})"
    annotation = raw.get(name) if name else None
    expected = hint_text(annotation) if annotation is not None else "its annotations"
    shown = expected if annotation is None else f"its annotation {expected}"
    if isinstance(annotation, str):
        shown = f'its annotation "{annotation}"'
    reason = f"{label}{value} does not fit {shown}"
    why = next((m.group(1) for t in texts if (m := _REASON.search(t.strip()))), None)
    if why and "not instance of" not in why:  # a type's mismatch: the annotation says it
        reason += f": {why.strip()}"
    return Failure(reason, _SHAPE_FIX, None if is_return else found, returned=is_return)


_CASTS = {"Float": "jnp.float32", "Inexact": "jnp.float32", "Real": "jnp.float32"}
_CASTS |= {"Int": "jnp.int32", "Integer": "jnp.int32", "UInt": "jnp.uint32"}
_CASTS |= {"Bool": "jnp.bool_", "Complex": "jnp.complex64"}


def fix_text(failure: Failure, fn: Callable[..., Any], is_method: bool, caller: Any) -> str:
    """How to repair ``failure``: its own fix, or for a shape (and dtype) disagreement
    one that depends on who annotated the function (a layer, an op, the user); ``caller``
    is the module whose method called the op ``fn`` (a layer's failure is the layer's)."""
    ours = str(getattr(fn, "__module__", "")).startswith(("pytreemod.", "adapters."))
    if failure.fix.startswith("cast it") and not ours:
        return failure.fix + ", or widen the annotation"
    if failure.fix != _SHAPE_FIX:
        return failure.fix
    if failure.returned:
        return (
            f"return a value that fits the annotation of {fn.__qualname__}, or correct the "
            "annotation"
        )
    layer = type(caller).__module__.startswith(("pytreemod.", "adapters."))
    if ours and (is_method or (caller is not None and layer)):
        return (
            "give the layer inputs of the shapes and dtypes its docstring shows, or build it "
            "with sizes that fit the data (e.g. Linear(in_features=x.shape[-1], ...))"
        )
    if ours:
        return "pass arrays of the shapes and dtypes the op's docstring shows"
    return f"pass arrays that fit the annotations of {fn.__qualname__}, or correct the annotations"
