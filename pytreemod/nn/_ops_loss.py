"""Losses: the softmax cross entropy of integer labels, on any mesh."""

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Bool, Float, Integer

from .._errors import LayerConfigError
from .._shapecheck import AnyArray, checked, fail, summary
from .._sharding._ops import class_pick, constrain
from ._ops_common import canonicalize_axes

_OP = "softmax_cross_entropy_with_integer_labels"


@checked
def softmax_cross_entropy_with_integer_labels(
    logits: Float[AnyArray, "..."],
    labels: Integer[AnyArray, "..."],
    *,
    axis: int | tuple[int, ...] = -1,
    where: Bool[AnyArray, "..."] | None = None,
    out_sharding: Any = None,
) -> Float[jax.Array, "..."]:
    """``logsumexp(logits) - logits[label]`` along ``axis`` (optax's
    ``softmax_cross_entropy_with_integer_labels``: the same values and gradients).

    **Arguments:** ``logits`` of any float dtype; ``labels``: integers of ``logits``' shape
    without ``axis``; ``axis``: the class axis, or a tuple of axes whose classes a label
    indexes in row-major order (as ``np.ravel_multi_index``); ``where``: the classes to
    include, of ``logits``' shape or ``labels``' (a row with none included gives 0);
    ``out_sharding``: the output's sharding (default: ``logits``' sharding without the
    class axes). As in optax, a label below 0 counts from the end and a label past the
    end gives NaN.

    The label logit is picked with a mask and a sum instead of optax's gather
    (``take_along_axis``), so on an Explicit mesh logits sharded along the classes (a
    vocabulary-sharded language model's) stay sharded: each device picks among its own
    classes and the reductions combine the devices, with no all-gather of the logits.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> logits = jnp.array([[1.2, -0.8, -0.5], [0.9, -1.2, 1.1]])
    >>> loss = F.softmax_cross_entropy_with_integer_labels(logits, jnp.array([0, 1]))
    >>> [round(float(v), 4) for v in loss]
    [0.2761, 2.9518]
    """
    axes = _class_axes(logits.ndim, axis)
    rows = tuple(n for d, n in enumerate(logits.shape) if d not in axes)
    if tuple(labels.shape) != rows:
        fail(
            _OP,
            f"labels {summary(labels)} must have logits' shape without the class axes "
            f"{axes}, {rows} (logits {summary(logits)}); give one integer label per row",
        )
    if where is not None and tuple(where.shape) not in (tuple(logits.shape), rows):
        fail(
            _OP,
            f"where {summary(where)} must have logits' shape {tuple(logits.shape)} (one "
            f"flag per class) or the labels' {rows} (one per row)",
        )
    labels, full, per_row = class_pick(logits, labels, axes, op=_OP)
    classes = math.prod(logits.shape[d] for d in axes)
    index_dtype = jnp.int64 if jnp.dtype(labels.dtype).itemsize == 8 else jnp.int32
    labels = jnp.asarray(labels, index_dtype)
    labels = jnp.where(labels < 0, labels + classes, labels)  # optax counts from the end
    # The flat class index of every logit, built with the logits' sharding.
    index = jnp.zeros((), index_dtype)
    stride = 1
    for d in reversed(axes):
        iota = lax.broadcasted_iota(index_dtype, logits.shape, d, out_sharding=full)
        index, stride = index + iota * stride, stride * logits.shape[d]
    chosen = index == jnp.expand_dims(labels, axes)
    picked = jnp.sum(jnp.where(chosen, logits, jnp.zeros((), logits.dtype)), axis=axes)
    mask = None if where is None else _class_mask(where, logits, axes, full, per_row)
    out = jax.nn.logsumexp(logits, axis=axes, where=mask) - picked
    # A label out of range picks nothing: NaN, as optax's gather gives (same gradient).
    valid = (labels >= 0) & (labels < classes)
    out = out + jnp.where(valid, jnp.zeros((), out.dtype), jnp.full((), jnp.nan, out.dtype))
    if mask is not None:
        out = jnp.where(jnp.any(mask, axis=axes), out, jnp.zeros((), out.dtype))
    return constrain(out, out_sharding, logits)


def _class_mask(where: Any, logits: Any, axes: tuple[int, ...], full: Any, per_row: Any) -> Any:
    """``where`` (of ``logits``' shape or the labels') with ``logits``' shape and sharding."""
    target = full if where.ndim == logits.ndim else per_row
    if target is not None:
        where = jax.sharding.reshard(where, target)
    return where if where.ndim == logits.ndim else jnp.expand_dims(where, axes)


def _class_axes(ndim: int, axis: int | tuple[int, ...]) -> tuple[int, ...]:
    axes = canonicalize_axes(ndim, axis)
    if isinstance(axis, tuple) and len(axes) != len(axis):
        raise LayerConfigError(
            f"{_OP}: axis={axis!r} names an axis twice; name each class axis once."
        )
    return axes
