"""Normalisation: statistics in one pass, in float32, and the affine normalisation.

The numerics and the backward-pass cost follow Flax Linen's ``_compute_stats`` and
``_normalize``: mean and mean of squares in one fusion, ``var = max(0, E[x^2] - E[x]^2)``
(at least float32), and ``y = (x - mean) * (rsqrt(var + eps) * scale) + bias``, where the
``(features,)``-sized product is formed before it touches the full-size array.
"""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Bool, Float

from .._errors import LayerConfigError
from .._shapecheck import AnyArray, checked, fail, python_numbers, summary
from .._sharding._ops import constrain, match_trailing, split_last
from ._ops_common import as_array, at_least_float32, canonicalize_axes, shared_inexact_dtype

Axes = int | Sequence[int]


def _mean(
    xs: Sequence[jax.Array],
    axes: tuple[int, ...],
    axis_name: Any,
    axis_index_groups: Any,
    mask: AnyArray | None,
) -> list[jax.Array]:
    where = None if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), xs[0].shape)
    mus = [x.mean(axes, where=where) for x in xs]
    if axis_name is None:
        return mus
    if len(mus) == 1:
        return [lax.pmean(mus[0], axis_name, axis_index_groups=axis_index_groups)]
    # One collective for both statistics.
    stacked = lax.pmean(jnp.stack(mus), axis_name, axis_index_groups=axis_index_groups)
    return [stacked[i] for i in range(len(mus))]


def _abs_sq(x: jax.Array) -> jax.Array:
    """``|x|^2``: ``x * x`` for real arrays, ``re^2 + im^2`` for complex ones."""
    if jnp.iscomplexobj(x):
        return lax.square(lax.real(x)) + lax.square(lax.imag(x))
    return lax.square(x)


@python_numbers
def compute_stats(
    x: AnyArray,
    axes: Axes,
    *,
    use_mean: bool = True,
    use_fast_variance: bool = True,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    mask: AnyArray | None = None,
    dtype: Any = None,
    force_float32_reductions: bool = True,
) -> tuple[jax.Array | None, jax.Array]:
    """Mean and variance of ``x`` over ``axes``, in at least float32.

    **Arguments:**

    - ``use_mean``: ``False`` gives ``(None, mean(x**2))`` (RMSNorm).
    - ``use_fast_variance``: ``E[x^2] - E[x]^2`` (clipped at 0) in one pass, as Flax's
      default; ``False`` uses ``E[(x - E[x])^2]``.
    - ``axis_name``, ``axis_index_groups``: average the statistics over a named mapped
      axis (``vmap``/``shard_map``) with one ``lax.pmean``.
    - ``mask``: only positions where it is true count.
    - ``dtype``: minimum dtype of the statistics (always at least float32).
    - ``force_float32_reductions``: ``False`` computes the statistics in ``dtype`` (or
      ``x``'s dtype) even when it is narrower than float32.

    For complex ``x`` the variance is the mean of ``|x - mean|^2`` (real).

    >>> import jax.numpy as jnp
    >>> mean, var = compute_stats(jnp.array([[1.0, 3.0]]), -1)
    >>> mean.tolist(), var.tolist()
    ([2.0], [1.0])
    """
    stat_dtype = jnp.asarray(x).dtype if dtype is None else dtype
    if force_float32_reductions:
        stat_dtype = at_least_float32(stat_dtype)
    x32 = jnp.asarray(x, stat_dtype)
    axes_ = canonicalize_axes(x32.ndim, axes)
    if not use_mean:
        (var,) = _mean([_abs_sq(x32)], axes_, axis_name, axis_index_groups, mask)
        return None, var
    if use_fast_variance:
        # Keep ``_abs_sq(x32)`` traced before any mean is taken (it is, being built
        # in this list first): traced the other way round, XLA's fusion of the backward
        # pass costs ~280 more full-size additions and the transformer step runs ~15%
        # slower (benchmarks/transformer.py checks the step's HLO matches Linen's).
        mu, mu2 = _mean([x32, _abs_sq(x32)], axes_, axis_name, axis_index_groups, mask)
        return mu, jnp.maximum(0.0, mu2 - _abs_sq(mu))
    (mu,) = _mean([x32], axes_, axis_name, axis_index_groups, mask)
    centred = _abs_sq(x32 - jnp.expand_dims(mu, axes_))
    (var,) = _mean([centred], axes_, axis_name, axis_index_groups, mask)
    return mu, var


def _out_dtype(dtype: Any, *arrays: Any) -> Any:
    if dtype is not None:
        return dtype
    present = [a for a in arrays if a is not None]
    shared = shared_inexact_dtype(present)
    if shared is not None:
        return shared
    with jax.numpy_dtype_promotion("standard"):
        out = jnp.result_type(*present)
    return out if jnp.issubdtype(out, jnp.inexact) else at_least_float32(out)


def _promote(a: Any, b: Any) -> Any:
    if a == b:
        return a  # a dtype promotes with itself to itself (skips the config context)
    with jax.numpy_dtype_promotion("standard"):
        return jnp.promote_types(a, b)


def _cast(a: Any, dtype: Any) -> Any:
    """``jnp.asarray(a, dtype)``, without its Python cost when ``a`` is already a strong
    array of ``dtype`` (which ``asarray`` returns unchanged)."""
    if isinstance(a, jax.Array) and a.dtype == dtype and not a.weak_type:
        return a
    return jnp.asarray(a, dtype)


@python_numbers
def normalize(
    x: AnyArray,
    mean: AnyArray | None,
    var: AnyArray,
    scale: AnyArray | None,
    bias: AnyArray | None,
    *,
    reduction_axes: Axes,
    feature_axes: Axes,
    epsilon: float,
    dtype: Any = None,
    out_sharding: Any = None,
) -> jax.Array:
    """``(x - mean) * (rsqrt(var + epsilon) * scale) + bias`` with statistics over
    ``reduction_axes`` and ``scale``/``bias`` over ``feature_axes`` (Flax's ``_normalize``).

    ``mean``/``var`` have the reduction axes removed; ``mean=None`` skips centring
    (RMSNorm). The output has ``dtype``, default the common dtype of ``x``, ``scale`` and
    ``bias``. ``out_sharding`` (a ``PartitionSpec`` or ``NamedSharding``) reshards the
    result (default: ``x``'s sharding).
    """
    # NumPy operands become JAX arrays first (float64 -> float32 unless x64 is on).
    x, var = as_array(x), as_array(var)
    mean, scale, bias = (None if a is None else as_array(a) for a in (mean, scale, bias))
    out_dtype = _out_dtype(dtype, x, scale, bias)
    red = canonicalize_axes(x.ndim, reduction_axes)
    feat = canonicalize_axes(x.ndim, feature_axes)
    feature_shape = [1] * x.ndim
    for ax in feat:
        feature_shape[ax] = x.shape[ax]
    y = _cast(x, _promote(x.dtype, var.dtype))
    if mean is not None:
        y = _arith(lax.sub, y, lax.expand_dims(mean, red))
    mul = lax.rsqrt(_arith(lax.add, lax.expand_dims(var, red), epsilon))
    # Real float32 statistics and parameters keep everything float32; a complex scale or
    # bias makes the result complex (as Flax's promotion does).
    if scale is not None:
        dt = _promote(mul.dtype, scale.dtype)
        scale = match_trailing(lax.reshape(_cast(scale, dt), tuple(feature_shape)), y)
        mul = _arith(lax.mul, _cast(mul, dt), scale)
    dt = _promote(y.dtype, mul.dtype)
    y = _arith(lax.mul, _cast(y, dt), _cast(mul, dt))
    if bias is not None:
        dt = _promote(y.dtype, bias.dtype)
        bias = match_trailing(lax.reshape(_cast(bias, dt), tuple(feature_shape)), y)
        y = _arith(lax.add, _cast(y, dt), bias)
    return constrain(_cast(y, out_dtype), out_sharding, x)


_NUMPY_OPS = {lax.sub: jnp.subtract, lax.add: jnp.add, lax.mul: jnp.multiply}


def _arith(op: Any, a: Any, b: Any) -> Any:
    """``op(a, b)`` as the ``jax.numpy`` operator computes it, binding the ``lax``
    primitive directly when NumPy's rules add nothing: operands of one dtype and rank
    (size-1 dimensions broadcast in ``lax`` too), or a Python float with a real floating
    array (weakly typed). The equation is the same one; the ``jax.numpy`` layer costs
    about 0.2 ms per distinct call in a fresh trace, and a norm makes five such calls."""
    if type(b) is float:
        if jnp.issubdtype(a.dtype, jnp.floating):
            # A weakly typed number takes the array's dtype (lax alone would make it
            # float32, or int32 from an int): a scalar of that dtype, as jax.numpy does.
            return op(a, np.asarray(b, a.dtype))
    elif hasattr(b, "dtype") and a.dtype == b.dtype and a.ndim == b.ndim:
        return op(a, b)
    return _NUMPY_OPS[op](a, b)


def _check_param(op: str, name: str, param: Any, x: Any, feature_axes: Axes) -> None:
    if param is None:
        return
    feat = canonicalize_axes(x.ndim, feature_axes)
    expected = tuple(x.shape[a] for a in feat)
    if tuple(param.shape) != expected:
        axes = feat[0] if len(feat) == 1 else feat
        fail(
            op,
            f"dimension 'features' does not agree: {name} is {summary(param)} but x "
            f"{summary(x)} has {expected} at feature axes {axes}",
        )


@checked
def layer_norm(
    x: Float[AnyArray, "*batch features"],
    scale: Float[AnyArray, "..."] | None = None,
    bias: Float[AnyArray, "..."] | None = None,
    *,
    epsilon: float = 1e-6,
    reduction_axes: Axes = -1,
    feature_axes: Axes = -1,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    use_fast_variance: bool = True,
    mask: Bool[AnyArray, "..."] | None = None,
    dtype: Any = None,
    out_sharding: Any = None,
) -> Float[jax.Array, "*batch features"]:
    """Layer normalisation (Flax ``LayerNorm``'s math and defaults).

    ``scale`` and ``bias`` have the shape of ``x`` at ``feature_axes`` (by default the last
    axis: ``(features,)``); statistics are taken over ``reduction_axes`` (default last).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> y = F.layer_norm(jnp.array([[1.0, 2.0, 3.0]]), jnp.ones(3), jnp.zeros(3))
    >>> y.shape, round(float(y.mean()), 6)
    ((1, 3), 0.0)
    """
    _check_param("layer_norm", "scale", scale, x, feature_axes)
    _check_param("layer_norm", "bias", bias, x, feature_axes)
    mean, var = compute_stats(
        x,
        reduction_axes,
        use_fast_variance=use_fast_variance,
        axis_name=axis_name,
        axis_index_groups=axis_index_groups,
        mask=mask,
    )
    return normalize(
        x,
        mean,
        var,
        scale,
        bias,
        reduction_axes=reduction_axes,
        feature_axes=feature_axes,
        epsilon=epsilon,
        dtype=dtype,
        out_sharding=out_sharding,
    )


@checked
def rms_norm(
    x: Float[AnyArray, "*batch features"],
    scale: Float[AnyArray, "..."] | None = None,
    *,
    epsilon: float = 1e-6,
    reduction_axes: Axes = -1,
    feature_axes: Axes = -1,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    mask: Bool[AnyArray, "..."] | None = None,
    dtype: Any = None,
    out_sharding: Any = None,
) -> Float[jax.Array, "*batch features"]:
    """Root-mean-square normalisation ``x * rsqrt(mean(x**2) + eps) * scale`` (Flax
    ``RMSNorm``; no centring, no bias).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> [round(v, 4) for v in F.rms_norm(jnp.array([[3.0, 4.0]]), epsilon=0.0)[0].tolist()]
    [0.8485, 1.1314]
    """
    _check_param("rms_norm", "scale", scale, x, feature_axes)
    _, var = compute_stats(
        x,
        reduction_axes,
        use_mean=False,
        axis_name=axis_name,
        axis_index_groups=axis_index_groups,
        mask=mask,
    )
    return normalize(
        x,
        None,
        var,
        scale,
        None,
        reduction_axes=reduction_axes,
        feature_axes=feature_axes,
        epsilon=epsilon,
        dtype=dtype,
        out_sharding=out_sharding,
    )


def group_norm_groups(channels: int, num_groups: int | None, group_size: int | None) -> int:
    """The number of groups given exactly one of ``num_groups``/``group_size``."""
    if (num_groups is None) == (group_size is None):
        raise LayerConfigError(
            "GroupNorm needs exactly one of num_groups and group_size (pass "
            "num_groups=None to use group_size)."
        )
    if group_size is not None:
        if group_size <= 0 or channels % group_size:
            raise LayerConfigError(
                f"GroupNorm: {channels} channels are not a multiple of group_size={group_size}."
            )
        return channels // group_size
    assert num_groups is not None
    if num_groups <= 0 or channels % num_groups:
        raise LayerConfigError(
            f"GroupNorm: num_groups={num_groups} does not divide the {channels} channels."
        )
    return num_groups


@checked
def group_norm(
    x: Float[AnyArray, "batch *spatial channels"],
    scale: Float[AnyArray, " channels"] | None = None,
    bias: Float[AnyArray, " channels"] | None = None,
    *,
    num_groups: int,
    epsilon: float = 1e-6,
    reduction_axes: Axes | None = None,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    use_fast_variance: bool = True,
    mask: Bool[AnyArray, "..."] | None = None,
    dtype: Any = None,
    out_sharding: Any = None,
) -> Float[jax.Array, "batch *spatial channels"]:
    """Group normalisation (Flax ``GroupNorm``): channels (last axis) split into
    ``num_groups`` groups; statistics per example and group over every axis except the
    leading batch axis (or over ``reduction_axes``, which must include the last).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.group_norm(jnp.ones((2, 4, 4, 6)), num_groups=3).shape
    (2, 4, 4, 6)
    """
    channels = x.shape[-1]
    groups = group_norm_groups(channels, num_groups, None)
    red: Axes = reduction_axes if reduction_axes is not None else [*range(1, x.ndim - 1), -1]
    red_ = canonicalize_axes(x.ndim, red)
    if red_[-1] != x.ndim - 1:
        raise LayerConfigError(
            f"GroupNorm: reduction_axes {reduction_axes} must include the last (channel) axis."
        )
    group_size = channels // groups
    # On an Explicit mesh: channels sharded over a mesh axis that divides the groups are
    # grouped shard by shard (each device holds whole groups); otherwise gathered first.
    x, split = split_last(x, groups)
    kw: dict[str, Any] = {} if split is None else {"out_sharding": split}
    grouped = jnp.reshape(x, (*x.shape[:-1], groups, group_size), **kw)
    if mask is not None:
        mask = jnp.broadcast_to(mask, x.shape).reshape(grouped.shape)
    mean, var = compute_stats(
        grouped,
        [*red_[:-1], -1],
        use_fast_variance=use_fast_variance,
        axis_name=axis_name,
        axis_index_groups=axis_index_groups,
        mask=mask,
    )
    assert mean is not None
    if split is not None:  # each group's statistics repeated on the devices holding it
        kw = {"out_sharding": jax.typeof(mean).sharding}
    mean = jnp.repeat(mean, group_size, axis=-1, **kw)
    var = jnp.repeat(var, group_size, axis=-1, **kw)
    return normalize(
        x,
        mean,
        var,
        scale,
        bias,
        reduction_axes=red_[:-1],
        feature_axes=-1,
        epsilon=epsilon,
        dtype=dtype,
        out_sharding=out_sharding,
    )


@checked
def batch_stats(
    x: Float[AnyArray, "*batch features"],
    *,
    axis: Axes = -1,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    use_fast_variance: bool = True,
    mask: Bool[AnyArray, "..."] | None = None,
) -> tuple[Float[jax.Array, "..."], Float[jax.Array, "..."]]:
    """Mean and variance over every axis except the feature ``axis`` (BatchNorm in
    training), averaged over the mapped axis ``axis_name`` if given.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> mean, var = F.batch_stats(jnp.array([[0.0, 1.0], [2.0, 1.0]]))
    >>> mean.tolist(), var.tolist()
    ([1.0, 1.0], [1.0, 0.0])
    """
    feat = canonicalize_axes(x.ndim, axis)
    red = tuple(i for i in range(x.ndim) if i not in feat)
    mean, var = compute_stats(
        x,
        red,
        use_fast_variance=use_fast_variance,
        axis_name=axis_name,
        axis_index_groups=axis_index_groups,
        mask=mask,
    )
    assert mean is not None
    return mean, var


@checked
def batch_norm(
    x: Float[AnyArray, "*batch features"],
    mean: Float[AnyArray, "..."],
    var: Float[AnyArray, "..."],
    scale: Float[AnyArray, "..."] | None = None,
    bias: Float[AnyArray, "..."] | None = None,
    *,
    axis: Axes = -1,
    epsilon: float = 1e-5,
    dtype: Any = None,
    out_sharding: Any = None,
) -> Float[jax.Array, "*batch features"]:
    """Normalise with given statistics (from ``batch_stats`` or running averages); the
    statistics, ``scale`` and ``bias`` have the shape of ``x`` at the feature ``axis``.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.batch_norm(jnp.array([[3.0]]), jnp.array([1.0]), jnp.array([4.0]), epsilon=0.0)
    Array([[1.]], dtype=float32)
    """
    for name, value in (("mean", mean), ("var", var), ("scale", scale), ("bias", bias)):
        _check_param("batch_norm", name, value, x, axis)
    feat = canonicalize_axes(x.ndim, axis)
    red = tuple(i for i in range(x.ndim) if i not in feat)
    var = as_array(var)
    var = _cast(var, at_least_float32(var.dtype))
    mean = _cast(mean, var.dtype)
    # The statistics have feature shape; normalize wants them with reduced axes removed.
    return normalize(
        x,
        mean,
        var,
        scale,
        bias,
        reduction_axes=red,
        feature_axes=feat,
        epsilon=epsilon,
        dtype=dtype,
        out_sharding=out_sharding,
    )


@python_numbers
def ema(running: jax.Array, batch: jax.Array, momentum: float) -> jax.Array:
    """``momentum * running + (1 - momentum) * batch``: a running-average update."""
    return momentum * running + (1.0 - momentum) * jnp.asarray(batch, running.dtype)


def l2_normalize(x: jax.Array, axis: Axes | None = None, eps: float = 1e-12) -> jax.Array:
    """``x`` divided by its L2 norm over ``axis`` (every axis: ``None``), ``eps`` added to
    the squared norm: the direction of weight normalisation and of power iteration."""
    return x * lax.rsqrt((x * x).sum(axis=axis, keepdims=True) + eps)


def spectral_power_iteration(
    matrix: jax.Array, u: jax.Array, n_steps: int, eps: float = 1e-12
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``n_steps`` of power iteration on ``matrix`` (2-D) from the row vector ``u``
    (``(1, columns)``): the new ``u``, ``v`` (gradients stopped) and ``sigma``, the
    estimate of the largest singular value that spectral normalisation divides by."""
    v = u
    for _ in range(n_steps):
        v = l2_normalize(jnp.matmul(u, matrix.T), eps=eps)
        u = l2_normalize(jnp.matmul(v, matrix), eps=eps)
    u, v = lax.stop_gradient(u), lax.stop_gradient(v)
    sigma = jnp.matmul(jnp.matmul(v, matrix), u.T)[0, 0]
    return u, v, sigma
