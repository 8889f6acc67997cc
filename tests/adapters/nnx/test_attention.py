"""adapters.nnx attention against flax.nnx 0.12.8 (the reference): the same parameters,
outputs, cache updates and errors."""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters import nnx
from adapters.nnx.nn import attention

X = jax.random.normal(jax.random.key(0), (2, 3, 8))
Q = jax.random.normal(jax.random.key(1), (2, 3, 4, 8))
K = jax.random.normal(jax.random.key(2), (2, 5, 2, 8))
MASK = jax.random.bernoulli(jax.random.key(3), 0.7, (2, 1, 3, 5))


def _params(module, lib):
    flat = lib.to_flat_state(lib.state(module, lib.Param))
    return {tuple(map(str, p)): np.asarray(v[...]) for p, v in flat}


def _build(lib, **kw):
    return lib.MultiHeadAttention(
        4, 8, 16, num_kv_heads=2, normalize_qk=True, decode=False, rngs=lib.Rngs(0), **kw
    )


def _call(module, x):
    return module(x, is_causal=True)


def test_layer_matches_flax():
    ours, theirs = _build(nnx), _build(fnnx)
    a, b = _params(ours, nnx), _params(theirs, fnnx)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert ours.key.kernel.shape == (8, 2, 4) and ours.query_ln.scale.shape == (4,)
    np.testing.assert_array_equal(nnx.jit(_call)(ours, X), fnnx.jit(_call)(theirs, X))


def _dropout_call(module, x):
    return module(x), module(x, deterministic=True)


def test_dropout_keys_match_flax():
    def build(lib):
        return lib.MultiHeadAttention(
            2, 8, dropout_rate=0.5, deterministic=False, decode=False, rngs=lib.Rngs(0, dropout=3)
        )

    ours, theirs = build(nnx), build(fnnx)
    for a, b in zip(nnx.jit(_dropout_call)(ours, X), fnnx.jit(_dropout_call)(theirs, X)):
        np.testing.assert_array_equal(a, b)
    assert ours.rngs is not None and theirs.rngs is not None
    assert int(ours.rngs.count[...]) == int(theirs.rngs.count[...]) == 1


def _decode(module, x):
    return [module(x[:, i : i + 1]) for i in range(2)]


def test_decode_matches_flax():
    ours = nnx.MultiHeadAttention(2, 8, decode=True, rngs=nnx.Rngs(0))
    theirs = fnnx.MultiHeadAttention(2, 8, decode=True, rngs=fnnx.Rngs(0))
    ours.init_cache(X.shape)
    theirs.init_cache(X.shape)
    for a, b in zip(nnx.jit(_decode)(ours, X), fnnx.jit(_decode)(theirs, X)):
        np.testing.assert_array_equal(a, b)
    assert int(ours.cache_index[...]) == 2 and type(ours.cached_key) is nnx.Cache
    assert ours.cached_value is not None and theirs.cached_value is not None
    np.testing.assert_array_equal(ours.cached_value[...], theirs.cached_value[...])


def _sown(module, x):
    return module(x, sow_weights=True)


def test_sow_weights():
    layer = nnx.MultiHeadAttention(2, 8, decode=False, rngs=nnx.Rngs(0))
    _, inter = nnx.capture(_sown, nnx.Intermediate)(layer, X)
    assert inter["attention_weights"][0].shape == (2, 2, 3, 3)


def _functions(lib):
    weights = lib.nn.attention.dot_product_attention_weights(
        Q, K, mask=MASK, dropout_rate=0.2, dropout_rng=jax.random.key(0), is_causal=True
    )
    fast = lib.dot_product_attention(Q, K, K, mask=MASK, is_causal=True)
    masks = (
        lib.make_attention_mask(jnp.ones((2, 3)), jnp.ones((2, 5))),
        lib.make_causal_mask(jnp.ones((2, 3)), extra_batch_dims=1, dtype=jnp.int32),
        lib.combine_masks(MASK, None, MASK),
    )
    return weights, fast, masks


def test_functions_match_flax():
    # compiled: one compilation each instead of one per eager op
    with jax.numpy_dtype_promotion("standard"):  # flax mixes bool and float masks
        expected = jax.jit(lambda: _functions(fnnx))()
    got = jax.jit(lambda: _functions(nnx))()
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert attention.combine_masks(None, None) is None


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (((2, 5, 4, 8), (5, 4, 8), (5, 4, 8)), "q, k, v must have same rank"),
        (((2, 5, 4, 8), (3, 5, 4, 8), (3, 5, 4, 8)), "batch dims must match"),
        (((2, 5, 4, 8), (2, 5, 4, 8), (2, 6, 4, 8)), "k, v lengths must match"),
        (((2, 5, 4, 8), (2, 5, 4, 7), (2, 5, 4, 8)), "q, k depths must match"),
        (((2, 5, 5, 8), (2, 5, 2, 8), (2, 5, 2, 8)), r"Query heads \(5\) must be multiple of Key"),
        (
            ((2, 5, 4, 8), (2, 5, 4, 8), (2, 5, 3, 8)),
            r"Query heads \(4\) must be multiple of Value",
        ),
    ],
)
def test_function_errors(args, match):
    q, k, v = (jnp.ones(s) for s in args)
    with pytest.raises(ValueError, match=match):
        nnx.dot_product_attention(q, k, v, dropout_rate=0.1, dropout_rng=jax.random.key(0))


def _mha(**kw):
    return nnx.MultiHeadAttention(2, 8, 8, rngs=nnx.Rngs(0), **kw)


@pytest.mark.parametrize(
    ("run", "error", "match"),
    [
        (lambda: nnx.MultiHeadAttention(4, 8, num_kv_heads=3, rngs=nnx.Rngs(0)), ValueError,
         r"num_heads \(4\) must be divisible by num_kv_heads \(3\)"),
        (lambda: nnx.MultiHeadAttention(3, 8, rngs=nnx.Rngs(0)), ValueError,
         r"Memory dimension \(8\) must be divisible by 'num_heads' heads \(3\)"),
        (lambda: _mha(decode=False)(X, None, X), ValueError, "`inputs_k` cannot be None"),
        (lambda: _mha(decode=False)(X[..., :4]), ValueError, "got 4 but module expects 8"),
        (lambda: _mha()(X), ValueError, "No `decode` argument was provided"),
        (lambda: _mha(decode=True)(X), ValueError, "Autoregressive cache not initialized"),
        (lambda: (lambda m: (m.init_cache(X.shape), m(X)))(_mha(decode=True)), ValueError,
         r"expected key shape \(2, 1, 2, 4\) instead got \(2, 3, 2, 4\)"),
        (lambda: _mha(decode=False, dropout_rate=0.1)(X), ValueError,
         "No `deterministic` argument was provided"),
        (lambda: _mha(decode=False, dropout_rate=0.1, keep_rngs=False)(X, deterministic=False),
         ValueError, "'rngs' must be provided to __call__"),
        (lambda: _mha().set_view(decode=True), TypeError, "'batch_size' must be provided"),
        (lambda: _mha().set_view(decode=True, batch_size=2), TypeError, "'max_length' must be"),
        (lambda: attention.combine_masks(jnp.ones((2, 2)), jnp.ones(2)), ValueError,
         r"masks must have same rank, but got \(2, 1\)"),
    ],
)  # fmt: skip
def test_layer_errors(run, error, match):
    with pytest.raises(error, match=match):
        run()


def test_set_view_makes_a_cache():
    layer = _mha()
    layer.set_view(deterministic=True, decode=True, batch_size=2, max_length=4)
    assert layer.cached_key.shape == (2, 4, 2, 4) and layer.deterministic is True
    assert layer(X[:, :1]).shape == (2, 1, 8)
