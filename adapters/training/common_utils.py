"""``adapters.training.common_utils``: helpers for data-parallel (``pmap``) training loops."""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["get_metrics", "onehot", "shard", "shard_prng_key", "stack_forest"]


def shard(xs: Any) -> Any:
    """Reshape every array of ``xs`` from ``(n, ...)`` to ``(local devices, n / local
    devices, ...)``, the leading axis ``pmap`` maps over."""
    count = jax.local_device_count()
    return jax.tree_util.tree_map(lambda x: x.reshape((count, -1, *x.shape[1:])), xs)


def shard_prng_key(prng_key: jax.Array) -> jax.Array:
    """``prng_key`` split into one key per local device."""
    return jax.random.split(prng_key, num=jax.local_device_count())


def stack_forest(forest: Sequence[Any]) -> Any:
    """One pytree whose leaves stack the matching leaves of the trees in ``forest``."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *forest)


def get_metrics(device_metrics: Sequence[Any]) -> Any:
    """Metrics recorded per step on replicated devices, as host arrays stacked over steps.

    Each leaf is replicated over devices (leading device axis); the first device's copy is
    taken.
    """
    first = jax.tree_util.tree_map(
        lambda x: x.addressable_shards[0].data.squeeze(0), device_metrics
    )
    return stack_forest(jax.device_get(first))


def onehot(
    labels: jax.Array, num_classes: int, on_value: float = 1.0, off_value: float = 0.0
) -> jax.Array:
    """Float32 one-hot vectors of length ``num_classes`` along a new last axis of
    ``labels`` (``on_value`` at the label, ``off_value`` elsewhere). ``jax.nn.one_hot`` is
    the usual alternative."""
    classes = jnp.arange(num_classes).reshape((1,) * labels.ndim + (-1,))
    hit = labels[..., None] == classes
    on = jnp.full(hit.shape, on_value)
    off = jnp.full(hit.shape, off_value)
    return lax.select(hit, on, off).astype(jnp.float32)
