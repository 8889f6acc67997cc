"""An MLP written against Scope (the slides' ``simple_mlp``), trained a few steps."""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import random

from adapters.core import Scope, apply, init, nn

Array = jax.Array


def simple_mlp(
    scope: Scope,
    x: Array,
    sizes: Sequence[int],
    act_fn: Callable[[Array], Array] = nn.relu,
) -> Array:
    i = scope.variable("counter", "i", jnp.zeros, ())
    i.value = i.value + random.uniform(scope.make_rng("counter"), ())
    for size in sizes[:-1]:
        x = act_fn(scope.child(nn.dense)(x, size))
    return scope.child(nn.dense, "out")(x, sizes[-1])


def hand_mlp(params: dict, x: Array) -> Array:
    for name in ("dense_0", "dense_1"):
        p = params[name]
        x = jax.nn.relu(x @ p["kernel"] + p["bias"][None])
    p = params["out"]
    return x @ p["kernel"] + p["bias"][None]


def test_mlp_init_and_apply() -> None:
    rngs = {"params": random.key(0), "counter": random.key(1)}
    x = random.normal(random.key(2), (5, 3))
    y, variables = init(simple_mlp)(rngs, x, sizes=(2, 8, 4))
    shapes = jax.tree.map(jnp.shape, variables["params"])
    assert shapes == {
        "dense_0": {"kernel": (3, 2), "bias": (2,)},
        "dense_1": {"kernel": (2, 8), "bias": (8,)},
        "out": {"kernel": (8, 4), "bias": (4,)},
    }
    counter = float(variables["counter"]["i"])
    assert 0.0 < counter < 1.0
    y2, updated = apply(simple_mlp, mutable=("counter",))(variables, x, (2, 8, 4), rngs=rngs)
    np.testing.assert_allclose(y, y2, rtol=1e-6)
    np.testing.assert_allclose(y2, hand_mlp(variables["params"], x), rtol=1e-5)
    assert float(updated["counter"]["i"]) > counter


def test_mlp_training_reduces_loss() -> None:
    rngs = {"params": random.key(0), "counter": random.key(1)}
    x = random.normal(random.key(2), (32, 3))
    target = jnp.sin(x.sum(-1, keepdims=True))
    _, variables = init(simple_mlp)(rngs, x, sizes=(16, 16, 1))
    params, state = variables["params"], {"counter": variables["counter"]}
    opt = optax.sgd(0.1, momentum=0.9)
    opt_state = opt.init(params)

    @jax.jit
    def step(params: dict, state: dict, opt_state: optax.OptState, key: Array) -> tuple:
        def loss_fn(params: dict) -> tuple[Array, dict]:
            y, new_state = apply(simple_mlp, mutable=["counter"])(
                {"params": params, **state}, x, (16, 16, 1), rngs={"counter": key}
            )
            return jnp.mean((y - target) ** 2), new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state)
        return optax.apply_updates(params, updates), new_state, opt_state, loss

    losses = []
    for i in range(50):
        params, state, opt_state, loss = step(params, state, opt_state, random.key(i))
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
