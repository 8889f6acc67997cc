"""Dtype inference and promotion for Linen layers (``flax.linen.dtypes``).

Layers take ``dtype`` (the computation dtype; ``None`` infers it from the inputs and
parameters) and ``param_dtype``. ``promote_dtype`` is what every layer calls before its
math; it follows JAX's current promotion mode, as Flax's does.
"""

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["canonicalize_dtype", "promote_dtype"]


def canonicalize_dtype(*args: Any, dtype: Any = None, inexact: bool = True) -> Any:
    """The dtype ``args`` compute in: ``dtype`` if given, else their common result type.

    ``None`` entries of ``args`` are ignored. With ``inexact=True`` an inferred integer or
    boolean type is promoted with float32, and an explicit non-inexact ``dtype`` is a
    ``ValueError``.

    >>> import jax.numpy as jnp
    >>> canonicalize_dtype(jnp.ones(2, jnp.int32))
    dtype('float32')
    """
    if dtype is None:
        present = [a if isinstance(a, jax.Array) else jnp.asarray(a) for a in args if a is not None]
        dtype = jnp.result_type(*present)
        if inexact and not jnp.issubdtype(dtype, jnp.inexact):
            dtype = jnp.promote_types(jnp.float32, dtype)
    if inexact and not jnp.issubdtype(dtype, jnp.inexact):
        raise ValueError(f"Dtype must be inexact: {dtype}")
    return dtype


def promote_dtype(*args: Any, dtype: Any = None, inexact: bool = True) -> list[Any]:
    """``args`` as arrays of one dtype (``canonicalize_dtype``'s); ``None`` stays ``None``.

    >>> import jax.numpy as jnp
    >>> [a.dtype for a in promote_dtype(jnp.ones(2), jnp.ones(2), dtype=jnp.float16)]
    [dtype('float16'), dtype('float16')]
    """
    target = canonicalize_dtype(*args, dtype=dtype, inexact=inexact)
    return [None if a is None else _cast(a, target) for a in args]


def _cast(a: Any, dtype: Any) -> Any:
    """``jnp.asarray(a, dtype)``, without its Python cost when ``a`` is already a strong
    array of ``dtype`` (which ``asarray`` returns unchanged)."""
    if isinstance(a, jax.Array) and a.dtype == dtype and not a.weak_type:
        return a
    return jnp.asarray(a, dtype)
