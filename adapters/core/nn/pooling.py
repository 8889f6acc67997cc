"""Pooling: ``avg_pool``, ``max_pool``, ``min_pool``, ``pool`` (no variables)."""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array


def pool(
    inputs: Array,
    init: Any,
    reduce_fn: Callable[[Any, Any], Any],
    window_shape: Sequence[int],
    strides: Sequence[int] | None,
    padding: str | Sequence[tuple[int, int]],
) -> Array:
    """Reduce windows of ``(batch, spatial..., features)`` inputs with ``reduce_fn``.

    A batch axis may be omitted (an input with one spatial axis fewer).
    """
    strides = tuple(strides) if strides is not None else (1,) * len(window_shape)
    if len(strides) != len(window_shape):
        raise ValueError(
            f"pool: strides {strides} and window_shape {tuple(window_shape)} differ in length."
        )
    batched = inputs.ndim == len(window_shape) + 2
    if not batched:
        inputs = inputs[None]
    dims = (1, *window_shape, 1)
    steps = (1, *strides, 1)
    if not isinstance(padding, str):
        padding = ((0, 0), *(tuple(p) for p in padding), (0, 0))
    y = lax.reduce_window(inputs, init, reduce_fn, dims, steps, padding)
    return y if batched else y[0]


def avg_pool(
    inputs: Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
    count_include_pad: bool = True,
) -> Array:
    """Average over windows (``count_include_pad=False`` divides by real elements only)."""
    zero = jnp.zeros((), inputs.dtype)
    y = pool(inputs, zero, lax.add, window_shape, strides, padding)
    if count_include_pad or padding == "VALID":
        return y / np.prod(window_shape).astype(inputs.dtype)
    ones = jnp.ones((*inputs.shape[:-1], 1), inputs.dtype)
    return y / pool(ones, zero, lax.add, window_shape, strides, padding)


def max_pool(
    inputs: Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
) -> Array:
    """Maximum over windows."""
    return pool(inputs, -jnp.inf, lax.max, window_shape, strides, padding)


def min_pool(
    inputs: Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
) -> Array:
    """Minimum over windows."""
    return pool(inputs, jnp.inf, lax.min, window_shape, strides, padding)
