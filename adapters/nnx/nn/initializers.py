"""Initializers (``flax.nnx.nn.initializers``): ``jax.nn.initializers`` plus Flax's
``zeros_init``/``ones_init`` builders (the same objects as ``adapters.linen.initializers``).

Every initializer is called as ``init(key, shape, dtype)``; ``zeros_init()`` returns
``zeros`` itself and ``ones_init()`` returns ``ones``, as in Flax.
"""

from typing import Any

from adapters.core.nn.initializers import constant as constant
from adapters.core.nn.initializers import delta_orthogonal as delta_orthogonal
from adapters.core.nn.initializers import glorot_normal as glorot_normal
from adapters.core.nn.initializers import glorot_uniform as glorot_uniform
from adapters.core.nn.initializers import he_normal as he_normal
from adapters.core.nn.initializers import he_uniform as he_uniform
from adapters.core.nn.initializers import kaiming_normal as kaiming_normal
from adapters.core.nn.initializers import kaiming_uniform as kaiming_uniform
from adapters.core.nn.initializers import lecun_normal as lecun_normal
from adapters.core.nn.initializers import lecun_uniform as lecun_uniform
from adapters.core.nn.initializers import normal as normal
from adapters.core.nn.initializers import ones as ones
from adapters.core.nn.initializers import ones_init as ones_init
from adapters.core.nn.initializers import orthogonal as orthogonal
from adapters.core.nn.initializers import truncated_normal as truncated_normal
from adapters.core.nn.initializers import uniform as uniform
from adapters.core.nn.initializers import variance_scaling as variance_scaling
from adapters.core.nn.initializers import xavier_normal as xavier_normal
from adapters.core.nn.initializers import xavier_uniform as xavier_uniform
from adapters.core.nn.initializers import zeros as zeros
from adapters.core.nn.initializers import zeros_init as zeros_init
from adapters.typing import Initializer as Initializer

DtypeLikeInexact = Any
"""A float or complex dtype, as initializers take it (Flax's alias)."""

__all__ = [
    "DtypeLikeInexact",
    "Initializer",
    "constant",
    "delta_orthogonal",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "he_uniform",
    "kaiming_normal",
    "kaiming_uniform",
    "lecun_normal",
    "lecun_uniform",
    "normal",
    "ones",
    "ones_init",
    "orthogonal",
    "truncated_normal",
    "uniform",
    "variance_scaling",
    "xavier_normal",
    "xavier_uniform",
    "zeros",
    "zeros_init",
]
