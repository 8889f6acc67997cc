"""``TrainState``: a model, its optax optimizer state and a step counter, as one Module.

The optimizer sees only the model's state selected by ``wrt`` (a filter, ``"params"`` by
default), as a nested dict; ``apply_gradients`` updates that state and puts it back
into the model with ``combine``, so Variable types, axis-metadata boxes, ties and the
variables outside ``wrt`` (batch statistics, constants) are kept.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import jax
import jax.numpy as jnp

from ._errors import StateMismatchError
from ._filters import FilterLike
from ._meta import AxisMetadata, peel, rebox
from ._module import Module, field
from ._partition import State, combine, partition, state
from ._variables import Variable

if TYPE_CHECKING:
    import optax

M = TypeVar("M")
_S = TypeVar("_S", bound="TrainState[Any]")
_M2 = TypeVar("_M2")


def _is_box(x: Any) -> bool:
    return isinstance(x, AxisMetadata)


def _is_state(grads: Any) -> bool:
    """Whether ``grads`` is a state dict (no Variables in it) rather than model-shaped."""
    if not isinstance(grads, Mapping):
        return False
    leaves = jax.tree.leaves(grads, is_leaf=lambda x: isinstance(x, Variable))
    return not any(isinstance(x, Variable) for x in leaves)


def _rebox_like(params: State, grads: Any) -> Any:
    """``grads`` with a plain array put in the box ``params`` has at the same place."""

    def one(p: Any, g: Any) -> Any:
        return rebox(peel(p)[0], g) if _is_box(p) and not _is_box(g) else g

    return jax.tree.map(one, params, grads, is_leaf=_is_box)


class TrainState(Module, Generic[M]):
    """A model with the state of one optax optimizer and a step counter.

    **Fields:**

    - ``model``: the model (any Module or PyTree of Variables).
    - ``opt_state``: ``tx``'s state for the variables ``wrt`` selects.
    - ``step``: the number of ``apply_gradients`` calls (an int32 scalar array).
    - ``tx``: the optax ``GradientTransformation`` (static).
    - ``wrt``: the filter selecting the trained variables (static; ``"params"``).

    ``pm.save``/``pm.load`` store and restore all of it but ``tx``; build the ``like`` tree
    with ``TrainState.create`` and the same ``tx``.

    >>> import jax, jax.numpy as jnp, optax
    >>> import pytreemod as pm
    >>> model = {"w": pm.Param(jnp.ones(2)), "mean": pm.BatchStat(jnp.zeros(2))}
    >>> ts = pm.TrainState.create(model, optax.sgd(0.5))
    >>> ts = ts.apply_gradients({"w": jnp.ones(2)})
    >>> ts.model["w"], int(ts.step)
    (Param(f32[2]), 1)
    >>> ts.model["w"].value
    Array([0.5, 0.5], dtype=float32)
    """

    model: M
    opt_state: Any
    step: jax.Array
    tx: "optax.GradientTransformation" = field(static=True)
    wrt: FilterLike = field(static=True, default="params")

    @classmethod
    def create(
        cls, model: _M2, tx: "optax.GradientTransformation", *, wrt: FilterLike = "params"
    ) -> "TrainState[_M2]":
        """A state at step 0 with ``opt_state = tx.init(pm.state(model, wrt))``.

        Called on a subclass it returns that subclass (typed ``TrainState[type(model)]``:
        narrow with ``isinstance`` to reach the subclass's fields).
        """
        if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
            raise TypeError(
                "TrainState.create: tx must be an optax GradientTransformation (with init "
                f"and update), e.g. optax.adam(1e-3); got {tx!r} of type {type(tx).__name__}."
            )
        opt_state = tx.init(state(model, wrt))
        make: Any = cls  # cls is TrainState[M] for the class's M, not the model's type
        return make(model=model, opt_state=opt_state, step=jnp.zeros((), jnp.int32), tx=tx, wrt=wrt)

    def params(self) -> State:
        """The trained state: ``pm.state(self.model, self.wrt)``."""
        return state(self.model, self.wrt)

    def apply_gradients(self: _S, grads: Any, *, model: Any = None, **changes: Any) -> _S:
        """A copy with the trained variables and ``opt_state`` updated by ``tx`` and
        ``step + 1``; ``changes`` replace further fields (of subclasses).

        ``grads`` is either a state dict with the paths of ``params()`` (as
        ``pm.grad(f, argnums=pm.DiffState(0, wrt))`` returns) or a gradient shaped like the
        model (as ``pm.grad(f)(model)`` returns), from which ``wrt`` selects. Plain arrays
        where the model has axis-metadata boxes are put in those boxes.

        ``model``: the model as the step's forward pass left it, such as the new model
        ``pm.apply(..., mutable="batch_stats")`` returns. Its variables outside ``wrt``
        (BatchNorm's running statistics, a cache) replace the state's, in the same call
        that applies the gradients to the trained variables (which are taken from the
        state, where the gradients were computed). It must have the state's structure.

        >>> import jax.numpy as jnp, optax
        >>> import pytreemod as pm
        >>> ts = pm.TrainState.create(pm.nn.BatchNorm(2), optax.sgd(0.1))
        >>> x = jnp.array([[0.0, 1.0], [2.0, 5.0]])
        >>> _, bn = pm.apply(ts.model, x, mutable="batch_stats")
        >>> grads = pm.state(ts.model, "params")  # (any gradient of the same structure)
        >>> ts = ts.apply_gradients(grads, model=bn)
        >>> ts.model.mean.value, int(ts.step)
        (Array([0.01, 0.03], dtype=float32), 1)
        """
        import optax

        structure, params, rest = partition(self.model, self.wrt)
        if model is not None:
            rest = self._outside_wrt(model, rest)
        g = grads if _is_state(grads) else state(grads, self.wrt)
        try:
            g = _rebox_like(params, g)
        except (ValueError, TypeError):
            raise StateMismatchError(
                "apply_gradients: the gradients do not have the structure of the trained "
                f"state (filter {self.wrt!r}).\n  state:     "
                f"{jax.tree.structure(params)}\n  gradients: {jax.tree.structure(g)}\n"
                "Pass the gradient of pm.state(model, wrt), or of the whole model."
            ) from None
        updates, opt_state = self.tx.update(g, self.opt_state, params)
        new_params = optax.apply_updates(params, updates)
        new_model = combine(structure, new_params, rest)
        return self.replace(model=new_model, opt_state=opt_state, step=self.step + 1, **changes)

    def _outside_wrt(self, model: Any, rest: State) -> State:
        """``model``'s variables outside ``wrt``, checked against the state's."""
        _, _, new_rest = partition(model, self.wrt)
        if jax.tree.structure(new_rest) != jax.tree.structure(rest):
            raise StateMismatchError(
                f"apply_gradients(model=...): the model's variables outside {self.wrt!r} do "
                "not have the structure of the state's.\n  state: "
                f"{jax.tree.structure(rest)}\n  model: {jax.tree.structure(new_rest)}\n"
                "Pass the new model pm.apply(ts.model, ..., mutable=...) returned for this "
                "state's model."
            )
        return new_rest
