"""``trace_once``: reuse the trace of a pure array function across calls inside a trace.

Tracing Python is what a user waits for on every retrace (``jax.jit``'s first call,
``jax.eval_shape``, ``jax.make_jaxpr``). A ResNet calls the same convolution with the same
configuration and input shapes many times; tracing it once and recording every later
call as one nested ``jit`` equation keeps the program identical (XLA inlines the nested
call) and the Python cost proportional to the distinct calls, not to all of them.

Outside a trace (eager calls on concrete arrays) the function runs as written, so eager
results stay bit-for-bit those of the plain function.
"""

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import jax
from jax.core import Tracer

__all__ = ["trace_once"]

P = ParamSpec("P")
R = TypeVar("R")

_MAX_ENTRIES = 2048
_DYNAMIC = object()  # placeholder of an array argument in a cache key


def _static_key(value: Any) -> Any:
    """A key equal for equal values of the same types (``1``, ``1.0`` and ``True`` differ,
    as do a list and a tuple); raises TypeError for unhashable values."""
    kind = type(value)
    if kind is tuple or kind is list:
        return (kind, tuple(_static_key(v) for v in value))
    hash(value)
    return (kind, value)


_entries: dict[Any, Any] = {}  # key -> jitted replay, or None: call the function as is


def trace_once(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap the pure array function ``fn`` so that, under a trace, each distinct call
    configuration is traced once and reused.

    A call is cached when at least one argument is a tracer: arrays (top-level positional
    or keyword arguments) become the inputs of a nested ``jax.jit``; every other argument
    must be hashable and is part of the cache key (lists count by value). Calls with
    unhashable non-array arguments, calls on concrete arrays only, and calls whose cached
    trace fails run ``fn`` directly, so errors are raised exactly as without the cache.

    ``fn`` must be pure (no side effects, no state captured from the caller): its trace
    is replayed for later calls with equal non-array arguments and array shapes/dtypes.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> scale = pm.trace_once(lambda x, factor: x * factor)
    >>> jax.make_jaxpr(lambda x: scale(scale(x, 2.0), 2.0))(jnp.ones(3)).eqns[0].primitive
    jit
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return _call(fn, args, kwargs)

    return wrapper


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    dynamic: list[Any] = []
    traced = False
    parts: list[Any] = [fn]  # positional entries are keys or _DYNAMIC; kwargs add a name
    key: tuple[Any, ...] = ()
    try:
        for a in args:
            if isinstance(a, jax.Array):
                dynamic.append(a)
                traced = traced or isinstance(a, Tracer)
                parts.append(_DYNAMIC)
            else:
                parts.append(_static_key(a))
        for name, a in kwargs.items():
            parts.append(name)
            if isinstance(a, jax.Array):
                dynamic.append(a)
                traced = traced or isinstance(a, Tracer)
                parts.append(_DYNAMIC)
            else:
                parts.append(_static_key(a))
        key = tuple(parts)
        jitted = _entries.get(key, _DYNAMIC) if traced else None
    except TypeError:  # an unhashable argument: no cache for this call
        traced, jitted = False, None
    if not traced or jitted is None:  # eager, uncacheable, or its trace failed before
        return fn(*args, **kwargs)
    if jitted is _DYNAMIC:
        jitted = jax.jit(_replay(fn, args, kwargs))
        _store(key, jitted)
    try:
        return jitted(*dynamic)
    except Exception:
        out = fn(*args, **kwargs)  # a real error raises here, from the caller's frame
        _store(key, None)
        return out


def _replay(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[..., Any]:
    """``fn`` with the non-array arguments of this call fixed and the arrays as inputs."""
    static_args = [None if isinstance(a, jax.Array) else a for a in args]
    array_slots = [i for i, a in enumerate(args) if isinstance(a, jax.Array)]
    static_kwargs = {k: v for k, v in kwargs.items() if not isinstance(v, jax.Array)}
    array_names = [k for k, v in kwargs.items() if isinstance(v, jax.Array)]

    def replay(*arrays: Any) -> Any:
        call_args = list(static_args)
        for slot, value in zip(array_slots, arrays):
            call_args[slot] = value
        call_kwargs = dict(static_kwargs)
        call_kwargs.update(zip(array_names, arrays[len(array_slots) :]))
        return fn(*call_args, **call_kwargs)

    replay.__name__ = getattr(fn, "__name__", "trace_once")
    replay.__qualname__ = getattr(fn, "__qualname__", replay.__name__)
    return replay


def _store(key: Any, value: Callable[..., Any] | None) -> None:
    if len(_entries) >= _MAX_ENTRIES:  # a bound on memory; configurations are few in practice
        _entries.clear()
    _entries[key] = value
