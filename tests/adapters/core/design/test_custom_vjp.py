"""A custom-vjp layer: a dense layer whose backward pass clips the parameter gradients,
built with ``lift.custom_vjp`` on ``lift.vjp``, checked against ``jax.custom_vjp`` by
hand."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from adapters.core import Scope, apply, init, lift, nn

Array = jax.Array


def layer(scope: Scope, x: Array) -> Array:
    return nn.tanh(nn.dense(scope, x, 3))


def fwd(scope: Scope, x: Array) -> tuple[Array, Any]:
    return lift.vjp(layer, scope, x)


def bwd(vjp_fn: Any, y_t: Array) -> Any:
    params_t, x_t = vjp_fn(y_t)
    return jax.tree.map(lambda g: jnp.clip(g, -0.1, 0.1), params_t), x_t


clipped_layer = lift.custom_vjp(layer, forward_fn=fwd, backward_fn=bwd)


def model(scope: Scope, x: Array) -> Array:
    return scope.child(clipped_layer, "clipped")(x) * 10.0


@jax.custom_vjp
def hand_layer(p: dict, x: Array) -> Array:
    return jnp.tanh(x @ p["kernel"] + p["bias"][None])


def hand_fwd(p: dict, x: Array) -> tuple[Array, Any]:
    y, vjp = jax.vjp(lambda p, x: jnp.tanh(x @ p["kernel"] + p["bias"][None]), p, x)
    return y, vjp


def hand_bwd(vjp: Any, g: Array) -> Any:
    gp, gx = vjp(g)
    return jax.tree.map(lambda a: jnp.clip(a, -0.1, 0.1), gp), gx


hand_layer.defvjp(hand_fwd, hand_bwd)


def test_forward_and_clipped_gradients_match_hand_written() -> None:
    x = random.normal(random.key(1), (4, 5))
    y, v = init(model)(random.key(0), x)
    p = v["params"]["clipped"]
    np.testing.assert_allclose(y, 10.0 * hand_layer(p, x), rtol=1e-5)
    g, gx = jax.grad(lambda v, x: apply(model)(v, x).sum(), argnums=(0, 1))(v, x)
    gp_hand, gx_hand = jax.grad(lambda p, x: (10.0 * hand_layer(p, x)).sum(), argnums=(0, 1))(p, x)
    np.testing.assert_allclose(g["params"]["clipped"]["kernel"], gp_hand["kernel"], rtol=1e-5)
    np.testing.assert_allclose(gx, gx_hand, rtol=1e-5)
    assert float(jnp.max(jnp.abs(g["params"]["clipped"]["kernel"]))) <= 0.1 + 1e-6
