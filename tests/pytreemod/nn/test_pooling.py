"""max/avg/min pooling vs jnp references and Flax."""

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from pytreemod.nn import functional as F

from ._compare import close, linen, randn

CASES = [
    dict(window_shape=(2, 2), strides=(2, 2), padding="VALID"),
    dict(window_shape=(3, 3), strides=(1, 2), padding="SAME"),
    dict(window_shape=(2, 3), strides=None, padding=((1, 0), (1, 1))),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_pools_match_flax(case: dict) -> None:
    nn = linen()
    from flax.linen import pooling

    x = randn(jax.random.key(0), (2, 6, 7, 3))

    def run(maxp, avgp, minp, x):
        return (
            maxp(x, **case),
            avgp(x, **case),
            minp(x, **case),
            avgp(x, count_include_pad=False, **case),
        )

    ours = jax.jit(run, static_argnums=(0, 1, 2))(F.max_pool, F.avg_pool, F.min_pool, x)
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        theirs = jax.jit(run, static_argnums=(0, 1, 2))(
            nn.max_pool, nn.avg_pool, pooling.min_pool, x
        )
    for a, b in zip(ours, theirs):
        close(a, b)


def test_pools_match_reshape_reference() -> None:
    x = randn(jax.random.key(1), (2, 4, 6, 3))
    blocks = x.reshape(2, 2, 2, 3, 2, 3)
    close(pm.nn.max_pool(x, (2, 2), (2, 2)), blocks.max((2, 4)))
    close(pm.nn.avg_pool(x, (2, 2), (2, 2)), blocks.mean((2, 4)))
    close(pm.nn.MaxPool((2, 2), (2, 2))(x), blocks.max((2, 4)))
    close(pm.nn.AvgPool((2, 2), (2, 2))(x), blocks.mean((2, 4)))
    close(pm.nn.MinPool((2, 2), (2, 2))(x), blocks.min((2, 4)))


def test_unbatched_and_integer_inputs() -> None:
    x = jnp.arange(8).reshape(4, 2, 1)
    assert pm.nn.max_pool(x, (2, 2)).tolist() == [[[3]], [[5]], [[7]]]
    assert pm.nn.max_pool(x.astype(jnp.float32)[None], (2, 2)).shape == (1, 3, 1, 1)


def test_pool_errors() -> None:
    with pytest.raises(pm.ShapeError, match=r"max_pool: x f32\[4\] has 1 axis but a 2-D window"):
        F.max_pool(jnp.ones(4), (2, 2))
    with pytest.raises(pm.LayerConfigError, match=r"strides \(1,\) and window_shape \(2, 2\)"):
        F.max_pool(jnp.ones((1, 4, 4, 1)), (2, 2), (1,))


@pytest.mark.parametrize("pool", ["max_pool", "min_pool", "avg_pool"])
def test_pooling_is_differentiable_under_jit(pool: str) -> None:
    fn = getattr(pm.nn, pool)
    x = jax.random.normal(jax.random.key(0), (2, 8, 8, 3))
    grad = jax.jit(jax.grad(lambda x: fn(x, (2, 2), strides=(2, 2)).sum()))(x)
    # every input lands in exactly one non-overlapping window: max/min route one unit of
    # gradient per window, the average spreads it evenly.
    expected = 2 * 4 * 4 * 3 if pool != "avg_pool" else x.size / 4
    assert float(grad.sum()) == pytest.approx(expected)
