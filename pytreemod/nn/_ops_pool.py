"""Pooling with ``lax.reduce_window``, channels last (Flax's ``pooling`` functions)."""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Float, Shaped

from .._errors import LayerConfigError
from .._shapecheck import AnyArray, axes_text, checked, fail, python_numbers, summary
from .._sharding._ops import constrain

PoolPadding = str | Sequence[tuple[int, int]]


@python_numbers
def pool(
    x: Any,
    init: Any,
    reduce_fn: Callable[[Any, Any], Any],
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: PoolPadding = "VALID",
    *,
    op: str = "pool",
    out_sharding: Any = None,
) -> jax.Array:
    """Reduce each window of ``x`` (``(*batch, *window_dims, features)``) with ``reduce_fn``
    starting from ``init``. ``padding`` is ``"SAME"``, ``"VALID"`` or one ``(low, high)``
    pair per window dimension. ``out_sharding`` (a ``PartitionSpec`` or ``NamedSharding``)
    reshards the result (default: what ``reduce_window`` gives, ``x``'s sharding)."""
    window = tuple(window_shape)
    n = len(window)
    if any(isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1 for w in window):
        raise LayerConfigError(f"{op}: window_shape {window} must hold positive ints.")
    if x.ndim < n + 1:
        fail(
            op,
            f"x {summary(x)} has {axes_text(x.ndim)} but a {n}-D window {window} needs at least "
            f"{n + 1} (*batch, {n} window axes, features)",
        )
    strides_ = tuple(strides) if strides is not None else (1,) * n
    if any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in strides_):
        raise LayerConfigError(f"{op}: strides {strides_} must hold positive ints.")
    if len(strides_) != n:
        raise LayerConfigError(
            f"{op}: strides {strides_} and window_shape {window} have different lengths."
        )
    num_batch = x.ndim - n - 1
    dims = (1,) * num_batch + window + (1,)
    steps = (1,) * num_batch + strides_ + (1,)
    if isinstance(padding, str) and padding.upper() not in ("SAME", "VALID", "SAME_LOWER"):
        raise LayerConfigError(
            f"{op}: padding {padding!r} must be 'SAME', 'VALID', 'SAME_LOWER' or {n} "
            "(low, high) pairs."
        )
    if not isinstance(padding, str):
        pads = tuple(tuple(p) for p in padding)
        if len(pads) != n or any(len(p) != 2 for p in pads):
            raise LayerConfigError(
                f"{op}: padding {padding!r} must be 'SAME', 'VALID' or {n} (low, high) pairs."
            )
        padding = ((0, 0),) * num_batch + pads + ((0, 0),)  # type: ignore[assignment]
    y = lax.reduce_window(x, init, reduce_fn, dims, steps, padding)  # type: ignore[arg-type]
    return constrain(y, out_sharding, x)


@checked
def max_pool(
    x: Shaped[AnyArray, "*batch_and_window features"],
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: PoolPadding = "VALID",
    *,
    out_sharding: Any = None,
) -> Shaped[jax.Array, "*batch_and_window_out features"]:
    """Maximum over each window (Flax ``max_pool``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.max_pool(jnp.arange(8.0).reshape(1, 4, 2, 1), (2, 2)).ravel().tolist()
    [3.0, 5.0, 7.0]
    """
    # A concrete NumPy scalar, not a jax array: lax.reduce_window then uses its
    # differentiable max/min/add reductions (a traced init value is not differentiable).
    init = -np.inf if jnp.issubdtype(x.dtype, jnp.inexact) else np.iinfo(x.dtype).min
    return pool(
        x,
        np.array(init, x.dtype),
        lax.max,
        window_shape,
        strides,
        padding,
        op="max_pool",
        out_sharding=out_sharding,
    )


@checked
def min_pool(
    x: Shaped[AnyArray, "*batch_and_window features"],
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: PoolPadding = "VALID",
    *,
    out_sharding: Any = None,
) -> Shaped[jax.Array, "*batch_and_window_out features"]:
    """Minimum over each window (Flax ``min_pool``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.min_pool(jnp.arange(4.0).reshape(1, 4, 1), (2,), strides=(2,)).ravel().tolist()
    [0.0, 2.0]
    """
    init = np.inf if jnp.issubdtype(x.dtype, jnp.inexact) else np.iinfo(x.dtype).max
    return pool(
        x,
        np.array(init, x.dtype),
        lax.min,
        window_shape,
        strides,
        padding,
        op="min_pool",
        out_sharding=out_sharding,
    )


@checked
def avg_pool(
    x: Float[AnyArray, "*batch_and_window features"],
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: PoolPadding = "VALID",
    count_include_pad: bool = True,
    *,
    out_sharding: Any = None,
) -> Float[jax.Array, "*batch_and_window_out features"]:
    """Mean over each window (Flax ``avg_pool``); with ``count_include_pad=False`` padded
    positions are left out of the count. ``out_sharding`` reshards the result.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.avg_pool(jnp.arange(4.0).reshape(1, 4, 1), (2,), strides=(2,)).ravel().tolist()
    [0.5, 2.5]
    """
    zero = np.array(0, x.dtype)
    y = pool(x, zero, lax.add, window_shape, strides, padding, op="avg_pool")
    if count_include_pad:
        return constrain(y / np.prod(window_shape).astype(x.dtype), out_sharding, x)
    ones = jnp.ones((1, *x.shape[-len(window_shape) - 1 : -1], 1), x.dtype)
    counts = pool(ones, zero, lax.add, window_shape, strides, padding, op="avg_pool")
    counts = jnp.reshape(counts, (1,) * (y.ndim - counts.ndim + 1) + counts.shape[1:])
    return constrain(y / counts, out_sharding, x)
