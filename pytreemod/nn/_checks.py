"""``error_if``: a runtime check that still raises under ``jit``, ``scan`` and ``vmap``.

A Python ``if`` on a traced value cannot run inside a compiled program. ``error_if`` puts
the check into the program instead: a ``lax.cond`` that, only when the predicate is true,
calls back into Python and raises. The value ``x`` is threaded through the callback, so
everything computed from the returned value waits for the check (and the check is kept
as long as that value is used). When the predicate is concrete (eager code), it raises at
once with ``error_cls``.

Under ``jit`` the error reaches the caller as the exception JAX raises for a failed host
callback (usually ``jax.errors.JaxRuntimeError``) whose text ends with
``ErrorClass: msg``: a Python exception class cannot cross a compiled program.

Limitation: in a program partitioned over several devices (sharded inputs), XLA runs the
callback on one device; when the check fails there, the other devices wait for it and
XLA ends the process after printing the message. The check costs a few scalar
all-reduces per call in such programs, nothing else.
"""

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap

from .._errors import PytreemodError

__all__ = ["error_if"]

_T = TypeVar("_T")


def error_if(
    x: _T,
    pred: Any,
    msg: str,
    error_cls: type[Exception] = PytreemodError,
    **values: Any,
) -> _T:
    """``x`` unchanged, after raising ``error_cls(msg)`` if any element of ``pred`` is true.

    ``x`` is a PyTree holding at least one array; ``pred`` a bool or a boolean array
    (under ``vmap``, the check fails if it fails for any batch element). ``msg`` may hold
    ``{name}`` fields filled from the keyword ``values`` (arrays or numbers) when it is
    raised, so it can show runtime values. Use the returned value: if it is unused, the
    compiler may drop the check with it.

    >>> import jax, jax.numpy as jnp
    >>> f = jax.jit(lambda i: error_if(i, i > 3, "i={i} is past 3", ValueError, i=i))
    >>> int(f(jnp.array(2)))
    2
    """
    try:
        concrete = bool(np.any(np.asarray(pred)))
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        concrete = None
    except TypeError:
        concrete = None
    if concrete is not None:
        if concrete:
            raise error_cls(_format(msg, values))
        return x
    leaves, treedef = jax.tree.flatten(x)
    if not leaves:
        raise ValueError("error_if needs an array in `x` to attach the check to.")
    arrays = tuple(jnp.asarray(leaf) for leaf in leaves)
    names = tuple(values)
    shown = tuple(jnp.asarray(values[n]) for n in names)
    checked = _checked(
        (arrays, shown), _any_in_batch(jnp.asarray(pred, bool)), _raiser(msg, error_cls, names)
    )
    return jax.tree.unflatten(treedef, list(checked[0]))


@custom_vmap
def _any_in_batch(pred: jax.Array) -> jax.Array:
    """``any(pred)``, and under ``vmap`` the any over the whole batch (an unbatched bool),
    so the ``lax.cond`` stays a branch: the callback runs only when a check fails."""
    return jnp.any(pred)


@_any_in_batch.def_vmap
def _any_in_batch_vmap(
    axis_size: int, in_batched: list[bool], pred: jax.Array
) -> tuple[jax.Array, bool]:
    del axis_size, in_batched
    return _any_in_batch(pred), False


def _format(msg: str, values: dict[str, Any]) -> str:
    if not values:
        return msg
    return msg.format(**{k: np.asarray(v).tolist() for k, v in values.items()})


def _raiser(msg: str, error_cls: type[Exception], names: tuple[str, ...]) -> Callable[..., Any]:
    def check(pred: Any, payload: Any) -> Any:
        # Under vmap the batch elements that passed come here too: raise on any failure.
        if np.any(pred):
            raise error_cls(_format(msg, dict(zip(names, payload[1], strict=True))))
        return payload

    return check


@partial(jax.custom_jvp, nondiff_argnums=(2,))
def _checked(payload: Any, pred: Any, check: Callable[..., Any]) -> Any:
    def fail(values: Any) -> Any:
        shapes = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), values)
        return jax.pure_callback(check, shapes, pred, values, vmap_method="broadcast_all")

    return lax.cond(pred, fail, lambda values: values, payload)


@_checked.defjvp
def _checked_jvp(
    check: Callable[..., Any], primals: tuple[Any, ...], tangents: tuple[Any, ...]
) -> tuple[Any, Any]:
    payload, pred = primals
    return _checked(payload, pred, check), tangents[0]
