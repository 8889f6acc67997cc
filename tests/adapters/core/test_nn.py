"""Functional-core layers against the same math written with plain JAX."""

import contextlib
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax, random

import pytreemod as pm
from adapters.core import Scope, apply, init, nn

KEY = random.key(0)


def test_dense_general_multiple_axes_and_batch_dims() -> None:
    x = random.normal(random.key(1), (2, 3, 4))
    y, v = init(nn.dense_general)(KEY, x, features=(5, 6), axis=(-2, -1))
    k, b = v["params"]["kernel"], v["params"]["bias"]
    assert k.shape == (3, 4, 5, 6) and y.shape == (2, 5, 6)
    np.testing.assert_allclose(y, jnp.einsum("bij,ijkl->bkl", x, k) + b[None], rtol=1e-5)
    y, v = init(nn.dense_general)(KEY, x, features=5, batch_dims=0)
    k = v["params"]["kernel"]
    assert k.shape == (2, 4, 5)
    np.testing.assert_allclose(
        y, jnp.einsum("bij,bjk->bik", x, k) + v["params"]["bias"][:, None], rtol=1e-5
    )
    with pytest.raises(ValueError, match="consecutive leading axes"):
        init(nn.dense_general)(KEY, x, features=5, batch_dims=1)


def test_conv_and_conv_transpose() -> None:
    x = random.normal(random.key(1), (2, 6, 6, 3))
    y, v = init(nn.conv)(KEY, x, 4, (3, 3), strides=(2, 2))
    k = v["params"]["kernel"]
    expected = lax.conv_general_dilated(
        x, k, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    np.testing.assert_allclose(y, expected + v["params"]["bias"][None, None, None], rtol=1e-5)
    y, v = init(nn.conv)(KEY, x, 6, (3, 3), feature_group_count=3, bias=False)
    assert v["params"]["kernel"].shape == (3, 3, 1, 6) and y.shape == (2, 6, 6, 6)
    with pytest.raises(ValueError, match="not divisible by feature_group_count=2"):
        init(nn.conv)(KEY, x, 4, (3, 3), feature_group_count=2)
    y, v = init(nn.conv_transpose)(KEY, x, 2, (3, 3), strides=(2, 2))
    assert y.shape == (2, 12, 12, 2)
    expected = lax.conv_transpose(x, v["params"]["kernel"], (2, 2), "SAME")
    np.testing.assert_allclose(y, expected + v["params"]["bias"][None, None, None], rtol=1e-5)


def test_embedding_lookup_and_attend() -> None:
    def f(scope: Scope, ids: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
        emb = nn.embedding(scope, 10, 4)
        return emb.lookup(ids), emb.attend(q)

    ids = jnp.array([[1, 2], [3, 9]])
    q = random.normal(random.key(1), (3, 4))
    (rows, logits), v = init(f)(KEY, ids, q)
    table = v["params"]["table"]
    np.testing.assert_allclose(rows, table[ids])
    np.testing.assert_allclose(logits, q @ table.T, rtol=1e-5)
    with pytest.raises(ValueError, match="integer indices"):
        init(f)(KEY, jnp.ones(2), q)


def test_layer_norm_and_group_norm() -> None:
    x = random.normal(random.key(1), (2, 4, 6)) * 3 + 1
    y, v = init(nn.layer_norm)(KEY, x)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(y, (x - mean) / jnp.sqrt(var + 1e-6), rtol=1e-4, atol=1e-5)
    assert v["params"]["scale"].shape == (6,)
    y, v = init(nn.group_norm)(KEY, x, num_groups=3)
    g = x.reshape(2, 4, 3, 2)
    gm, gv = g.mean((1, 3), keepdims=True), g.var((1, 3), keepdims=True)
    expected = ((g - gm) / jnp.sqrt(gv + 1e-6)).reshape(x.shape)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    y2, _ = init(nn.group_norm)(KEY, x, num_groups=None, group_size=2)
    np.testing.assert_allclose(y2, y, rtol=1e-5)
    with pytest.raises(ValueError, match="exactly one of num_groups and group_size"):
        init(nn.group_norm)(KEY, x, num_groups=None)
    with pytest.raises(ValueError, match="not a multiple of group_size=4"):
        init(nn.group_norm)(KEY, x, num_groups=None, group_size=4)
    with pytest.raises(ValueError, match="not divisible by num_groups=4"):
        init(nn.group_norm)(KEY, x, num_groups=4)


def test_dropout() -> None:
    x = jnp.ones((100,))

    def f(scope: Scope, x: jax.Array, deterministic: bool) -> jax.Array:
        return nn.dropout(scope, x, 0.5, deterministic=deterministic)

    y = apply(f)({}, x, False, rngs={"dropout": random.key(1)})
    assert set(np.unique(np.asarray(y)).tolist()) <= {0.0, 2.0}
    np.testing.assert_allclose(apply(f)({}, x, True), x)
    given = apply(lambda s, x: nn.dropout(s, x, 0.5, rng=random.key(1)))({}, x)
    mask = random.bernoulli(random.key(1), 0.5, (100,))
    np.testing.assert_allclose(given, jnp.where(mask, 2.0, 0.0))


def test_pooling() -> None:
    x = random.normal(random.key(1), (2, 4, 4, 3))
    y = nn.max_pool(x, (2, 2), strides=(2, 2))
    np.testing.assert_allclose(y, x.reshape(2, 2, 2, 2, 2, 3).max((2, 4)))
    y = nn.avg_pool(x, (2, 2), strides=(2, 2))
    np.testing.assert_allclose(y, x.reshape(2, 2, 2, 2, 2, 3).mean((2, 4)), rtol=1e-6)
    y = nn.min_pool(x[0], (2, 2), strides=(2, 2))  # unbatched
    np.testing.assert_allclose(y, x[0].reshape(2, 2, 2, 2, 3).min((1, 3)))
    y = nn.avg_pool(x, (3, 3), padding="SAME", count_include_pad=False)
    assert y.shape == x.shape
    np.testing.assert_allclose(y[0, 0, 0], x[0, :2, :2].mean((0, 1)), rtol=1e-5)
    y = nn.max_pool(x, (3, 3), padding=((1, 1), (1, 1)))
    assert y.shape == x.shape
    with pytest.raises(pm.LayerConfigError, match="different lengths"):
        nn.max_pool(x, (2, 2), strides=(1,))


def test_dot_product_attention_matches_softmax_attention() -> None:
    q = random.normal(random.key(1), (2, 5, 3, 4))
    k = random.normal(random.key(2), (2, 7, 3, 4))
    val = random.normal(random.key(3), (2, 7, 3, 4))
    y = apply(nn.dot_product_attention)({}, q, k, val)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / 2.0
    expected = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, -1), val)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="incompatible query"):
        apply(nn.dot_product_attention)({}, q, k[..., :2], val)
    with pytest.raises(ValueError, match="between the batch and the heads"):
        apply(nn.dot_product_attention)({}, q, k, val, axis=3)
    dropped = apply(nn.dot_product_attention)(
        {}, q, k, val, dropout_rate=0.5, rngs={"dropout": random.key(4)}
    )
    assert dropped.shape == y.shape and not np.allclose(dropped, y)


def test_multi_head_attention_masks_and_errors() -> None:
    x = random.normal(random.key(1), (2, 4, 8))
    pad = jnp.array([[True, True, True, False], [True, True, False, False]])
    y, v = init(nn.multi_head_dot_product_attention)(
        KEY, x, x, num_heads=2, padding_mask=pad, deterministic=True
    )
    # Padded key positions do not influence real query positions.
    x2 = x.at[0, 3].set(100.0)
    y2 = apply(nn.multi_head_dot_product_attention)(
        v, x2, x2, num_heads=2, padding_mask=pad, deterministic=True
    )
    np.testing.assert_allclose(y[0, :3], y2[0, :3], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        init(nn.multi_head_dot_product_attention)(KEY, x, None, num_heads=3)
    with pytest.raises(ValueError, match=r"\(batch, length, features\)"):
        init(nn.multi_head_dot_product_attention)(KEY, x[0], None, num_heads=2)


def test_initializers_and_activations_are_jax() -> None:
    assert nn.initializers.zeros_init() is jax.nn.initializers.zeros
    assert nn.initializers.ones_init() is jax.nn.initializers.ones
    np.testing.assert_allclose(nn.relu(jnp.array([-1.0, 2.0])), jnp.array([0.0, 2.0]))
    assert nn.activation.gelu is jax.nn.gelu


@contextlib.contextmanager
def flax_promotion() -> Iterator[None]:
    """Flax's pooling relies on JAX's standard promotion (the suite runs strict)."""
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        yield


POOL_CASES = [
    ((4, 6, 3), dict(window_shape=(3, 2), strides=None, padding="SAME")),  # no batch axis
    ((2, 5, 7, 3), dict(window_shape=[2, 3], strides=(1, 2), padding=((1, 0), (0, 2)))),
    ((2, 2, 5, 7, 3), dict(window_shape=(2, 3), strides=[1, 2], padding="SAME")),
    ((3, 9, 2), dict(window_shape=(4,), strides=(3,), padding="VALID")),
]


@pytest.mark.parametrize(("shape", "case"), POOL_CASES, ids=str)
def test_pooling_matches_flax_values_and_gradients_under_jit(shape, case) -> None:
    """The pooling functions are pytreemod.nn.functional's: same numbers and same
    gradients as Flax's, also under ``jit(grad)``."""
    pooling = pytest.importorskip("flax.linen.pooling")
    x = random.normal(random.key(2), shape)
    pairs = [
        (nn.max_pool, pooling.max_pool, {}),
        (nn.min_pool, pooling.min_pool, {}),
        (nn.avg_pool, pooling.avg_pool, {}),
        (nn.avg_pool, pooling.avg_pool, dict(count_include_pad=False)),
    ]
    for ours, theirs, extra in pairs:
        kw = {**case, **extra}
        if kw["strides"] is not None:
            kw_flax = {**kw, "strides": tuple(kw["strides"])}
        else:
            kw_flax = kw
        kw_flax = {**kw_flax, "window_shape": tuple(kw["window_shape"])}
        weights = random.normal(random.key(3), ours(x, **kw).shape)
        g = jax.jit(jax.grad(lambda x, f=ours, kw=kw, w=weights: (f(x, **kw) * w).sum()))(x)
        with flax_promotion():
            np.testing.assert_allclose(ours(x, **kw), theirs(x, **kw_flax), rtol=1e-6, atol=1e-6)
            g_flax = jax.grad(lambda x, f=theirs, kw=kw_flax, w=weights: (f(x, **kw) * w).sum())(x)
        np.testing.assert_allclose(g, g_flax, rtol=1e-6, atol=1e-6)


def test_pooling_takes_numpy_and_integer_inputs_as_flax_does() -> None:
    pooling = pytest.importorskip("flax.linen.pooling")
    x = np.arange(24, dtype=np.int32).reshape(1, 4, 6, 1)
    for ours, theirs in [
        (nn.max_pool, pooling.max_pool),
        (nn.min_pool, pooling.min_pool),
        (nn.avg_pool, pooling.avg_pool),
    ]:
        with flax_promotion():
            y, y_flax = ours(x, (2, 2)), theirs(x, (2, 2))
        assert y.dtype == y_flax.dtype
        np.testing.assert_array_equal(y, y_flax)
    y = nn.pool(x, 0, lax.add, (2, 3), (), "VALID")
    np.testing.assert_array_equal(y, pooling.pool(x, 0, lax.add, (2, 3), (1, 1), "VALID"))
