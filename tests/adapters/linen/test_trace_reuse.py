"""Linen layers reuse the trace of repeated identical calls, with Flax's values."""

from typing import Any

import flax.linen as flax_nn
import jax
import jax.numpy as jnp
import numpy as np

import adapters.linen as nn


def _tower(lib: Any) -> Any:
    class Tower(lib.Module):
        @lib.compact
        def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
            for _ in range(4):
                y = lib.Conv(8, (3, 3), use_bias=False)(x)
                y = lib.BatchNorm(use_running_average=not train, momentum=0.9)(y)
                x = x + lib.relu(y)
            x = lib.max_pool(x, (2, 2), strides=(2, 2))
            return lib.Dense(3)(x.reshape(x.shape[0], -1))

    return Tower()


def _jit_equations(jaxpr: Any) -> list[str]:
    return [str(e.params["name"]) for e in jaxpr.eqns if e.primitive.name == "jit"]


def test_identical_blocks_become_one_reused_trace() -> None:
    x = jnp.ones((2, 8, 8, 8))
    model = _tower(nn)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), x))
    jaxpr = jax.make_jaxpr(
        lambda v, x: model.apply(v, x, mutable=["batch_stats"]),
    )(variables, x).jaxpr
    names = _jit_equations(jaxpr)
    # the four identical convolutions and normalisations are nested jits sharing a trace
    assert names.count("conv") == 4
    assert names.count("normalize") == 4
    convs = [e.params["jaxpr"] for e in jaxpr.eqns if e.params.get("name") == "conv"]
    assert all(c is convs[0] for c in convs)


def test_values_equal_flax_under_jit() -> None:
    x = jax.random.normal(jax.random.key(1), (2, 8, 8, 8))
    ours, theirs = _tower(nn), _tower(flax_nn)
    key = jax.random.key(0)
    a, b = jax.jit(lambda x: ours.init(key, x))(x), jax.jit(lambda x: theirs.init(key, x))(x)
    jax.tree.map(
        lambda p, q: np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-6), dict(a), dict(b)
    )
    v = theirs.init(key, x)
    out_ours = jax.jit(lambda v, x: ours.apply(v, x, mutable=["batch_stats"]))(v, x)
    out_theirs = jax.jit(lambda v, x: theirs.apply(v, x, mutable=["batch_stats"]))(v, x)
    np.testing.assert_allclose(out_ours[0], out_theirs[0], rtol=1e-5, atol=1e-5)
    jax.tree.map(
        lambda p, q: np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6),
        dict(out_ours[1]),
        dict(out_theirs[1]),
    )


def test_eager_init_is_bitwise_flax() -> None:
    x = jax.random.normal(jax.random.key(1), (2, 8, 8, 8))
    a = _tower(nn).init(jax.random.key(0), x)
    b = _tower(flax_nn).init(jax.random.key(0), x)
    jax.tree.map(np.testing.assert_array_equal, dict(a), dict(b))
