"""``flax.nnx.training.ema``: an exponential moving average of a model's Variables.

``EMA(model, decay)`` copies the Variables that ``only`` selects (same types and
metadata, fresh arrays); ``update(model)`` blends the model's current values in
(``ema = decay * ema + (1 - decay) * new``); ``apply_to(model)`` is a model whose tracked
Variables *are* the EMA's, so it follows every later ``update``.
"""

from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from .. import graphlib, statelib
from ..pytreelib import Pytree, data
from ..variablelib import Variable

A = TypeVar("A")


def _shadow_copy(tree: Any) -> Any:
    """A copy of each Variable leaf of ``tree`` with a new array; a TypeError names the
    path of any leaf that is not a Variable."""

    def copy(path: Any, x: Any) -> Variable:
        if not isinstance(x, Variable):
            where = "/".join(str(k) for k in path)
            raise TypeError(
                f"EMA only supports Variable leaves, got {type(x).__name__} at path "
                f"'{where}'. Use the `only` filter to select Variable leaves."
            )
        return type(x)(jnp.copy(x.get_value()), **x.get_metadata())

    return jax.tree.map_with_path(copy, tree, is_leaf=lambda x: isinstance(x, Variable))


class EMA(Pytree):
    """Exponential moving average of Variables.

    Attributes:
      decay: the weight of the old average in each update.
      filter: the filter (``only``) choosing the tracked Variables.
      params: the averaged Variables, a State shaped like ``nnx.state(model, only)``.
    """

    def __init__(
        self, params: Any, decay: float, *, only: Any = ..., graph: bool | None = None
    ) -> None:
        """Start the average at the current values of ``params``' Variables.

        Args:
          params: a module or any graph node/pytree of Variables.
          decay: the decay rate.
          only: filter of the Variables to track (default: all).
          graph: graph (``True``) or tree (``False``) mode; ``None`` follows the current one.
        """
        self.graph = graph
        self.decay = decay
        self.filter = only
        self.params = data(_shadow_copy(graphlib.state(params, only, graph=graph)))

    def update(self, updates: Any) -> None:
        """Blend in the tracked Variables of ``updates`` (shaped like the ``params`` given
        at construction): ``ema = decay * ema + (1 - decay) * new``."""

        def blend(ema: Variable, new: Any) -> None:
            value = new.get_value() if isinstance(new, Variable) else new
            ema[...] = self.decay * ema[...] + (1.0 - self.decay) * value

        jax.tree.map(
            blend,
            self.params,
            graphlib.state(updates, self.filter, graph=self.graph),
            is_leaf=lambda x: isinstance(x, Variable),
        )

    def apply_to(self, model: A) -> A:
        """A new model like ``model`` whose tracked Variables are this EMA's (shared, not
        copied); its other state is ``model``'s."""
        graphdef, state = graphlib.split(model, graph=self.graph)
        return graphlib.merge(graphdef, statelib.merge_state(state, self.params))
