"""Pooling (``flax.linen.pooling``): ``pool``, ``avg_pool``, ``max_pool``, ``min_pool``.

Inputs are ``(*batch, *window dims, features)``, with any number of batch axes (none
too). The window logic is ``pytreemod.nn.functional.pool``.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F

from . import _traced

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
    pair per window dimension, ``strides`` default to 1."""
    return F.pool(
        jnp.asarray(inputs), init, reduce_fn, tuple(window_shape), strides or None, padding
    )


def avg_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
    count_include_pad: bool = True,
) -> jax.Array:
    """Mean over each window; ``count_include_pad=False`` divides by the number of real
    (unpadded) entries."""
    x = jnp.asarray(inputs)
    return _traced.avg_pool(x, tuple(window_shape), strides or None, padding, count_include_pad)


def max_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Maximum over each window."""
    return _traced.max_pool(jnp.asarray(inputs), tuple(window_shape), strides or None, padding)


def min_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Minimum over each window."""
    return F.min_pool(jnp.asarray(inputs), tuple(window_shape), strides or None, padding)
