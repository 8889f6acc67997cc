"""Pooling: ``avg_pool``, ``max_pool``, ``min_pool``, ``pool`` (no variables).

The window logic is ``pytreemod.nn.functional.pool``. The reductions pass their initial
value as a Python scalar so that ``lax.reduce_window`` recognises the monoid and stays
differentiable under ``jit`` (``pytreemod.nn.functional.max_pool`` currently passes an
array and fails to linearize under ``jax.jit(jax.grad(...))``).
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pytreemod.nn.functional import pool as pool

Array = jax.Array
Padding = str | Sequence[tuple[int, int]]


def max_pool(
    inputs: Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> Array:
    """Maximum over windows of ``(*batch, *window dims, features)`` inputs."""
    init = (
        -np.inf if jnp.issubdtype(inputs.dtype, jnp.inexact) else int(jnp.iinfo(inputs.dtype).min)
    )
    return pool(inputs, init, lax.max, window_shape, strides, padding, op="max_pool")


def min_pool(
    inputs: Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> Array:
    """Minimum over windows."""
    init = np.inf if jnp.issubdtype(inputs.dtype, jnp.inexact) else int(jnp.iinfo(inputs.dtype).max)
    return pool(inputs, init, lax.min, window_shape, strides, padding, op="min_pool")


def avg_pool(
    inputs: Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
    count_include_pad: bool = True,
) -> Array:
    """Average over windows (``count_include_pad=False`` divides by real elements only)."""
    y = pool(inputs, 0.0, lax.add, window_shape, strides, padding, op="avg_pool")
    if count_include_pad or padding == "VALID":
        return y / np.prod(window_shape).astype(inputs.dtype)
    ones = jnp.ones((1, *inputs.shape[-len(window_shape) - 1 : -1], 1), inputs.dtype)
    counts = pool(ones, 0.0, lax.add, window_shape, strides, padding, op="avg_pool")
    counts = jnp.reshape(counts, (1,) * (y.ndim - counts.ndim + 1) + counts.shape[1:])
    return y / counts
