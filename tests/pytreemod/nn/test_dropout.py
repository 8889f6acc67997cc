"""Dropout: training/evaluation, keys, broadcast dims, rate edge cases, vs Flax."""

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm

from ._compare import close, linen, randn, run_linen


def test_training_drops_and_rescales() -> None:
    x = jnp.ones((100, 50))
    y = pm.nn.Dropout(0.3)(x, key=jax.random.key(0))
    kept = y != 0
    assert 0.6 < float(kept.mean()) < 0.8
    close(y[kept], jnp.full(int(kept.sum()), 1 / 0.7))


def test_matches_flax_given_the_same_key() -> None:
    nn = linen()
    x = randn(jax.random.key(1), (4, 8))
    key = jax.random.key(2)
    ours = pm.nn.Dropout(0.4, broadcast_dims=(0,))(x, key=key)
    ref = run_linen(nn.Dropout(0.4, broadcast_dims=(0,), deterministic=False), {}, x, rng=key)
    close(ours, ref, tol=0)
    assert bool(jnp.all((ours == 0).all(0) | (ours != 0).all(0)))  # same mask on every row


def test_evaluation_and_edge_rates() -> None:
    x = jnp.arange(6.0)
    assert pm.nn.Dropout(0.5)(x, deterministic=True) is not None
    close(pm.nn.Dropout(0.5, deterministic=True)(x), x, tol=0)
    close(pm.nn.Dropout(0.0)(x), x, tol=0)  # no key needed for rate 0
    zero = pm.nn.Dropout(1.0)
    close(zero(x, key=jax.random.key(0)), jnp.zeros(6), tol=0)
    grad = jax.grad(lambda v: zero(v, key=jax.random.key(0)).sum())(x)
    assert bool(jnp.all(jnp.isfinite(grad)))


def test_errors() -> None:
    with pytest.raises(pm.LayerConfigError, match=r"Dropout\(rate=0.5\) in training mode needs a"):
        pm.nn.Dropout(0.5)(jnp.ones(3))
    with pytest.raises(pm.LayerConfigError, match=r"rate=1.5 is not a probability"):
        pm.nn.Dropout(1.5)


def test_under_jit_with_a_fresh_key_per_step() -> None:
    drop = pm.nn.Dropout(0.5)
    step = pm.jit(lambda m, x, k: m(x, key=k))
    a = step(drop, jnp.ones(16), jax.random.key(0))
    b = step(drop, jnp.ones(16), jax.random.key(1))
    assert not bool(jnp.all(a == b))
