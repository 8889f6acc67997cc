"""Normalization layers (``flax.nnx.nn.normalization``): ``BatchNorm``, ``LayerNorm``,
``RMSNorm``, ``GroupNorm``, ``InstanceNorm``, and the wrappers ``SpectralNorm`` and
``WeightNorm``.

The statistics are ``pytreemod.nn.functional.compute_stats``'s and the affine
normalisation ``functional.normalize``'s, the same calls Linen's layers make, so an NNX
layer and its Linen twin with the same parameters give the same bits. These classes own
the parameters (Flax's names, shapes and initial values) and the running averages.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

import pytreemod as pm
from pytreemod.nn import functional as F

from .. import filterlib
from ..graphlib import state as _graph_state
from ..module import Module, first_from
from ..pytreelib import data
from ..rnglib import Rngs
from ..statelib import to_flat_state
from ..variablelib import BatchStat, Param, Variable
from . import initializers
from .dtypes import canonicalize_dtype, promote_dtype

Array = jax.Array
Axes = int | Sequence[int]
Dtype = Any
Initializer = Callable[..., Any]
PromoteDtypeFn = Callable[..., Any]

__all__ = [
    "BatchNorm",
    "GroupNorm",
    "InstanceNorm",
    "LayerNorm",
    "RMSNorm",
    "SpectralNorm",
    "WeightNorm",
]

_NO_METADATA: Mapping[str, Any] = MappingProxyType({})
_ZEROS: Any = initializers.zeros_init()
_ONES: Any = initializers.ones_init()
_KERNEL_PATHS: Any = filterlib.PathContains("kernel")


def _canonicalize_axes(rank: int, axes: Axes) -> tuple[int, ...]:
    if not isinstance(axes, Iterable):
        axes = (axes,)
    return tuple(sorted({a + rank if a < 0 else a for a in axes}))


def _feature_param(
    use: bool,
    init: Initializer,
    rngs: Rngs,
    shape: tuple[int, ...],
    dtype: Dtype,
    meta: Mapping[str, Any],
    absent: Any = None,
) -> Any:
    """A ``Param`` drawn with the next ``params`` key, or ``absent`` when not ``use``."""
    if not use:
        return absent
    return Param(init(rngs.params(), shape, dtype), **meta)


def _value(v: Variable | None) -> Array | None:
    return None if v is None else v[...]


def _stats(
    layer: Any,
    x: Array,
    axes: Axes,
    *,
    use_mean: bool = True,
    mask: Array | None = None,
) -> tuple[Array | None, Array]:
    return F.compute_stats(
        x,
        axes,
        use_mean=use_mean,
        use_fast_variance=layer.use_fast_variance,
        axis_name=layer.axis_name,
        axis_index_groups=layer.axis_index_groups,
        mask=mask,
        dtype=layer.dtype,
    )


def _normalize(
    layer: Any,
    x: Array,
    mean: Array | None,
    var: Array,
    scale: Array | None,
    bias: Array | None,
    reduction_axes: Axes,
    feature_axes: Axes,
) -> Array:
    """Flax's ``_normalize``: the result dtype is ``layer.dtype`` or that of ``x`` with the
    scale and bias."""
    dtype = canonicalize_dtype(x, scale, bias, dtype=layer.dtype)
    return F.normalize(
        x,
        mean,
        var,
        scale,
        bias,
        reduction_axes=reduction_axes,
        feature_axes=feature_axes,
        epsilon=layer.epsilon,
        dtype=dtype,
    )


class _NormConfig(NamedTuple):
    """The settings ``_stats`` and ``_normalize`` read (the static part of a norm traced
    once per configuration)."""

    epsilon: float
    dtype: Any
    use_fast_variance: bool
    axis_name: Any
    axis_index_groups: Any
    reduction_axes: Any
    feature_axes: Any


def _config(layer: Any) -> _NormConfig:
    return _NormConfig(
        layer.epsilon,
        layer.dtype,
        layer.use_fast_variance,
        layer.axis_name,
        layer.axis_index_groups,
        layer.reduction_axes,
        layer.feature_axes,
    )


def _layer_norm(
    c: _NormConfig, x: Array, scale: Array | None, bias: Array | None, mask: Array | None
) -> Array:
    mean, var = _stats(c, x, c.reduction_axes, mask=mask)
    return _normalize(c, x, mean, var, scale, bias, c.reduction_axes, c.feature_axes)


def _rms_norm(c: _NormConfig, x: Array, scale: Array | None, mask: Array | None) -> Array:
    _, var = _stats(c, x, c.reduction_axes, use_mean=False, mask=mask)
    return _normalize(c, x, None, var, scale, None, c.reduction_axes, c.feature_axes)


# Under a staging trace each configuration's math is traced once and its trace inlined
# (``pm.trace_once(inline=True)``: the jaxpr of the math itself, its linearization taken
# from JAX's caches after the first block of a deep model); eager calls run it as written.
_ONCE = {math: pm.trace_once(math, inline=True) for math in (_layer_norm, _rms_norm)}


def _norm_math(math: Callable[..., Array], layer: Any, *arrays: Any) -> Array:
    """``math`` with the layer's settings, traced once per configuration except with a
    named axis (whose ``pmean`` depends on the axes bound around the call)."""
    config = _config(layer)
    if layer.axis_name is not None:
        return math(config, *arrays)
    return _ONCE[math](config, *arrays)


class BatchNorm(Module):
    """Batch normalization: each feature normalised with statistics over the batch.

    ``mean``/``var`` (``BatchStat``, ``(num_features,)``, zeros/ones) are running averages;
    ``scale``/``bias`` (``Param``) the affine parameters. In training
    (``use_running_average=False``, ``module.train()``) a call normalises with the batch's
    statistics and updates the running averages in place with ``momentum``; in evaluation
    (``True``, ``module.eval()``) it uses the running averages.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> bn = nnx.BatchNorm(3, momentum=0.9, rngs=nnx.Rngs(0))
    >>> y = bn(jnp.arange(12.0).reshape(4, 3))
    >>> [round(float(m), 2) for m in bn.mean[...]]
    [0.45, 0.55, 0.65]
    """

    def __init__(
        self,
        num_features: int,
        *,
        use_running_average: bool | None = False,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-5,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = _ZEROS,
        scale_init: Initializer = _ONES,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
        scale_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        shape = (num_features,)
        self.mean = BatchStat(jnp.zeros(shape, jnp.float32))
        self.var = BatchStat(jnp.ones(shape, jnp.float32))
        self.scale: Param | None = _feature_param(
            use_scale, scale_init, rngs, shape, param_dtype, scale_metadata, data(None)
        )
        self.bias: Param | None = _feature_param(
            use_bias, bias_init, rngs, shape, param_dtype, bias_metadata, data(None)
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
        self.promote_dtype = promote_dtype

    def __call__(
        self,
        x: Array,
        use_running_average: bool | None = None,
        *,
        mask: Array | None = None,
    ) -> Array:
        """Normalise ``x``; ``use_running_average`` given here overrides the attribute."""
        use_running_average = first_from(
            use_running_average,
            self.use_running_average,
            error_msg=(
                "No `use_running_average` argument was provided to BatchNorm. Consider one "
                "of the following options:\n\n1. Pass `use_running_average` to the BatchNorm "
                "constructor:\n\n  self.bn = nnx.BatchNorm(..., use_running_average=True/False)"
                "\n\n2. Pass `use_running_average` to the BatchNorm __call__:\n\n"
                "  self.bn(x, use_running_average=True/False)\n\n3. Use `nnx.view` to create "
                "a view of the model with a specific `use_running_average` value:\n\n"
                "  model_view = nnx.view(model, use_running_average=True/False)\n"
            ),
        )
        feature_axes = _canonicalize_axes(x.ndim, self.axis)
        reduction_axes = tuple(i for i in range(x.ndim) if i not in feature_axes)
        x, mean, var, scale, bias = self.promote_dtype(
            (x, self.mean[...], self.var[...], _value(self.scale), _value(self.bias)),
            dtype=self.dtype,
        )
        if not use_running_average:
            mean, var = _stats(self, x, reduction_axes, mask=mask)
            assert mean is not None
            self.mean[...] = lax.stop_gradient(F.ema(self.mean[...], mean, self.momentum))
            self.var[...] = lax.stop_gradient(F.ema(self.var[...], var, self.momentum))
        return _normalize(self, x, mean, var, scale, bias, reduction_axes, feature_axes)

    def set_view(self, use_running_average: bool | None = None) -> None:
        """Set ``use_running_average`` (when given); called by ``nnx.view``.

        Args:
            use_running_average: ``True`` normalises with the stored running statistics,
                ``False`` with the batch's (and updates the running averages).
        """
        if use_running_average is not None:
            self.use_running_average = use_running_average


class LayerNorm(Module):
    """Layer normalization: each example normalised with its own statistics over
    ``reduction_axes``; ``scale`` (ones) and ``bias`` (zeros) are ``(num_features,)``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> ln = nnx.LayerNorm(3, rngs=nnx.Rngs(0))
    >>> y = ln(jnp.array([[1.0, 2.0, 3.0]]))
    >>> round(float(y.mean()), 6), ln.scale.shape
    (0.0, (3,))
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = _ZEROS,
        scale_init: Initializer = _ONES,
        reduction_axes: Axes = -1,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
        scale_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        shape = (num_features,)
        self.scale: Param | None = _feature_param(
            use_scale, scale_init, rngs, shape, param_dtype, scale_metadata, data(None)
        )
        self.bias: Param | None = _feature_param(
            use_bias, bias_init, rngs, shape, param_dtype, bias_metadata, data(None)
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
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalise ``x``; only positions where ``mask`` is true count in the statistics."""
        x, scale, bias = self.promote_dtype(
            (x, _value(self.scale), _value(self.bias)), dtype=self.dtype
        )
        return _norm_math(_layer_norm, self, x, scale, bias, mask)


class RMSNorm(Module):
    """Root-mean-square normalization: ``x / sqrt(mean(x**2) + epsilon) * scale`` (no
    centring, no bias); ``scale`` is ``(num_features,)``, ones.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> rms = nnx.RMSNorm(2, epsilon=0.0, rngs=nnx.Rngs(0))
    >>> [round(float(v), 4) for v in rms(jnp.array([[3.0, 4.0]]))[0]]
    [0.8485, 1.1314]
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_scale: bool = True,
        scale_init: Initializer = initializers.ones,
        reduction_axes: Axes = -1,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        scale_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        shape = (num_features,)
        self.scale: Param | None = _feature_param(
            use_scale, scale_init, rngs, shape, param_dtype, scale_metadata, data(None)
        )
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_scale = use_scale
        self.reduction_axes = reduction_axes
        self.feature_axes = feature_axes
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def __call__(self, x: Array, mask: Array | None = None) -> Array:
        """Normalise ``x``; only positions where ``mask`` is true count in the statistics."""
        x, scale = self.promote_dtype((x, _value(self.scale)), dtype=self.dtype)
        return _norm_math(_rms_norm, self, x, scale, mask)


def _group_count(num_features: int, num_groups: int | None, group_size: int | None) -> int:
    if (num_groups is None) == (group_size is None):
        raise ValueError(
            "Either `num_groups` or `group_size` should be specified. If `group_size` is to "
            "be specified, pass `num_groups=None` as argument to override the default "
            "`num_groups` value of 32."
        )
    if group_size is not None:
        if num_features % group_size != 0:
            raise ValueError(
                f"Number of features ({num_features}) is not multiple of the group size "
                f"({group_size})."
            )
        return num_features // group_size
    if not isinstance(num_groups, int) or num_groups <= 0 or num_features % num_groups != 0:
        raise ValueError(
            f"Number of groups ({num_groups}) does not divide the number of channels "
            f"({num_features})."
        )
    return num_groups


class GroupNorm(Module):
    """Group normalization: the channels (last axis) split into ``num_groups`` groups,
    each normalised per example over the group and every axis but the first (or over
    ``reduction_axes``, which must include the last). Give ``num_groups`` or
    ``group_size`` (with ``num_groups=None``).

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> gn = nnx.GroupNorm(6, num_groups=3, rngs=nnx.Rngs(0))
    >>> gn(jnp.ones((2, 4, 6))).shape, gn.group_size
    ((2, 4, 6), 2)
    """

    def __init__(
        self,
        num_features: int,
        num_groups: int | None = 32,
        group_size: int | None = None,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = _ZEROS,
        scale_init: Initializer = _ONES,
        reduction_axes: Axes | None = None,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
        scale_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.feature_axis = -1
        self.num_groups = _group_count(num_features, num_groups, group_size)
        self.group_size = num_features // self.num_groups
        shape = (num_features,)
        self.scale: Param | None = _feature_param(
            use_scale, scale_init, rngs, shape, param_dtype, scale_metadata, data(None)
        )
        self.bias: Param | None = _feature_param(
            use_bias, bias_init, rngs, shape, param_dtype, bias_metadata, data(None)
        )
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.reduction_axes = reduction_axes
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalise ``x`` (``(batch, ..., num_features)``) group by group."""
        if self.reduction_axes is not None:
            red_in: Axes = self.reduction_axes
        else:
            red_in = [*range(1, x.ndim - 1), -1]
        red = _canonicalize_axes(x.ndim, red_in)
        group_shape = (*x.shape[:-1], self.num_groups, self.group_size)
        if mask is not None:
            mask = mask.reshape((*mask.shape[:-1], self.num_groups, self.group_size))
        x, scale, bias = self.promote_dtype(
            (x, _value(self.scale), _value(self.bias)), dtype=self.dtype
        )
        mean, var = _stats(self, x.reshape(group_shape), [*red[:-1], -1], mask=mask)
        assert mean is not None
        mean = jnp.repeat(mean, self.group_size, axis=1)
        var = jnp.repeat(var, self.group_size, axis=1)
        return _normalize(self, x, mean, var, scale, bias, red[:-1], (self.feature_axis,))


class InstanceNorm(Module):
    """Instance normalization: each example and feature normalised on its own, over every
    axis but the first (the batch) and ``feature_axes``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> inorm = nnx.InstanceNorm(5, rngs=nnx.Rngs(0))
    >>> inorm(jnp.ones((2, 3, 5))).shape
    (2, 3, 5)
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros,
        scale_init: Initializer = initializers.ones,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
        scale_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        shape = (num_features,)
        self.scale: Param | None = _feature_param(
            use_scale, scale_init, rngs, shape, param_dtype, scale_metadata
        )
        self.bias: Param | None = _feature_param(
            use_bias, bias_init, rngs, shape, param_dtype, bias_metadata
        )
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.feature_axes = feature_axes
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalise ``x`` (``(batch, ...)``) per example and feature."""
        feature_axes = _canonicalize_axes(x.ndim, self.feature_axes)
        if 0 in feature_axes:
            raise ValueError(
                "The channel axes cannot include the leading dimension as this is assumed "
                "to be the batch axis."
            )
        reduction_axes = [i for i in range(1, x.ndim) if i not in feature_axes]
        x, scale, bias = self.promote_dtype(
            (x, _value(self.scale), _value(self.bias)), dtype=self.dtype
        )
        mean, var = _stats(self, x, reduction_axes, mask=mask)
        return _normalize(self, x, mean, var, scale, bias, reduction_axes, feature_axes)


def _as_matrix(value: Array, error_on_non_matrix: bool) -> Array:
    if value.ndim > 2:
        if error_on_non_matrix:
            raise ValueError(
                f"Layer instance parameter is {value.ndim}D but error_on_non_matrix is True"
            )
        return jnp.reshape(value, (-1, value.shape[-1]))
    return value


class SpectralNorm(Module):
    """Spectral normalization: a wrapper whose call divides every matrix parameter of
    ``layer_instance`` by its largest singular value, in place, before calling it.

    The singular value is estimated by ``n_steps`` of power iteration from a vector ``u``;
    ``u`` and the estimate ``sigma`` are ``BatchStat`` s in the dict ``batch_stats``, keyed
    by the parameter's path plus ``'u'``/``'sigma'``. Parameters of rank above 2 are viewed
    as ``(-1, last axis)`` matrices (or refused with ``error_on_non_matrix``); vectors and
    scalars are left alone. ``update_stats`` (here or at call time; ``train()``/``eval()``
    set it) decides whether a call stores the new ``u`` and ``sigma``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.SpectralNorm(nnx.Linear(4, 5, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
    >>> sorted(layer.batch_stats)
    [('kernel', 'sigma'), ('kernel', 'u')]
    >>> layer(jnp.ones((2, 4))).shape
    (2, 5)
    """

    def __init__(
        self,
        layer_instance: Module,
        *,
        n_steps: int = 1,
        epsilon: float = 1e-12,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        error_on_non_matrix: bool = False,
        update_stats: bool = True,
        rngs: Rngs,
    ) -> None:
        self.layer_instance = layer_instance
        self.n_steps = n_steps
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.error_on_non_matrix = error_on_non_matrix
        # train()/eval() set use_running_average; update_stats is its negation.
        self.use_running_average = not update_stats
        batch_stats: dict[tuple[Any, ...], BatchStat] = {}
        for path, param in to_flat_state(_graph_state(layer_instance, Param)):
            value = param[...]
            if value.ndim <= 1 or n_steps < 1:
                continue
            value = _as_matrix(value, error_on_non_matrix)
            key = rngs.params()
            u = initializers.normal()(key, (1, value.shape[-1]), param_dtype)
            batch_stats[(*path, "u")] = BatchStat(u)
            batch_stats[(*path, "sigma")] = BatchStat(initializers.ones(key, (), param_dtype))
        self.batch_stats = data(batch_stats)

    def __call__(self, x: Array, update_stats: bool | None = None) -> Any:
        """Normalise the wrapped layer's parameters in place, then call it on ``x``."""
        update_stats = first_from(
            update_stats,
            not self.use_running_average,
            error_msg=(
                "No `update_stats` argument was provided to SpectralNorm\n        as either a "
                "__call__ argument or __init__ argument."
            ),
        )
        for path, param in to_flat_state(_graph_state(self.layer_instance, Param)):
            self._normalize_param(tuple(path), param, bool(update_stats))
        return self.layer_instance(x)  # type: ignore[operator]

    def _stat(self, path: tuple[Any, ...], name: str) -> BatchStat:
        stat = self.batch_stats.get((*path, name))
        if stat is None:
            raise RuntimeError(
                f"Could not find the path for {name} batch stat corresponding to the param "
                f"{path} in the batch stats dict. Parameters of the layer_instance should "
                "not change!"
            )
        return stat

    def _normalize_param(self, path: tuple[Any, ...], param: Variable, update: bool) -> None:
        value = param[...]
        shape = value.shape
        if value.ndim <= 1 or self.n_steps < 1:
            return
        value = _as_matrix(value, self.error_on_non_matrix)
        u_stat, sigma_stat = self._stat(path, "u"), self._stat(path, "sigma")
        u, v, sigma = F.spectral_power_iteration(value, u_stat[...], self.n_steps, self.epsilon)
        value = (value / jnp.where(sigma != 0, sigma, 1)).reshape(shape)
        if update:
            u_stat[...] = u
            sigma_stat[...] = sigma
        dtype = canonicalize_dtype(value, u, v, sigma, dtype=self.dtype)
        param[...] = jnp.asarray(value, dtype)


class WeightNorm(Module):
    """Weight normalization: a wrapper whose call replaces each selected parameter of
    ``layer_instance`` (``variable_filter``, default paths containing ``'kernel'``) by
    its L2-normalised direction (over every axis but ``feature_axes``) times a learned
    scale, in place, before calling it.

    The scales are arrays of the feature axes' shape in the dict ``scales``, keyed by
    the parameter's path (``None`` with ``use_scale=False``).

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.WeightNorm(nnx.Linear(4, 5, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
    >>> layer.scales[("kernel",)].shape, layer(jnp.ones((2, 4))).shape
    ((5,), (2, 5))
    """

    def __init__(
        self,
        layer_instance: Module,
        *,
        feature_axes: Axes | None = -1,
        use_scale: bool = True,
        scale_init: Initializer = initializers.ones,
        epsilon: float = 1e-12,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        variable_filter: Any = _KERNEL_PATHS,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
    ) -> None:
        self.layer_instance = layer_instance
        self.feature_axes: Axes = () if feature_axes is None else feature_axes
        self.use_scale = use_scale
        self.scale_init = scale_init
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.variable_filter = filterlib.to_predicate(variable_filter)
        self.promote_dtype = promote_dtype
        self.scales: dict[tuple[Any, ...], Array] | None = None
        if use_scale:  # (Flax assigns None first, then data: the attribute is data)
            scales = {}
            for path, param in to_flat_state(_graph_state(layer_instance, Param)):
                if self.variable_filter(path, param):
                    axes = _canonicalize_axes(param.ndim, self.feature_axes)
                    shape = tuple(param.shape[a] for a in axes)
                    # Flax passes the stream itself (no key drawn) and no dtype.
                    scales[tuple(path)] = scale_init(rngs["params"], shape)
            self.scales = data(scales)

    def __call__(self, x: Array, *args: Any, **kwargs: Any) -> Any:
        """Normalise the wrapped layer's selected parameters in place, then call it."""
        for path, param in to_flat_state(_graph_state(self.layer_instance)):
            self._normalize_param(tuple(path), param)
        return self.layer_instance(x, *args, **kwargs)  # type: ignore[operator]

    def _normalize_param(self, path: tuple[Any, ...], param: Variable) -> None:
        if not self.variable_filter(path, param):
            return
        value = param[...]
        feature_axes = _canonicalize_axes(value.ndim, self.feature_axes)
        reduction_axes = tuple(i for i in range(value.ndim) if i not in feature_axes)
        value_bar = F.l2_normalize(value, axis=reduction_axes, eps=self.epsilon)
        cast_args = [value]
        if self.use_scale:
            assert self.scales is not None
            if path not in self.scales:
                raise RuntimeError(
                    f"Could not find the scale corresponding to the param {path} in scales "
                    "dict. Parameters of the layer_instance should not change!"
                )
            scale = self.scales[path]
            if len(feature_axes) < value.ndim:
                shape = [1] * value.ndim
                for ax in feature_axes:
                    shape[ax] = value.shape[ax]
                scale = scale.reshape(shape)
            value_bar = value_bar * scale
            cast_args.append(scale)
        param[...] = jnp.asarray(value_bar, canonicalize_dtype(*cast_args, dtype=self.dtype))
