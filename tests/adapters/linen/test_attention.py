"""Attention against flax.linen: functions, masks, the multi-head layer (its variables,
outputs, dropout, sown weights) and step-by-step decoding with the cache."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn

from ._flax_compare import check, flax_linen, standard

X = jax.random.normal(jax.random.key(1), (2, 5, 8))
KV = jax.random.normal(jax.random.key(2), (2, 7, 8))


def test_mask_helpers_match_flax() -> None:
    fl = flax_linen()
    valid = jnp.array([[1, 1, 0], [1, 0, 0]])
    for ours, theirs in [
        (nn.make_attention_mask(valid, valid), fl.make_attention_mask(valid, valid)),
        (nn.make_causal_mask(valid, extra_batch_dims=1), fl.make_causal_mask(valid, 1)),
        (
            nn.combine_masks(
                nn.make_causal_mask(valid), None, nn.make_attention_mask(valid, valid)
            ),
            fl.combine_masks(
                fl.make_causal_mask(valid), None, fl.make_attention_mask(valid, valid)
            ),
        ),
    ]:
        assert ours.dtype == theirs.dtype == jnp.float32
        np.testing.assert_array_equal(ours, theirs)
    assert nn.combine_masks(None, None) is None


def test_dot_product_attention_functions_match_flax() -> None:
    fl = flax_linen()
    q, k, v = (jax.random.normal(jax.random.key(i), (2, 5, 3, 4)) for i in range(3))
    mask = nn.make_causal_mask(jnp.ones((2, 5)))
    bias = jax.random.normal(jax.random.key(9), (2, 3, 5, 5))
    rng = jax.random.key(4)
    kw: dict[str, Any] = dict(mask=mask, bias=bias, dropout_rng=rng, dropout_rate=0.3)
    np.testing.assert_allclose(
        nn.dot_product_attention(q, k, v, **kw), fl.dot_product_attention(q, k, v, **kw), 1e-5
    )
    np.testing.assert_allclose(
        nn.dot_product_attention_weights(q, k, broadcast_dropout=False, **kw),
        fl.dot_product_attention_weights(q, k, broadcast_dropout=False, **kw),
        1e-5,
    )


def test_dot_product_attention_rejects_conflicting_einsums() -> None:
    x = jnp.ones((1, 4, 1, 2))
    with pytest.raises(ValueError, match="must be specified together"):
        nn.dot_product_attention(x, x, x, qk_attn_weights_einsum=jnp.einsum)
    with pytest.raises(ValueError, match="mutually exclusive"):
        nn.dot_product_attention(
            x,
            x,
            x,
            precision=jax.lax.Precision.DEFAULT,
            qk_attn_weights_einsum=jnp.einsum,
            attn_weights_value_einsum=jnp.einsum,
        )
    with pytest.raises(ValueError, match="mutually exclusive"):
        nn.dot_product_attention_weights(
            x, x, einsum_dot_general=jax.lax.dot_general, einsum=jnp.einsum
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_heads": 2},
        {"num_heads": 4, "qkv_features": 16, "out_features": 6, "use_bias": False},
        {"num_heads": 2, "normalize_qk": True},
        {"num_heads": 2, "out_kernel_init": jax.nn.initializers.ones},
        {"num_heads": 2, "dtype": jnp.bfloat16, "force_fp32_for_softmax": True},
    ],
)
def test_multi_head_attention(kwargs: dict[str, Any]) -> None:
    tol = 2e-2 if "dtype" in kwargs else 1e-5
    check(lambda m: m.MultiHeadDotProductAttention(**kwargs), X, tol=tol)
    check(lambda m: m.MultiHeadDotProductAttention(**kwargs), X, KV, tol=tol)
    mask = nn.make_causal_mask(jnp.ones((2, 5)))
    check(lambda m: m.MultiHeadDotProductAttention(**kwargs), X, mask=mask, tol=tol)


def test_multi_head_attention_dropout_uses_the_dropout_rng() -> None:
    check(
        lambda m: m.MultiHeadDotProductAttention(2, dropout_rate=0.5, deterministic=False),
        X,
        dropout_rng=jax.random.key(7),
    )
    check(
        lambda m: m.MultiHeadDotProductAttention(2, dropout_rate=0.5, deterministic=False),
        X,
        rngs={"dropout": jax.random.key(7)},
    )
    layer = nn.MultiHeadDotProductAttention(2, dropout_rate=0.5, deterministic=False)
    with standard():
        variables = layer.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, X)
        a = layer.apply(variables, X, rngs={"dropout": jax.random.key(2)})
        b = layer.apply(variables, X, rngs={"dropout": jax.random.key(3)})
    assert not np.allclose(a, b)
    check(lambda m: m.MultiHeadDotProductAttention(2, dropout_rate=0.5), X, deterministic=True)


def test_aliases_have_the_same_variables() -> None:
    check(lambda m: m.MultiHeadAttention(2), X, KV, KV)
    with pytest.warns(DeprecationWarning, match="SelfAttention will be deprecated"):
        check(lambda m: m.SelfAttention(2), X)


def test_sown_attention_weights() -> None:
    layer = nn.MultiHeadDotProductAttention(2)
    with standard():
        variables = layer.init(jax.random.key(0), X)
        _, state = layer.apply(variables, X, sow_weights=True, mutable=["intermediates"])
    (weights,) = state["intermediates"]["attention_weights"]
    assert weights.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)


def test_kv_argument_errors() -> None:
    layer = nn.MultiHeadDotProductAttention(2)
    with pytest.raises(ValueError, match="`inputs_k` cannot be None if `inputs_v` is not None"):
        layer.init(jax.random.key(0), X, inputs_v=KV)
    with pytest.raises(ValueError, match="`inputs_kv` must be None"):
        layer.init(jax.random.key(0), X, KV, inputs_kv=KV)
    with pytest.warns(DeprecationWarning, match="inputs_kv arg will be deprecated"):
        layer.init(jax.random.key(0), X, inputs_kv=KV)


def test_decoding_step_by_step_equals_causal_attention() -> None:
    layer = nn.MultiHeadDotProductAttention(2, decode=False)
    decoder = layer.clone(decode=True)
    with standard():
        variables = decoder.init(jax.random.key(0), X)
        assert variables["cache"]["cached_key"].shape == (2, 5, 2, 4)
        full = layer.apply(
            {"params": variables["params"]}, X, mask=nn.make_causal_mask(jnp.ones((2, 5)))
        )
        cache = variables["cache"]
        steps = []
        for t in range(5):
            y, state = decoder.apply(
                {"params": variables["params"], "cache": cache}, X[:, t : t + 1], mutable=["cache"]
            )
            cache = state["cache"]
            steps.append(y)
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, rtol=1e-5, atol=1e-5)
    assert int(cache["cache_index"]) == 5
    with standard(), pytest.raises(ValueError, match="Autoregressive cache shape error"):
        decoder.apply({"params": variables["params"], "cache": cache}, X[:, :2], mutable=["cache"])
