"""``adapters.training.dynamic_scale``: dynamic loss scaling for low-precision gradients."""

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .. import struct

__all__ = ["DynamicScale", "DynamicScaleResult"]


class DynamicScaleResult(NamedTuple):
    """What the function built by ``DynamicScale.value_and_grad`` returns."""

    dynamic_scale: "DynamicScale"
    finite: jax.Array
    aux: Any
    grad: Any


class DynamicScale(struct.PyTreeNode):
    """Loss scaling that adapts so float16 gradients neither underflow nor overflow.

    The loss is multiplied by ``scale`` before differentiation and the gradients divided
    by it (in float32). After ``growth_interval`` finite steps in a row the scale grows
    by ``growth_factor``; a non-finite gradient shrinks it by ``backoff_factor`` (not
    below ``minimum_scale``) and restarts the count. The caller skips the update when
    ``finite`` is false, typically with ``jnp.where``.

    Attributes:
      growth_factor: factor applied after a run of finite steps (static).
      backoff_factor: factor applied after a non-finite gradient (static).
      growth_interval: finite steps in a row before growing (static).
      fin_steps: finite steps in a row so far.
      scale: the current loss scale.
      minimum_scale: the smallest scale (static; ``None`` for no bound).
    """

    growth_factor: float = struct.field(pytree_node=False, default=2.0)
    backoff_factor: float = struct.field(pytree_node=False, default=0.5)
    growth_interval: int = struct.field(pytree_node=False, default=2000)
    fin_steps: int | jax.Array = 0
    scale: float | jax.Array = 65536.0
    minimum_scale: float | None = struct.field(
        pytree_node=False, default=float(jnp.finfo(jnp.float32).tiny)
    )

    def value_and_grad(
        self,
        fun: Callable[..., Any],
        argnums: int | Sequence[int] = 0,
        has_aux: bool = False,
        axis_name: str | None = None,
    ) -> Callable[..., DynamicScaleResult]:
        """``jax.value_and_grad`` of ``fun`` with loss scaling.

        The returned function takes ``fun``'s arguments and returns
        ``DynamicScaleResult(new dynamic scale, finite, value, grad)`` where ``value`` is
        unscaled (with ``fun``'s aux when ``has_aux``) and ``grad`` float32.
        ``axis_name`` averages the gradients over that mapped axis (``pmap``/``shard_map``).
        """
        scale = self.scale

        @functools.wraps(fun)
        def scaled(*args: Any) -> Any:
            out = fun(*args)
            return (scale * out[0], out[1]) if has_aux else scale * out

        value_and_grad = jax.value_and_grad(scaled, argnums, has_aux)

        def wrapper(*args: Any) -> DynamicScaleResult:
            value, grad = value_and_grad(*args)
            value = (value[0] / scale, value[1]) if has_aux else value / scale
            grad = jax.tree_util.tree_map(lambda g: jnp.asarray(g, jnp.float32) / scale, grad)
            if axis_name is not None:
                grad = lax.pmean(grad, axis_name)
            finite = jnp.array(True)
            for g in jax.tree_util.tree_leaves(grad):
                finite &= jnp.all(lax.is_finite(g))
            return DynamicScaleResult(self._next(finite), finite, value, grad)

        return wrapper

    def _next(self, finite: jax.Array) -> "DynamicScale":
        grow = self.fin_steps == self.growth_interval
        grown = jnp.minimum(self.scale * self.growth_factor, jnp.finfo(jnp.float32).max)
        on_finite = jnp.where(grow & finite, grown, self.scale)
        on_overflow = self.scale * self.backoff_factor
        if self.minimum_scale is not None:
            on_overflow = jnp.maximum(on_overflow, self.minimum_scale)
        return self.replace(
            fin_steps=jnp.where(grow | ~finite, 0, self.fin_steps + 1),
            scale=jnp.where(finite, on_finite, on_overflow),
        )
