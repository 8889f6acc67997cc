"""A normalizing flow: affine coupling layers with a forward and an inverse scope function
sharing the same variables; the inverse inverts, and the log-determinant matches the
Jacobian's."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from adapters.core import Scope, apply, init, nn

Array = jax.Array


def shift_and_log_scale(scope: Scope, x1: Array, features: int) -> tuple[Array, Array]:
    h = nn.tanh(scope.child(nn.dense, "hidden")(x1, 8))
    out = scope.child(nn.dense, "out", kernel_init=nn.initializers.normal(0.1))(h, 2 * features)
    shift, log_scale = jnp.split(out, 2, axis=-1)
    return shift, jnp.tanh(log_scale)


def coupling_forward(scope: Scope, x: Array) -> tuple[Array, Array]:
    x1, x2 = jnp.split(x, 2, axis=-1)
    shift, log_scale = shift_and_log_scale(scope, x1, x2.shape[-1])
    y2 = x2 * jnp.exp(log_scale) + shift
    return jnp.concatenate([y2, x1], axis=-1), log_scale.sum(-1)


def coupling_inverse(scope: Scope, y: Array) -> Array:
    y2, x1 = jnp.split(y, 2, axis=-1)
    shift, log_scale = shift_and_log_scale(scope, x1, y2.shape[-1])
    return jnp.concatenate([x1, (y2 - shift) * jnp.exp(-log_scale)], axis=-1)


def flow_forward(scope: Scope, x: Array, depth: int = 3) -> tuple[Array, Array]:
    logdet = jnp.zeros(x.shape[:1])
    for i in range(depth):
        x, ld = scope.child(coupling_forward, f"layer_{i}")(x)
        logdet = logdet + ld
    return x, logdet


def flow_inverse(scope: Scope, y: Array, depth: int = 3) -> Array:
    for i in reversed(range(depth)):
        y = scope.child(coupling_inverse, f"layer_{i}")(y)
    return y


def test_inverse_inverts_and_logdet_matches_jacobian() -> None:
    x = random.normal(random.key(1), (5, 4))
    (y, logdet), v = init(flow_forward)(random.key(0), x)
    np.testing.assert_allclose(apply(flow_inverse)(v, y), x, rtol=1e-5, atol=1e-5)

    def single(x: Array) -> Array:
        return apply(flow_forward)(v, x[None])[0][0]

    for i in range(5):
        jac = jax.jacobian(single)(x[i])
        _, expected = jnp.linalg.slogdet(jac)
        np.testing.assert_allclose(logdet[i], expected, rtol=1e-4, atol=1e-5)


def test_maximum_likelihood_step() -> None:
    x = random.normal(random.key(1), (64, 4)) * jnp.array([[1.0, 0.5, 2.0, 1.0]])
    _, v = init(flow_forward)(random.key(0), x)

    def nll(params: dict) -> Array:
        z, logdet = apply(flow_forward)({"params": params}, x)
        return jnp.mean(0.5 * jnp.sum(z**2, -1) - logdet)

    params = v["params"]
    first = nll(params)
    step = jax.jit(lambda p: jax.tree.map(lambda a, g: a - 0.05 * g, p, jax.grad(nll)(p)))
    for _ in range(30):
        params = step(params)
    assert float(nll(params)) < float(first)
