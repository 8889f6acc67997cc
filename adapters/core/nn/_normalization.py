"""Normalization layers as scope functions: ``batch_norm``, ``layer_norm``, ``group_norm``.

The math is ``pytreemod.nn.functional``'s (``batch_stats``, ``batch_norm``, ``ema``,
``layer_norm``, ``group_norm``); these functions create the parameters and running
statistics on the scope. Parameter shapes are ``flax.core.nn``'s.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F

from .._scope import Scope
from . import initializers

Array = jax.Array
Initializer = Callable[..., Any]


def _absolute_dims(ndim: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(ndim + d if d < 0 else d for d in dims)


def batch_norm(
    scope: Scope,
    x: Array,
    use_running_average: bool = False,
    axis: int | tuple[int, ...] = -1,
    momentum: float = 0.99,
    epsilon: float = 1e-5,
    dtype: Any = jnp.float32,
    bias: bool = True,
    scale: bool = True,
    bias_init: Initializer = initializers.zeros,
    scale_init: Initializer = initializers.ones,
    axis_name: str | None = None,
    axis_index_groups: Any = None,
    kind: str = "batch_stats",
) -> Array:
    """Batch normalization over every axis but ``axis``.

    Running statistics ``mean`` and ``var`` live in collection ``kind``
    (``batch_stats``); with ``use_running_average=False`` they are updated (the
    collection must then be mutable, except while they are being created), with ``True``
    they normalize instead of the batch statistics. ``axis_name`` averages the statistics
    over a mapped axis (``lax.pmean``).
    """
    x = jnp.asarray(x, jnp.float32)
    axes = _absolute_dims(x.ndim, axis if isinstance(axis, tuple) else (axis,))
    feature_shape = tuple(x.shape[i] for i in axes)
    is_init = not scope.has_variable(kind, "mean")
    ra_mean = scope.variable(kind, "mean", jnp.zeros, feature_shape)
    ra_var = scope.variable(kind, "var", jnp.ones, feature_shape)
    if use_running_average:
        mean, var = ra_mean.value, ra_var.value
    else:
        mean, var = F.batch_stats(
            x, axis=axes, axis_name=axis_name, axis_index_groups=axis_index_groups
        )
        if not is_init:
            ra_mean.value = F.ema(ra_mean.value, mean, momentum)
            ra_var.value = F.ema(ra_var.value, var, momentum)
    s = scope.param("scale", scale_init, feature_shape) if scale else None
    b = scope.param("bias", bias_init, feature_shape) if bias else None
    return jnp.asarray(F.batch_norm(x, mean, var, s, b, axis=axes, epsilon=epsilon), dtype)


def layer_norm(
    scope: Scope,
    x: Array,
    epsilon: float = 1e-6,
    dtype: Any = jnp.float32,
    bias: bool = True,
    scale: bool = True,
    bias_init: Initializer = initializers.zeros,
    scale_init: Initializer = initializers.ones,
) -> Array:
    """Layer normalization over the last axis (params ``scale``, ``bias``)."""
    features = x.shape[-1]
    s = scope.param("scale", scale_init, (features,)) if scale else None
    b = scope.param("bias", bias_init, (features,)) if bias else None
    return jnp.asarray(F.layer_norm(x, s, b, epsilon=epsilon), dtype)


def group_norm(
    scope: Scope,
    x: Array,
    num_groups: int | None = 32,
    group_size: int | None = None,
    epsilon: float = 1e-6,
    dtype: Any = jnp.float32,
    bias: bool = True,
    scale: bool = True,
    bias_init: Initializer = initializers.zeros,
    scale_init: Initializer = initializers.ones,
) -> Array:
    """Group normalization of ``(batch, ..., channels)`` inputs: statistics over each
    group of channels and every non-batch axis. Give ``num_groups`` or ``group_size``.

    ``scale`` and ``bias`` have shape ``(1, ..., 1, channels)``, as in ``flax.core.nn``.
    """
    x = jnp.asarray(x, jnp.float32)
    if (num_groups is None) == (group_size is None):
        raise ValueError("group_norm: give exactly one of num_groups and group_size.")
    channels = x.shape[-1]
    if group_size is not None:
        if channels % group_size:
            raise ValueError(
                f"group_norm: {channels} channels are not a multiple of group_size={group_size}."
            )
        num_groups = channels // group_size
    assert num_groups is not None
    if channels % num_groups:
        raise ValueError(
            f"group_norm: {channels} channels are not divisible by num_groups={num_groups}."
        )
    feature_shape = (1,) * (x.ndim - 1) + (channels,)
    s = scope.param("scale", scale_init, feature_shape) if scale else None
    b = scope.param("bias", bias_init, feature_shape) if bias else None
    y = F.group_norm(
        x,
        None if s is None else jnp.reshape(s, (channels,)),
        None if b is None else jnp.reshape(b, (channels,)),
        num_groups=num_groups,
        epsilon=epsilon,
    )
    return jnp.asarray(y, dtype)
