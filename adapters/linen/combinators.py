"""``Sequential`` (``flax.linen.combinators``): apply callables in a chain."""

from collections.abc import Callable, Sequence
from typing import Any

from .module import Module, compact

__all__ = ["Sequential"]


class Sequential(Module):
    """Apply ``layers`` in order, each to the previous one's output.

    A ``tuple`` output is passed on as positional arguments, a ``dict`` as keyword
    arguments; the first layer gets the call's arguments. Layers may be modules,
    functions, or functions building modules inline (the call is ``compact``).
    """

    layers: Sequence[Callable[..., Any]]

    def __post_init__(self) -> None:
        if not isinstance(self.layers, Sequence):
            raise ValueError(f"'layers' must be a sequence, got '{type(self.layers).__name__}'.")
        super().__post_init__()

    @compact
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the chain."""
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
