"""``flax.nnx.training.optimizer``: one optax transformation held as NNX state.

``Optimizer(model, tx, wrt=filter)`` initialises ``tx`` on the model's Variables that
``wrt`` selects and keeps the result as ``OptState`` Variables (``OptVariable`` where the
parameter was a Variable, whose metadata, e.g. sharding, it copies; ``OptArray`` for any
other leaf) plus a ``step`` counter. ``update(model, grads, **kwargs)`` runs ``tx.update``
on plain arrays, applies the updates to the model in place and returns them. Because the
optimizer is itself an NNX object, ``nnx.jit``/``nnx.split`` carry it like a model.
"""

import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import optax

from .. import graphlib
from ..pytreelib import Pytree, data
from ..variablelib import Param, Variable

M = TypeVar("M")
F = TypeVar("F", bound=Callable[..., Any])


class OptState(Variable):
    """A Variable holding any optimizer state (the ``step`` counter, moments...)."""

    __slots__ = ()


class OptArray(OptState):
    """Optimizer state kept for a leaf that was a plain array."""

    __slots__ = ()


class OptVariable(OptState):
    """Optimizer state kept for a Variable; it carries that Variable's metadata."""

    __slots__ = ()


def _opt_leaf(x: Any) -> OptState:
    if isinstance(x, Variable):
        metadata = x.get_metadata()
        if "optimizer_sharding" in metadata:
            metadata["out_sharding"] = metadata.pop("optimizer_sharding")
        return OptVariable(x.get_value(), **metadata)
    return OptArray(x)


def to_opt_state(tree: Any) -> Any:
    """``tree`` with each Variable turned into an ``OptVariable`` (same value and metadata)
    and each other leaf into an ``OptArray``."""
    return jax.tree.map(_opt_leaf, tree, is_leaf=lambda x: isinstance(x, Variable))


class _Missing:
    """Marks an argument that was not passed."""


_MISSING: Any = _Missing()

_NO_GRADS = (
    "Missing required argument `grads`. As of Flax 0.11.0 update requires both (model, "
    "grads) arguments to be passed. If you want to keep the previous use "
    "nnx.ModelAndOptimizer instead of nnx.Optimizer."
)
_NO_WRT = (
    "Missing required argument `wrt`. As of Flax 0.11.0 the `wrt` argument is required, if "
    "you want to keep the previous use nnx.ModelAndOptimizer instead of nnx.Optimizer."
)


def _requires_grads(method: F) -> F:
    """``method(self, model, grads, **kw)`` raising Flax's TypeError when ``grads`` is absent
    (the pre-0.11 call ``update(grads)``)."""

    @functools.wraps(method)
    def checked(self: Any, model: Any, grads: Any = _MISSING, /, **kwargs: Any) -> Any:
        if grads is _MISSING:
            raise TypeError(_NO_GRADS)
        return method(self, model, grads, **kwargs)

    return checked  # type: ignore[return-value]


def _set_values(variables: Any, values: Any) -> None:
    """Write each array of ``values`` into the Variable at the same place in ``variables``."""

    def put(variable: Any, value: Any) -> None:
        if isinstance(variable, Variable):
            variable.set_value(value)

    jax.tree.map(put, variables, values, is_leaf=lambda x: isinstance(x, Variable))


class Optimizer(Pytree, Generic[M]):
    """Train state for the common case of one optax transformation.

    Attributes:
      step: an ``OptState`` counting the updates (``uint32``).
      tx: the optax ``GradientTransformation``.
      opt_state: ``tx``'s state, its leaves ``OptState`` Variables.
      wrt: the filter selecting the Variables that are optimised.
    """

    def __init__(
        self,
        model: M,
        tx: optax.GradientTransformation,
        *,
        wrt: Any = _MISSING,
        graph: bool | None = None,
    ) -> None:
        """Initialise ``tx`` on the Variables of ``model`` that ``wrt`` selects.

        Args:
          model: an NNX Module (or any graph node).
          tx: an optax transformation.
          wrt: filter of the Variables to optimise; it should match the one given to
            ``nnx.grad`` for the gradients passed to ``update``. Required.
          graph: graph mode (``True``) or tree mode (``False``) for reading the state;
            ``None`` follows the current setting.
        """
        if wrt is _MISSING:
            raise TypeError(_NO_WRT)
        self.graph = graph
        self.step = OptState(jnp.array(0, dtype=jnp.uint32))
        self.tx = tx
        self.opt_state = data(to_opt_state(tx.init(graphlib.state(model, wrt, graph=graph))))
        self.wrt = wrt

    def __getattr__(self, name: str) -> Any:
        if name == "model":
            raise AttributeError(
                f"{type(self).__name__} does not have attribute 'model' since Flax 0.11.0. "
                "To keep the previous behavior, use nnx.ModelAndOptimizer instead of "
                "nnx.Optimizer."
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @_requires_grads
    def update(self, model: M, grads: Any, /, **kwargs: Any) -> Any:
        """Apply one step of ``tx`` to ``model`` in place and return the updates.

        Args:
          model: the model whose ``wrt`` Variables are updated.
          grads: gradients of those Variables (e.g. from ``nnx.grad``).
          **kwargs: extra arguments for ``tx.update`` (``GradientTransformationExtraArgs``
            such as ``optax.scale_by_backtracking_linesearch``'s ``value``/``value_fn``).

        Returns:
          The updates, with the structure of the ``wrt`` state of ``model``.
        """
        params = graphlib.as_pure(graphlib.state(model, self.wrt, graph=self.graph))
        grad_values = graphlib.as_pure(graphlib.state(grads, self.wrt, graph=self.graph))
        updates, new_opt_state = self.tx.update(
            grad_values, graphlib.as_pure(self.opt_state), params, **graphlib.as_pure(kwargs)
        )
        graphlib.update(model, optax.apply_updates(params, updates))
        _set_values(self.opt_state, new_opt_state)
        self.step[...] = self.step[...] + 1
        return updates


class ModelAndOptimizer(Optimizer[M]):
    """An ``Optimizer`` that also holds its model (Flax's pre-0.11 API): ``update(grads)``.

    Deprecated in Flax; kept for code written against it.
    """

    def __init__(self, model: M, tx: optax.GradientTransformation, *, wrt: Any = Param) -> None:
        super().__init__(model, tx, wrt=wrt)
        self.model = model

    def update(self, grads: Any, /, **kwargs: Any) -> Any:  # type: ignore[override]
        """Apply one step of ``tx`` to ``self.model`` and return the updates."""
        return super().update(self.model, grads, **kwargs)
