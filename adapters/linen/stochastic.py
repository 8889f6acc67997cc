"""``Dropout`` (``flax.linen.stochastic``); the math is ``pytreemod.nn.functional.dropout``."""

from collections.abc import Sequence
from typing import Any

import jax

from pytreemod.nn import functional as F

from .module import Module, compact, merge_param

__all__ = ["Dropout"]


class Dropout(Module):
    """Zero each input with probability ``rate`` and scale the rest by ``1 / (1 - rate)``.

    ``deterministic`` (here or at call time, exactly one of them) ``True`` returns the
    input unchanged. The mask is the same along ``broadcast_dims``. The key is the call's
    ``rng`` or ``make_rng(rng_collection)`` (``'dropout'``).
    """

    rate: float
    broadcast_dims: Sequence[int] = ()
    deterministic: bool | None = None
    rng_collection: str = "dropout"

    @compact
    def __call__(
        self, inputs: Any, deterministic: bool | None = None, rng: jax.Array | None = None
    ) -> Any:
        """Apply dropout to ``inputs`` (any shape)."""
        deterministic = merge_param("deterministic", self.deterministic, deterministic)
        if self.rate == 0.0 or deterministic:
            return inputs
        if self.rate != 1.0 and rng is None:
            rng = self.make_rng(self.rng_collection)
        return F.dropout(inputs, self.rate, rng, broadcast_dims=tuple(self.broadcast_dims))
