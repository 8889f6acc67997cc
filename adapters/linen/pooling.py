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
    """Reduce every window of ``inputs`` with a binary function (``lax.reduce_window``).

    The generic pooling behind ``max_pool``, ``avg_pool`` and ``min_pool``: each output
    entry folds ``reduce_fn`` over one window, starting from ``init``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)  # (batch, height, width, features)
    >>> nn.pool(x, 0.0, jax.lax.add, (2, 2), (2, 2), "VALID")[..., 0].tolist()
    [[[10.0, 18.0], [42.0, 50.0]]]

    Args:
        inputs: an array ``(*batch, *spatial, features)`` with one spatial axis per entry
            of ``window_shape``.
        init: the reduction's starting value (its identity: ``0`` for a sum, ``-inf`` for a
            maximum).
        reduce_fn: the binary reduction, e.g. ``jax.lax.add`` or ``jax.lax.max``.
        window_shape: the window size along each spatial axis.
        strides: the step between windows along each spatial axis (``None``: 1).
        padding: ``'VALID'``, ``'SAME'`` or one ``(low, high)`` pair per spatial axis.

    Returns:
        An array ``(*batch, *out_spatial, features)``.
    """
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
    """Average pooling: the mean of each window.

    >>> import jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)  # (batch, height, width, features)
    >>> nn.avg_pool(x, (2, 2), strides=(2, 2))[..., 0].tolist()
    [[[2.5, 4.5], [10.5, 12.5]]]

    Args:
        inputs: an array ``(*batch, *spatial, features)`` with one spatial axis per
            entry of ``window_shape`` (any number of batch axes, none included).
        window_shape: the window size along each spatial axis.
        strides: the step between windows along each spatial axis (default ``None``:
            1, overlapping windows).
        padding: ``'VALID'`` (the default: only whole windows), ``'SAME'`` (pad so the
            output size is ``ceil(size / stride)``), or one ``(low, high)`` pair per
            spatial axis.
        count_include_pad: divide by the full window size, padding included (default
            ``True``); ``False`` divides by the number of real entries in the window.

    Returns:
        An array ``(*batch, *out_spatial, features)``.
    """
    x = jnp.asarray(inputs)
    return _traced.avg_pool(x, tuple(window_shape), strides or None, padding, count_include_pad)


def max_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Max pooling: the maximum of each window.

    >>> import jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)  # (batch, height, width, features)
    >>> nn.max_pool(x, (2, 2), strides=(2, 2))[..., 0].tolist()
    [[[5.0, 7.0], [13.0, 15.0]]]

    Args:
        inputs: an array ``(*batch, *spatial, features)`` with one spatial axis per
            entry of ``window_shape`` (any number of batch axes, none included).
        window_shape: the window size along each spatial axis.
        strides: the step between windows along each spatial axis (default ``None``:
            1, overlapping windows).
        padding: ``'VALID'`` (the default: only whole windows), ``'SAME'`` (pad so the
            output size is ``ceil(size / stride)``), or one ``(low, high)`` pair per
            spatial axis.

    Returns:
        An array ``(*batch, *out_spatial, features)``.
    """
    return _traced.max_pool(jnp.asarray(inputs), tuple(window_shape), strides or None, padding)


def min_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Min pooling: the minimum of each window.

    Args:
        inputs: an array ``(*batch, *spatial, features)`` with one spatial axis per
            entry of ``window_shape`` (any number of batch axes, none included).
        window_shape: the window size along each spatial axis.
        strides: the step between windows along each spatial axis (default ``None``:
            1, overlapping windows).
        padding: ``'VALID'`` (the default: only whole windows), ``'SAME'`` (pad so the
            output size is ``ceil(size / stride)``), or one ``(low, high)`` pair per
            spatial axis.

    Returns:
        An array ``(*batch, *out_spatial, features)``.
    """
    return F.min_pool(jnp.asarray(inputs), tuple(window_shape), strides or None, padding)
