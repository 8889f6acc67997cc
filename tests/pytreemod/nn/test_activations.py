"""pm.nn's activations: JAX's jitted ones re-exported as they are; the five JAX traces
again at every call wear trace_once (traced once per call configuration under a trace,
JAX's function as written when eager)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm
from pytreemod import _trace_cache

TRACED_ONCE = ["gelu", "relu", "relu6", "softmax", "logsumexp"]


@pytest.mark.parametrize("name", ["silu", "log_softmax", "sigmoid", "elu", "softplus"])
def test_jitted_activations_are_jax_nn_functions(name: str) -> None:
    assert getattr(pm.nn, name) is getattr(jax.nn, name)
    assert pm.nn.tanh is jnp.tanh


@pytest.mark.parametrize("name", TRACED_ONCE)
def test_traced_once_activations_match_jax_eagerly_and_under_grad(name: str) -> None:
    ours, theirs = getattr(pm.nn, name), getattr(jax.nn, name)
    assert ours.__wrapped__ is theirs and ours.__name__ == theirs.__name__
    x = jax.random.normal(jax.random.key(0), (4, 6)) * 4
    np.testing.assert_array_equal(ours(x), theirs(x))  # eager: JAX's function as written
    grad = lambda f: jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(f(x)))))(x)
    np.testing.assert_allclose(grad(ours), grad(theirs), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", TRACED_ONCE)
def test_traced_once_activations_trace_once_per_configuration(name: str) -> None:
    fn = getattr(pm.nn, name)

    def model(x: jax.Array) -> jax.Array:
        for _ in range(4):
            x = x + fn(x)
        return x

    _trace_cache._entries.clear()
    jaxpr = jax.make_jaxpr(model)(jnp.ones((2, 3)))
    nested = [e for e in jaxpr.eqns if e.primitive.name == "jit"]
    # One trace, replayed: four nested calls of one jaxpr, one cache entry.
    assert [e.params["name"] for e in nested] == [name] * 4
    assert len({id(e.params["jaxpr"]) for e in nested}) == 1 and len(_trace_cache._entries) == 1
    with pm.disable_trace_once():
        inline = jax.make_jaxpr(lambda x: model(x))(jnp.ones((2, 3)))  # a fresh trace
    assert name not in {e.params.get("name") for e in inline.eqns}


def test_static_arguments_key_the_trace() -> None:
    x = jnp.linspace(-3.0, 3.0, 8)
    for approximate in (False, True):  # one replay each, compiled as JAX's own function
        ours = jax.jit(pm.nn.gelu, static_argnums=1)(x, approximate)
        theirs = jax.jit(jax.nn.gelu, static_argnums=1)(x, approximate)
        np.testing.assert_array_equal(ours, theirs)
    assert not np.array_equal(pm.nn.gelu(x, approximate=False), pm.nn.gelu(x))
    rows = jax.jit(lambda x: pm.nn.softmax(x, axis=0))(x.reshape(2, 4))
    np.testing.assert_allclose(rows.sum(axis=0), np.ones(4), rtol=1e-6)
