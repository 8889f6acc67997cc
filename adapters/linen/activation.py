"""Activation functions (``flax.linen.activation``): ``jax.nn``'s, plus the ``PReLU`` layer."""

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

from .module import Module, compact

normalize = standardize
"""``jax.nn.standardize`` under its older Flax name."""


class PReLU(Module):
    """Parametric ReLU: a leaky ReLU whose negative slope is learned.

    Returns ``x`` where ``x >= 0`` and ``negative_slope * x`` elsewhere, with
    ``negative_slope`` a scalar parameter shared by all elements.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.PReLU()
    >>> x = jnp.array([-2.0, 3.0])
    >>> variables = layer.init(jax.random.key(0), x)
    >>> [round(float(v), 4) for v in layer.apply(variables, x)]
    [-0.02, 3.0]

    Attributes:
        param_dtype: the dtype the slope is created in (default ``float32``).
        negative_slope_init: the slope's initial value (default ``0.01``).
    """

    param_dtype: Any = jnp.float32
    negative_slope_init: float = 0.01

    @compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        """Apply the activation elementwise.

        Args:
            inputs: an array of any shape.

        Returns:
            An array of the same shape and dtype.
        """
        slope = self.param(
            "negative_slope", lambda _: jnp.asarray(self.negative_slope_init, self.param_dtype)
        )
        return jnp.where(inputs >= 0, inputs, jnp.asarray(slope, inputs.dtype) * inputs)
