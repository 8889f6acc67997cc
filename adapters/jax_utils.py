"""JAX helpers of ``flax.jax_utils``: ``scan_in_dim`` (a scan along any axes),
``replicate``/``unreplicate`` (copies over local devices)."""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["replicate", "scan_in_dim", "unreplicate"]


def replicate(tree: Any, devices: Sequence[Any] | None = None) -> Any:
    """Every leaf stacked once per device (default: the local devices)."""
    devices = list(devices) if devices is not None else jax.local_devices()
    mesh = jax.sharding.Mesh(np.array(devices), ("devices",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("devices"))

    def copies(x: Any) -> Any:
        x = jnp.asarray(x)
        return jax.device_put(jnp.broadcast_to(x, (len(devices), *x.shape)), sharding)

    return jax.tree_util.tree_map(copies, tree)


def unreplicate(tree: Any) -> Any:
    """The first device's copy of every leaf of a replicated tree."""
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def _scan_nested(
    body: Callable[[Any, Any], Any], init: Any, xs: Any, n: int, unroll: tuple[int, ...]
) -> Any:
    """``lax.scan`` over the first ``n`` axes of ``xs`` (outermost first)."""
    if n == 1:
        return lax.scan(body, init, xs, unroll=unroll[0])
    return lax.scan(
        lambda c, x: _scan_nested(body, c, x, n - 1, unroll[1:]), init, xs, unroll=unroll[0]
    )


def _leading(axes: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return axes + tuple(int(a) for a in np.delete(np.arange(ndim), axes))


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


def scan_in_dim(
    body_fn: Callable[[Any, Any], tuple[Any, Any]],
    init: Any,
    xs: Any,
    axis: int | Iterable[int] = (0,),
    unroll: int | Iterable[int] = (1,),
    keepdims: bool = False,
) -> tuple[Any, Any]:
    """``lax.scan`` of ``body_fn(carry, x) -> (carry, y)`` along ``axis`` of every leaf of
    ``xs`` (several axes scan as nested loops, the first outermost). With ``keepdims`` the
    body sees (and returns) slices with the scanned axes kept at size 1. ``unroll`` is
    per axis, padded with ones on the left (the innermost loop unrolls first).

    >>> import jax.numpy as jnp
    >>> total, ys = scan_in_dim(lambda c, x: (c + x.sum(), 2 * x), 0.0, jnp.ones((2, 3)), axis=1)
    >>> float(total), ys.shape
    (6.0, (2, 3))
    """
    axes = tuple(axis) if isinstance(axis, Iterable) else (axis,)
    unrolls = tuple(unroll) if isinstance(unroll, Iterable) else (unroll,)
    unrolls = (1,) * (len(axes) - len(unrolls)) + unrolls

    def to_front(x: Any) -> Any:
        return x.transpose(_leading(axes, x.ndim))

    def to_place(x: Any) -> Any:
        return x.transpose(_inverse(_leading(axes, x.ndim)))

    def drop_front(x: Any) -> Any:
        x = to_front(x)
        return x.reshape(x.shape[len(axes) :])

    def body(c: Any, x: Any) -> Any:
        if keepdims:
            x = jax.tree_util.tree_map(lambda v: to_place(v.reshape((1,) * len(axes) + v.shape)), x)
        c, y = body_fn(c, x)
        if keepdims:
            y = jax.tree_util.tree_map(drop_front, y)
        return c, y

    c, ys = _scan_nested(body, init, jax.tree_util.tree_map(to_front, xs), len(axes), unrolls)
    return c, jax.tree_util.tree_map(to_place, ys)
