"""Activations, pooling, Dropout, Sequential, BatchApply, dtypes and initializers of
adapters.linen, against flax.linen where a reference exists."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn
from adapters.linen import dtypes, initializers

from ._flax_compare import check, flax_linen, standard


def test_activations_are_jax_nn() -> None:
    assert nn.relu is jax.nn.relu and nn.gelu is jax.nn.gelu and nn.tanh is jnp.tanh
    assert nn.normalize is jax.nn.standardize


def test_prelu() -> None:
    x = jnp.linspace(-2.0, 2.0, 12).reshape(3, 4)
    out, variables = check(lambda m: m.PReLU(), x)
    assert variables["params"]["negative_slope"].shape == ()
    np.testing.assert_allclose(out, jnp.where(x < 0, 0.01 * x, x), rtol=1e-6)
    check(lambda m: m.PReLU(negative_slope_init=0.2, param_dtype=jnp.bfloat16), x, tol=1e-2)


@pytest.mark.parametrize("pool", ["max_pool", "min_pool", "avg_pool"])
@pytest.mark.parametrize(
    ("shape", "window", "kwargs"),
    [
        ((1, 4, 4, 2), (2, 2), {}),
        ((4, 4, 2), (2, 2), {"strides": (2, 2)}),
        ((2, 3, 5, 5, 1), (3, 3), {"padding": "SAME"}),
        ((1, 5, 2), (3,), {"padding": ((1, 1),), "strides": (2,)}),
    ],
)
def test_pooling_matches_flax(pool: str, shape: Any, window: Any, kwargs: dict[str, Any]) -> None:
    x = jax.random.normal(jax.random.key(0), shape)
    with standard():
        ref = getattr(flax_linen().pooling, pool)(x, window, **kwargs)
    np.testing.assert_allclose(getattr(nn.pooling, pool)(x, window, **kwargs), ref, rtol=1e-6)


def test_avg_pool_without_padding_in_the_count() -> None:
    x = jnp.arange(1.0, 5.0).reshape(1, 2, 2, 1)
    y = nn.avg_pool(x, (2, 2), padding="SAME", count_include_pad=False)
    np.testing.assert_allclose(y.ravel(), [10 / 4, 6 / 2, 7 / 2, 4 / 1])


def test_pool_with_custom_reduction_and_gradient() -> None:
    x = jnp.full((1, 3, 3, 1), 2.0)
    y = nn.pool(x, 1.0, jax.lax.mul, (2, 2), (1, 1), "VALID")
    np.testing.assert_allclose(y, jnp.full((1, 2, 2, 1), 16.0))
    grad = jax.grad(lambda x: nn.max_pool(x, (2, 2)).sum())(jnp.arange(9.0).reshape(1, 3, 3, 1))
    np.testing.assert_array_equal(grad.ravel(), [0, 0, 0, 0, 1, 1, 0, 1, 1])


def test_dropout_matches_flax_for_a_key() -> None:
    x = jnp.ones((6, 8))
    key = jax.random.key(3)
    check(lambda m: m.Dropout(0.4), x, deterministic=False, rng=key)
    check(lambda m: m.Dropout(0.4, broadcast_dims=(0,), deterministic=False), x, rng=key)
    check(lambda m: m.Dropout(0.4), x, deterministic=False, rngs={"dropout": key})


def test_dropout_draws_from_its_rng_collection() -> None:
    x = jnp.ones((6, 8))
    a = nn.Dropout(0.4, rng_collection="noise").apply(
        {}, x, False, rngs={"noise": jax.random.key(1)}
    )
    b = nn.Dropout(0.4).apply({}, x, False, rngs={"dropout": jax.random.key(1)})
    assert set(np.unique(np.asarray(a)).tolist()) == {0.0, float(jnp.float32(1 / 0.6))}
    np.testing.assert_array_equal(a, b)
    with pytest.raises(Exception, match="noise"):
        nn.Dropout(0.4, rng_collection="noise").apply(
            {}, x, False, rngs={"dropout": jax.random.key(1)}
        )


def test_dropout_limits_and_explicit_rng() -> None:
    x = jnp.ones((4, 4))
    assert nn.Dropout(0.0).apply({}, x, deterministic=False) is x
    np.testing.assert_array_equal(nn.Dropout(1.0).apply({}, x, deterministic=False), 0.0)
    y = nn.Dropout(0.5).apply({}, x, deterministic=True)
    np.testing.assert_array_equal(y, x)
    key = jax.random.key(0)
    a = nn.Dropout(0.5).apply({}, x, False, key)
    b = nn.Dropout(0.5).apply({}, x, False, jax.random.clone(key))
    np.testing.assert_array_equal(a, b)


def test_dropout_deterministic_given_twice_or_never() -> None:
    with pytest.raises(ValueError, match='"deterministic" must be passed'):
        nn.Dropout(0.5).apply({}, jnp.ones(3))
    with pytest.raises(ValueError, match='"deterministic" was passed to the constructor'):
        nn.Dropout(0.5, deterministic=True).apply({}, jnp.ones(3), deterministic=True)


def test_sequential_matches_flax_and_unpacks_tuples_and_dicts() -> None:
    x = jnp.ones((2, 3))
    check(lambda m: m.Sequential([m.Dense(4), m.relu, m.Dense(2)]), x)
    chain = nn.Sequential([lambda x: (x, 2 * x), lambda a, b: {"a": a, "b": b}, lambda a, b: a + b])
    np.testing.assert_allclose(chain.apply({}, x), 3 * x)


def test_sequential_errors() -> None:
    with pytest.raises(ValueError, match="'layers' must be a sequence, got 'int'"):
        nn.Sequential(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Empty Sequential module"):
        nn.Sequential([]).apply({}, jnp.ones(2))


def test_batch_apply_merges_and_splits_leading_axes() -> None:
    a, b = jnp.ones((2, 3, 4)), jnp.ones(4)

    def f(a: jax.Array, b: jax.Array) -> jax.Array:
        assert a.ndim == 2
        return a @ b

    np.testing.assert_allclose(nn.BatchApply(f)(a, b), jnp.full((2, 3), 4.0))
    np.testing.assert_allclose(nn.BatchApply(lambda a, c: a + c)(a, 2.0), 3 * a)
    with pytest.raises(ValueError, match="requires at least one input with ndim >= 2"):
        nn.BatchApply(lambda: 1)()


def test_dtypes() -> None:
    with standard():
        assert dtypes.canonicalize_dtype(jnp.int32(1)) == jnp.float32
    assert dtypes.canonicalize_dtype(jnp.int32(1), inexact=False) == jnp.int32
    assert dtypes.canonicalize_dtype(jnp.ones(2, jnp.bfloat16), None) == jnp.bfloat16
    (x,) = dtypes.promote_dtype(jnp.float32(1.0), dtype=jnp.float16)
    assert x.dtype == jnp.float16
    assert dtypes.promote_dtype(None, jnp.ones(2))[0] is None
    with pytest.raises(ValueError, match="Dtype must be inexact"):
        dtypes.canonicalize_dtype(jnp.ones(2), dtype=jnp.int32)
    with standard():
        x, y = dtypes.promote_dtype(jnp.ones(2, jnp.bfloat16), jnp.ones(2))
    assert x.dtype == y.dtype == jnp.float32


def test_initializer_builders() -> None:
    key = jax.random.key(0)
    np.testing.assert_array_equal(initializers.zeros_init()(key, (2, 3)), jnp.zeros((2, 3)))
    np.testing.assert_array_equal(initializers.ones_init()(key, (3, 2)), jnp.ones((3, 2)))
    params = nn.Dense(5, kernel_init=initializers.ones_init()).init(key, jnp.ones((3, 2)))
    np.testing.assert_array_equal(params["params"]["kernel"], jnp.ones((2, 5)))
