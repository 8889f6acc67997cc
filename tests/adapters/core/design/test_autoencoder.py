"""An auto-encoder: encoder and decoder as separate scope functions under one root, used
together or on their own (the slides' multiple-methods module)."""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from adapters.core import Scope, apply, init, nn

Array = jax.Array


def mlp(scope: Scope, x: Array, widths: Sequence[int]) -> Array:
    for i, width in enumerate(widths):
        x = scope.child(nn.dense, f"layer_{i}")(x, width)
        if i < len(widths) - 1:
            x = nn.relu(x)
    return x


INPUT_SHAPE = (4, 4)


def encode(scope: Scope, x: Array) -> Array:
    assert x.shape[-2:] == INPUT_SHAPE
    return scope.child(mlp, "encoder")(jnp.reshape(x, (x.shape[0], -1)), (8, 3))


def decode(scope: Scope, z: Array) -> Array:
    z = scope.child(mlp, "decoder")(z, (8, int(np.prod(INPUT_SHAPE))))
    return jnp.reshape(nn.sigmoid(z), (z.shape[0], *INPUT_SHAPE))


def autoencoder(scope: Scope, x: Array) -> Array:
    return decode(scope, encode(scope, x))


def test_autoencoder_methods_share_variables() -> None:
    x = random.uniform(random.key(1), (5, *INPUT_SHAPE))
    y, v = init(autoencoder)(random.key(0), x)
    assert y.shape == x.shape
    assert set(v["params"]) == {"encoder", "decoder"}
    z = apply(encode)(v, x)
    assert z.shape == (5, 3)
    np.testing.assert_allclose(apply(decode)(v, z), y, rtol=1e-6)
    # By hand on the variables dict.
    p = v["params"]["encoder"]
    h = jax.nn.relu(x.reshape(5, -1) @ p["layer_0"]["kernel"] + p["layer_0"]["bias"][None])
    np.testing.assert_allclose(
        z, h @ p["layer_1"]["kernel"] + p["layer_1"]["bias"][None], rtol=1e-5
    )


def test_autoencoder_learns_to_reconstruct() -> None:
    x = random.uniform(random.key(1), (16, *INPUT_SHAPE))
    _, v = init(autoencoder)(random.key(0), x)
    params = v["params"]

    @jax.jit
    def step(params: dict) -> tuple[dict, Array]:
        def loss(params: dict) -> Array:
            return jnp.mean((apply(autoencoder)({"params": params}, x) - x) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads), value

    first = last = None
    for _ in range(100):
        params, value = step(params)
        first = value if first is None else first
        last = value
    assert last is not None and first is not None and float(last) < float(first)
