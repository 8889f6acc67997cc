"""Initializers: ``jax.nn.initializers``, and the layer defaults Flax Linen publishes.

Every initializer is a function ``init(key, shape, dtype) -> array``. Wrap one with
``pytreemod.with_partitioning(init, names)`` to box the parameter with axis names.

| layer parameter                      | default                                          |
|--------------------------------------|--------------------------------------------------|
| Linear / Conv / attention kernels    | ``lecun_normal()`` (``default_kernel_init``)     |
| biases                               | ``zeros`` (``default_bias_init``)                |
| Embedding table                      | ``variance_scaling(1.0, "fan_in", "normal",
                                          out_axis=0)`` (``default_embed_init``)         |
| norm scale / bias                    | ``ones`` / ``zeros``                             |
"""

import math
from typing import Any, Protocol

import jax
import numpy as np
from jax import lax
from jax.nn import initializers as _jinit
from jax.nn.initializers import constant as constant
from jax.nn.initializers import delta_orthogonal as delta_orthogonal
from jax.nn.initializers import glorot_normal as glorot_normal
from jax.nn.initializers import glorot_uniform as glorot_uniform
from jax.nn.initializers import he_normal as he_normal
from jax.nn.initializers import he_uniform as he_uniform
from jax.nn.initializers import kaiming_normal as kaiming_normal
from jax.nn.initializers import kaiming_uniform as kaiming_uniform
from jax.nn.initializers import lecun_normal as lecun_normal
from jax.nn.initializers import lecun_uniform as lecun_uniform
from jax.nn.initializers import normal as normal
from jax.nn.initializers import ones as ones
from jax.nn.initializers import orthogonal as orthogonal
from jax.nn.initializers import truncated_normal as truncated_normal
from jax.nn.initializers import uniform as uniform
from jax.nn.initializers import variance_scaling as variance_scaling
from jax.nn.initializers import xavier_normal as xavier_normal
from jax.nn.initializers import xavier_uniform as xavier_uniform
from jax.nn.initializers import zeros as zeros


class Initializer(Protocol):
    """``init(key, shape, dtype) -> array``, as ``jax.nn.initializers`` functions are."""

    def __call__(self, key: Any, shape: Any, dtype: Any = ..., /) -> Any: ...


_jax_lecun_normal = _jinit.lecun_normal()
_TRUNCATED_STD = 0.87962566103423978  # a standard normal's, truncated to (-2, 2), as JAX's


def _lecun_normal(key: Any, shape: Any, *args: Any, **kwargs: Any) -> Any:
    """``jax.nn.initializers.lecun_normal()``: for a floating ``dtype`` and a shape of at
    least two positive ints, the same equations on the same constants (a square root, a
    division, ``jax.random.truncated_normal``, a product), so the same array bit for bit,
    written with ``lax`` on NumPy constants instead of ``jax.numpy``, whose argument
    handling costs about as much again as the rest of the call in a trace. Every other
    call goes to JAX's function itself."""
    if not kwargs and len(args) == 1 and args[0] is not None and type(shape) is tuple:
        dtype = jax.dtypes.canonicalize_dtype(args[0])
        if (
            len(shape) >= 2
            and all(type(d) is int and d > 0 for d in shape)
            and np.issubdtype(dtype, np.floating)
        ):
            # JAX's own arithmetic (jax.nn.initializers' _compute_fans), for the same float.
            fan_in = shape[-2] * (math.prod(shape) / shape[-2] / shape[-1])
            variance = np.asarray(1.0 / fan_in, dtype)
            stddev = lax.div(lax.sqrt(variance), np.asarray(_TRUNCATED_STD, dtype))
            return lax.mul(jax.random.truncated_normal(key, -2, 2, shape, args[0]), stddev)
    return _jax_lecun_normal(key, shape, *args, **kwargs)


default_kernel_init: Initializer = _lecun_normal
"""``lecun_normal()``: Flax's default for Dense, Conv, ConvTranspose and attention kernels
(JAX's array, bit for bit, at a lower trace cost: ``_lecun_normal``)."""

default_bias_init: Initializer = _jinit.zeros
"""``zeros``: Flax's default for every bias."""

default_embed_init: Initializer = _jinit.variance_scaling(1.0, "fan_in", "normal", out_axis=0)
"""``variance_scaling(1.0, "fan_in", "normal", out_axis=0)``: Flax's ``Embed`` default
(standard deviation 1 / sqrt(features))."""


def kernel_bias_keys(key: Any, bias_init: Initializer, use_bias: bool) -> tuple[Any, Any]:
    """The keys of a layer's kernel and bias: the kernel draws from ``key`` itself, a bias
    initializer that may use randomness from ``fold_in(key, 1)``. The default ``zeros``
    bias takes none, so a default layer's init hashes no key beyond the one it is given,
    as a hand-written init does (and its jitted init compiles the same program)."""
    if use_bias and bias_init is not default_bias_init:
        return key, jax.random.fold_in(key, 1)
    return key, key  # unused by zeros


def filled(shape: tuple[int, ...], value: float, dtype: Any) -> jax.Array:
    """``jnp.full(shape, value, dtype)`` for a tuple of ints: the same array and the same
    equation (a broadcast of one scalar), without ``jax.numpy``'s argument handling, which
    costs as much again in a trace. The norms' parameters and statistics start so."""
    return lax.broadcast_in_dim(np.asarray(value, jax.dtypes.canonicalize_dtype(dtype)), shape, ())


def bias_value(bias_init: Initializer, key: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """``bias_init(key, shape, dtype)``; for the default ``zeros``, ``filled(shape, 0,
    dtype)``: the same array and equation, at a third of the trace cost (a layer's bias
    is made so at every construction under ``jit``/``eval_shape``)."""
    if bias_init is default_bias_init:
        return filled(shape, 0, dtype)
    return bias_init(key, shape, dtype)
