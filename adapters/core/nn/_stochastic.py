"""``dropout`` as a scope function (math: ``pytreemod.nn.functional.dropout``)."""

import jax

from pytreemod.nn import functional as F

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
    if rng is None:
        rng = scope.make_rng("dropout")
    return F.dropout(inputs, rate, rng)
