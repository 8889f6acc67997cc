"""Linear layers as scope functions: ``dense``, ``dense_general``, ``conv``,
``conv_transpose`` and ``embedding``.

The math is ``pytreemod.nn.functional``'s (``linear``, ``project_heads``, ``merge_heads``,
``conv``, ``conv_transpose``, ``embed``, ``attend``); these functions create the
parameters on the scope, with ``flax.core.nn``'s names and shapes. ``dense_general``
contractions those ops do not cover (other axes, batch dims) use ``lax.dot_general``.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pytreemod.nn import functional as F

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
    kernel = scope.param("kernel", kernel_init, (inputs.shape[-1], features))
    b = scope.param("bias", bias_init, (features,)) if bias else None
    return F.linear(inputs, kernel, b, dtype=dtype, precision=precision)


def _batched_init(init: Initializer, n_batch: int, n_in: int, n_feat: int) -> Initializer:
    """Initialize a ``(*batch, *in, *features)`` array as ``prod(batch)`` flat draws."""

    def wrapped(rng: Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
        size_batch = int(np.prod(shape[:n_batch]))
        flat = (int(np.prod(shape[-n_feat:])),)
        if n_in:
            flat = (int(np.prod(shape[n_batch : n_batch + n_in])), *flat)
        keys = list(jax.random.split(rng, size_batch)) if size_batch > 1 else [rng]
        return jnp.reshape(jnp.concatenate([init(k, flat, dtype) for k in keys]), shape)

    return wrapped


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
    batch_shape = tuple(inputs.shape[ax] for ax in batch)
    kernel_shape = batch_shape + tuple(inputs.shape[ax] for ax in axes) + feats
    kernel_init_ = _batched_init(kernel_init, n_batch, n_axis, n_feat)
    kernel = jnp.asarray(scope.param("kernel", kernel_init_, kernel_shape), dtype)
    b = None
    if bias:
        bias_init_ = _batched_init(bias_init, n_batch, 0, n_feat)
        b = jnp.asarray(scope.param("bias", bias_init_, batch_shape + feats), dtype)
    if not batch and axes == (ndim - 1,) and n_feat <= 2:
        op = F.linear if n_feat == 1 else F.project_heads
        return op(inputs, kernel, b, dtype=dtype, precision=precision)
    if not batch and axes == (ndim - 2, ndim - 1) and n_feat == 1:
        return F.merge_heads(inputs, kernel, b, dtype=dtype, precision=precision)
    batch_ind = tuple(range(n_batch))
    contract_ind = tuple(range(n_batch, n_axis + n_batch))
    out = lax.dot_general(
        inputs, kernel, ((axes, contract_ind), (batch, batch_ind)), precision=precision
    )
    if b is not None:
        for ax in sorted(set(range(ndim)) - set(axes) - set(batch)):
            b = jnp.expand_dims(b, ax)
        out = out + b
    return out


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
    in_features = inputs.shape[-1]
    if in_features % feature_group_count:
        raise ValueError(
            f"conv: {in_features} input features are not divisible by "
            f"feature_group_count={feature_group_count}."
        )
    shape = (*kernel_size, in_features // feature_group_count, features)
    kernel = scope.param("kernel", kernel_init, shape)
    b = scope.param("bias", bias_init, (features,)) if bias else None
    return F.conv(
        inputs,
        kernel,
        b,
        strides=tuple(strides) if strides is not None else 1,
        padding=padding,
        input_dilation=tuple(input_dilation) if input_dilation is not None else 1,
        kernel_dilation=tuple(kernel_dilation) if kernel_dilation is not None else 1,
        feature_group_count=feature_group_count,
        dtype=dtype,
        precision=precision,
    )


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
    """A transposed convolution (``jax.lax.conv_transpose``'s semantics)."""
    inputs = jnp.asarray(inputs, dtype)
    shape = (*kernel_size, inputs.shape[-1], features)
    kernel = scope.param("kernel", kernel_init, shape)
    b = scope.param("bias", bias_init, (features,)) if bias else None
    return F.conv_transpose(
        inputs,
        kernel,
        b,
        strides=tuple(strides) if strides else 1,
        padding=padding,
        kernel_dilation=tuple(kernel_dilation) if kernel_dilation is not None else 1,
        dtype=dtype,
        precision=precision,
    )


class Embedding:
    """An embedding table with ``lookup(indices)`` and ``attend(query)``."""

    __slots__ = ("table",)

    def __init__(self, table: Array):
        self.table: Array = table

    def lookup(self, indices: Array) -> Array:
        """Rows of the table for integer ``indices`` (a features axis is appended)."""
        if not jnp.issubdtype(indices.dtype, jnp.integer):
            raise ValueError(
                f"Embedding.lookup expects integer indices, got dtype {indices.dtype}."
            )
        return F.embed(indices, self.table)

    def attend(self, query: Array) -> Array:
        """Inner products of ``query`` with every embedding (logits over the vocabulary)."""
        return F.attend(query, self.table)


def embedding(
    scope: Scope,
    num_embeddings: int,
    features: int,
    init_fn: Initializer = default_embed_init,
) -> Embedding:
    """An ``Embedding`` over the parameter ``table`` of shape ``(num_embeddings, features)``."""
    return Embedding(scope.param("table", init_fn, (num_embeddings, features)))
