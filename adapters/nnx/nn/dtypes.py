"""Dtype inference and promotion for NNX layers (``flax.nnx.nn.dtypes``).

The rules are Linen's (``adapters.linen.dtypes``: one implementation); NNX's
``promote_dtype`` differs only in its calling convention: it takes one tuple of arrays
and returns a tuple, where Linen's is variadic.
"""

from typing import Any, TypeVar

from adapters.linen import dtypes as _linen_dtypes
from adapters.linen.dtypes import canonicalize_dtype as canonicalize_dtype
from adapters.typing import Dtype as Dtype

__all__ = ["canonicalize_dtype", "promote_dtype"]

T = TypeVar("T", bound=tuple[Any, ...])


def promote_dtype(args: T, /, *, dtype: Any = None, inexact: bool = True) -> T:
    """Cast every array of the tuple ``args`` to one dtype; ``None`` entries stay ``None``.

    The dtype is ``dtype`` when given, else the arrays' common result type (promoted with
    float32 when ``inexact`` and the result is not a float or complex type); see
    ``canonicalize_dtype``.

    >>> import jax.numpy as jnp
    >>> x, w, b = promote_dtype((jnp.ones(2, jnp.bfloat16), jnp.ones(2), None))
    >>> x.dtype, w.dtype, b
    (dtype('float32'), dtype('float32'), None)

    Args:
        args: a tuple of arrays (or array-likes, or ``None``).
        dtype: the dtype to cast to (default ``None``: inferred from ``args``).
        inexact: require a float or complex dtype (default ``True``); an explicit
            integer ``dtype`` is then a ``ValueError``.

    Returns:
        A tuple of the same length as ``args``.
    """
    return tuple(_linen_dtypes.promote_dtype(*args, dtype=dtype, inexact=inexact))  # type: ignore[return-value]
