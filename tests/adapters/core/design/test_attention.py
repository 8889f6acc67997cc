"""Multi-head attention as ``lift.vmap`` over a single-head function (the slides' example:
``in_axes=(None, None)``, ``out_axes=-2``, ``axis_size=num_heads``, params per head)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from adapters.core import Scope, apply, init, lift, nn

Array = jax.Array


def single_head(
    scope: Scope, inputs_q: Array, inputs_kv: Array, qkv_features: int, dropout: float
) -> Array:
    dense = lambda name: scope.child(nn.dense, name, bias=False)
    q = dense("query")(inputs_q, qkv_features)
    k = dense("key")(inputs_kv, qkv_features)
    v = dense("value")(inputs_kv, qkv_features)
    logits = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(jnp.float32(qkv_features))
    weights = nn.softmax(logits, axis=-1)
    weights = nn.dropout(scope, weights, dropout, deterministic=dropout == 0.0)
    return jnp.einsum("bqk,bkd->bqd", weights, v)


def multi_head(
    scope: Scope, inputs_q: Array, inputs_kv: Array, num_heads: int, dropout: float = 0.0
) -> Array:
    qkv_features = inputs_q.shape[-1] // num_heads
    attn = lift.vmap(
        single_head,
        in_axes=(None, None, None, None),
        out_axes=-2,
        axis_size=num_heads,
        variable_axes={"params": 0},
        split_rngs={"params": True, "dropout": True},
    )
    # On a child scope: lifting the parent would also map its other parameters ("out").
    y = scope.child(attn, "heads")(inputs_q, inputs_kv, qkv_features, dropout)  # (b, q, h, d)
    y = jnp.reshape(y, (*y.shape[:-2], -1))
    return scope.child(nn.dense, "out")(y, inputs_q.shape[-1])


def test_multi_head_matches_per_head_computation() -> None:
    xq = random.normal(random.key(1), (2, 5, 8))
    xkv = random.normal(random.key(2), (2, 7, 8))
    y, v = init(multi_head)(random.key(0), xq, xkv, 4)
    assert y.shape == (2, 5, 8)
    p = {**v["params"]["heads"], "out": v["params"]["out"]}
    assert p["query"]["kernel"].shape == (4, 8, 2)
    heads = []
    for h in range(4):
        q = xq @ p["query"]["kernel"][h]
        k = xkv @ p["key"]["kernel"][h]
        val = xkv @ p["value"]["kernel"][h]
        w = jax.nn.softmax(jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(2.0), axis=-1)
        heads.append(jnp.einsum("bqk,bkd->bqd", w, val))
    concat = jnp.concatenate(heads, axis=-1)
    expected = concat @ p["out"]["kernel"] + p["out"]["bias"][None, None]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(apply(multi_head)(v, xq, xkv, 4), expected, rtol=1e-4, atol=1e-5)
    # Heads are initialized independently.
    assert not np.allclose(p["query"]["kernel"][0], p["query"]["kernel"][1])


def test_dropout_rng_is_split_per_head() -> None:
    x = random.normal(random.key(1), (1, 3, 4))
    _, v = init(multi_head)(random.key(0), x, x, 2)
    rngs = {"dropout": random.key(3)}
    y1 = apply(multi_head)(v, x, x, 2, 0.5, rngs=rngs)
    y2 = apply(multi_head)(v, x, x, 2, 0.5, rngs=rngs)
    np.testing.assert_allclose(y1, y2)
    assert not np.allclose(y1, apply(multi_head)(v, x, x, 2, 0.0))


def test_library_attention_layer() -> None:
    x = random.normal(random.key(1), (2, 5, 8))
    y, v = init(nn.multi_head_dot_product_attention)(
        random.key(0), x, None, num_heads=2, causal_mask=True, deterministic=True
    )
    assert y.shape == (2, 5, 8)
    assert v["params"]["query"]["kernel"].shape == (8, 2, 4)
    # Causal: the first output position only depends on the first input position.
    x2 = x.at[:, 1:].set(0.0)
    y2 = apply(nn.multi_head_dot_product_attention)(
        v, x2, None, num_heads=2, causal_mask=True, deterministic=True
    )
    np.testing.assert_allclose(y[:, 0], y2[:, 0], rtol=1e-5, atol=1e-6)
