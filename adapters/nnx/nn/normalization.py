"""NNX normalization layers over ``pytreemod.nn.functional``."""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F

from ..module import Module
from ..rnglib import Rngs
from ..variablelib import BatchStat, Param

Initializer = Callable[..., jax.Array]


class LayerNorm(Module):
    """Layer normalization with learned ``scale`` (ones) and ``bias`` (zeros)."""

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = jax.nn.initializers.zeros,
        scale_init: Initializer = jax.nn.initializers.ones,
        reduction_axes: int | Sequence[int] = -1,
        feature_axes: int | Sequence[int] = -1,
        axis_name: str | None = None,
        use_fast_variance: bool = True,
        rngs: Rngs,
    ) -> None:
        shape = (num_features,)
        self.scale: Param | None = (
            Param(scale_init(rngs.params(), shape, param_dtype)) if use_scale else None
        )
        self.bias: Param | None = (
            Param(bias_init(rngs.params(), shape, param_dtype)) if use_bias else None
        )
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.reduction_axes = reduction_axes
        self.feature_axes = feature_axes
        self.axis_name = axis_name
        self.use_fast_variance = use_fast_variance

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        return F.layer_norm(
            x,
            None if self.scale is None else self.scale[...],
            None if self.bias is None else self.bias[...],
            epsilon=self.epsilon,
            reduction_axes=self.reduction_axes,
            feature_axes=self.feature_axes,
            axis_name=self.axis_name,
            use_fast_variance=self.use_fast_variance,
            mask=mask,
            dtype=self.dtype,
        )


class BatchNorm(Module):
    """Batch normalization: ``mean``/``var`` are BatchStat running averages, ``scale``/``bias``
    Params. In training (``use_running_average=False``) the batch's statistics are used and
    the running averages updated in place with ``momentum``."""

    def __init__(
        self,
        num_features: int,
        *,
        use_running_average: bool = False,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-5,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = jax.nn.initializers.zeros,
        scale_init: Initializer = jax.nn.initializers.ones,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        rngs: Rngs,
    ) -> None:
        shape = (num_features,)
        self.mean: BatchStat = BatchStat(jnp.zeros(shape, jnp.float32))
        self.var: BatchStat = BatchStat(jnp.ones(shape, jnp.float32))
        self.scale: Param | None = (
            Param(scale_init(rngs.params(), shape, param_dtype)) if use_scale else None
        )
        self.bias: Param | None = (
            Param(bias_init(rngs.params(), shape, param_dtype)) if use_bias else None
        )
        self.num_features = num_features
        self.use_running_average = use_running_average
        self.axis = axis
        self.momentum = momentum
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance

    def __call__(
        self,
        x: jax.Array,
        use_running_average: bool | None = None,
        *,
        mask: jax.Array | None = None,
    ) -> jax.Array:
        if use_running_average is None:
            use_running_average = self.use_running_average
        mean, var = self.mean[...], self.var[...]
        if not use_running_average:
            mean, var = F.batch_stats(
                x,
                axis=self.axis,
                axis_name=self.axis_name,
                axis_index_groups=self.axis_index_groups,
                use_fast_variance=self.use_fast_variance,
                mask=mask,
            )
            self.mean[...] = F.ema(self.mean[...], mean, self.momentum)
            self.var[...] = F.ema(self.var[...], var, self.momentum)
        return F.batch_norm(
            x,
            mean,
            var,
            None if self.scale is None else self.scale[...],
            None if self.bias is None else self.bias[...],
            axis=self.axis,
            epsilon=self.epsilon,
            dtype=self.dtype,
        )
