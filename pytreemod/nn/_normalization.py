"""``LayerNorm``, ``RMSNorm``, ``GroupNorm`` and ``BatchNorm`` (running statistics as state)."""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Bool, Float

from .._errors import LayerConfigError
from .._module import Module, field
from .._shapecheck import AnyArray, checked, fail, summary
from .._sharding._ops import constrain
from .._trace_cache import trace_once
from .._variables import BatchStat, Param
from . import _ops_norm as F
from ._init import Initializer, bias_value, filled
from ._ops_common import canonicalize_axes, var_value
from ._validate import callable_arg, dtype_arg, number, positive_int, prng_key, probability

_ones = jax.nn.initializers.ones
_zeros = jax.nn.initializers.zeros


def _shape(features: int | Sequence[int], owner: str = "norm") -> tuple[int, ...]:
    shape = (features,) if not isinstance(features, Sequence) else tuple(features)
    for n in shape:
        positive_int(owner, "features", n)
    return shape


def _axes(axes: int | Sequence[int]) -> int | tuple[int, ...]:
    return axes if isinstance(axes, int) else tuple(axes)


def _init_params(
    owner: str,
    shape: tuple[int, ...],
    param_dtype: Any,
    use_scale: bool,
    use_bias: bool,
    scale_init: Initializer,
    bias_init: Initializer,
    key: jax.Array | None,
) -> tuple[Param[jax.Array] | None, Param[jax.Array] | None]:
    for n in shape:
        positive_int(owner, "features", n)
    dtype_arg(owner, "param_dtype", param_dtype, inexact=True)
    callable_arg(owner, "scale_init", scale_init)
    callable_arg(owner, "bias_init", bias_init)
    if key is not None:
        prng_key(owner, key)
    if key is None:
        # ones/zeros take no randomness: no key is made or split, so a norm's init
        # program holds its constants only, as a hand-written init would. A custom
        # initializer is called without a key (``ones``, ``constant(v)`` ignore it).
        scale = bias = None
        if use_scale:
            scale = Param(_keyless(owner, "scale_init", scale_init, shape, param_dtype, 1))
        if use_bias:
            bias = Param(_keyless(owner, "bias_init", bias_init, shape, param_dtype, 0))
        return scale, bias
    skey, bkey = jax.random.split(key)
    scale = Param(scale_init(skey, shape, param_dtype)) if use_scale else None
    bias = Param(bias_value(bias_init, bkey, shape, param_dtype)) if use_bias else None
    return scale, bias


def _keyless(
    owner: str, name: str, init: Initializer, shape: tuple[int, ...], dtype: Any, fill: float
) -> jax.Array:
    """``init``'s value without a PRNG key: ``filled`` for the defaults; a custom
    initializer is called with ``key=None``, and one that needs randomness (it fails
    so) is a ``LayerConfigError`` asking for ``key=``."""
    if init is (_ones if fill == 1 else _zeros):
        return filled(shape, fill, dtype)
    try:
        return jnp.asarray(init(None, shape, dtype))  # type: ignore[arg-type]
    except Exception as error:
        raise LayerConfigError(
            f"{owner}: this {name} needs a PRNG key (called without one it raised "
            f"{type(error).__name__}: {str(error)[:120]}); pass "
            "key=jax.random.key(seed). Initializers that take no randomness (ones, zeros, "
            "constant(v)) need none."
        ) from None


class LayerNorm(Module, typecheck=True):
    """Layer normalisation (Flax ``LayerNorm``): normalise each example over its feature
    axis, then scale and shift.

    **Arguments:**

    - ``features``: size of the feature axis (or sizes, for several ``feature_axes``).
    - ``epsilon``: added to the variance, default ``1e-6`` (Flax's).
    - ``use_scale``, ``use_bias``: learn ``scale`` (init ``ones``) and ``bias`` (init
      ``zeros``); default ``True``.
    - ``reduction_axes``, ``feature_axes``: statistics axes and parameter axes (default
      ``-1`` both).
    - ``axis_name``: also average the statistics over this mapped axis (default ``None``).
    - ``use_fast_variance``: ``E[x^2] - E[x]^2`` in one pass (default ``True``, Flax's).
    - ``dtype`` (default ``None``: inferred), ``param_dtype`` (default ``float32``),
      ``scale_init``, ``bias_init``, ``key`` (only needed by initializers that draw
      random numbers; ``ones``, ``zeros`` and ``constant(v)`` need none).

    Statistics are computed in float32 whatever the input dtype.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> norm = pm.nn.LayerNorm(16)
    >>> norm
    LayerNorm(scale=Param(f32[16]), bias=Param(f32[16]), epsilon=1e-06)
    >>> x = jnp.arange(32.0).reshape(2, 16)  # (*batch, features)
    >>> y = norm(x)                          # (*batch, features)
    >>> y.shape, bool(abs(y.mean(-1)).max() < 1e-5), bool(abs(y.std(-1) - 1).max() < 1e-3)
    ((2, 16), True, True)
    """

    scale: Param[jax.Array] | None
    bias: Param[jax.Array] | None
    epsilon: float = field(static=True, default=1e-6)
    reduction_axes: int | tuple[int, ...] = field(static=True, default=-1, repr=False)
    feature_axes: int | tuple[int, ...] = field(static=True, default=-1, repr=False)
    axis_name: Any = field(static=True, default=None, repr=False)
    use_fast_variance: bool = field(static=True, default=True, repr=False)
    dtype: Any = field(static=True, default=None, repr=False)

    def __init__(
        self,
        features: int | Sequence[int],
        *,
        epsilon: float = 1e-6,
        use_scale: bool = True,
        use_bias: bool = True,
        reduction_axes: int | Sequence[int] = -1,
        feature_axes: int | Sequence[int] = -1,
        axis_name: Any = None,
        use_fast_variance: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        scale_init: Initializer = _ones,
        bias_init: Initializer = _zeros,
        key: jax.Array | None = None,
    ):
        self.scale, self.bias = _init_params(
            "LayerNorm",
            _shape(features, "LayerNorm"),
            param_dtype,
            use_scale,
            use_bias,
            scale_init,
            bias_init,
            key,
        )
        self.epsilon = number("LayerNorm", "epsilon", epsilon, low=0.0)
        self.reduction_axes = _axes(reduction_axes)
        self.feature_axes = _axes(feature_axes)
        self.axis_name = axis_name
        self.use_fast_variance = use_fast_variance
        self.dtype = dtype_arg("LayerNorm", "dtype", dtype)

    @trace_once
    @checked
    def __call__(
        self,
        x: Float[AnyArray, "*batch features"],
        *,
        mask: Bool[AnyArray, "..."] | None = None,
        out_sharding: Any = None,
    ) -> Float[jax.Array, "*batch features"]:
        """Normalise ``x``; ``mask`` (broadcastable to ``x``) limits the statistics;
        ``out_sharding`` reshards the result (default: ``x``'s sharding)."""
        y = F.layer_norm(
            x,
            var_value(self.scale),
            var_value(self.bias),
            epsilon=self.epsilon,
            reduction_axes=self.reduction_axes,
            feature_axes=self.feature_axes,
            axis_name=self.axis_name,
            use_fast_variance=self.use_fast_variance,
            mask=mask,
            dtype=self.dtype,
        )
        return constrain(y, out_sharding, x)


class RMSNorm(Module, typecheck=True):
    """Root-mean-square normalisation (Flax ``RMSNorm``): ``x / sqrt(mean(x^2) + eps) *
    scale``, without centring or bias.

    **Arguments:** ``features``; ``epsilon`` (default ``1e-6``, Flax's); ``use_scale``
    (default ``True``, init ``ones``); ``reduction_axes``/``feature_axes`` (default
    ``-1``); ``axis_name``; ``dtype``; ``param_dtype`` (default ``float32``);
    ``scale_init``; ``key`` (only for initializers that draw random numbers).

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> norm = pm.nn.RMSNorm(4)
    >>> x = jnp.ones((3, 4)) * 2.0  # (*batch, features)
    >>> y = norm(x)                 # (*batch, features)
    >>> y.shape, y[0].round(3).tolist()
    ((3, 4), [1.0, 1.0, 1.0, 1.0])
    """

    scale: Param[jax.Array] | None
    epsilon: float = field(static=True, default=1e-6)
    reduction_axes: int | tuple[int, ...] = field(static=True, default=-1, repr=False)
    feature_axes: int | tuple[int, ...] = field(static=True, default=-1, repr=False)
    axis_name: Any = field(static=True, default=None, repr=False)
    dtype: Any = field(static=True, default=None, repr=False)

    def __init__(
        self,
        features: int | Sequence[int],
        *,
        epsilon: float = 1e-6,
        use_scale: bool = True,
        reduction_axes: int | Sequence[int] = -1,
        feature_axes: int | Sequence[int] = -1,
        axis_name: Any = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        scale_init: Initializer = _ones,
        key: jax.Array | None = None,
    ):
        self.scale, _ = _init_params(
            "RMSNorm",
            _shape(features, "RMSNorm"),
            param_dtype,
            use_scale,
            False,
            scale_init,
            _zeros,
            key,
        )
        self.epsilon = number("RMSNorm", "epsilon", epsilon, low=0.0)
        self.reduction_axes = _axes(reduction_axes)
        self.feature_axes = _axes(feature_axes)
        self.axis_name = axis_name
        self.dtype = dtype_arg("RMSNorm", "dtype", dtype)

    @trace_once
    @checked
    def __call__(
        self,
        x: Float[AnyArray, "*batch features"],
        *,
        mask: Bool[AnyArray, "..."] | None = None,
        out_sharding: Any = None,
    ) -> Float[jax.Array, "*batch features"]:
        """Normalise ``x``; ``mask`` (broadcastable to ``x``) limits the statistics;
        ``out_sharding`` reshards the result (default: ``x``'s sharding)."""
        y = F.rms_norm(
            x,
            var_value(self.scale),
            epsilon=self.epsilon,
            reduction_axes=self.reduction_axes,
            feature_axes=self.feature_axes,
            axis_name=self.axis_name,
            mask=mask,
            dtype=self.dtype,
        )
        return constrain(y, out_sharding, x)


class GroupNorm(Module, typecheck=True):
    """Group normalisation (Flax ``GroupNorm``): channels (last axis) in groups; per
    example and group, statistics over every axis but the leading batch axis.

    **Arguments:**

    - ``features``: number of channels.
    - ``num_groups``: default ``32`` (Flax's); or ``num_groups=None, group_size=...``.
    - ``epsilon``: default ``1e-6`` (Flax's).
    - ``use_scale``, ``use_bias`` (default ``True``; ``ones``/``zeros``),
      ``reduction_axes`` (default: all but the first; must include the last),
      ``axis_name``, ``use_fast_variance``, ``dtype``, ``param_dtype``, ``scale_init``,
      ``bias_init``, ``key`` (only for initializers that draw random numbers).

    ``GroupNorm(c, num_groups=1)`` is a LayerNorm over all non-batch axes;
    ``group_size=1`` an InstanceNorm.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> norm = pm.nn.GroupNorm(6, num_groups=3)
    >>> x = jnp.ones((2, 8, 8, 6))  # (batch, *spatial, channels)
    >>> norm(x).shape               # (batch, *spatial, channels)
    (2, 8, 8, 6)
    """

    scale: Param[jax.Array] | None
    bias: Param[jax.Array] | None
    num_groups: int = field(static=True)
    epsilon: float = field(static=True, default=1e-6)
    reduction_axes: int | tuple[int, ...] | None = field(static=True, default=None, repr=False)
    axis_name: Any = field(static=True, default=None, repr=False)
    use_fast_variance: bool = field(static=True, default=True, repr=False)
    dtype: Any = field(static=True, default=None, repr=False)

    def __init__(
        self,
        features: int,
        num_groups: int | None = 32,
        *,
        group_size: int | None = None,
        epsilon: float = 1e-6,
        use_scale: bool = True,
        use_bias: bool = True,
        reduction_axes: int | Sequence[int] | None = None,
        axis_name: Any = None,
        use_fast_variance: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        scale_init: Initializer = _ones,
        bias_init: Initializer = _zeros,
        key: jax.Array | None = None,
    ):
        positive_int("GroupNorm", "features", features)
        self.num_groups = F.group_norm_groups(features, num_groups, group_size)
        self.scale, self.bias = _init_params(
            "GroupNorm",
            (features,),
            param_dtype,
            use_scale,
            use_bias,
            scale_init,
            bias_init,
            key,
        )
        self.epsilon = number("GroupNorm", "epsilon", epsilon, low=0.0)
        self.reduction_axes = None if reduction_axes is None else _axes(reduction_axes)
        self.axis_name = axis_name
        self.use_fast_variance = use_fast_variance
        self.dtype = dtype_arg("GroupNorm", "dtype", dtype)

    @trace_once
    @checked
    def __call__(
        self,
        x: Float[AnyArray, "batch *spatial channels"],
        *,
        mask: Bool[AnyArray, "..."] | None = None,
        out_sharding: Any = None,
    ) -> Float[jax.Array, "batch *spatial channels"]:
        """Normalise ``x`` of shape ``(batch, *spatial, channels)``; ``out_sharding``
        reshards the result."""
        y = F.group_norm(
            x,
            var_value(self.scale),
            var_value(self.bias),
            num_groups=self.num_groups,
            epsilon=self.epsilon,
            reduction_axes=self.reduction_axes,
            axis_name=self.axis_name,
            use_fast_variance=self.use_fast_variance,
            mask=mask,
            dtype=self.dtype,
        )
        return constrain(y, out_sharding, x)


class BatchNorm(Module, typecheck=True):
    """Batch normalisation (Flax ``BatchNorm``), with running statistics as state.

    In training (``use_running_average=False``) it normalises with the statistics of the
    batch (averaged over the mapped axis ``axis_name`` too, if given) and **writes** the
    running averages ``mean``/``var`` (collection ``batch_stats``), so it must run inside
    ``out, model = pm.apply(model, x, mutable="batch_stats")``, which returns the updated
    model. In evaluation (``use_running_average=True``) it reads them and writes nothing.

    **Arguments:**

    - ``features``: size of the feature ``axis`` (sizes, for several axes).
    - ``use_running_average``: the default mode (default ``False``: training); the call
      argument of the same name overrides it.
    - ``axis``: feature axis or axes (default ``-1``); statistics over all other axes.
    - ``momentum``: running average decay, default ``0.99`` (Flax's).
    - ``epsilon``: default ``1e-5`` (Flax's).
    - ``use_scale``, ``use_bias`` (default ``True``; ``ones``/``zeros``).
    - ``axis_name``, ``axis_index_groups``: cross-replica statistics under
      ``pm.vmap(..., axis_name=...)`` or ``shard_map`` (default ``None``).
    - ``use_fast_variance`` (default ``True``), ``dtype``, ``param_dtype`` (default
      ``float32``), ``scale_init``, ``bias_init``, ``key`` (only for initializers that
      draw random numbers).

    **State:** ``mean`` (init zeros) and ``var`` (init ones), float32 ``BatchStat``s.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> bn = pm.nn.BatchNorm(3, momentum=0.9)
    >>> x = jax.random.normal(jax.random.key(0), (16, 3)) + 5.0  # (*batch, features)
    >>> y, bn = pm.apply(bn, x, mutable="batch_stats")           # train: writes stats
    >>> y.shape                                                  # (*batch, features)
    (16, 3)
    >>> bn.mean.value.round(1).tolist()                          # 0.9 * 0 + 0.1 * ~5
    [0.5, 0.5, 0.5]
    >>> y_eval = bn(x, use_running_average=True)                 # eval: reads only
    """

    scale: Param[jax.Array] | None
    bias: Param[jax.Array] | None
    mean: BatchStat[jax.Array]
    var: BatchStat[jax.Array]
    use_running_average: bool = field(static=True, default=False)
    axis: int | tuple[int, ...] = field(static=True, default=-1, repr=False)
    momentum: float = field(static=True, default=0.99)
    epsilon: float = field(static=True, default=1e-5)
    axis_name: Any = field(static=True, default=None, repr=False)
    axis_index_groups: Any = field(static=True, default=None, repr=False)
    use_fast_variance: bool = field(static=True, default=True, repr=False)
    dtype: Any = field(static=True, default=None, repr=False)

    def __init__(
        self,
        features: int | Sequence[int],
        *,
        use_running_average: bool = False,
        axis: int | Sequence[int] = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-5,
        use_scale: bool = True,
        use_bias: bool = True,
        axis_name: Any = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        scale_init: Initializer = _ones,
        bias_init: Initializer = _zeros,
        key: jax.Array | None = None,
    ):
        shape = _shape(features, "BatchNorm")
        self.scale, self.bias = _init_params(
            "BatchNorm", shape, param_dtype, use_scale, use_bias, scale_init, bias_init, key
        )
        self.mean = BatchStat(filled(shape, 0, jnp.float32))
        self.var = BatchStat(filled(shape, 1, jnp.float32))
        self.use_running_average = use_running_average
        self.axis = _axes(axis)
        self.momentum = probability("BatchNorm", "momentum", momentum)
        self.epsilon = number("BatchNorm", "epsilon", epsilon, low=0.0)
        self.axis_name = axis_name
        self.axis_index_groups = (
            None if axis_index_groups is None else tuple(tuple(g) for g in axis_index_groups)
        )
        self.use_fast_variance = use_fast_variance
        self.dtype = dtype_arg("BatchNorm", "dtype", dtype)

    @trace_once
    @checked
    def __call__(
        self,
        x: Float[AnyArray, "*batch features"],
        use_running_average: bool | None = None,
        *,
        mask: Bool[AnyArray, "..."] | None = None,
        out_sharding: Any = None,
    ) -> Float[jax.Array, "*batch features"]:
        """Normalise ``x``: with batch statistics (and update the running ones) in
        training, with the running statistics in evaluation."""
        use_ra = self.use_running_average if use_running_average is None else use_running_average
        axes = canonicalize_axes(x.ndim, self.axis)
        features: tuple[int, ...] = tuple(x.shape[a] for a in axes)
        expected = tuple(var_value(self.mean).shape)
        if features != expected:
            fail(
                "batch_norm",
                f"dimension 'features' does not agree: the running mean is {expected} but "
                f"x {summary(x)} has {features} at feature axes {axes}; build the layer "
                f"with BatchNorm(features={features})",
            )
        if use_ra:
            mean, var = self.mean.get(), self.var.get()
        else:
            mean, var = F.batch_stats(
                x,
                axis=self.axis,
                axis_name=self.axis_name,
                axis_index_groups=self.axis_index_groups,
                use_fast_variance=self.use_fast_variance,
                mask=mask,
            )
            self.mean.set(F.ema(self.mean.get(), mean, self.momentum))
            self.var.set(F.ema(self.var.get(), var, self.momentum))
        y = F.batch_norm(
            x,
            mean,
            var,
            var_value(self.scale),
            var_value(self.bias),
            axis=self.axis,
            epsilon=self.epsilon,
            dtype=self.dtype,
        )
        return constrain(y, out_sharding, x)
