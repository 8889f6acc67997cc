"""max/avg/min pooling vs jnp references and Flax."""

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from pytreemod.nn import functional as F

from ._compare import close, linen

CASES = [
    dict(window_shape=(2, 2), strides=(2, 2), padding="VALID"),
    dict(window_shape=(3, 3), strides=(1, 2), padding="SAME"),
    dict(window_shape=(2, 3), strides=None, padding=((1, 0), (1, 1))),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_pools_match_flax(case: dict) -> None:
    nn = linen()
    from flax.linen import pooling

    x = jax.random.normal(jax.random.key(0), (2, 6, 7, 3))
    for ours, theirs in ((F.max_pool, nn.max_pool), (F.avg_pool, nn.avg_pool),
                         (F.min_pool, pooling.min_pool)):
        with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
            ref = theirs(x, **case)
        close(ours(x, **case), ref)
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        ref = nn.avg_pool(x, count_include_pad=False, **case)
    close(F.avg_pool(x, count_include_pad=False, **case), ref)


def test_pools_match_reshape_reference() -> None:
    x = jax.random.normal(jax.random.key(1), (2, 4, 6, 3))
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
    with pytest.raises(pm.ShapeError, match=r"max_pool: x f32\[4\] has 1 axes but a 2-D window"):
        F.max_pool(jnp.ones(4), (2, 2))
    with pytest.raises(pm.LayerConfigError, match=r"strides \(1,\) and window_shape \(2, 2\)"):
        F.max_pool(jnp.ones((1, 4, 4, 1)), (2, 2), (1,))
