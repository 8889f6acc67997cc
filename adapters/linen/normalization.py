"""Normalisation layers (``flax.linen.normalization``): ``BatchNorm``, ``LayerNorm``,
``RMSNorm``, ``GroupNorm``, ``InstanceNorm``, ``SpectralNorm``, ``WeightNorm``.

Statistics come from ``pytreemod.nn.functional.compute_stats`` (one pass, at least
float32) and the affine normalisation from ``functional.normalize``; these classes create
the parameters and running averages with Flax's names and shapes.
"""

import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from pytreemod.nn import functional as F

from . import _traced, initializers, transforms
from .dtypes import canonicalize_dtype
from .module import Module, compact, merge_param

Array = jax.Array
Axes = int | Sequence[int]
Dtype = Any
Initializer = Callable[..., Any]

__all__ = [
    "BatchNorm",
    "GroupNorm",
    "InstanceNorm",
    "LayerNorm",
    "RMSNorm",
    "SpectralNorm",
    "WeightNorm",
]


def _axes(rank: int, axes: Axes) -> tuple[int, ...]:
    if not isinstance(axes, Iterable):
        axes = (axes,)
    return tuple(sorted({a + rank if a < 0 else a for a in axes}))


def _stats(
    mdl: Any,
    x: Array,
    axes: Axes,
    *,
    axis_name: Any = None,
    use_mean: bool = True,
    mask: Array | None = None,
) -> tuple[Array | None, Array]:
    stats = F.compute_stats if axis_name is not None else _traced.compute_stats
    return stats(
        x,
        axes,
        use_mean=use_mean,
        use_fast_variance=mdl.use_fast_variance,
        axis_name=axis_name,
        axis_index_groups=mdl.axis_index_groups,
        mask=mask,
        dtype=mdl.dtype,
        force_float32_reductions=mdl.force_float32_reductions,
    )


def _normalize(
    mdl: Any,
    x: Array,
    mean: Array | None,
    var: Array,
    reduction_axes: Axes,
    feature_axes: Axes,
    use_bias: bool,
    use_scale: bool,
    bias_init: Initializer,
    scale_init: Initializer,
) -> Array:
    """Create ``scale``/``bias`` (feature shape) on ``mdl`` and normalise ``x``."""
    feat = _axes(x.ndim, feature_axes)
    shape = [x.shape[a] for a in feat]
    scale = bias = None
    if use_scale:
        scale = mdl.param("scale", scale_init, shape, mdl.param_dtype)
    if use_bias:
        bias = mdl.param("bias", bias_init, shape, mdl.param_dtype)
    if not mdl.force_float32_reductions:
        scale = None if scale is None else jnp.asarray(scale, mdl.param_dtype)
        bias = None if bias is None else jnp.asarray(bias, mdl.param_dtype)
    dtype = canonicalize_dtype(*[a for a in (x, scale, bias) if a is not None], dtype=mdl.dtype)
    return _traced.normalize(
        x,
        mean,
        var,
        scale,
        bias,
        reduction_axes=reduction_axes,
        feature_axes=feat,
        epsilon=mdl.epsilon,
        dtype=dtype,
    )


class BatchNorm(Module):
    """Batch normalisation: normalise each feature with statistics over the batch.

    The mean and variance are taken over every axis except ``axis`` (the features), then
    the input is normalised, scaled and shifted per feature. Running averages of the
    statistics, ``mean`` and ``var`` of shape ``(features,)``, live in the
    ``'batch_stats'`` collection. In training mode (``use_running_average=False``) the
    batch's own statistics are used and the running averages updated (pass
    ``mutable=['batch_stats']`` to ``apply``; they are left alone while initialising); in
    evaluation mode (``True``) the running averages are used and nothing changes.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.BatchNorm(use_running_average=False, momentum=0.9)
    >>> x = jnp.arange(12.0).reshape(4, 3)
    >>> variables = layer.init(jax.random.key(0), x)
    >>> y, updates = layer.apply(variables, x, mutable=["batch_stats"])
    >>> [round(float(m), 4) for m in updates["batch_stats"]["mean"]]  # 0.1 * batch mean
    [0.45, 0.55, 0.65]

    Attributes:
        use_running_average: ``True`` to normalise with the running averages
            (evaluation), ``False`` with the batch statistics (training). Give it here
            or at call time, not both (default ``None``: at call time).
        axis: the feature axis, or axes, kept out of the statistics (default ``-1``).
        momentum: the decay of the running averages: each update is
            ``momentum * running + (1 - momentum) * batch`` (default ``0.99``).
        epsilon: a small number added to the variance before the square root (default ``1e-5``).
        dtype: the dtype of the output (default ``None``: promoted from the input and the
            parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        use_bias: whether to add a learned bias after normalising (default ``True``).
        use_scale: whether to multiply by a learned scale after normalising (default
            ``True``).
        bias_init: initializer of the bias (default zeros).
        scale_init: initializer of the scale (default ones).
        axis_name: a mapped axis (``pmap``, ``shard_map``, ``vmap``) to average the
            statistics over (default ``None``: local statistics).
        axis_index_groups: groups of ``axis_name`` indices that average among themselves
            only, e.g. ``[[0, 1], [2, 3]]`` (default ``None``: one group).
        use_fast_variance: ``True`` (the default) computes the variance in one pass as
            ``E[x**2] - E[x]**2``; ``False`` in two, as ``E[(x - E[x])**2]``, more accurately.
        force_float32_reductions: compute the statistics in at least float32 (default
            ``True``); ``False`` computes them in ``dtype`` or the input's dtype.
    """

    use_running_average: bool | None = None
    axis: int = -1
    momentum: float = 0.99
    epsilon: float = 1e-5
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Initializer = initializers.zeros
    scale_init: Initializer = initializers.ones
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(
        self, x: Array, use_running_average: bool | None = None, *, mask: Array | None = None
    ) -> Array:
        """Normalise ``x``.

        Args:
            x: the input, with the feature axis ``axis``.
            use_running_average: the mode of this call; give it here exactly when the
                attribute is ``None``.
            mask: an optional boolean array broadcastable to ``x``; only its ``True``
                positions contribute to the statistics (default ``None``: all).

        Returns:
            The normalised input, of the same shape.
        """
        use_running_average = merge_param(
            "use_running_average", self.use_running_average, use_running_average
        )
        feat = _axes(x.ndim, self.axis)
        red = tuple(i for i in range(x.ndim) if i not in feat)
        shape = [x.shape[a] for a in feat]
        stat_dtype = jnp.float32 if self.force_float32_reductions else self.param_dtype
        # lax.full: jnp.zeros/ones' values, with less Python per call on every retrace
        ra_mean = self.variable(
            "batch_stats", "mean", lambda s: lax.full(tuple(s), 0, stat_dtype), shape
        )
        ra_var = self.variable(
            "batch_stats", "var", lambda s: lax.full(tuple(s), 1, stat_dtype), shape
        )
        if use_running_average:
            mean, var = ra_mean.value, ra_var.value
            if not self.force_float32_reductions:
                mean = jnp.asarray(mean, self.param_dtype)
                var = jnp.asarray(var, self.param_dtype)
        else:
            initializing = self.is_initializing()
            mean, var = _stats(
                self,
                x,
                red,
                axis_name=None if initializing else self.axis_name,
                mask=mask,
            )
            assert mean is not None
            if not initializing:
                ra_mean.value = self.momentum * ra_mean.value + (1 - self.momentum) * mean
                ra_var.value = self.momentum * ra_var.value + (1 - self.momentum) * var
        return _normalize(
            self,
            x,
            mean,
            var,
            red,
            feat,
            self.use_bias,
            self.use_scale,
            self.bias_init,
            self.scale_init,
        )


class LayerNorm(Module):
    """Layer normalisation: normalise each example with its own statistics.

    The mean and variance are taken over ``reduction_axes`` separately at every other
    position, so no statistic is shared across the batch and there is no running state.
    The learned scale and bias have the shape of ``feature_axes``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.LayerNorm()
    >>> x = jnp.arange(12.0).reshape(4, 3)
    >>> variables = layer.init(jax.random.key(0), x)
    >>> variables["params"]["scale"].shape
    (3,)
    >>> y = layer.apply(variables, x)  # each row now has mean 0 and variance 1
    >>> bool(jnp.allclose(y.mean(axis=-1), 0, atol=1e-5))
    True

    Attributes:
        epsilon: a small number added to the variance before the square root (default ``1e-6``).
        dtype: the dtype of the output (default ``None``: promoted from the input and the
            parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        use_bias: whether to add a learned bias after normalising (default ``True``).
        use_scale: whether to multiply by a learned scale after normalising (default
            ``True``).
        bias_init: initializer of the bias (default zeros).
        scale_init: initializer of the scale (default ones).
        reduction_axes: the axis, or axes, the statistics are computed over (default
            ``-1``).
        feature_axes: the axis, or axes, that the scale and bias span (default ``-1``).
        axis_name: a mapped axis (``pmap``, ``shard_map``, ``vmap``) to average the
            statistics over (default ``None``: local statistics).
        axis_index_groups: groups of ``axis_name`` indices that average among themselves
            only, e.g. ``[[0, 1], [2, 3]]`` (default ``None``: one group).
        use_fast_variance: ``True`` (the default) computes the variance in one pass as
            ``E[x**2] - E[x]**2``; ``False`` in two, as ``E[(x - E[x])**2]``, more accurately.
        force_float32_reductions: compute the statistics in at least float32 (default
            ``True``); ``False`` computes them in ``dtype`` or the input's dtype.
    """

    epsilon: float = 1e-6
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Initializer = initializers.zeros
    scale_init: Initializer = initializers.ones
    reduction_axes: Axes = -1
    feature_axes: Axes = -1
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalise ``x``.

        Args:
            x: the input.
            mask: an optional boolean array broadcastable to ``x``; only its ``True``
                positions contribute to the statistics (default ``None``: all).

        Returns:
            The normalised input, of the same shape.
        """
        mean, var = _stats(self, x, self.reduction_axes, axis_name=self.axis_name, mask=mask)
        return _normalize(
            self,
            x,
            mean,
            var,
            self.reduction_axes,
            self.feature_axes,
            self.use_bias,
            self.use_scale,
            self.bias_init,
            self.scale_init,
        )


class RMSNorm(Module):
    """Root-mean-square normalisation: ``x / sqrt(mean(x**2) + epsilon) * scale``.

    Like ``LayerNorm`` but without subtracting the mean and without a bias: each example
    is divided by its root mean square over ``reduction_axes``, then multiplied by a
    learned scale of the shape of ``feature_axes``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.RMSNorm()
    >>> x = jnp.array([[3.0, 4.0]])
    >>> variables = layer.init(jax.random.key(0), x)
    >>> [round(float(v), 3) for v in layer.apply(variables, x)[0]]  # x / sqrt(12.5)
    [0.849, 1.131]

    Attributes:
        epsilon: a small number added to the variance before the square root (default ``1e-6``).
        dtype: the dtype of the output (default ``None``: promoted from the input and the
            parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        use_scale: whether to multiply by a learned scale after normalising (default
            ``True``).
        scale_init: initializer of the scale (default ones).
        reduction_axes: the axis, or axes, the mean square is taken over (default ``-1``).
        feature_axes: the axis, or axes, that the scale spans (default ``-1``).
        axis_name: a mapped axis (``pmap``, ``shard_map``, ``vmap``) to average the
            statistics over (default ``None``: local statistics).
        axis_index_groups: groups of ``axis_name`` indices that average among themselves
            only, e.g. ``[[0, 1], [2, 3]]`` (default ``None``: one group).
        use_fast_variance: ``True`` (the default) computes the variance in one pass as
            ``E[x**2] - E[x]**2``; ``False`` in two, as ``E[(x - E[x])**2]``, more accurately.
            No mean is subtracted here, so it changes nothing.
        force_float32_reductions: compute the statistics in at least float32 (default
            ``True``); ``False`` computes them in ``dtype`` or the input's dtype.
    """

    epsilon: float = 1e-6
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_scale: bool = True
    scale_init: Initializer = initializers.ones
    reduction_axes: Axes = -1
    feature_axes: Axes = -1
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalise ``x``.

        Args:
            x: the input.
            mask: an optional boolean array broadcastable to ``x``; only its ``True``
                positions contribute to the statistics (default ``None``: all).

        Returns:
            The normalised input, of the same shape.
        """
        _, var = _stats(
            self, x, self.reduction_axes, axis_name=self.axis_name, use_mean=False, mask=mask
        )
        return _normalize(
            self,
            x,
            None,
            var,
            self.reduction_axes,
            self.feature_axes,
            False,
            self.use_scale,
            initializers.zeros,
            self.scale_init,
        )


class GroupNorm(Module):
    """Group normalisation: normalise groups of channels with per-example statistics.

    The channels (the last axis) are split into equal consecutive groups, fixed either by
    their number (``num_groups``) or their size (``group_size``); exactly one of the two
    must be set. Each example's mean and variance are taken per group, over the group's
    channels and the reduction axes. With one group it matches ``LayerNorm`` over all
    non-batch axes, with one channel per group ``InstanceNorm``. Scale and bias have shape
    ``(channels,)``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.GroupNorm(num_groups=2)
    >>> x = jnp.ones((2, 5, 5, 8))  # (batch, height, width, channels)
    >>> variables = layer.init(jax.random.key(0), x)
    >>> layer.apply(variables, x).shape
    (2, 5, 5, 8)

    Attributes:
        num_groups: the number of groups; it must divide the channel count (default
            ``32``). Set it to ``None`` when giving ``group_size``.
        group_size: the number of channels per group; it must divide the channel count
            (default ``None``: use ``num_groups``).
        epsilon: a small number added to the variance before the square root (default ``1e-6``).
        dtype: the dtype of the output (default ``None``: promoted from the input and the
            parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        use_bias: whether to add a learned bias after normalising (default ``True``).
        use_scale: whether to multiply by a learned scale after normalising (default
            ``True``).
        bias_init: initializer of the bias (default zeros).
        scale_init: initializer of the scale (default ones).
        reduction_axes: the axes the statistics are taken over besides the channels'
            groups; they must include the last axis (default ``None``: every axis but
            the first, which is the batch).
        axis_name: a mapped axis (``pmap``, ``shard_map``, ``vmap``) to average the
            statistics over (default ``None``: local statistics).
        axis_index_groups: groups of ``axis_name`` indices that average among themselves
            only, e.g. ``[[0, 1], [2, 3]]`` (default ``None``: one group).
        use_fast_variance: ``True`` (the default) computes the variance in one pass as
            ``E[x**2] - E[x]**2``; ``False`` in two, as ``E[(x - E[x])**2]``, more accurately.
        force_float32_reductions: compute the statistics in at least float32 (default
            ``True``); ``False`` computes them in ``dtype`` or the input's dtype.
    """

    num_groups: int | None = 32
    group_size: int | None = None
    epsilon: float = 1e-6
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Initializer = initializers.zeros
    scale_init: Initializer = initializers.ones
    reduction_axes: Axes | None = None
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalise ``x``.

        Args:
            x: the input ``(batch, ..., channels)``.
            mask: an optional boolean array broadcastable to ``x``; only its ``True``
                positions contribute to the statistics (default ``None``: all).

        Returns:
            The normalised input, of the same shape.
        """
        if self.reduction_axes is not None:
            red_in: Axes = self.reduction_axes
        else:
            red_in = [*range(1, x.ndim - 1), -1]
        red = _axes(x.ndim, red_in)
        if red[-1] != x.ndim - 1:
            raise ValueError(
                "The reduction axes must include the final dimension as this is assumed to "
                "be the feature axis."
            )
        if (self.num_groups is None) == (self.group_size is None):
            raise ValueError(
                "Either `num_groups` or `group_size` should be specified. If `group_size` is "
                "to be specified, pass `num_groups=None` as argument to override the default "
                "`num_groups` value of 32."
            )
        channels = x.shape[-1]
        if self.group_size is not None:
            if channels % self.group_size != 0:
                raise ValueError(
                    f"Number of channels ({channels}) is not multiple of the group size "
                    f"({self.group_size})."
                )
            num_groups = channels // self.group_size
        else:
            assert self.num_groups is not None
            num_groups = self.num_groups
        if num_groups <= 0 or channels % num_groups != 0:
            raise ValueError(
                f"Number of groups ({num_groups}) does not divide the number of channels "
                f"({channels})."
            )
        group_size = channels // num_groups
        grouped = x.reshape((*x.shape[:-1], num_groups, group_size))
        if mask is not None:
            mask = mask.reshape((*mask.shape[:-1], num_groups, group_size))
        mean, var = _stats(self, grouped, [*red[:-1], -1], axis_name=self.axis_name, mask=mask)
        assert mean is not None
        mean = jnp.repeat(mean, group_size, axis=-1)
        var = jnp.repeat(var, group_size, axis=-1)
        return _normalize(
            self,
            x,
            mean,
            var,
            red[:-1],
            (-1,),
            self.use_bias,
            self.use_scale,
            self.bias_init,
            self.scale_init,
        )


class InstanceNorm(Module):
    """Instance normalisation: normalise each example and feature on its own.

    Axis 0 is the batch. For every example and every feature the mean and variance are
    taken over all remaining axes (e.g. height and width of an image), so each channel of
    each image is normalised independently. Scale and bias have the shape of
    ``feature_axes``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.InstanceNorm()
    >>> x = jnp.ones((2, 5, 5, 8))  # (batch, height, width, channels)
    >>> variables = layer.init(jax.random.key(0), x)
    >>> variables["params"]["scale"].shape
    (8,)

    Attributes:
        epsilon: a small number added to the variance before the square root (default ``1e-6``).
        dtype: the dtype of the output (default ``None``: promoted from the input and the
            parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        use_bias: whether to add a learned bias after normalising (default ``True``).
        use_scale: whether to multiply by a learned scale after normalising (default
            ``True``).
        bias_init: initializer of the bias (default zeros).
        scale_init: initializer of the scale (default ones).
        feature_axes: the axis, or axes, kept out of the statistics and spanned by the
            scale and bias; must not include axis 0 (default ``-1``).
        axis_name: a mapped axis (``pmap``, ``shard_map``, ``vmap``) to average the
            statistics over (default ``None``: local statistics).
        axis_index_groups: groups of ``axis_name`` indices that average among themselves
            only, e.g. ``[[0, 1], [2, 3]]`` (default ``None``: one group).
        use_fast_variance: ``True`` (the default) computes the variance in one pass as
            ``E[x**2] - E[x]**2``; ``False`` in two, as ``E[(x - E[x])**2]``, more accurately.
        force_float32_reductions: compute the statistics in at least float32 (default
            ``True``); ``False`` computes them in ``dtype`` or the input's dtype.
    """

    epsilon: float = 1e-6
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Initializer = initializers.zeros
    scale_init: Initializer = initializers.ones
    feature_axes: Axes = -1
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalise ``x``.

        Args:
            x: the input ``(batch, ...)``.
            mask: an optional boolean array broadcastable to ``x``; only its ``True``
                positions contribute to the statistics (default ``None``: all).

        Returns:
            The normalised input, of the same shape.
        """
        feat = _axes(x.ndim, self.feature_axes)
        if 0 in feat:
            raise ValueError(
                "The channel axes cannot include the leading dimension as this is assumed "
                "to be the batch axis."
            )
        red = [i for i in range(1, x.ndim) if i not in feat]
        mean, var = _stats(self, x, red, axis_name=self.axis_name, mask=mask)
        return _normalize(
            self,
            x,
            mean,
            var,
            red,
            feat,
            self.use_bias,
            self.use_scale,
            self.bias_init,
            self.scale_init,
        )


def _path_name(path: Sequence[Any]) -> str:
    return jax.tree_util.keystr(tuple(path), simple=True, separator="/")


class SpectralNorm(Module):
    """Spectral normalisation: run a layer with its weight matrices divided by their norm.

    Wraps ``layer_instance``: every parameter of rank 2 or more (a higher-rank one viewed
    as a matrix ``(-1, last axis)``) is divided by its largest singular value before the
    layer uses it; vectors and scalars pass unchanged. The singular value is estimated by
    power iteration, whose vector ``u`` and estimate ``sigma`` are kept in
    ``collection_name`` under ``<layer>/<param path>/u`` and ``.../sigma``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.SpectralNorm(nn.Dense(4))
    >>> x = jnp.ones((2, 3))
    >>> variables = layer.init(jax.random.key(0), x, update_stats=False)
    >>> sorted(variables["batch_stats"])
    ['layer_instance/kernel/sigma', 'layer_instance/kernel/u']
    >>> y, updates = layer.apply(variables, x, update_stats=True, mutable=["batch_stats"])
    >>> y.shape
    (2, 4)

    Attributes:
        layer_instance: the layer whose parameters are normalised.
        n_steps: power-iteration steps per call (default ``1``); ``0`` or less leaves
            the parameters as they are.
        epsilon: a small number keeping the iteration's vector normalisation away from
            division by zero (default ``1e-12``).
        dtype: the dtype of the normalised parameters (default ``None``: promoted from
            the parameter and the iteration's values).
        param_dtype: the dtype ``u`` and ``sigma`` are created in (default ``float32``).
        error_on_non_matrix: raise on parameters of rank above 2 instead of reshaping
            them (default ``False``).
        collection_name: the variable collection holding ``u`` and ``sigma`` (default
            ``'batch_stats'``); make it mutable when ``update_stats=True``.
    """

    layer_instance: Module
    n_steps: int = 1
    epsilon: float = 1e-12
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    error_on_non_matrix: bool = False
    collection_name: str = "batch_stats"

    @compact
    def __call__(self, *args: Any, update_stats: bool, **kwargs: Any) -> Any:
        """Call the wrapped layer with spectrally normalised parameters.

        Args:
            *args: positional arguments for the wrapped layer.
            update_stats: store this call's ``u`` and ``sigma`` (training) or leave them
                as they are (evaluation). Required, keyword-only.
            **kwargs: keyword arguments for the wrapped layer.

        Returns:
            The wrapped layer's output.
        """

        def forward(layer: Any) -> Any:
            return layer(*args, **kwargs)

        normalize = functools.partial(self._spectral_normalize, update_stats=update_stats)
        return transforms.map_variables(
            forward,
            trans_in_fn=lambda vs: jax.tree_util.tree_map_with_path(normalize, vs),
            init=self.is_initializing(),
            mutable=True,
        )(self.layer_instance)

    def _spectral_normalize(self, path: Sequence[Any], vs: Any, update_stats: bool) -> Array:
        value = jnp.asarray(vs)
        value_shape = value.shape
        if value.ndim <= 1 or self.n_steps < 1:
            return value
        if value.ndim > 2:
            if self.error_on_non_matrix:
                raise ValueError(f"Input is {value.ndim}D but error_on_non_matrix is True")
            value = jnp.reshape(value, (-1, value.shape[-1]))
        prefix = f"{self.layer_instance.name}/{_path_name(path[1:])}"
        u_name, sigma_name = prefix + "/u", prefix + "/sigma"
        rng = None
        if not self.has_variable(self.collection_name, u_name):
            rng = self.make_rng("params")
        u_var = self.variable(
            self.collection_name,
            u_name,
            jax.random.normal,
            rng,
            (1, value.shape[-1]),
            self.param_dtype,
        )
        sigma_var = self.variable(self.collection_name, sigma_name, jnp.ones, (), self.param_dtype)
        u0, v0, sigma = F.spectral_power_iteration(value, u_var.value, self.n_steps, self.epsilon)
        value = value / jnp.where(sigma != 0, sigma, 1)
        if update_stats:
            u_var.value = u0
            sigma_var.value = sigma
        dtype = canonicalize_dtype(vs, u0, v0, sigma, dtype=self.dtype)
        return jnp.asarray(value.reshape(value_shape), dtype)


class WeightNorm(Module):
    """Weight normalisation: run a layer with its weights split into direction and scale.

    Wraps ``layer_instance``: each selected parameter is divided by its L2 norm over all
    axes except ``feature_axes`` and multiplied by a learned scale of the shape of those
    axes, a parameter named ``<layer>/<param path>/scale``. The direction and the length
    of each weight are thus learned separately.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.WeightNorm(nn.Dense(4))
    >>> x = jnp.ones((2, 3))
    >>> variables = layer.init(jax.random.key(0), x)
    >>> variables["params"]["layer_instance/kernel/scale"].shape
    (4,)

    Attributes:
        layer_instance: the layer whose parameters are normalised.
        epsilon: a small number added to the squared norm before the square root
            (default ``1e-12``).
        dtype: the dtype of the normalised parameters (default ``None``: promoted from
            the parameter and the scale).
        param_dtype: the dtype the scales are created in (default ``float32``).
        use_scale: whether to learn a scale (default ``True``); without it every
            selected weight has unit norm.
        scale_init: initializer of the scales (default ones).
        feature_axes: the axis, or axes, kept out of the norm and spanned by the scale
            (default ``-1``); ``None`` takes the norm over the whole parameter.
        variable_filter: names selecting the parameters to normalise: those whose path
            contains one of them (default ``{'kernel'}``); ``None`` or empty selects all.
    """

    layer_instance: Module
    epsilon: float = 1e-12
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_scale: bool = True
    scale_init: Initializer = initializers.ones
    feature_axes: Axes | None = -1
    variable_filter: Iterable[str] | None = dataclasses.field(default_factory=lambda: {"kernel"})

    @compact
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped layer with weight-normalised parameters.

        Args:
            *args: positional arguments for the wrapped layer.
            **kwargs: keyword arguments for the wrapped layer.

        Returns:
            The wrapped layer's output.
        """

        def forward(layer: Any) -> Any:
            return layer(*args, **kwargs)

        return transforms.map_variables(
            forward,
            trans_in_fn=lambda vs: jax.tree_util.tree_map_with_path(self._l2_normalize, vs),
            init=self.is_initializing(),
        )(self.layer_instance)

    def _l2_normalize(self, path: Sequence[Any], vs: Any) -> Array:
        value = jnp.asarray(vs)
        str_path = f"{self.layer_instance.name}/{_path_name(path[1:])}"
        if self.variable_filter and not any(n in str_path for n in self.variable_filter):
            return value
        if self.feature_axes is None:
            feat: tuple[int, ...] = ()
        else:
            feat = _axes(value.ndim, self.feature_axes)
        red = tuple(i for i in range(value.ndim) if i not in feat)
        feature_shape = [1] * value.ndim
        reduced_shape = []
        for ax in feat:
            feature_shape[ax] = value.shape[ax]
            reduced_shape.append(value.shape[ax])
        value_bar = F.l2_normalize(value, axis=red, eps=self.epsilon)
        args = [vs]
        if self.use_scale:
            scale = self.param(
                str_path + "/scale", self.scale_init, reduced_shape, self.param_dtype
            ).reshape(feature_shape)
            value_bar = value_bar * scale
            args.append(scale)
        dtype = canonicalize_dtype(*args, dtype=self.dtype)
        return jnp.asarray(value_bar, dtype)
