"""``Dropout`` (``flax.linen.stochastic``); the math is ``pytreemod.nn.functional.dropout``."""

from collections.abc import Sequence
from typing import Any

import jax

from pytreemod.nn import functional as F

from .module import Module, compact, merge_param

__all__ = ["Dropout"]


class Dropout(Module):
    """Dropout: zero each input with probability ``rate`` and scale the rest up.

    The kept entries are divided by ``1 - rate``, so the expected value is unchanged. In
    deterministic mode (evaluation) the input is returned as is. The random key is the
    call's ``rng`` if given, else drawn from the ``rng_collection`` stream, so training
    calls pass ``rngs={'dropout': key}`` to ``apply``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.Dropout(rate=0.5)
    >>> x = jnp.ones((2, 4))
    >>> y = layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(0)})
    >>> sorted(set(y.ravel().tolist()))  # dropped, or kept and scaled by 1 / (1 - 0.5)
    [0.0, 2.0]
    >>> bool((layer.apply({}, x, deterministic=True) == x).all())
    True

    Attributes:
        rate: the probability of zeroing an entry, in ``[0, 1]``; ``0`` returns the input
            and ``1`` zeros.
        broadcast_dims: axes along which one mask is shared (default ``()``: an
            independent draw per entry); e.g. ``(1,)`` on ``(batch, time, features)``
            drops the same features at every time step.
        deterministic: ``True`` turns dropout off. Give it here or at call time, not
            both (default ``None``: at call time).
        rng_collection: the rng stream the mask's key is drawn from (default
            ``'dropout'``).
    """

    rate: float
    broadcast_dims: Sequence[int] = ()
    deterministic: bool | None = None
    rng_collection: str = "dropout"

    @compact
    def __call__(
        self, inputs: Any, deterministic: bool | None = None, rng: jax.Array | None = None
    ) -> Any:
        """Apply dropout.

        Args:
            inputs: an array of any shape.
            deterministic: ``True`` returns ``inputs`` unchanged; give it exactly when the
                attribute is ``None``.
            rng: a key for the mask (default ``None``: drawn from ``rng_collection``).

        Returns:
            An array of the shape and dtype of ``inputs``.
        """
        deterministic = merge_param("deterministic", self.deterministic, deterministic)
        if self.rate == 0.0 or deterministic:
            return inputs
        if self.rate != 1.0 and rng is None:
            rng = self.make_rng(self.rng_collection)
        return F.dropout(inputs, self.rate, rng, broadcast_dims=tuple(self.broadcast_dims))
