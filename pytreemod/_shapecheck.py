"""Trace-time shape checks, with errors that say what disagrees.

Every op in ``pytreemod.nn.functional`` and every array-taking method of a layer is
decorated with ``checked``, and so is every method of a user's module declared
``typecheck=True``: jaxtyping and beartype check its annotated arguments
(``x: Float[Array, "*batch in_features"]``, ``kernel: Float[Array, "in_features
out_features"]``) and its output, so a dimension shared by two arguments is tied; a layer
passes its parameters to an op, which ties the input to them. Under ``jit`` the check
runs once, while tracing; the compiled program is the same with checks on or off
(``JAXTYPING_DISABLE=1`` turns them off, as it does for every jaxtyping check).

A passing call is checked in one pass: beartype checks each argument and then the output
inside one jaxtyping dimension memo. jaxtyping's own ``jaxtyped(typechecker=...)``, which
binds the signature and checks every argument again with the output, runs only when that
check fails (its error is the one explained below) and for annotations that need more
than the memo (symbolic axes such as ``"n+1"``, ``PyTree[...]``).

When a check fails, NumPy arrays given where the annotation takes a ``jax.Array`` only
are converted (``jnp.asarray``) and the call is made again; otherwise jaxtyping's
``TypeCheckError`` is replaced by a ``ShapeError`` in pytreemod's words
(``_shapecheck_explain``): the argument or the return value, what its annotation expects
and what it got (the dimension that disagrees with the shapes on both sides, a dtype, a
type), and ``Fix: ...``. It names the module class and method: the method's own ``self``
for a layer method, the nearest calling Module method for an op. When enclosing modules
on the calling frames hold that module, the call is named by its path from the outermost
of them instead (``Model.blocks[3].mlp.up(x=f32[2, 5])``), as ``_where`` finds it for
every error that names a layer. The explanation walks the annotations again and looks at
the calling frames only on this error path; a successful call pays for jaxtyping's check
alone.

Layers are declared ``typecheck=True``, whose class-level jaxtyping wrapper checks the
methods a subclass adds; on the layers' own methods, already checked here, it stands
aside (``__no_type_check__``, which jaxtyping honours) so each call is checked once.
"""

import functools
import inspect
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

import jax
import numpy as np

from . import _where
from ._errors import ShapeError
from ._shapecheck_explain import (
    as_jax_arrays,
    beartype_conf,
    explain,
    fallback,
    fix_text,
    hints_of,
    returned_value,
    short_text,
)
from ._shapecheck_explain import axes_text as axes_text
from ._shapecheck_explain import summary as summary

AnyArray: TypeAlias = jax.Array | np.ndarray
"""What array annotations accept: JAX arrays (tracers included) and NumPy arrays."""

F = TypeVar("F", bound=Callable[..., Any])


def checked(fn: F, *, method: bool | None = None) -> F:
    """Check ``fn``'s jaxtyping annotations with beartype; explain failures as ``ShapeError``.

    ``fn`` is an op of ``pytreemod.nn.functional`` or a method of a module, whose first
    parameter is the instance; ``method=None`` takes a first parameter named ``self`` to
    mean a method.
    """
    first = _first_parameter(fn)
    is_method = first is not None and (first == "self" if method is None else method)
    op_name = f"pytreemod.nn.functional.{fn.__name__}"
    # beartype accepts ``typing.Self`` only when it decorates the whole class; a method
    # annotated with it is checked against its declaring class instead (``owner``, set by
    # the Module metaclass through ``_pytreemod_owner`` once the class exists).
    owner: list[type | None] = [None]
    deferred = is_method and _mentions_self(fn)
    # The checker (beartype's generated code, the signature, the numeric slots) is built
    # on the first call, not here: decorating costs nothing at import time, and a layer
    # or op never called never pays for it.
    # [signature, one-pass checker or None, jaxtyping+beartype checker, number slots,
    #  the exceptions that send a call from the first checker to the second, jaxtyping's
    #  TypeCheckError]
    built: list[Any] = []

    def build(instance: Any) -> list[Any]:
        from beartype.roar import BeartypeCallHintViolation  # with the first checker built
        from jaxtyping import TypeCheckError, jaxtyped

        checked_fn = fn
        if deferred:
            cls = owner[0] if owner[0] is not None else type(instance)
            checked_fn = _with_self_as(fn, cls)
        inner = jaxtyped(typechecker=_typechecker())(checked_fn)
        fast = _one_pass(checked_fn)
        slots = number_slots(fn)
        built[:] = [
            inspect.signature(fn),
            fast,
            inner,
            slots,
            BeartypeCallHintViolation,
            TypeCheckError,
        ]
        return built

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        signature, fast, inner, slots, violation, check_error = built or build(
            args[0] if args else None
        )
        if slots is not None:
            args, kwargs = as_python_numbers(slots, args, kwargs)
        try:
            if fast is not None:
                try:
                    return fast(*args, **kwargs)
                except violation:  # jaxtyping's checker, below, has the last word
                    pass
            return inner(*args, **kwargs)
        except check_error as error:
            cause: BaseException = error
        # The error path: convert NumPy arrays the annotations refuse, or say what is wrong.
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        hints = hints_of(fn)
        if deferred and hints is not None:  # ``Self``: the declaring class, as checked
            cls = owner[0] if owner[0] is not None else type(args[0])
            hints = {k: _replace_self(v, cls) for k, v in hints.items()}
        has_returned, returned = returned_value(cause)
        if not has_returned:
            converted = as_jax_arrays(hints, bound.arguments)
            if converted is not None:
                bound.arguments.update(converted)
                return wrapper(*bound.args, **bound.kwargs)
        failure = explain(signature, bound.arguments, hints, returned, has_returned)
        if failure is None:
            failure = fallback(cause, fn, bound.arguments, hints)
        frame = sys._getframe(1)
        caller = None if is_method else _where.module_frame(frame)
        caller_module = None if caller is None else caller.f_locals["self"]
        fix = fix_text(failure, fn, is_method, caller_module)
        if is_method:
            arguments = dict(bound.arguments)
            module = arguments.pop(str(first))
            where = _describe_call(module, fn.__name__, arguments, frame, also=failure.arg)
            raise ShapeError(f"{where}: {failure.reason}. Fix: {fix}.") from None
        context = _with_context(op_name, failure.reason, frame)
        raise ShapeError(f"{context}. Fix: {fix}.") from None

    if is_method:
        wrapper.__no_type_check__ = True  # type: ignore[attr-defined]
    if deferred:
        wrapper._pytreemod_owner = owner  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _first_parameter(fn: Callable[..., Any]) -> str | None:
    """The name of ``fn``'s first parameter (``inspect.signature``'s), read from its code
    object when it has one: ``inspect.signature`` is slow for import-time decoration."""
    code = getattr(fn, "__code__", None)
    if isinstance(fn, types.FunctionType) and code is not None and code.co_argcount > 0:
        return code.co_varnames[0]
    return next(iter(inspect.signature(fn).parameters), None)


# ----------------------------------------------------------------------------- numbers


def _is_numeric(hint: Any) -> bool:
    if hint is int or hint is float or hint is complex:
        return True
    return any(_is_numeric(a) for a in typing.get_args(hint))


NumberSlots: TypeAlias = tuple[frozenset[int], frozenset[str]]


def number_slots(fn: Callable[..., Any]) -> NumberSlots | None:
    """The positions and names of ``fn``'s parameters annotated with a Python number
    (``float``, ``int | Sequence[int]``...), or ``None`` when it has none."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an unresolvable forward reference: read the raw annotations
        hints = getattr(fn, "__annotations__", {})
    params = list(inspect.signature(fn).parameters.values())
    names = frozenset(p.name for p in params if _is_numeric(hints.get(p.name)))
    if not names:
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positions = frozenset(
        i for i, p in enumerate(params) if p.name in names and p.kind in positional
    )
    return positions, names


def _as_python(value: Any) -> Any:
    if isinstance(value, np.generic) and not isinstance(value, np.bool_):
        return value.item()
    if type(value) in (tuple, list):
        items: Any = value
        if any(isinstance(v, np.generic) for v in items):
            return type(items)(_as_python(v) for v in items)
    return value


def as_python_numbers(
    slots: NumberSlots, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args``/``kwargs`` with NumPy scalars in the numeric ``slots`` replaced by the
    Python numbers they hold (``np.float32(0.5)`` -> ``0.5``, ``(np.int64(2),)`` ->
    ``(2,)``), so that a NumPy scalar means exactly what the Python number means: weakly
    typed in JAX arithmetic, hashable the same way in static fields and cache keys."""
    positions, names = slots
    n = len(args)
    for i in positions:
        if i < n and _holds_numpy_number(args[i]):
            args = tuple(_as_python(a) if i in positions else a for i, a in enumerate(args))
            break
    if kwargs:
        for k in names:
            if k in kwargs and _holds_numpy_number(kwargs[k]):
                kwargs = {k: _as_python(v) if k in names else v for k, v in kwargs.items()}
                break
    return args, kwargs


_PYTHON_SCALARS = frozenset({int, float, bool, str, type(None)})


def _holds_numpy_number(value: Any) -> bool:
    """Whether ``_as_python`` would change ``value`` (the common Python value: no)."""
    t = type(value)
    if t in _PYTHON_SCALARS:
        return False
    if t is tuple or t is list:
        return any(isinstance(v, np.generic) for v in value)
    return isinstance(value, np.generic) and not isinstance(value, np.bool_)


def python_numbers(fn: F) -> F:
    """Wrap ``fn`` (a typechecked Module's ``__init__``) so that NumPy scalars passed for
    its numeric parameters arrive as Python numbers (see ``as_python_numbers``)."""
    slots = number_slots(fn)
    if slots is None:
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = as_python_numbers(slots, args, kwargs)
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _one_pass(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """``fn`` checked in one pass: beartype's wrapper checks each parameter before the
    call and the output after it, inside one jaxtyping dimension memo, so a dimension an
    argument binds ties the output. jaxtyping's own ``jaxtyped(typechecker=...)`` binds
    the signature and checks every parameter a second time with the output (what lets
    its errors show them all); the wrapper above runs it only when this check fails, to
    say what is wrong.

    ``None`` where only jaxtyping's checker applies: annotations that cannot be resolved
    or that read more than dimension memos (a symbolic axis such as ``"n+1"`` reads the
    arguments; a ``PyTree[...]`` annotation its own memo). Built after jaxtyping's
    checker, which applies beartype first: a hint beartype refuses has failed there.
    """
    from jaxtyping import config, jaxtyped

    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an unresolvable forward reference
        return None
    if not all(_memo_only(hint) for hint in hints.values()):
        return None
    checked_fn = _typechecker()(fn)  # a hint beartype refuses failed in jaxtyping's already

    def one_pass(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if config.jaxtyping_disable:  # read per call, as jaxtyping does
            return fn(*args, **kwargs)
        with jaxtyped("context"):
            return checked_fn(*args, **kwargs)

    return one_pass


def _memo_only(hint: Any) -> bool:
    """Whether checking ``hint`` needs nothing of jaxtyping's but its dimension memo."""
    from jaxtyping import AbstractArray

    if isinstance(hint, type) and issubclass(hint, AbstractArray):
        dims = getattr(hint, "dims", None)
        return isinstance(dims, tuple | list) and not any(
            type(d).__name__ == "_SymbolicDim" for d in dims
        )
    if str(getattr(hint, "__module__", "")).startswith("jaxtyping"):  # PyTree[...] and kin
        return False
    return all(_memo_only(arg) for arg in typing.get_args(hint))


@functools.cache
def _typechecker() -> Callable[[Any], Any]:
    """beartype, configured with Python's numeric tower and NumPy's scalars.

    Python's typing lets an ``int`` stand where ``float`` (or ``complex``) is declared, and
    code passes NumPy scalars (``np.float32(0.1)``, ``np.int64(3)`` read from a config or an
    array) where a Python number is meant. beartype alone takes ``float`` literally, so the
    annotations are widened once, here, for every checked op and method: ``float`` accepts
    ``int``, ``np.floating`` and ``np.integer``; ``int`` accepts ``np.integer``; ``complex``
    any real or complex number. Containers are widened too (``Sequence[int]`` takes
    ``[np.int64(2)]``). beartype is imported on the first check, not with the package.
    """
    from beartype import beartype

    _keep_beartype_off_global_random()
    return beartype(conf=beartype_conf())


def _keep_beartype_off_global_random() -> None:
    """Give beartype's checkers a private random source.

    A checker of a container hint (``tuple[int, ...]``) draws a random index with
    ``random.getrandbits``; drawn from Python's global generator, every checked call would
    move the user's ``random`` stream (a ``random.shuffle`` of the data after a forward
    pass would then differ from the same program without checks). beartype reads the
    function from its code generator's module when it builds a checker, so replacing it
    there, before the first checker is built, moves every draw to a generator of its own.
    """
    import random

    try:
        from beartype._check.code import codemain
    except ImportError:  # another beartype layout: its draws stay on the global source
        return
    if getattr(codemain, "getrandbits", None) is random.getrandbits:
        codemain.getrandbits = random.Random(0).getrandbits


def _is_self(hint: Any) -> bool:
    return hint is typing.Self or (isinstance(hint, str) and hint.strip() == "Self")


def _mentions_self(fn: Callable[..., Any]) -> bool:
    def mentions(hint: Any) -> bool:
        return _is_self(hint) or any(mentions(a) for a in typing.get_args(hint))

    return any(mentions(h) for h in getattr(fn, "__annotations__", {}).values())


def _replace_self(hint: Any, cls: type) -> Any:
    if _is_self(hint):
        return cls
    args = typing.get_args(hint)
    if not args:
        return hint
    new = tuple(_replace_self(a, cls) for a in args)
    if new == args:
        return hint
    origin = typing.get_origin(hint)
    if isinstance(hint, types.GenericAlias):  # list[Self], tuple[Self, int]
        return types.GenericAlias(origin, new)
    if origin is types.UnionType or origin is typing.Union:  # Self | None
        return typing.Union[new]  # noqa: UP007
    copy_with = getattr(hint, "copy_with", None)  # typing.Tuple[...], typing.Optional[...]
    return copy_with(new) if copy_with is not None else hint


def _with_self_as(fn: Callable[..., Any], cls: type) -> Callable[..., Any]:
    """A copy of ``fn`` whose annotations name ``cls`` where they say ``Self``."""
    assert isinstance(fn, types.FunctionType)
    copy = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    copy.__annotations__ = {k: _replace_self(v, cls) for k, v in fn.__annotations__.items()}
    return copy


def fail(op: str, reason: str) -> typing.NoReturn:
    """Raise a ``ShapeError`` for a check written by hand in op ``op`` (``"conv"``)."""
    raise ShapeError(_with_context(f"pytreemod.nn.functional.{op}", reason, sys._getframe(1)))


# ----------------------------------------------------------------------------- context
#
# The layer a failed check names comes from ``_where``, the one model-path walk (shared
# with sharding errors and the layers' own errors); only a failed check walks the frames.


def _describe_call(
    module: Any,
    method: str,
    arguments: dict[str, Any],
    caller: types.FrameType | None,
    also: str | None = None,
) -> str:
    """``Linear.__call__(x=f32[2, 5])``, or, when ``module`` was called by an enclosing
    model (found on the calling frames, ``caller`` outward), the call as that model's path:
    ``Model.blocks[1].mlp.up(x=f32[2, 5])``. Arrays are shown, and the argument ``also``
    whatever it holds (the one a failed check names)."""
    shown = [
        f"{name}={short_text(value, 40)}"
        for name, value in arguments.items()
        if value is not module and (hasattr(value, "shape") or name == also)
    ]
    root, path = _where.model_path(module, caller)
    if path:
        called = "" if method == "__call__" else f".{method}"
        return f"{type(root).__name__}{path}{called}({', '.join(shown)})"
    return f"{type(module).__name__}.{method}({', '.join(shown)})"


def _with_context(op: str, reason: str, frame: types.FrameType | None) -> str:
    found = _where.module_frame(frame)
    if found is None:
        return f"{op}: {reason}"
    code = found.f_code
    local = found.f_locals
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    arguments = {n: local.get(n) for n in names}
    where = _describe_call(local["self"], code.co_name, arguments, found.f_back)
    return f"{where}: {reason} (checked in {op})"
