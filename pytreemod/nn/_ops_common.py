"""Helpers shared by the functional ops: dtype promotion, axis and tuple canonicalisation."""

import contextlib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayerConfigError
from .._meta import unboxed
from .._where import at_layer


def promote_dtype(*arrays: Any, dtype: Any = None, inexact: bool = True) -> tuple[Any, ...]:
    """Cast ``arrays`` (``None`` passes through) to ``dtype``, or to their common dtype.

    As Flax's ``promote_dtype``: with ``dtype=None`` the arrays are promoted to the type
    JAX's standard rules give them together (made inexact when ``inexact``). The cast is
    explicit, so it works under ``jax_numpy_dtype_promotion="strict"``; an array that
    already has the dtype is returned as it is (no operation is traced).

    >>> import jax.numpy as jnp
    >>> x, w = promote_dtype(jnp.ones(2, jnp.bfloat16), jnp.ones(2, jnp.float32))
    >>> x.dtype, w.dtype
    (dtype('float32'), dtype('float32'))
    """
    present = [a for a in arrays if a is not None]
    if dtype is None:
        if shared_inexact_dtype(present) is not None:
            return arrays  # nothing to promote or cast
        with jax.numpy_dtype_promotion("standard"):
            dtype = jnp.result_type(*present)
        if inexact and not jnp.issubdtype(dtype, jnp.inexact):
            dtype = at_least_float32(dtype)
    return tuple(
        None if a is None else a if getattr(a, "dtype", None) == dtype else jnp.asarray(a, dtype)
        for a in arrays
    )


def shared_inexact_dtype(arrays: Sequence[Any]) -> Any:
    """The dtype of ``arrays`` when they are JAX arrays (whose dtypes are canonical) that
    all have one inexact dtype, which is then what JAX's promotion gives them; else
    ``None``. A shortcut past ``jnp.result_type`` and its promotion context."""
    if not arrays or not all(isinstance(a, jax.Array) for a in arrays):
        return None
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    return dtype if jnp.issubdtype(dtype, jnp.inexact) else None


def as_array(a: Any) -> jax.Array:
    """``jnp.asarray(a)``: a JAX array (a tracer included) as it is, without
    ``jnp.asarray``'s Python cost (about 10 µs per call in a trace); anything else
    converted."""
    return a if isinstance(a, jax.Array) else jnp.asarray(a)


def at_least_float32(dtype: Any) -> Any:
    """``dtype`` promoted with float32 by JAX's standard rules (``bf16 -> f32``, ``f64`` and
    complex kept, integers -> f32), whatever the promotion mode."""
    try:
        return _AT_LEAST_FLOAT32[dtype]
    except (KeyError, TypeError):  # not seen yet, or not hashable (then not remembered)
        pass
    with jax.numpy_dtype_promotion("standard"):
        promoted = jnp.promote_types(dtype, jnp.float32)
    with contextlib.suppress(TypeError):
        _AT_LEAST_FLOAT32[dtype] = promoted
    return promoted


# ``at_least_float32``'s answers: a function of the dtype alone (the mode is fixed above).
_AT_LEAST_FLOAT32: dict[Any, Any] = {}


def canonicalize_axes(ndim: int, axes: int | Iterable[int]) -> tuple[int, ...]:
    """Sorted, de-duplicated, non-negative axes."""
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted({a % ndim if -ndim <= a < ndim else _bad_axis(a, ndim) for a in axes}))


def _bad_axis(axis: int, ndim: int) -> int:
    message = f"axis {axis} is out of range for an input with {ndim} axes."
    raise LayerConfigError(at_layer(message, sys._getframe(1)))


def as_tuple(
    value: int | Sequence[int] | None, n: int, name: str, owner: str = ""
) -> tuple[int, ...]:
    """Broadcast an int (or ``None`` meaning 1) to ``n`` entries; check a sequence's length
    and that every entry is a positive int (strides and dilations)."""

    if value is None:
        return (1,) * n
    if type(value) is int and value >= 1:  # the usual case, in one test
        return (value,) * n
    values = (value,) * n if isinstance(value, (int, np.integer)) else tuple(value)
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in values):
        raise LayerConfigError(
            f"{owner + ': ' if owner else ''}{name}={value!r} must be a positive int or hold "
            "positive ints."
        )
    out = tuple(int(v) for v in values)
    if len(out) != n:
        raise LayerConfigError(
            f"{owner + ': ' if owner else ''}{name}={out!r} has {len(out)} entries but the "
            f"convolution has {n} spatial dimensions; give one int per spatial dimension (or "
            "a single int)."
        )
    return out


def var_value(variable: Any) -> Any:
    """The value of a Variable (or a bare array), unboxed; ``None`` stays ``None``."""
    if variable is None:
        return None
    return unboxed(getattr(variable, "value", variable))
