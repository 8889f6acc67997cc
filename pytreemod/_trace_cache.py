"""``trace_once``: reuse the trace of a pure array function across calls inside a trace.

Tracing Python is what a user waits for on every retrace (``jax.jit``'s first call,
``jax.eval_shape``, ``jax.make_jaxpr``). A ResNet calls the same convolution with the same
configuration and input shapes many times; tracing it once and recording every later
call as one nested ``jit`` equation keeps the Python cost proportional to the distinct
calls, not to all of them. XLA inlines the nested calls: a forward pass compiles to the
same program; differentiated, a call's input cotangent is summed inside the call before
it joins the input's other uses, so a backward pass may add in another order (the same
values to float32 rounding).

Outside a trace (eager calls on concrete arrays) the function runs as written, so eager
results stay bit-for-bit those of the plain function. ``pm.nn``'s layers wrap their
``__call__`` with it, as adapters' Linen layers wrap their math: one mechanism.
"""

import contextlib
import contextvars
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar, overload

import jax
import jax.tree_util as jtu
import numpy as np
from jax.core import Tracer

from ._sharding._policy import explicit_mesh_policy
from ._sharding._rules import get_logical_axis_rules
from ._variables import Variable, recorders

__all__ = ["disable_trace_once", "trace_once"]

P = ParamSpec("P")
R = TypeVar("R")

_MAX_ENTRIES = 2048
_DYNAMIC = object()  # placeholder of an array leaf in a cache key
_ENV = "PYTREEMOD_TRACE_ONCE"
_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "pytreemod_trace_once", default=os.environ.get(_ENV, "1").strip().lower() not in ("0", "false")
)


@contextlib.contextmanager
def disable_trace_once(disable: bool = True) -> Iterator[None]:
    """Inside this context, functions wrapped by ``pm.trace_once`` (and so ``pm.nn``'s
    layers) are traced on every call, as plain Python: jaxprs show every equation
    inline, without the nested ``jit`` equations of reused traces, and compile to the
    program Python writes out inline (a forward pass compiles to the same program either
    way; a backward pass may sum a layer's input cotangent in another order). jit caches
    traces without keying them on this setting: wrap a function's first trace.

    ``disable=False`` turns the reuse back on inside an outer ``disable_trace_once()``.
    The environment variable ``PYTREEMOD_TRACE_ONCE=0`` turns it off for the whole
    process (read when pytreemod is imported).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> layer = pm.nn.Linear(3, 3, key=jax.random.key(0))
    >>> with pm.disable_trace_once():
    ...     jaxpr = jax.make_jaxpr(lambda x: layer(layer(x)))(jnp.ones(3))
    >>> "jit" in {e.primitive.name for e in jaxpr.eqns}
    False
    """
    token = _enabled.set(not disable)
    try:
        yield
    finally:
        _enabled.reset(token)


def _static_key(value: Any) -> Any:
    """A key equal for equal values of the same type (``1``, ``1.0`` and ``True`` differ);
    raises TypeError for unhashable values."""
    hash(value)
    return (type(value), value)


_entries: dict[Any, Any] = {}  # key -> jitted replay, or None: call the function as is


@overload
def trace_once(fn: Callable[P, R], /, *, inline: bool = False) -> Callable[P, R]: ...
@overload
def trace_once(
    fn: None = None, /, *, inline: bool = False
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def trace_once(fn: Callable[P, R] | None = None, /, *, inline: bool = False) -> Any:
    """Wrap the pure array function ``fn`` so that, under a trace, each distinct call
    configuration is traced once and reused.

    A call is cached when at least one array in its arguments is a tracer. The arguments
    are flattened as PyTrees (a Module, such as ``self`` when ``fn`` is a layer's
    ``__call__``, included): array leaves become the inputs of a nested ``jax.jit``; the
    tree structure (a Module's static fields with it) and every other leaf are the cache
    key, so non-array leaves must be hashable. Calls with unhashable non-array leaves,
    calls on concrete arrays only, calls inside ``pm.disable_trace_once()``, calls whose
    arguments hold a Variable that an active ``pm.apply`` may write (or has written), and
    calls whose cached trace fails run ``fn`` directly, so errors are raised and state is
    written exactly as without the cache.

    ``fn`` must be pure (no side effects, nothing read from the caller's context that is
    not an argument): its trace is replayed for later calls with equal non-array leaves
    and array shapes/dtypes. JAX's own context (the mesh, ``enable_x64``...) and
    pytreemod's logical axis rules are part of what a replay is keyed on.

    ``inline=True`` (``@pm.trace_once(inline=True)``): the reused trace is inlined into
    the caller's jaxpr (an inline ``jax.jit``, as ``jax.numpy``'s own functions are), so
    the jaxpr, the lowered program and the numbers are those of ``fn`` traced directly,
    while the Python trace of ``fn`` and its transformed versions (linearized under
    ``grad``, batched under ``vmap``) still come from JAX's caches. Only calls under a
    staging trace (``jit``, ``make_jaxpr``, a ``scan`` body...) are cached then; eager
    calls and eager transforms of concrete arrays (``jax.grad`` outside ``jit``) run
    ``fn`` as written, primitive by primitive (NNX's layers: their numbers are then
    Flax's, bit for bit).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> scale = pm.trace_once(lambda x, factor: x * factor)
    >>> jax.make_jaxpr(lambda x: scale(scale(x, 2.0), 2.0))(jnp.ones(3)).eqns[0].primitive
    jit
    """

    def wrap(f: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(f)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            return _call(f, args, kwargs, inline)

        return wrapper

    return wrap if fn is None else wrap(fn)


def _call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], inline: bool
) -> Any:
    leaves, treedef = jtu.tree_flatten((args, kwargs))
    dynamic: list[Any] = []
    traced = False
    # Layers resolve names by the rules and shard on Explicit meshes by the policy.
    parts: list[Any] = [fn, inline, treedef, get_logical_axis_rules(), explicit_mesh_policy()]
    key: tuple[Any, ...] = ()
    try:
        for leaf in leaves:
            if isinstance(leaf, jax.Array):
                dynamic.append(leaf)
                traced = traced or (_staged(leaf) if inline else isinstance(leaf, Tracer))
                parts.append(_DYNAMIC)
            else:
                parts.append(_static_key(leaf))
        key = tuple(parts)
        cached = traced and _enabled.get() and not (recorders.get() and _may_write(args, kwargs))
        jitted = _entries.get(key, _DYNAMIC) if cached else None
    except TypeError:  # an unhashable leaf: no cache for this call
        jitted = None
    if jitted is None:  # eager, uncacheable, switched off, or its trace failed before
        return fn(*args, **kwargs)
    if jitted is _DYNAMIC:
        jitted = jax.jit(_replay(fn, leaves, treedef), inline=inline)
        _store(key, jitted)
    try:
        return jitted(*dynamic)
    except Exception:
        out = fn(*args, **kwargs)  # a real error raises here, from the caller's frame
        _store(key, None)
        return out


_CONCRETE = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


def _staged(x: Any) -> bool:
    """Whether the array ``x`` is a tracer of a staging trace (``jit``, ``make_jaxpr``, a
    ``scan`` body...), perhaps under transforms: the values under JVP and batching
    tracers are followed down to a staged value or a concrete array."""
    if not isinstance(x, Tracer):
        return False
    while isinstance(x, Tracer):
        primal = getattr(x, "primal", None)
        x = getattr(x, "val", None) if primal is None else primal
    return not isinstance(x, _CONCRETE)


def _may_write(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the arguments hold a Variable that an active ``pm.apply`` may write or has
    written: its writes and reads go through the recorders, keyed by the Variable objects
    of the caller's tree, which a replay rebuilds."""
    active = recorders.get()
    for leaf in jtu.tree_leaves((args, kwargs), is_leaf=_is_variable):
        if not isinstance(leaf, Variable):
            continue
        for recorder in active:
            if id(leaf) in recorder.writes:
                return True
            entry = recorder.paths.get(id(leaf))
            if entry is not None and recorder.mutable(*entry):
                return True
    return False


def _is_variable(x: Any) -> bool:
    return isinstance(x, Variable)


def _replay(fn: Callable[..., Any], leaves: list[Any], treedef: Any) -> Callable[..., Any]:
    """``fn`` with the non-array leaves of this call fixed and the arrays as inputs."""
    template = [None if isinstance(leaf, jax.Array) else leaf for leaf in leaves]
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.Array)]

    def replay(*arrays: Any) -> Any:
        filled = list(template)
        for slot, value in zip(slots, arrays):
            filled[slot] = value
        args, kwargs = jtu.tree_unflatten(treedef, filled)
        return fn(*args, **kwargs)

    # The nested jit's name in jaxprs: `Conv.__call__`, not `replay`.
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "trace_once")
    replay.__name__ = replay.__qualname__ = name
    return replay


def _store(key: Any, value: Callable[..., Any] | None) -> None:
    if len(_entries) >= _MAX_ENTRIES:  # a bound on memory; configurations are few in practice
        _entries.clear()
    _entries[key] = value
