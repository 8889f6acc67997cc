"""Attention as scope functions: ``dot_product_attention`` and
``multi_head_dot_product_attention``."""

import functools
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F

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
    mask: Array | None = None,
) -> Array:
    """Softmax attention of ``query`` over ``key``/``value``
    (``pytreemod.nn.functional.dot_product_attention``).

    Shapes are ``(batch, attention dims..., heads, channels)``; ``axis`` lists the
    attention dims (default: all between batch and heads), which are attended jointly.
    ``bias`` is added to the logits and ``mask`` hides entries where false (both
    broadcastable to ``(batch, heads, q_len, kv_len)``, for one attention axis). Dropout on
    the weights draws from ``dropout_rng`` or ``scope.make_rng('dropout')``.
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
    if len(axes) != 1 and (bias is not None or mask is not None):
        raise ValueError("dot_product_attention: bias and mask need one attention axis.")
    # Move the attention axes next to the heads and flatten them into one length axis.
    rest = tuple(i for i in range(n - 2) if i not in axes)
    perm = (*rest, *axes, n - 2, n - 1)

    def flat(x: Array) -> Array:
        x = x.transpose(perm)
        return jnp.reshape(x, (*x.shape[: len(rest)], -1, *x.shape[-2:]))

    if not deterministic and dropout_rate > 0.0 and dropout_rng is None:
        dropout_rng = scope.make_rng("dropout")
    y = F.dot_product_attention(
        flat(query),
        flat(key),
        flat(value),
        bias,
        mask,
        dropout_rate=dropout_rate,
        dropout_key=dropout_rng,
        broadcast_dropout=broadcast_dropout,
        deterministic=deterministic,
        dtype=dtype,
        precision=precision,
    )
    q_shape = query.transpose(perm).shape
    y = jnp.reshape(y, (*q_shape[:-1], value.shape[-1]))
    return y.transpose(_invert(perm))


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
    masks = []
    if causal_mask:
        masks.append(F.make_causal_mask(jnp.ones(inputs_kv.shape[:2])))
    if padding_mask is not None or key_padding_mask is not None:
        q_mask = padding_mask if padding_mask is not None else jnp.ones(inputs_q.shape[:2], bool)
        k_mask = key_padding_mask if key_padding_mask is not None else q_mask
        masks.append(F.make_attention_mask(q_mask, k_mask))
    y = attention_fn(
        scope,
        query,
        key,
        value,
        dtype=dtype,
        mask=F.combine_masks(*masks),
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
