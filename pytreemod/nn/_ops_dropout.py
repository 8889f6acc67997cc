"""Dropout: zero entries with probability ``rate`` and rescale the rest by ``1/(1-rate)``."""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Shaped

from .._errors import LayerConfigError
from .._shapecheck import AnyArray, checked
from .._sharding._ops import constrain, draw_kwargs, like
from ._validate import prng_key


def check_rate(rate: float, owner: str = "dropout") -> None:
    """``rate`` must be in ``[0, 1]``."""
    if not 0.0 <= rate <= 1.0:
        raise LayerConfigError(f"{owner}: rate={rate} is not a probability in [0, 1].")


@checked
def dropout(
    x: Shaped[AnyArray, "*shape"],
    rate: float,
    key: jax.Array | None,
    *,
    broadcast_dims: Sequence[int] = (),
    deterministic: bool = False,
    out_sharding: Any = None,
) -> Shaped[jax.Array, "*shape"]:
    """Flax ``Dropout``'s math: keep each entry with probability ``1 - rate`` (the same
    choice along ``broadcast_dims``) and divide kept entries by ``1 - rate``.

    ``deterministic=True`` or ``rate == 0`` returns ``x`` (no key needed); ``rate == 1``
    returns zeros (with a zero gradient, not NaN). ``out_sharding`` reshards the result
    (default: ``x``'s sharding).

    >>> import jax, jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> y = F.dropout(jnp.ones((2, 4)), 0.5, jax.random.key(0))
    >>> sorted(set(y.ravel().tolist()))
    [0.0, 2.0]
    """
    check_rate(rate)
    if deterministic or rate == 0.0:
        return constrain(jnp.asarray(x), out_sharding, x)
    if rate == 1.0:
        return constrain(jnp.zeros_like(x), out_sharding, x)
    if key is None:
        raise LayerConfigError(
            "dropout with rate > 0 in training mode needs a PRNG key: pass key=... (or "
            "deterministic=True for evaluation)."
        )
    prng_key("pytreemod.nn.functional.dropout", key, calling=True)
    keep_prob = 1.0 - rate
    shape = list(x.shape)
    for dim in broadcast_dims:
        shape[dim] = 1
    mask = jax.random.bernoulli(key, p=keep_prob, shape=tuple(shape), **draw_kwargs(x, shape))
    mask = like(jnp.broadcast_to(mask, x.shape), x)
    return constrain(lax.select(mask, x / keep_prob, jnp.zeros_like(x)), out_sharding, x)
