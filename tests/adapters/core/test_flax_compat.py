"""Code written against ``flax.core`` runs on ``adapters.core``: the same names and
signatures, and the same source giving the same outputs on the same variables.

Flax is only a reference here (the ``compare`` extra); the tests skip without it.
"""

import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random

import adapters.core as ac
from tests.helpers import tree_allclose

fc = pytest.importorskip("flax.core")
fnn = pytest.importorskip("flax.core.nn")
flift = pytest.importorskip("flax.core.lift")

NOT_PROVIDED = {"check_trace_level", "current_trace"}


def public(module: ModuleType) -> set[str]:
    return {
        n for n in dir(module) if not n.startswith("_") and not inspect.ismodule(getattr(module, n))
    }


def test_every_flax_core_name_exists() -> None:
    missing = public(fc) - public(ac) - NOT_PROVIDED
    assert not missing, missing


def test_every_lifted_transform_exists_with_flax_parameters() -> None:
    names = [
        "pack",
        "vmap",
        "scan",
        "remat",
        "checkpoint",
        "remat_scan",
        "jit",
        "jvp",
        "vjp",
        "value_and_grad",
        "custom_vjp",
        "while_loop",
        "cond",
        "switch",
        "map_variables",
        "swap_collection",
        "fold_rngs",
    ]
    for name in names:
        ours = inspect.signature(getattr(ac.lift, name)).parameters
        theirs = inspect.signature(getattr(flift, name)).parameters
        assert list(ours)[: len(theirs)] == list(theirs), name


def test_scope_has_flax_scope_methods() -> None:
    theirs = {n for n in dir(fc.Scope) if not n.startswith("_")}
    assert theirs - set(dir(ac.Scope)) == set()


def test_nn_has_flax_core_nn_functions() -> None:
    theirs = {n for n in public(fnn) if callable(getattr(fnn, n))}
    assert theirs - public(ac.nn) == set()
    for name in ("dense", "dense_general", "conv", "batch_norm", "layer_norm", "group_norm"):
        ours = list(inspect.signature(getattr(ac.nn, name)).parameters)
        flax_params = list(inspect.signature(getattr(fnn, name)).parameters)
        assert set(flax_params) <= set(ours), name


# ----------------------------------------------------------------------------- same source


def make_model(core: ModuleType, nn: ModuleType) -> Callable[..., Any]:
    def block(scope: Any, x: jax.Array, train: bool) -> jax.Array:
        y = scope.child(nn.conv, "conv")(x, 4, (3, 3), bias=False)
        y = scope.child(nn.batch_norm, "bn")(y, use_running_average=not train, momentum=0.9)
        return nn.relu(y) + x

    def model(scope: Any, x: jax.Array, train: bool) -> jax.Array:
        x = scope.child(nn.conv, "stem")(x, 4, (3, 3))
        x = scope.child(block, "block")(x, train)
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = scope.child(nn.group_norm, "gn")(x, num_groups=2)
        x = jnp.mean(x, axis=(1, 2))
        heads = core.lift.vmap(
            lambda s, h: nn.dense(s, h, 3),
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            axis_size=2,
        )
        return scope.child(heads, "heads")(x)

    return model


def test_same_source_same_outputs_on_flax_variables() -> None:
    x = random.normal(random.key(1), (2, 6, 6, 4))
    flax_model = make_model(fc, fnn)
    ours = make_model(ac, ac.nn)
    _, variables = fc.init(flax_model)(random.key(0), x, True)
    variables = fc.unfreeze(variables)
    y_flax, up_flax = fc.apply(flax_model, mutable=["batch_stats"])(variables, x, True)
    y_ours, up_ours = ac.apply(ours, mutable=["batch_stats"])(variables, x, True)
    np.testing.assert_allclose(y_ours, y_flax, rtol=1e-4, atol=1e-5)
    assert tree_allclose(fc.unfreeze(up_flax), up_ours, rtol=1e-4, atol=1e-5)
    y_flax = fc.apply(flax_model)(variables, x, False)
    np.testing.assert_allclose(ac.apply(ours)(variables, x, False), y_flax, rtol=1e-4, atol=1e-5)
    # Our init gives the same variable structure and shapes.
    _, our_vars = ac.init(ours)(random.key(0), x, True)
    assert jax.tree.map(jnp.shape, our_vars) == jax.tree.map(jnp.shape, variables)


def test_same_scan_source_same_outputs() -> None:
    def make(core: ModuleType, nn: ModuleType) -> Callable[..., Any]:
        def body(scope: Any, c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            c = jnp.tanh(nn.dense(scope, c, c.shape[-1]) + x)
            return c, c

        def model(scope: Any, c: jax.Array, xs: jax.Array) -> Any:
            return core.lift.scan(body, variable_axes={"params": 0}, split_rngs={"params": True})(
                scope, c, xs
            )

        return model

    c0, xs = jnp.ones((2, 3)), random.normal(random.key(1), (4, 2, 3))
    _, variables = fc.init(make(fc, fnn))(random.key(0), c0, xs)
    variables = fc.unfreeze(variables)
    expected = fc.apply(make(fc, fnn))(variables, c0, xs)
    got = ac.apply(make(ac, ac.nn))(variables, c0, xs)
    assert tree_allclose(got, expected, rtol=1e-5, atol=1e-6)
