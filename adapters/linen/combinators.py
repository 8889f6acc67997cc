"""``Sequential`` (``flax.linen.combinators``): apply callables in a chain."""

from collections.abc import Callable, Sequence
from typing import Any

from .module import Module, compact

__all__ = ["Sequential"]


class Sequential(Module):
    """A chain of layers: each is applied to the previous one's output.

    The first layer receives the call's arguments. A layer returning a ``tuple`` passes
    it on as positional arguments, one returning a ``dict`` as keyword arguments, and
    anything else as the single argument. The layers may be modules, plain functions
    (``nn.relu``) or functions that build modules inline, since the call is
    ``compact``. Module layers are named ``layers_<index>``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> model = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])
    >>> x = jnp.ones((2, 3))
    >>> variables = model.init(jax.random.key(0), x)
    >>> sorted(variables["params"])
    ['layers_0', 'layers_2']
    >>> model.apply(variables, x).shape
    (2, 2)

    Attributes:
        layers: the callables to apply, in order (a non-empty sequence).
    """

    layers: Sequence[Callable[..., Any]]

    def __post_init__(self) -> None:
        if not isinstance(self.layers, Sequence):
            raise ValueError(f"'layers' must be a sequence, got '{type(self.layers).__name__}'.")
        super().__post_init__()

    @compact
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the chain.

        Args:
            *args: positional arguments for the first layer.
            **kwargs: keyword arguments for the first layer.

        Returns:
            The last layer's output.
        """
        if not self.layers:
            raise ValueError(f"Empty Sequential module {self.name}.")
        outputs = self.layers[0](*args, **kwargs)
        for layer in self.layers[1:]:
            if isinstance(outputs, tuple):
                outputs = layer(*outputs)
            elif isinstance(outputs, dict):
                outputs = layer(**outputs)
            else:
                outputs = layer(outputs)
        return outputs
