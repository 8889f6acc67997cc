"""``Dropout`` (``flax.nnx.nn.stochastic``); the math is ``pytreemod.nn.functional.dropout``."""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F

from ..module import Module, first_from
from ..pytreelib import data
from ..rnglib import Rngs, RngStream

__all__ = ["Dropout"]

_NO_DETERMINISTIC = (
    "No `deterministic` argument was provided to Dropout. Consider one of the following "
    "options:\n\n"
    "1. Pass `deterministic` to the Dropout constructor:\n\n"
    "  self.dropout = nnx.Dropout(..., deterministic=True/False)\n\n"
    "2. Pass `deterministic` to the Dropout __call__:\n\n"
    "  self.dropout(x, deterministic=True/False)\n\n"
    "3. Use `nnx.view` to create a view of the model with a specific `deterministic` "
    "value:\n\n"
    "  model_view = nnx.view(model, deterministic=True/False)\n"
)
_NO_RNGS = (
    "`deterministic` is False, but no `rngs` argument was provided to Dropout as either a "
    "__call__ argument or class attribute."
)


class Dropout(Module):
    """Zero each input with probability ``rate`` and scale the rest by ``1 / (1 - rate)``.

    ``model.train()`` turns dropout on and ``model.eval()`` off (they set
    ``deterministic``); a call's ``deterministic`` wins over the attribute. The mask's key
    comes from the call's ``rngs`` if given, else from the stream this layer forked at
    construction from ``rngs[rng_collection]`` (so a layer built with ``rngs`` draws a new
    mask on every call).

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=0))
    >>> sorted(set(layer(jnp.ones((2, 4))).ravel().tolist()))
    [0.0, 2.0]
    >>> layer.eval()
    >>> layer(jnp.ones(3)).tolist()
    [1.0, 1.0, 1.0]

    Args:
        rate: the probability of zeroing an entry (not the keep rate).
        broadcast_dims: axes along which one mask entry is shared (default ``()``).
        deterministic: ``True`` returns the inputs unchanged (default ``False``).
        rng_collection: the name of the stream keys are drawn from (default
            ``'dropout'``).
        rngs: a ``Rngs`` (its ``rng_collection`` stream is forked), a ``RngStream``
            (forked) or ``None`` (keys must then be given at call time).
    """

    def __init__(
        self,
        rate: float,
        *,
        broadcast_dims: Sequence[int] = (),
        deterministic: bool | None = False,
        rng_collection: str = "dropout",
        rngs: Rngs | RngStream | None = None,
    ) -> None:
        self.rate = rate
        self.broadcast_dims = broadcast_dims
        self.deterministic = deterministic
        self.rng_collection = rng_collection
        self.rngs: RngStream | None
        if isinstance(rngs, Rngs):
            self.rngs = rngs[rng_collection].fork()
        elif isinstance(rngs, RngStream):
            self.rngs = rngs.fork()
        elif rngs is None:
            self.rngs = data(None)
        else:
            raise TypeError(f"rngs must be a Rngs, RngStream or None, but got {type(rngs)}.")

    def __call__(
        self,
        inputs: Any,
        *,
        deterministic: bool | None = None,
        rngs: Rngs | RngStream | jax.Array | None = None,
    ) -> jax.Array:
        """Apply dropout.

        Args:
            inputs: an array of any shape.
            deterministic: ``True`` returns ``inputs`` as they are; ``None`` (the default)
                uses the attribute.
            rngs: a key, ``RngStream`` or ``Rngs`` for this call's mask; it wins over the
                layer's own stream.

        Returns:
            An array of the shape and dtype of ``inputs``.
        """
        deterministic = first_from(deterministic, self.deterministic, error_msg=_NO_DETERMINISTIC)
        if self.rate == 0.0 or deterministic:
            return inputs
        if self.rate == 1.0:  # zeros, with a zero (not NaN) gradient
            return jnp.zeros_like(inputs)
        source = first_from(rngs, self.rngs, error_msg=_NO_RNGS)
        if isinstance(source, Rngs):
            key = source[self.rng_collection]()
        elif isinstance(source, RngStream):
            key = source()
        elif isinstance(source, jax.Array):
            key = source
        else:
            raise TypeError(f"rngs must be a Rngs, RngStream or jax.Array, but got {type(source)}.")
        return F.dropout(inputs, self.rate, key, broadcast_dims=tuple(self.broadcast_dims))

    def set_view(self, deterministic: bool | None = None) -> None:
        """Set ``deterministic`` (when given); called by ``nnx.view``.

        Args:
            deterministic: ``True`` turns the masking off, ``False`` on.
        """
        if deterministic is not None:
            self.deterministic = deterministic
