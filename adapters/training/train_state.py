"""``adapters.training.train_state``: ``TrainState``, one optax optimizer and its parameters."""

from collections.abc import Callable
from typing import Any, Self

import jax
import optax

from .. import struct
from ..core import FrozenDict
from ..linen.fp8_ops import OVERWRITE_WITH_GRADIENT

__all__ = ["TrainState"]


def _split_overwrite(tree: Any) -> tuple[Any, bool]:
    """The part of ``tree`` the optimizer updates, and whether ``tree`` has an fp8
    ``_overwrite_with_gradient`` collection beside ``'params'`` (then only ``tree['params']``
    is optimized; the other collection is replaced by its gradient)."""
    if isinstance(tree, (dict, FrozenDict)) and OVERWRITE_WITH_GRADIENT in tree:
        return tree["params"], True
    return tree, False


class TrainState(struct.PyTreeNode):
    """The training state for the common case of one optax optimizer.

    A pytree whose children are ``step``, ``params`` and ``opt_state``; ``apply_fn``
    (usually ``model.apply``) and ``tx`` (the optax ``GradientTransformation``) are static.
    Subclass it to carry more (``batch_stats``, a dropout key...): the extra fields are set
    by ``create(..., **kwargs)`` and replaced by ``apply_gradients(..., **kwargs)``.

    Attributes:
      step: the number of ``apply_gradients`` calls so far (``0`` after ``create``).
      apply_fn: a function kept for convenience, usually ``model.apply``.
      params: the parameters ``tx`` updates.
      tx: the optax gradient transformation.
      opt_state: ``tx``'s state.
    """

    step: int | jax.Array
    apply_fn: Callable[..., Any] = struct.field(pytree_node=False)
    params: Any = struct.field(pytree_node=True)
    tx: optax.GradientTransformation = struct.field(pytree_node=False)
    opt_state: optax.OptState = struct.field(pytree_node=True)

    def apply_gradients(self, *, grads: Any, **kwargs: Any) -> Self:
        """A copy with ``step + 1`` and ``params``/``opt_state`` updated by ``tx`` from
        ``grads`` (the structure of ``params``); ``kwargs`` replace further fields.

        When ``params`` has an fp8 ``_overwrite_with_gradient`` collection beside
        ``'params'``, only ``params['params']`` goes through ``tx`` and that collection
        becomes its gradient (its values are statistics the gradient carries).
        """
        grads_opt, overwrite = _split_overwrite(grads)
        params_opt = self.params["params"] if overwrite else self.params
        updates, opt_state = self.tx.update(grads_opt, self.opt_state, params_opt)
        new_params = optax.apply_updates(params_opt, updates)
        if overwrite:
            new_params = {
                "params": new_params,
                OVERWRITE_WITH_GRADIENT: grads[OVERWRITE_WITH_GRADIENT],
            }
        return self.replace(step=self.step + 1, params=new_params, opt_state=opt_state, **kwargs)

    @classmethod
    def create(
        cls,
        *,
        apply_fn: Callable[..., Any],
        params: Any,
        tx: optax.GradientTransformation,
        **kwargs: Any,
    ) -> Self:
        """A new state with ``step=0`` and ``opt_state = tx.init(params)`` (of
        ``params['params']`` when an fp8 ``_overwrite_with_gradient`` collection is beside
        it); ``kwargs`` set the fields of subclasses."""
        params_opt = params if isinstance(params, jax.Array) else _split_overwrite(params)[0]
        return cls(
            step=0, apply_fn=apply_fn, params=params, tx=tx, opt_state=tx.init(params_opt), **kwargs
        )
