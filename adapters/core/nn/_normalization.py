"""Normalization layers as scope functions: ``batch_norm``, ``layer_norm``, ``group_norm``."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

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
    redux = tuple(i for i in range(x.ndim) if i not in axes)

    def pmean(v: Array) -> Array:
        m = jnp.mean(v, redux, keepdims=True)
        if axis_name is not None:
            m = lax.pmean(m, axis_name=axis_name, axis_index_groups=axis_index_groups)
        return m

    mean = pmean(x)
    feature_shape = tuple(x.shape[i] for i in axes)
    var = pmean(jnp.square(x)) - jnp.square(mean)
    is_init = not scope.has_variable(kind, "mean")
    ra_mean = scope.variable(kind, "mean", jnp.zeros, feature_shape)
    ra_var = scope.variable(kind, "var", jnp.ones, feature_shape)
    if use_running_average:
        mean = jnp.reshape(ra_mean.value, mean.shape)
        var = jnp.reshape(ra_var.value, var.shape)
    elif not is_init:
        beta = 1.0 - momentum
        ra_mean.value = ra_mean.value + beta * (jnp.reshape(mean, feature_shape) - ra_mean.value)
        ra_var.value = ra_var.value + beta * (jnp.reshape(var, feature_shape) - ra_var.value)
    y = x - mean
    mul = lax.rsqrt(var + epsilon)
    if scale:
        mul = mul * jnp.reshape(scope.param("scale", scale_init, feature_shape), mean.shape)
    y = y * mul
    if bias:
        y = y + jnp.reshape(scope.param("bias", bias_init, feature_shape), mean.shape)
    return jnp.asarray(y, dtype)


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
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(lax.square(x), axis=-1, keepdims=True) - lax.square(mean)
    mul = lax.rsqrt(var + epsilon)
    if scale:
        mul = mul * jnp.asarray(scope.param("scale", scale_init, (features,)), dtype)
    y = (x - mean) * mul
    if bias:
        y = y + jnp.asarray(scope.param("bias", bias_init, (features,)), dtype)
    return jnp.asarray(y, dtype)


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
    group of channels and every non-batch axis. Give ``num_groups`` or ``group_size``."""
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
    shape = x.shape
    g = jnp.reshape(x, (*shape[:-1], num_groups, channels // num_groups))
    axes = (*range(1, g.ndim - 2), g.ndim - 1)
    mean = jnp.mean(g, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(g), axis=axes, keepdims=True) - jnp.square(mean)
    y = jnp.reshape((g - mean) * lax.rsqrt(var + epsilon), shape)
    feature_shape = (1,) * (len(shape) - 1) + (channels,)
    if scale:
        y = y * scope.param("scale", scale_init, feature_shape)
    if bias:
        y = y + scope.param("bias", bias_init, feature_shape)
    return jnp.asarray(y, dtype)
