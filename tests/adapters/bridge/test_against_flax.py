"""A Linen model's variables made by real flax, moved into pytreemod through the bridge:
same outputs and the same BatchNorm statistics as flax's own ``apply``."""

from typing import Any

import flax.linen as fnn
import jax
import jax.numpy as jnp

import pytreemod as pm
from adapters import bridge
from adapters import linen as nn


def _define(lib: Any) -> Any:
    class Net(lib.Module):
        @lib.compact
        def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
            x = lib.Conv(4, (3,), padding="SAME")(x)
            x = lib.BatchNorm(use_running_average=not train, momentum=0.9)(x)
            return lib.Dense(2)(lib.relu(x))

    return Net()


def test_flax_variables_through_from_linen_match_flax_apply() -> None:
    x = jax.random.normal(jax.random.key(0), (2, 5, 3))
    flax_net, our_net = _define(fnn), _define(nn)
    variables = jax.tree.map(jnp.asarray, dict(flax_net.init(jax.random.key(1), x, train=False)))
    model = bridge.from_linen(our_net, variables)
    assert jnp.allclose(model(x, train=False), flax_net.apply(variables, x, train=False), atol=1e-5)
    out, new = pm.apply(model, x, mutable="batch_stats")
    expected, updates = flax_net.apply(variables, x, mutable=["batch_stats"])
    assert jnp.allclose(out, expected, atol=1e-5)
    got = new.to_linen()[1]["batch_stats"]["BatchNorm_0"]
    want = updates["batch_stats"]["BatchNorm_0"]
    assert jnp.allclose(got["mean"], want["mean"], atol=1e-5)
    assert jnp.allclose(got["var"], want["var"], atol=1e-5)
    # and back: flax runs the variables the pytreemod model holds
    module, back = new.to_linen()
    assert module is our_net
    assert jnp.allclose(
        flax_net.apply(back, x, train=False), our_net.apply(back, x, train=False), atol=1e-5
    )
