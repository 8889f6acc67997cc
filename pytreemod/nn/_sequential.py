"""``Sequential`` and ``Lambda``."""

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax

from .._errors import LayerConfigError
from .._module import Module, field
from .._sharding._ops import constrain
from ._validate import callable_arg


class Lambda(Module, typecheck=True):
    """Wrap a function (an activation, a reshape) as a layer; the function is static.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> y = pm.nn.Lambda(jax.nn.relu)(jnp.array([-1.0, 2.0]))  # (*shape) -> (*shape)
    >>> y.shape, y.tolist()
    ((2,), [0.0, 2.0])
    """

    fn: Callable[..., Any] = field(static=True)

    def __check_init__(self) -> None:
        callable_arg("Lambda", "fn", self.fn)

    def __call__(self, x: Any, *args: Any, out_sharding: Any = None, **kwargs: Any) -> Any:
        """Return ``fn(x, *args, **kwargs)``; ``out_sharding`` (not passed to ``fn``)
        reshards each array of the result."""
        y = self.fn(x, *args, **kwargs)
        return _constrain_tree(y, out_sharding, x)


def _takes_key(layer: Any) -> bool:
    try:
        params = inspect.signature(layer).parameters
    except (TypeError, ValueError):
        return False
    return "key" in params


class Sequential(Module, typecheck=True):
    """Apply layers one after another (Flax/Equinox ``Sequential``).

    Plain functions in ``layers`` (``jax.nn.relu``) are wrapped in ``Lambda``. The call's
    ``key`` (if given) is split over the layers that take a ``key`` argument (Dropout), so
    one key drives every stochastic layer; other keyword arguments go to every layer
    that accepts them, except ``out_sharding``: it is the sharding of the Sequential's
    output, applied to the last layer's result (not given to any layer).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> k1, k2 = jax.random.split(jax.random.key(0))
    >>> model = pm.nn.Sequential([
    ...     pm.nn.Linear(3, 4, key=k1), jax.nn.relu, pm.nn.Dropout(0.1),
    ...     pm.nn.Linear(4, 4, key=k2),
    ... ])
    >>> x = jnp.ones((8, 3))                       # (batch, 3)
    >>> model(x, key=jax.random.key(1)).shape      # (batch, 4)
    (8, 4)
    >>> model(x, deterministic=True).shape         # no key needed in evaluation
    (8, 4)
    """

    layers: tuple[Any, ...]
    takes_key: tuple[bool, ...] = field(static=True, repr=False)

    def __init__(self, layers: Sequence[Callable[..., Any]]):
        if isinstance(layers, (Module, str)) or not isinstance(layers, Sequence):
            raise LayerConfigError(
                f"Sequential: layers={layers!r} is not a list of layers; pass a list, "
                "e.g. Sequential([layer]) for a single layer."
            )
        for i, layer in enumerate(layers):
            callable_arg("Sequential", f"layers[{i}]", layer)
        self.layers = tuple(
            layer if isinstance(layer, Module) else Lambda(layer) for layer in layers
        )
        self.takes_key = tuple(_takes_key(layer) for layer in self.layers)

    def __call__(
        self,
        x: Any,
        *,
        key: jax.Array | None = None,
        out_sharding: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Feed ``x`` through every layer in order; ``out_sharding`` reshards the result."""
        x0 = x
        n_keyed = sum(self.takes_key)
        keys = list(jax.random.split(key, n_keyed)) if key is not None and n_keyed else []
        for layer, wants_key in zip(self.layers, self.takes_key):
            extra = {k: v for k, v in kwargs.items() if _accepts(layer, k)}
            if wants_key and keys:
                extra["key"] = keys.pop(0)
            x = layer(x, **extra)
        return _constrain_tree(x, out_sharding, x0)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return Sequential(self.layers[index])
        return self.layers[index]

    def __len__(self) -> int:
        return len(self.layers)


def _accepts(layer: Any, name: str) -> bool:
    if isinstance(layer, Lambda):
        return False
    try:
        params = inspect.signature(layer).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _constrain_tree(y: Any, out_sharding: Any, x: Any) -> Any:
    """``out_sharding`` applied to every array of ``y`` (nothing when it is ``None``)."""
    if out_sharding is None:
        return y
    return jax.tree.map(lambda a: constrain(a, out_sharding, x), y)
