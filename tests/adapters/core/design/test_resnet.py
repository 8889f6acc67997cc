"""A small ResNet with batch norm written against Scope: train/eval modes, batch stats."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from adapters.core import Scope, apply, init, nn

Array = jax.Array


def residual_block(scope: Scope, x: Array, features: int, train: bool) -> Array:
    conv = lambda name: scope.child(nn.conv, name)
    bn = lambda name: scope.child(nn.batch_norm, name)
    y = conv("conv1")(x, features, (3, 3), bias=False)
    y = nn.relu(bn("bn1")(y, use_running_average=not train, momentum=0.9))
    y = conv("conv2")(y, features, (3, 3), bias=False)
    y = bn("bn2")(y, use_running_average=not train, momentum=0.9)
    if x.shape[-1] != features:
        x = conv("proj")(x, features, (1, 1), bias=False)
    return nn.relu(x + y)


def resnet(scope: Scope, x: Array, train: bool = True, num_classes: int = 10) -> Array:
    x = scope.child(nn.conv, "init_conv")(x, 8, (3, 3), bias=False)
    x = scope.child(nn.batch_norm, "init_bn")(x, use_running_average=not train)
    x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
    for i, features in enumerate((8, 16)):
        x = scope.child(residual_block, f"block_{i}")(x, features, train)
    x = jnp.mean(x, axis=(1, 2))
    return nn.log_softmax(scope.child(nn.dense, "head")(x, num_classes))


def test_resnet_variables_and_modes() -> None:
    x = random.normal(random.key(1), (4, 8, 8, 3))
    y, v = init(resnet)(random.key(0), x)
    assert y.shape == (4, 10)
    assert set(v) == {"params", "batch_stats"}
    assert v["params"]["block_1"]["proj"]["kernel"].shape == (1, 1, 8, 16)
    assert v["batch_stats"]["block_0"]["bn1"]["mean"].shape == (8,)
    # Training updates the running statistics; evaluation reads them and changes nothing.
    y_train, updates = apply(resnet, mutable=["batch_stats"])(v, x, True)
    moved = jax.tree.map(
        lambda a, b: not np.allclose(a, b), updates["batch_stats"], v["batch_stats"]
    )
    assert all(jax.tree.leaves(moved))
    y_eval = apply(resnet)({**v, **updates}, x, False)
    assert y_eval.shape == y_train.shape
    assert not np.allclose(y_eval, y_train)


def test_batch_norm_matches_hand_written() -> None:
    x = random.normal(random.key(1), (6, 3)) * 2 + 1

    def f(scope: Scope, x: Array, train: bool) -> Array:
        return nn.batch_norm(scope, x, use_running_average=not train, momentum=0.9)

    _, v = init(f)(random.key(0), x, True)
    y, new = apply(f, mutable=["batch_stats"])(v, x, True)
    mean, var = x.mean(0), x.var(0)
    np.testing.assert_allclose(
        y, (x - mean[None]) / jnp.sqrt(var[None] + 1e-5), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(new["batch_stats"]["mean"], 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(new["batch_stats"]["var"], 0.9 + 0.1 * var, rtol=1e-5)
    y_eval = apply(f)({**v, **new}, x, False)
    ra_mean, ra_var = new["batch_stats"]["mean"], new["batch_stats"]["var"]
    np.testing.assert_allclose(
        y_eval, (x - ra_mean[None]) / jnp.sqrt(ra_var[None] + 1e-5), rtol=1e-4, atol=1e-5
    )


def test_resnet_gradient_step_is_jittable() -> None:
    x = random.normal(random.key(1), (2, 8, 8, 3))
    labels = jnp.array([1, 3])
    _, v = init(resnet)(random.key(0), x)

    @jax.jit
    def loss(params: dict, stats: dict) -> tuple[Array, dict]:
        logp, updates = apply(resnet, mutable=["batch_stats"])(
            {"params": params, "batch_stats": stats}, x, True
        )
        return -jnp.mean(logp[jnp.arange(2), labels]), updates

    (value, updates), grads = jax.value_and_grad(loss, has_aux=True)(v["params"], v["batch_stats"])
    assert np.isfinite(float(value))
    assert jax.tree.structure(grads) == jax.tree.structure(v["params"])
    assert set(updates) == {"batch_stats"}
