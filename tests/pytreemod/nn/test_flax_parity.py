"""A pre-LN transformer block's training step traces to the same program as Flax Linen's.

The layer math is written as Flax writes it (one-pass float32 LayerNorm statistics, query
scaling before the logits einsum, DenseGeneral projections): the gradient jaxpr of a
block built from pytreemod layers uses no primitive more often than the Linen block given
the same parameters does, so XLA gets the same program and the step runs at Linen's speed.
"""

import collections
from typing import Any

import jax
import jax.numpy as jnp

import pytreemod as pm

from ._compare import close, linen, make, randn, standard_promotion

D, HEADS, T, B = 32, 4, 8, 2


class Block(pm.Module):
    ln1: pm.nn.LayerNorm
    attn: pm.nn.MultiHeadAttention
    ln2: pm.nn.LayerNorm
    mlp: pm.nn.MLP

    def __init__(self, *, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.ln1, self.ln2 = pm.nn.LayerNorm(D), pm.nn.LayerNorm(D)
        self.attn = pm.nn.MultiHeadAttention(HEADS, D, key=k1)
        self.mlp = pm.nn.MLP(D, 4 * D, D, activation=jax.nn.gelu, key=k2)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.mlp(self.ln2(x))


def _primitives(jaxpr: Any) -> collections.Counter[str]:
    return collections.Counter(e.primitive.name for e in jaxpr.eqns)


def test_block_matches_linen_numerically_and_its_step_in_primitives() -> None:
    nn = linen()

    class LinenBlock(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
            attn = nn.MultiHeadDotProductAttention(HEADS, name="attn")
            x = x + attn(nn.LayerNorm(name="ln1")(x), mask=mask)
            h = nn.Dense(4 * D, name="fc1")(nn.LayerNorm(name="ln2")(x))
            return x + nn.Dense(D, name="fc2")(jax.nn.gelu(h))

    block = make(Block, key=jax.random.key(0))
    p = pm.to_variables(block)["params"]
    flax_params = {
        "ln1": p["ln1"],
        "ln2": p["ln2"],
        "attn": p["attn"],
        "fc1": p["mlp"]["layers"][0],
        "fc2": p["mlp"]["layers"][1],
    }
    x = randn(jax.random.key(1), (B, T, D))
    mask = pm.nn.make_causal_mask(jnp.ones((B, T)))

    def ours(m: Block, v: jax.Array) -> jax.Array:
        return jnp.sum(m(v, mask) ** 2)

    def theirs(params: dict, v: jax.Array) -> jax.Array:
        return jnp.sum(LinenBlock().apply({"params": params}, v, mask) ** 2)

    with standard_promotion():
        ref = jax.jit(theirs)(flax_params, x)
        theirs_jaxpr = jax.make_jaxpr(jax.grad(theirs, argnums=(0, 1)))(flax_params, x)
    close(jax.jit(ours)(block, x), ref, tol=1e-4)
    with pm.disable_trace_once():  # every equation inline, as Linen's
        ours_jaxpr = jax.make_jaxpr(jax.grad(ours, argnums=(0, 1)))(block, x)
    extra = _primitives(ours_jaxpr) - _primitives(theirs_jaxpr)
    assert not extra, f"primitives pytreemod's step has beyond Linen's: {dict(extra)}"
