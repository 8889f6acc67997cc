"""Linear layers as scope functions: ``dense``, ``dense_general``, ``conv``,
``conv_transpose`` and ``embedding``."""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._scope import Scope
from . import initializers

Array = jax.Array
Initializer = Callable[..., Any]
default_kernel_init: Initializer = initializers.lecun_normal()
default_embed_init: Initializer = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


def _as_tuple(x: int | Iterable[int]) -> tuple[int, ...]:
    return tuple(x) if isinstance(x, Iterable) else (x,)


def _normalize_axes(axes: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return tuple(ax if ax >= 0 else ndim + ax for ax in axes)


def _add_bias(y: Array, bias: Array) -> Array:
    return y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))


def dense(
    scope: Scope,
    inputs: Array,
    features: int,
    bias: bool = True,
    dtype: Any = jnp.float32,
    precision: Any = None,
    kernel_init: Initializer = default_kernel_init,
    bias_init: Initializer = initializers.zeros,
) -> Array:
    """``inputs @ kernel + bias`` over the last axis (params ``kernel``, ``bias``).

    >>> import jax, jax.numpy as jnp
    >>> from adapters.core import init, nn
    >>> y, v = init(nn.dense)(jax.random.key(0), jnp.ones((2, 3)), 4)
    >>> y.shape, v['params']['kernel'].shape
    ((2, 4), (3, 4))
    """
    inputs = jnp.asarray(inputs, dtype)
    kernel = jnp.asarray(scope.param("kernel", kernel_init, (inputs.shape[-1], features)), dtype)
    y = lax.dot_general(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())), precision=precision)
    if bias:
        y = _add_bias(y, jnp.asarray(scope.param("bias", bias_init, (features,)), dtype))
    return y


def dense_general(
    scope: Scope,
    inputs: Array,
    features: int | Sequence[int],
    axis: int | Sequence[int] = -1,
    batch_dims: int | Sequence[int] = (),
    bias: bool = True,
    dtype: Any = jnp.float32,
    kernel_init: Initializer = default_kernel_init,
    bias_init: Initializer = initializers.zeros,
    precision: Any = None,
) -> Array:
    """A linear map contracting ``axis`` of ``inputs`` to ``features`` (a tuple of sizes).

    ``batch_dims`` are leading axes with a separate kernel per index.
    """
    inputs = jnp.asarray(inputs, dtype)
    feats, axes, batch = _as_tuple(features), _as_tuple(axis), _as_tuple(batch_dims)
    if batch and set(batch) != set(range(max(batch) + 1)):
        raise ValueError(
            f"dense_general: batch_dims {batch} must be consecutive leading axes from 0."
        )
    ndim = inputs.ndim
    axes, batch = _normalize_axes(axes, ndim), _normalize_axes(batch, ndim)
    n_batch, n_axis, n_feat = len(batch), len(axes), len(feats)

    def kernel_init_wrap(rng: Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
        size_batch = int(np.prod(shape[:n_batch]))
        flat = (int(np.prod(shape[n_batch : n_batch + n_axis])), int(np.prod(shape[-n_feat:])))
        keys = jax.random.split(rng, size_batch) if size_batch > 1 else [rng]
        kernel = jnp.concatenate([kernel_init(k, flat, dtype) for k in keys], axis=0)
        return jnp.reshape(kernel, shape)

    batch_shape = tuple(inputs.shape[ax] for ax in batch)
    kernel_shape = tuple(inputs.shape[ax] for ax in axes) + feats
    kernel = jnp.asarray(scope.param("kernel", kernel_init_wrap, batch_shape + kernel_shape), dtype)
    batch_ind = tuple(range(n_batch))
    contract_ind = tuple(range(n_batch, n_axis + n_batch))
    out = lax.dot_general(
        inputs, kernel, ((axes, contract_ind), (batch, batch_ind)), precision=precision
    )
    if bias:

        def bias_init_wrap(rng: Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
            size_batch = int(np.prod(shape[:n_batch]))
            flat = (int(np.prod(shape[-n_feat:])),)
            keys = jax.random.split(rng, size_batch) if size_batch > 1 else [rng]
            return jnp.reshape(jnp.concatenate([bias_init(k, flat, dtype) for k in keys]), shape)

        b = jnp.asarray(scope.param("bias", bias_init_wrap, batch_shape + feats), dtype)
        for ax in sorted(set(range(ndim)) - set(axes) - set(batch)):
            b = jnp.expand_dims(b, ax)
        out = out + b
    return out


def _conv_dimension_numbers(input_shape: tuple[int, ...]) -> lax.ConvDimensionNumbers:
    ndim = len(input_shape)
    lhs = (0, ndim - 1, *range(1, ndim - 1))
    rhs = (ndim - 1, ndim - 2, *range(0, ndim - 2))
    return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def conv(
    scope: Scope,
    inputs: Array,
    features: int,
    kernel_size: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "SAME",
    input_dilation: Sequence[int] | None = None,
    kernel_dilation: Sequence[int] | None = None,
    feature_group_count: int = 1,
    bias: bool = True,
    dtype: Any = jnp.float32,
    precision: Any = None,
    kernel_init: Initializer = default_kernel_init,
    bias_init: Initializer = initializers.zeros,
) -> Array:
    """An N-d convolution of ``(batch, spatial..., features)`` inputs (params ``kernel``,
    ``bias``)."""
    inputs = jnp.asarray(inputs, dtype)
    strides = tuple(strides) if strides is not None else (1,) * (inputs.ndim - 2)
    in_features = inputs.shape[-1]
    if in_features % feature_group_count:
        raise ValueError(
            f"conv: {in_features} input features are not divisible by "
            f"feature_group_count={feature_group_count}."
        )
    shape = (*kernel_size, in_features // feature_group_count, features)
    kernel = jnp.asarray(scope.param("kernel", kernel_init, shape), dtype)
    y = lax.conv_general_dilated(
        inputs,
        kernel,
        strides,
        padding,
        lhs_dilation=input_dilation,
        rhs_dilation=kernel_dilation,
        dimension_numbers=_conv_dimension_numbers(inputs.shape),
        feature_group_count=feature_group_count,
        precision=precision,
    )
    if bias:
        y = _add_bias(y, jnp.asarray(scope.param("bias", bias_init, (features,)), dtype))
    return y


def conv_transpose(
    scope: Scope,
    inputs: Array,
    features: int,
    kernel_size: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "SAME",
    kernel_dilation: Sequence[int] | None = None,
    bias: bool = True,
    dtype: Any = jnp.float32,
    precision: Any = None,
    kernel_init: Initializer = default_kernel_init,
    bias_init: Initializer = initializers.zeros,
) -> Array:
    """A transposed convolution (``jax.lax.conv_transpose``)."""
    inputs = jnp.asarray(inputs, dtype)
    strides = tuple(strides) if strides else (1,) * (inputs.ndim - 2)
    shape = (*kernel_size, inputs.shape[-1], features)
    kernel = jnp.asarray(scope.param("kernel", kernel_init, shape), dtype)
    y = lax.conv_transpose(
        inputs, kernel, strides, padding, rhs_dilation=kernel_dilation, precision=precision
    )
    if bias:
        y = _add_bias(y, jnp.asarray(scope.param("bias", bias_init, (features,)), dtype))
    return y


class Embedding:
    """An embedding table with ``lookup(indices)`` and ``attend(query)``."""

    __slots__ = ("table",)

    def __init__(self, table: Array):
        self.table = table

    def lookup(self, indices: Array) -> Array:
        """Rows of the table for integer ``indices`` (a features axis is appended)."""
        if not jnp.issubdtype(indices.dtype, jnp.integer):
            raise ValueError(
                f"Embedding.lookup expects integer indices, got dtype {indices.dtype}."
            )
        return self.table[indices]

    def attend(self, query: Array) -> Array:
        """Inner products of ``query`` with every embedding (logits over the vocabulary)."""
        return jnp.dot(query, self.table.T)


def embedding(
    scope: Scope,
    num_embeddings: int,
    features: int,
    init_fn: Initializer = default_embed_init,
) -> Embedding:
    """An ``Embedding`` over the parameter ``table`` of shape ``(num_embeddings, features)``."""
    return Embedding(scope.param("table", init_fn, (num_embeddings, features)))
