"""A 100-block residual network by ``lift.remat_scan`` with ``lengths=(10, 10)``: one block
traced, parameters and batch statistics stacked ``(10, 10, ...)``, the same values as the
unrolled loop, and a compiled program whose size does not grow with depth."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from adapters.core import Scope, apply, init, lift, nn

Array = jax.Array


def block(scope: Scope, x: Array, train: bool = True) -> Array:
    h = scope.child(nn.dense, "dense")(x, x.shape[-1])
    h = scope.child(nn.batch_norm, "bn")(h, use_running_average=not train, momentum=0.9)
    return x + 0.1 * nn.relu(h)


def big_resnet(scope: Scope, x: Array, lengths: tuple[int, ...] = (10, 10)) -> Array:
    return lift.remat_scan(block, lengths=lengths)(scope, x)


def hand_block(p: dict, stats: dict, x: Array) -> tuple[Array, dict]:
    h = x @ p["dense"]["kernel"] + p["dense"]["bias"][None]
    mean, var = h.mean(0), h.var(0)
    new_stats = {
        "mean": stats["mean"] + 0.1 * (mean - stats["mean"]),
        "var": stats["var"] + 0.1 * (var - stats["var"]),
    }
    h = (h - mean[None]) / jnp.sqrt(var[None] + 1e-5)
    h = h * p["bn"]["scale"][None] + p["bn"]["bias"][None]
    return x + 0.1 * jax.nn.relu(h), new_stats


def test_hundred_blocks_match_the_unrolled_loop() -> None:
    x = random.normal(random.key(1), (8, 4))
    _y, v = init(big_resnet)(random.key(0), x)
    assert v["params"]["dense"]["kernel"].shape == (10, 10, 4, 4)
    assert v["batch_stats"]["bn"]["mean"].shape == (10, 10, 4)
    k = v["params"]["dense"]["kernel"].reshape(100, 4, 4)
    assert len({float(k[i, 0, 0]) for i in range(100)}) == 100  # independent inits
    y2, updates = apply(big_resnet, mutable=["batch_stats"])(v, x)
    h = x
    flat = jax.tree.map(lambda a: a.reshape(100, *a.shape[2:]), v)
    new_means = []
    for i in range(100):
        p = jax.tree.map(lambda a, i=i: a[i], flat["params"])
        s = jax.tree.map(lambda a, i=i: a[i], flat["batch_stats"]["bn"])
        h, new = hand_block(p, s, h)
        new_means.append(new["mean"])
    np.testing.assert_allclose(y2, h, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        updates["batch_stats"]["bn"]["mean"].reshape(100, 4),
        jnp.stack(new_means),
        rtol=1e-4,
        atol=1e-5,
    )


def test_gradients_and_constant_program_size() -> None:
    x = random.normal(random.key(1), (8, 4))
    sizes = {}
    for lengths in ((10, 10), (20, 10)):
        _, v = init(big_resnet)(random.key(0), x, lengths)

        def loss(params: dict, stats: dict, lengths: tuple[int, ...] = lengths) -> Array:
            y, _ = apply(big_resnet, mutable=["batch_stats"])(
                {"params": params, "batch_stats": stats}, x, lengths
            )
            return jnp.mean(y**2)

        grad_fn = jax.grad(loss)
        g = grad_fn(v["params"], v["batch_stats"])
        assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(g))
        sizes[lengths] = len(jax.make_jaxpr(grad_fn)(v["params"], v["batch_stats"]).eqns)
    assert sizes[(10, 10)] == sizes[(20, 10)]
