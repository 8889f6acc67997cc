"""A tied auto-encoder: the decoder uses the encoder's kernel, transposed, through
``lift.map_variables`` (one parameter, two views)."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from adapters.core import Scope, apply, init, lift, nn

Array = jax.Array


def transpose(variables: Any) -> Any:
    return jax.tree.map(lambda k: k.T, variables)


def dense_no_bias(scope: Scope, x: Array, features: int) -> Array:
    return nn.dense(scope, x, features, bias=False)


def tied_autoencoder(scope: Scope, x: Array, latents: int) -> Array:
    tied = scope.push("tied")
    z = nn.sigmoid(dense_no_bias(tied, x, latents))
    decoder = lift.map_variables(dense_no_bias, "params", transpose, transpose)
    return decoder(tied.rewound(), z, x.shape[-1])


def hand(w: Array, x: Array) -> Array:
    return jax.nn.sigmoid(x @ w) @ w.T


def test_one_kernel_two_views() -> None:
    x = random.normal(random.key(1), (3, 6))
    y, v = init(tied_autoencoder)(random.key(0), x, 2)
    assert jax.tree.map(jnp.shape, v) == {"params": {"tied": {"kernel": (6, 2)}}}
    w = v["params"]["tied"]["kernel"]
    np.testing.assert_allclose(y, hand(w, x), rtol=1e-5)
    np.testing.assert_allclose(apply(tied_autoencoder)(v, x, 2), hand(w, x), rtol=1e-5)


def test_gradient_sums_both_uses() -> None:
    x = random.normal(random.key(1), (3, 6))
    _, v = init(tied_autoencoder)(random.key(0), x, 2)
    g = jax.grad(lambda v: jnp.sum(apply(tied_autoencoder)(v, x, 2) ** 2))(v)
    w = v["params"]["tied"]["kernel"]
    g_hand = jax.grad(lambda w: jnp.sum(hand(w, x) ** 2))(w)
    np.testing.assert_allclose(g["params"]["tied"]["kernel"], g_hand, rtol=1e-5)
