"""Attention as scope functions: ``dot_product_attention`` and
``multi_head_dot_product_attention``."""

import functools
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._scope import Scope
from . import initializers
from ._linear import default_kernel_init, dense_general

Array = jax.Array


def _invert(perm: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, j in enumerate(perm):
        inv[j] = i
    return tuple(inv)


def dot_product_attention(
    scope: Scope,
    query: Array,
    key: Array,
    value: Array,
    dtype: Any = jnp.float32,
    bias: Array | None = None,
    axis: int | Iterable[int] | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    precision: Any = None,
) -> Array:
    """Softmax attention of ``query`` over ``key``/``value``.

    Shapes are ``(batch, attention dims..., heads, channels)``; ``axis`` lists the
    attention dims (default: all between batch and heads). ``bias`` is added to the
    logits (masks as large negative values). Dropout on the weights draws from
    ``dropout_rng`` or ``scope.make_rng('dropout')``.
    """
    if key.shape[:-1] != value.shape[:-1] or query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"dot_product_attention: incompatible query {query.shape}, key {key.shape} and "
            f"value {value.shape}."
        )
    n = key.ndim
    axes = (
        tuple(range(1, n - 2))
        if axis is None
        else (tuple(axis) if isinstance(axis, Iterable) else (axis,))
    )
    for ax in axes:
        if not 1 <= ax < n - 2:
            raise ValueError("Attention axes must lie between the batch and the heads axes.")
    depth = query.shape[-1]
    batch_dims = tuple(i for i in range(n) if i not in (*axes, n - 1))
    qk_perm = (*batch_dims, *axes, n - 1)
    key_t = key.transpose(qk_perm)
    query_t = query.transpose(qk_perm) / jnp.sqrt(jnp.asarray(depth, dtype))
    value_t = value.transpose((*batch_dims, n - 1, *axes))
    bd = tuple(range(len(batch_dims)))
    weights = lax.dot_general(query_t, key_t, (((n - 1,), (n - 1,)), (bd, bd)), precision=precision)
    if bias is not None:
        weights = weights + bias
    norm_dims = tuple(range(weights.ndim - len(axes), weights.ndim))
    weights = jnp.exp(
        weights - jax.scipy.special.logsumexp(weights, axis=norm_dims, keepdims=True)
    ).astype(dtype)
    if not deterministic and dropout_rate > 0.0:
        rng = dropout_rng if dropout_rng is not None else scope.make_rng("dropout")
        keep_prob = 1.0 - dropout_rate
        shape = (
            (1,) * len(bd) + weights.shape[-(2 * len(axes)) :]
            if broadcast_dropout
            else weights.shape
        )
        keep = jax.random.bernoulli(rng, keep_prob, shape)
        weights = weights * (keep.astype(weights.dtype) / jnp.asarray(keep_prob, dtype))
    contract = (norm_dims, tuple(range(value_t.ndim - len(axes), value_t.ndim)))
    y = lax.dot_general(weights, value_t, (contract, (bd, bd)), precision=precision)
    return y.transpose(_invert(qk_perm))


def _causal_bias(length_q: int, length_k: int) -> Array:
    mask = np.tril(np.ones((length_q, length_k), dtype=bool))
    return jnp.where(mask, 0.0, -1e10).astype(jnp.float32)


def multi_head_dot_product_attention(
    scope: Scope,
    inputs_q: Array,
    inputs_kv: Array | None,
    num_heads: int,
    dtype: Any = jnp.float32,
    qkv_features: int | None = None,
    out_features: int | None = None,
    causal_mask: bool = False,
    padding_mask: Array | None = None,
    key_padding_mask: Array | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    precision: Any = None,
    kernel_init: Callable[..., Any] = default_kernel_init,
    bias_init: Callable[..., Any] = initializers.zeros,
    bias: bool = True,
    attention_fn: Callable[..., Array] = dot_product_attention,
) -> Array:
    """Multi-head attention over one sequence axis: ``(batch, length, features)`` inputs.

    Children ``query``, ``key``, ``value`` (``dense_general`` to ``(heads, head_dim)``)
    and ``out``. ``causal_mask`` hides later positions; ``padding_mask`` /
    ``key_padding_mask`` (``(batch, length)`` booleans, True = real token) hide padding.
    ``inputs_kv=None`` is self-attention. (Flax's cache and segmentation options are not
    provided.)
    """
    if inputs_kv is None:
        inputs_kv = inputs_q
    if inputs_q.ndim != 3:
        raise ValueError(
            f"multi_head_dot_product_attention expects (batch, length, features) inputs, got "
            f"shape {inputs_q.shape}."
        )
    features = out_features or inputs_q.shape[-1]
    qkv = qkv_features or inputs_q.shape[-1]
    if qkv % num_heads:
        raise ValueError(f"qkv_features={qkv} is not divisible by num_heads={num_heads}.")
    dense = functools.partial(
        dense_general,
        axis=-1,
        dtype=dtype,
        features=(num_heads, qkv // num_heads),
        kernel_init=kernel_init,
        bias_init=bias_init,
        bias=bias,
        precision=precision,
    )
    query = scope.child(dense, "query")(inputs_q)
    key = scope.child(dense, "key")(inputs_kv)
    value = scope.child(dense, "value")(inputs_kv)
    logits_bias = jnp.zeros((1, 1, inputs_q.shape[1], inputs_kv.shape[1]), jnp.float32)
    if causal_mask:
        logits_bias = logits_bias + _causal_bias(inputs_q.shape[1], inputs_kv.shape[1])
    if padding_mask is not None or key_padding_mask is not None:
        q_mask = padding_mask if padding_mask is not None else jnp.ones(inputs_q.shape[:2], bool)
        k_mask = key_padding_mask if key_padding_mask is not None else q_mask
        both = jnp.logical_and(q_mask[:, None, :, None], k_mask[:, None, None, :])
        logits_bias = logits_bias + jnp.where(both, 0.0, -1e10).astype(jnp.float32)
    y = attention_fn(
        scope,
        query,
        key,
        value,
        dtype=dtype,
        bias=logits_bias.astype(dtype),
        broadcast_dropout=broadcast_dropout,
        dropout_rng=dropout_rng,
        dropout_rate=dropout_rate,
        deterministic=deterministic,
        precision=precision,
    )
    return scope.child(dense_general, "out")(
        y,
        features=features,
        axis=(-2, -1),
        kernel_init=kernel_init,
        bias_init=bias_init,
        bias=bias,
        dtype=dtype,
        precision=precision,
    )
