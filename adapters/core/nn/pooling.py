"""Pooling: ``avg_pool``, ``max_pool``, ``min_pool``, ``pool`` (no variables).

Inputs are ``(*batch, *window dims, features)``, with any number of batch axes (none
too). Each function is ``pytreemod.nn.functional``'s, given Flax's argument forms
(NumPy or JAX arrays, window and strides as any sequence, ``strides=None`` or empty for
ones); the window logic, the reductions and their derivatives live there only.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F

Padding = str | Sequence[tuple[int, int]]

__all__ = ["avg_pool", "max_pool", "min_pool", "pool"]


def pool(
    inputs: Any,
    init: Any,
    reduce_fn: Callable[[Any, Any], Any],
    window_shape: Sequence[int],
    strides: Sequence[int] | None,
    padding: Padding,
) -> jax.Array:
    """Reduce every window of ``inputs`` with ``reduce_fn`` from ``init``
    (``lax.reduce_window``); ``padding`` is ``'SAME'``, ``'VALID'`` or one ``(low, high)``
    pair per window dimension."""
    return F.pool(
        jnp.asarray(inputs), init, reduce_fn, tuple(window_shape), strides or None, padding
    )


def max_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Maximum over each window."""
    return F.max_pool(jnp.asarray(inputs), tuple(window_shape), strides or None, padding)


def min_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Minimum over each window."""
    return F.min_pool(jnp.asarray(inputs), tuple(window_shape), strides or None, padding)


def avg_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
    count_include_pad: bool = True,
) -> jax.Array:
    """Mean over each window; ``count_include_pad=False`` divides by the number of real
    (unpadded) entries. Integer inputs give JAX's default float, as in Flax."""
    x = jnp.asarray(inputs)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(float))
    return F.avg_pool(x, tuple(window_shape), strides or None, padding, count_include_pad)
