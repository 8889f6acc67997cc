"""``MaxPool``, ``AvgPool`` and ``MinPool`` layers over the functional pools."""

from collections.abc import Sequence
from typing import Any

import jax
from jaxtyping import Shaped

from .._errors import LayerConfigError
from .._module import Module, field
from .._shapecheck import AnyArray, checked
from .._trace_cache import trace_once
from . import _ops_pool as F
from ._validate import nonempty_output, positive_ints


def _padding(
    name: str, padding: str | Sequence[tuple[int, int]], n: int
) -> str | tuple[tuple[int, int], ...]:
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID", "SAME_LOWER"):
            raise LayerConfigError(
                f"{name}: padding={padding!r} is not 'SAME', 'VALID' or 'SAME_LOWER' (or one "
                "(low, high) pair per window axis)."
            )
        return padding
    try:
        pads = tuple((int(lo), int(hi)) for lo, hi in padding)
    except (TypeError, ValueError):
        pads = ()
    if len(pads) != n:
        raise LayerConfigError(
            f"{name}: padding={padding!r} must be 'SAME', 'VALID' or {n} (low, high) pairs, "
            "one per window axis."
        )
    return pads


class _Pool(Module):
    window_shape: tuple[int, ...] = field(static=True)
    strides: tuple[int, ...] | None = field(static=True, default=None)
    padding: str | tuple[tuple[int, int], ...] = field(static=True, default="VALID")

    def __init__(
        self,
        window_shape: Sequence[int],
        strides: Sequence[int] | None = None,
        padding: str | Sequence[tuple[int, int]] = "VALID",
    ):
        name = type(self).__name__
        self.window_shape = positive_ints(name, "window_shape", window_shape, allow_int=False)
        n = len(self.window_shape)
        if strides is not None:
            strides = positive_ints(name, "strides", strides, allow_int=False)
            if len(strides) != n:
                raise LayerConfigError(
                    f"{name}: strides={strides} and window_shape={self.window_shape} have "
                    "different lengths; give one stride per window axis."
                )
        self.strides = strides
        self.padding = _padding(name, padding, n)


class MaxPool(_Pool, typecheck=True):
    """Maximum over windows (``functional.max_pool`` as a layer, e.g. in ``Sequential``).

    **Arguments:** ``window_shape`` (one size per window axis), ``strides`` (default:
    1 per axis), ``padding`` (``"VALID"`` default, ``"SAME"`` or ``(low, high)`` pairs).

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> pool = pm.nn.MaxPool((2, 2), strides=(2, 2))
    >>> pool(jnp.ones((8, 32, 32, 3))).shape  # (*batch, h, w, c) -> (*batch, h/2, w/2, c)
    (8, 16, 16, 3)
    """

    @trace_once
    @checked
    def __call__(
        self, x: Shaped[AnyArray, "*batch_and_window features"], *, out_sharding: Any = None
    ) -> Shaped[jax.Array, "*batch_and_window_out features"]:
        """Pool ``x`` of shape ``(*batch, *window_axes, features)``; ``out_sharding``
        reshards the result (default: ``x``'s sharding)."""
        y = F.max_pool(x, self.window_shape, self.strides, self.padding, out_sharding=out_sharding)
        return nonempty_output("max_pool", x, y, "window")


class AvgPool(_Pool, typecheck=True):
    """Mean over windows (``functional.avg_pool`` as a layer; padding counted, as Flax's
    default ``count_include_pad=True``).

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> pool = pm.nn.AvgPool((2,), strides=(2,))
    >>> pool(jnp.ones((4, 10, 3))).shape  # (*batch, length, c) -> (*batch, length/2, c)
    (4, 5, 3)
    """

    @trace_once
    @checked
    def __call__(
        self, x: Shaped[AnyArray, "*batch_and_window features"], *, out_sharding: Any = None
    ) -> Shaped[jax.Array, "*batch_and_window_out features"]:
        """Pool ``x`` of shape ``(*batch, *window_axes, features)``; ``out_sharding``
        reshards the result (default: ``x``'s sharding)."""
        y = F.avg_pool(x, self.window_shape, self.strides, self.padding, out_sharding=out_sharding)
        return nonempty_output("avg_pool", x, y, "window")


class MinPool(_Pool, typecheck=True):
    """Minimum over windows (``functional.min_pool`` as a layer).

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> pm.nn.MinPool((3,))(jnp.ones((2, 9, 1))).shape  # (*batch, 9, c) -> (*batch, 7, c)
    (2, 7, 1)
    """

    @trace_once
    @checked
    def __call__(
        self, x: Shaped[AnyArray, "*batch_and_window features"], *, out_sharding: Any = None
    ) -> Shaped[jax.Array, "*batch_and_window_out features"]:
        """Pool ``x`` of shape ``(*batch, *window_axes, features)``; ``out_sharding``
        reshards the result (default: ``x``'s sharding)."""
        y = F.min_pool(x, self.window_shape, self.strides, self.padding, out_sharding=out_sharding)
        return nonempty_output("min_pool", x, y, "window")
