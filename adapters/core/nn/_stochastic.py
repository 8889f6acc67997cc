"""``dropout`` as a scope function."""

import jax
import jax.numpy as jnp
from jax import lax

from .._scope import Scope

Array = jax.Array


def dropout(
    scope: Scope,
    inputs: Array,
    rate: float,
    deterministic: bool = False,
    rng: Array | None = None,
) -> Array:
    """Zero each input with probability ``rate`` and scale the rest by ``1 / (1 - rate)``.

    The key is ``rng`` or ``scope.make_rng('dropout')``; ``deterministic=True`` (or
    ``rate == 0``) returns the inputs unchanged.
    """
    if rate == 0.0 or deterministic:
        return inputs
    keep = 1.0 - rate
    if rng is None:
        rng = scope.make_rng("dropout")
    mask = jax.random.bernoulli(rng, p=keep, shape=inputs.shape)
    return lax.select(mask, inputs / keep, jnp.zeros_like(inputs))
