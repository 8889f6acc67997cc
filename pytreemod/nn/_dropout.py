"""``Dropout``."""

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
from jaxtyping import Shaped

from .._errors import LayerConfigError
from .._module import Module, field
from .._shapecheck import AnyArray, checked, summary
from .._trace_cache import trace_once
from .._where import layer_name
from . import _ops_dropout as F
from ._validate import _is_int, integer, prng_key, probability

if TYPE_CHECKING:
    _Key = jax.Array
else:  # checked by the layer (a LayerConfigError naming its path), not by beartype
    _Key = Any


class Dropout(Module, typecheck=True):
    """Randomly zero entries in training, rescaling the rest by ``1 / (1 - rate)``.

    **Arguments:**

    - ``rate``: probability of dropping an entry (default ``0.5``).
    - ``broadcast_dims``: axes along which the same entries are dropped (default none).
    - ``deterministic``: the default mode of calls; ``True`` returns the input as it is
      (evaluation). Default ``False`` (training).

    A training call needs ``key=``, one PRNG key (randomness is explicit: no hidden
    state); it draws the mask of the whole input. A missing key, a number or a batch of
    keys is a ``LayerConfigError`` naming the layer's path in the model called
    (``Model.drop``). ``deterministic=`` at call time overrides the field, and an
    evaluation call ignores ``key``. No parameters.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> drop = pm.nn.Dropout(0.5)
    >>> x = jnp.ones((4, 8))                            # (*shape)
    >>> y = drop(x, key=jax.random.key(0))              # (*shape), entries 0 or 2
    >>> y.shape, sorted(set(y.ravel().tolist()))
    ((4, 8), [0.0, 2.0])
    >>> bool((drop(x, deterministic=True) == x).all())  # evaluation
    True
    """

    rate: float = field(static=True, default=0.5)
    broadcast_dims: tuple[int, ...] = field(static=True, default=())
    deterministic: bool = field(static=True, default=False)

    def __init__(
        self, rate: float = 0.5, *, broadcast_dims: Sequence[int] = (), deterministic: bool = False
    ):
        self.rate = probability("Dropout", "rate", rate)
        dims: Any = (broadcast_dims,) if _is_int(broadcast_dims) else broadcast_dims
        self.broadcast_dims = tuple(integer("Dropout", "broadcast_dims", d) for d in dims)
        self.deterministic = deterministic

    @trace_once
    @checked
    def __call__(
        self,
        x: Shaped[AnyArray, "*shape"],
        *,
        key: _Key | None = None,
        deterministic: bool | None = None,
        out_sharding: Any = None,
    ) -> Shaped[jax.Array, "*shape"]:
        """Drop entries of ``x`` using ``key`` (training) or return ``x`` (deterministic);
        ``out_sharding`` reshards the result (default: ``x``'s sharding)."""
        det = self.deterministic if deterministic is None else deterministic
        for d in self.broadcast_dims:
            if not -x.ndim <= d < x.ndim:
                raise LayerConfigError(
                    f"{layer_name(self, sys._getframe(1))}: broadcast_dims="
                    f"{self.broadcast_dims} names axis {d} but x {summary(x)} has {x.ndim} "
                    "axes; give axes of the input."
                )
        if not det and 0.0 < self.rate < 1.0:
            if key is None:
                raise LayerConfigError(
                    f"{layer_name(self, sys._getframe(1))}: Dropout(rate={self.rate}) in "
                    "training mode needs a PRNG key: call it with key=jax.random.key(seed) "
                    "(a fresh one each step: jax.random.fold_in(key, step)), or pass "
                    "deterministic=True in evaluation."
                )
            prng_key(layer_name(self, sys._getframe(1)), key, calling=True)
        return F.dropout(
            x,
            self.rate,
            None if det else key,  # evaluation ignores the key, whatever it is
            broadcast_dims=self.broadcast_dims,
            deterministic=det,
            out_sharding=out_sharding,
        )
