"""Weight standardisation: a dense layer sees its kernel standardised (zero mean, unit
variance per output unit) through ``lift.map_variables``; values and gradients match the
hand-written standardised layer."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from adapters.core import Scope, apply, init, lift, nn

Array = jax.Array


def standardize(x: Array, axis: int = 0, eps: float = 1e-8) -> Array:
    x = x - jnp.mean(x, axis=axis, keepdims=True)
    return x / jnp.sqrt(jnp.mean(jnp.square(x), axis=axis, keepdims=True) + eps)


def standardize_kernels(variables: Any) -> Any:
    params = dict(variables.get("params", {}))
    if "kernel" in params:
        params["kernel"] = standardize(params["kernel"])
    return {**variables, "params": params}


def ws_dense(scope: Scope, x: Array, features: int) -> Array:
    return lift.map_variables(
        nn.dense,
        "params",
        map_in_fn=standardize_kernels,
        init=scope.is_mutable_collection("params"),
    )(scope, x, features)


def model(scope: Scope, x: Array) -> Array:
    x = nn.relu(scope.child(ws_dense, "ws_0")(x, 8))
    return scope.child(ws_dense, "ws_1")(x, 2)


def hand(params: dict, x: Array) -> Array:
    for name in ("ws_0", "ws_1"):
        p = params[name]
        x = x @ standardize(p["kernel"]) + p["bias"][None]
        if name == "ws_0":
            x = jax.nn.relu(x)
    return x


def test_standardised_view_values_and_gradients() -> None:
    x = random.normal(random.key(1), (4, 3))
    y, v = init(model)(random.key(0), x)
    # init=True writes the view back through map_out_fn (the identity here): the stored
    # kernel starts standardised.
    np.testing.assert_allclose(v["params"]["ws_0"]["kernel"].mean(0), 0.0, atol=1e-5)
    # y saw the raw kernel standardised once; hand() standardises the stored (already
    # standardised) kernel again: equal up to float32 rounding of a second
    # standardisation, about 1e-6 and CPU-dependent, hence the looser atol here only.
    np.testing.assert_allclose(y, hand(v["params"], x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(apply(model)(v, x), hand(v["params"], x), rtol=1e-5, atol=1e-6)
    g = jax.grad(lambda v: apply(model)(v, x).sum())(v)
    g_hand = jax.grad(lambda p: hand(p, x).sum())(v["params"])
    for a, b in zip(jax.tree.leaves(g["params"]), jax.tree.leaves(g_hand)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
