"""``BatchApply`` (``flax.linen.batch_apply``): merge leading axes around a call."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["BatchApply"]


def _ndim(x: Any) -> int:
    return x.ndim if isinstance(x, jax.Array | np.ndarray) else jnp.asarray(x).ndim


def _first_mergeable(num_dims: int, args: Any, kwargs: Any) -> Any:
    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        if _ndim(leaf) >= num_dims:
            return leaf
    return None


def _merge(x: Any, num_dims: int) -> Any:
    if _ndim(x) < num_dims:
        return x
    return x.reshape((int(np.prod(x.shape[:num_dims])), *x.shape[num_dims:]))


class BatchApply:
    """Call ``f`` with the first ``num_dims`` axes of every input merged into one, then split
    that axis of every output back (inputs with fewer axes pass unchanged).

    >>> import jax.numpy as jnp
    >>> BatchApply(lambda x: x.sum(-1))(jnp.ones((2, 3, 4))).shape
    (2, 3)
    """

    def __init__(self, f: Callable[..., Any], num_dims: int = 2) -> None:
        self._f = f
        self.num_dims = num_dims

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        example = _first_mergeable(self.num_dims, args, kwargs)
        if example is None:
            raise ValueError(
                f"BatchApply requires at least one input with ndim >= {self.num_dims}."
            )
        lead = tuple(example.shape[: self.num_dims])
        args, kwargs = jax.tree_util.tree_map(lambda x: _merge(x, self.num_dims), (args, kwargs))
        outputs = self._f(*args, **kwargs)
        return jax.tree_util.tree_map(lambda y: y.reshape(lead + y.shape[1:]), outputs)
