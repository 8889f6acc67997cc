"""adapters.nnx's norms and contractions go through ``pm.trace_once(inline=True)``
inside staged traces: the same jaxpr as the math traced directly, and user
contractions and named-axis norms left as written (the cache's own laws are in
tests/pytreemod/test_trace_cache.py)."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import pytreemod as pm
from adapters import nnx
from adapters.nnx.nn import normalization as norm_mod


class _Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.norm = nnx.LayerNorm(4, rngs=rngs)
        self.rms = nnx.RMSNorm(4, rngs=rngs)
        self.up = nnx.Linear(4, 4, rngs=rngs)
        self.down = nnx.LinearGeneral(4, 4, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.gelu(self.up(self.rms(self.norm(x)))))


def _model() -> Any:
    rngs = nnx.Rngs(0)
    return nnx.List([_Block(rngs), _Block(rngs)])


def _loss(blocks: Any, x: jax.Array) -> jax.Array:
    for block in blocks:
        x = block(x)
    return jnp.mean(x**2)


def _grad_jaxpr(graphdef: Any, state: Any, x: jax.Array) -> str:
    def grads(state: Any) -> Any:
        return jax.grad(lambda s: _loss(nnx.merge(graphdef, s), x))(state)

    return str(jax.make_jaxpr(grads)(state))


def test_the_layers_trace_once_and_give_the_direct_jaxpr() -> None:
    # The same equations in the same order: the same program, so the same bits.
    x = jnp.ones((3, 4))
    graphdef, state = nnx.split(_model())
    jaxpr = _grad_jaxpr(graphdef, state, x)
    with pm.disable_trace_once():
        direct = _grad_jaxpr(graphdef, state, x)
    assert "jit" not in jaxpr  # inlined: no nested call equation
    assert jaxpr == direct


def test_a_users_dot_general_is_called_every_time() -> None:
    seen: list[int] = []

    def dot_general(*args: Any, **kwargs: Any) -> jax.Array:
        seen.append(1)
        return lax.dot_general(*args, **kwargs)

    layer = nnx.Linear(3, 3, dot_general=dot_general, rngs=nnx.Rngs(0))
    general = nnx.LinearGeneral(3, 3, dot_general=dot_general, rngs=nnx.Rngs(0))
    jax.make_jaxpr(lambda x: general(general(layer(layer(x)))))(jnp.ones((2, 3)))
    assert len(seen) == 4


def test_a_named_axis_norm_is_not_traced_once(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[int] = []
    once = norm_mod._ONCE[norm_mod._layer_norm]

    def spy(*args: Any) -> Any:
        used.append(1)
        return once(*args)

    monkeypatch.setitem(norm_mod._ONCE, norm_mod._layer_norm, spy)
    norm = nnx.LayerNorm(3, axis_name="i", rngs=nnx.Rngs(0))
    out = jax.jit(jax.vmap(norm, axis_name="i"))(jnp.arange(12.0).reshape(4, 1, 3))
    assert out.shape == (4, 1, 3) and not used
    jax.make_jaxpr(nnx.LayerNorm(3, rngs=nnx.Rngs(0)))(jnp.ones((2, 3)))
    assert used
