"""Activation functions (``flax.nnx.nn.activations``): ``jax.nn``'s, plus the ``PReLU`` layer."""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
from jax.nn import celu as celu
from jax.nn import elu as elu
from jax.nn import gelu as gelu
from jax.nn import glu as glu
from jax.nn import hard_sigmoid as hard_sigmoid
from jax.nn import hard_silu as hard_silu
from jax.nn import hard_swish as hard_swish
from jax.nn import hard_tanh as hard_tanh
from jax.nn import identity as identity
from jax.nn import leaky_relu as leaky_relu
from jax.nn import log_sigmoid as log_sigmoid
from jax.nn import log_softmax as log_softmax
from jax.nn import logsumexp as logsumexp
from jax.nn import one_hot as one_hot
from jax.nn import relu as relu
from jax.nn import relu6 as relu6
from jax.nn import selu as selu
from jax.nn import sigmoid as sigmoid
from jax.nn import silu as silu
from jax.nn import soft_sign as soft_sign
from jax.nn import softmax as softmax
from jax.nn import softplus as softplus
from jax.nn import standardize as standardize
from jax.nn import swish as swish
from jax.numpy import tanh as tanh

from adapters.typing import Array as Array
from adapters.typing import Dtype as Dtype
from adapters.typing import PromoteDtypeFn as PromoteDtypeFn

from ..module import Module
from ..variablelib import Param
from . import dtypes

__all__ = [
    "PReLU",
    "celu",
    "elu",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "identity",
    "leaky_relu",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "one_hot",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "standardize",
    "swish",
    "tanh",
]


class PReLU(Module):
    """Parametric ReLU: ``x`` where ``x >= 0``, ``negative_slope * x`` elsewhere.

    ``negative_slope`` is a scalar ``Param``, learned like any other; unlike the functions
    of this module PReLU is a layer, built before use (it needs no key: the slope starts
    at ``negative_slope_init``).

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> act = nnx.PReLU(negative_slope_init=0.1)
    >>> [round(float(v), 4) for v in act(jnp.array([-2.0, 3.0]))]
    [-0.2, 3.0]

    Args:
        negative_slope_init: the slope's initial value (default ``0.01``).
        dtype: the computation dtype (default ``None``: the input's dtype, to which the
            slope is cast, as Linen's PReLU does).
        param_dtype: the dtype of the slope (default ``float32``).
        promote_dtype: called as ``promote_dtype((inputs, negative_slope), dtype=dtype)``
            when ``dtype`` is given (default: ``nnx.nn.dtypes.promote_dtype``).
        negative_slope_metadata: metadata of the slope's ``Param`` (sharding...).
    """

    def __init__(
        self,
        negative_slope_init: float = 0.01,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        negative_slope_metadata: Mapping[str, Any] = MappingProxyType({}),
    ) -> None:
        self.negative_slope = Param(
            jnp.asarray(negative_slope_init, dtype=param_dtype), **negative_slope_metadata
        )
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype

    def __call__(self, inputs: jax.Array) -> jax.Array:
        """Apply the activation elementwise; the output has the input's shape."""
        slope = self.negative_slope[...]
        if self.dtype is not None:
            inputs, slope = self.promote_dtype((inputs, slope), dtype=self.dtype)
        else:
            slope = jnp.asarray(slope, inputs.dtype)
        return jnp.where(inputs >= 0, inputs, slope * inputs)
