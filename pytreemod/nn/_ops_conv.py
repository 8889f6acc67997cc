"""Convolutions, channels-last, with Flax's kernel layout ``(*kernel_size, in, out)``."""

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Inexact

from .._errors import LayerConfigError
from .._shapecheck import AnyArray, axes_text, checked, fail, python_numbers, summary
from .._sharding._ops import (
    constrain,
    convolution,
    explicit_mesh,
    gather_dims,
    match_trailing,
    out_kwargs,
    sharding_errors,
)
from ._ops_common import as_array, as_tuple, promote_dtype

PaddingLike: TypeAlias = str | int | Sequence[int | tuple[int, int]]
"""``"SAME"``, ``"VALID"``, ``"CIRCULAR"``, ``"REFLECT"``, ``"CAUSAL"`` (1-D), an int
(same padding on both sides of every spatial axis) or one int or ``(low, high)`` pair per
spatial axis."""

_STRING_PADDINGS = ("SAME", "SAME_LOWER", "VALID", "CIRCULAR", "REFLECT", "CAUSAL")


@python_numbers
def canonicalize_padding(padding: PaddingLike, rank: int) -> str | list[tuple[int, int]]:
    """Padding as ``lax`` takes it: a mode string or ``rank`` ``(low, high)`` pairs.

    >>> canonicalize_padding(1, 2)
    [(1, 1), (1, 1)]
    >>> canonicalize_padding([(0, 1), 2], 2)
    [(0, 1), (2, 2)]
    """
    if isinstance(padding, str):
        mode = padding.upper()
        if mode not in _STRING_PADDINGS:
            raise LayerConfigError(
                f"Unknown padding {padding!r}; use one of {', '.join(_STRING_PADDINGS)}, an "
                "int, or one int or (low, high) pair per spatial dimension."
            )
        return mode
    if isinstance(padding, int):
        return [(padding, padding)] * rank
    pads = list(padding)
    out: list[tuple[int, int]] = []
    for p in pads:
        if isinstance(p, int):
            out.append((p, p))
        elif isinstance(p, Sequence) and len(p) == 2:
            out.append((int(p[0]), int(p[1])))
        else:
            break
    if len(out) != rank or len(pads) != rank:
        raise LayerConfigError(
            f"Invalid padding {padding!r} for {rank} spatial dimension(s): give a mode string, "
            f"an int, or {rank} entries that are each an int or a (low, high) pair."
        )
    return out


def _flatten_batch(x: AnyArray, num_spatial: int) -> tuple[jax.Array, tuple[int, ...] | None]:
    """Make exactly one leading batch axis (added or merged); return how to undo it."""
    num_batch = x.ndim - (num_spatial + 1)
    if num_batch == 1:
        return as_array(x), None
    batch_shape = x.shape[:num_batch]
    return jnp.reshape(x, (-1, *x.shape[num_batch:])), batch_shape


def _restore_batch(y: jax.Array, batch_shape: tuple[int, ...] | None) -> jax.Array:
    if batch_shape is None:
        return y
    return jnp.reshape(y, (*batch_shape, *y.shape[1:]))


def _dimension_numbers(ndim: int) -> lax.ConvDimensionNumbers:
    lhs = (0, ndim - 1, *range(1, ndim - 1))
    rhs = (ndim - 1, ndim - 2, *range(0, ndim - 2))
    return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def _check_spatial_rank(op: str, x: Any, kernel: Any) -> int:
    num_spatial = kernel.ndim - 2
    if num_spatial < 1:
        fail(op, f"kernel {summary(kernel)} needs at least 3 axes (*kernel_size, in, out)")
    if x.ndim < num_spatial + 1:
        fail(
            op,
            f"x {summary(x)} has {axes_text(x.ndim)} but a {num_spatial}-D convolution needs at "
            f"least {num_spatial + 1} (*batch, {num_spatial} spatial, in_features)",
        )
    return num_spatial


@checked
def conv(
    x: Inexact[AnyArray, "*batch_and_spatial in_features"],
    kernel: Inexact[AnyArray, "*kernel_size in_per_group out_features"],
    bias: Inexact[AnyArray, " out_features"] | None = None,
    *,
    strides: int | Sequence[int] = 1,
    padding: PaddingLike = "SAME",
    input_dilation: int | Sequence[int] = 1,
    kernel_dilation: int | Sequence[int] = 1,
    feature_group_count: int = 1,
    dtype: Any = None,
    precision: Any = None,
    conv_general_dilated: Callable[..., Any] | None = None,
    out_sharding: Any = None,
) -> Inexact[jax.Array, "*batch_and_spatial_out out_features"]:
    """N-D convolution (Flax ``Conv``'s math); N is ``kernel.ndim - 2``.

    **Arguments:**

    - ``x``: ``(*batch, *spatial, in_features)``, channels last; any number of batch axes
      (none, one, several).
    - ``kernel``: ``(*kernel_size, in_features // feature_group_count, out_features)``.
    - ``bias``: ``(out_features,)`` or ``None``.
    - ``strides``, ``input_dilation``, ``kernel_dilation``: an int or one per spatial axis.
    - ``padding``: see ``PaddingLike``; ``"CIRCULAR"`` wraps around (periodic),
      ``"REFLECT"`` mirrors, ``"CAUSAL"`` left-pads a 1-D convolution.
    - ``feature_group_count``: split channels into groups (depthwise: ``in_features``).
    - ``conv_general_dilated``: a replacement for ``lax.conv_general_dilated`` (on an
      Explicit mesh it is also given ``out_sharding=``).
    - ``out_sharding``: the output's sharding (a ``PartitionSpec`` or ``NamedSharding``);
      default: derived from the operands on an Explicit mesh (see docs/sharding.md).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.conv(jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 16)), strides=2).shape
    (2, 4, 4, 16)
    """
    num_spatial = _check_spatial_rank("conv", x, kernel)
    in_features = x.shape[-1]
    if in_features != kernel.shape[-2] * feature_group_count:
        fail(
            "conv",
            f"dimension 'in_features' does not agree: x {summary(x)} has {in_features} "
            f"channels but kernel {summary(kernel)} takes {kernel.shape[-2]} per group x "
            f"feature_group_count={feature_group_count} = "
            f"{kernel.shape[-2] * feature_group_count}",
        )
    if kernel.shape[-1] % feature_group_count:
        raise LayerConfigError(
            f"conv: out_features={kernel.shape[-1]} is not divisible by "
            f"feature_group_count={feature_group_count}."
        )
    kernel_size = tuple(kernel.shape[:num_spatial])
    x, batch_shape, pad, strides_, in_dil, k_dil = _prepare_conv(
        x, kernel_size, strides, padding, input_dilation, kernel_dilation
    )
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    conv_fn = conv_general_dilated or lax.conv_general_dilated
    y = _convolve(
        conv_fn,
        as_array(x),
        as_array(kernel),
        (strides_, pad),
        dict(
            lhs_dilation=in_dil,
            rhs_dilation=k_dil,
            dimension_numbers=_dimension_numbers(x.ndim),
            feature_group_count=feature_group_count,
            precision=precision,
        ),
        out_sharding if batch_shape is None else None,
        op="conv",
    )
    if bias is not None:
        y = y + jnp.reshape(match_trailing(bias, y), (1,) * (y.ndim - 1) + (-1,))
    return constrain(_restore_batch(y, batch_shape), out_sharding, x, kernel)


Ints = tuple[int, ...]


def _convolve(
    conv_fn: Callable[..., Any],
    x: Any,
    kernel: Any,
    pos: tuple[Any, Any],
    args: dict[str, Any],
    out_sharding: Any,
    *,
    op: str,
) -> jax.Array:
    """``conv_fn(x, kernel, strides, padding, **args)``; on an Explicit mesh with the
    operands resharded and the output sharding given (see
    ``pytreemod._sharding._policy.ExplicitMeshPolicy.convolution``)."""

    def shape() -> tuple[int, ...]:
        spec = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, kernel)]
        return jax.eval_shape(
            lambda a, b: lax.conv_general_dilated(a, b, *pos, **args), *spec
        ).shape

    groups = args.get("feature_group_count", 1)
    x, kernel, derived = convolution(x, kernel, shape, groups, op=op)
    kw = out_kwargs(out_sharding, derived, x, kernel)
    with sharding_errors(op, x=x, kernel=kernel):
        return conv_fn(x, kernel, *pos, **args, **kw)


def _prepare_conv(
    x: Any,
    kernel_size: tuple[int, ...],
    strides: int | Sequence[int] | None,
    padding: PaddingLike,
    input_dilation: int | Sequence[int] | None,
    kernel_dilation: int | Sequence[int] | None,
) -> tuple[
    jax.Array, tuple[int, ...] | None, Any, tuple[int, ...], tuple[int, ...], tuple[int, ...]
]:
    """One batch axis, the padding modes lax lacks applied to ``x``, tuples per axis."""
    num_spatial = len(kernel_size)
    strides_ = as_tuple(strides, num_spatial, "strides")
    in_dil = as_tuple(input_dilation, num_spatial, "input_dilation")
    k_dil = as_tuple(kernel_dilation, num_spatial, "kernel_dilation")
    x, batch_shape = _flatten_batch(x, num_spatial)
    pad = canonicalize_padding(padding, num_spatial)
    if pad in ("CIRCULAR", "REFLECT"):
        dilated = [(k - 1) * d + 1 for k, d in zip(kernel_size, k_dil)]
        pads = [(0, 0), *[((k - 1) // 2, k // 2) for k in dilated], (0, 0)]
        x = jnp.pad(x, pads, mode="wrap" if pad == "CIRCULAR" else "reflect")
        pad = "VALID"
    elif pad == "CAUSAL":
        if num_spatial != 1:
            raise LayerConfigError(
                f"padding='CAUSAL' is only defined for 1-D convolutions; this one has "
                f"{num_spatial} spatial dimensions."
            )
        x = jnp.pad(x, [(0, 0), (k_dil[0] * (kernel_size[0] - 1), 0), (0, 0)])
        pad = "VALID"
    return x, batch_shape, pad, strides_, in_dil, k_dil


@python_numbers
def conv_local_shapes(
    x_shape: Sequence[int],
    kernel_size: Sequence[int],
    features: int,
    *,
    strides: int | Sequence[int] | None = 1,
    padding: PaddingLike = "SAME",
    input_dilation: int | Sequence[int] | None = 1,
    kernel_dilation: int | Sequence[int] | None = 1,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The kernel and bias shapes of an unshared (local) convolution of an ``x_shape``
    input: ``(*out_spatial, prod(kernel_size) * in_features, features)`` and
    ``(*out_spatial, features)`` (Flax ``ConvLocal``'s layout).

    >>> conv_local_shapes((1, 8, 3), (3,), 4, padding="VALID")
    ((6, 9, 4), (6, 4))
    """
    ks = tuple(kernel_size)
    x = jax.ShapeDtypeStruct(tuple(x_shape), jnp.float32)

    def out_shape(x: Any) -> Any:
        x, _, pad, strides_, in_dil, k_dil = _prepare_conv(
            x, ks, strides, padding, input_dilation, kernel_dilation
        )
        k = jnp.zeros((*ks, x.shape[-1], features), x.dtype)
        return lax.conv_general_dilated(
            x,
            k,
            strides_,
            pad,
            lhs_dilation=in_dil,
            rhs_dilation=k_dil,
            dimension_numbers=_dimension_numbers(x.ndim),
        )

    spatial = tuple(jax.eval_shape(out_shape, x).shape[1:-1])
    in_features = int(x_shape[-1])
    return (*spatial, int(np.prod(ks)) * in_features, features), (*spatial, features)


@python_numbers
def conv_local(
    x: AnyArray,
    kernel: AnyArray,
    bias: AnyArray | None = None,
    *,
    kernel_size: Sequence[int],
    strides: int | Sequence[int] | None = 1,
    padding: PaddingLike = "SAME",
    input_dilation: int | Sequence[int] | None = 1,
    kernel_dilation: int | Sequence[int] | None = 1,
    dtype: Any = None,
    precision: Any = None,
    out_sharding: Any = None,
) -> jax.Array:
    """Unshared convolution (Flax ``ConvLocal``'s math, ``lax.conv_general_dilated_local``):
    a separate filter at every output position; shapes from ``conv_local_shapes``.
    ``out_sharding``: the output's sharding, applied after the op (``reshard`` on an
    Explicit mesh, a sharding constraint on an Auto one).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.conv_local(jnp.ones((1, 8, 3)), jnp.ones((6, 9, 4)), kernel_size=(3,),
    ...              padding="VALID").shape
    (1, 6, 4)
    """
    ks = tuple(kernel_size)
    x, batch_shape, pad, strides_, in_dil, k_dil = _prepare_conv(
        x, ks, strides, padding, input_dilation, kernel_dilation
    )
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    y = lax.conv_general_dilated_local(
        lhs=x,
        rhs=kernel,
        window_strides=strides_,
        padding=pad,
        filter_shape=ks,
        lhs_dilation=in_dil,
        rhs_dilation=k_dil,
        dimension_numbers=_dimension_numbers(x.ndim),
        precision=precision,
    )
    if bias is not None:
        y = y + jnp.reshape(match_trailing(bias, y), (1,) * (y.ndim - bias.ndim) + bias.shape)
    return constrain(_restore_batch(y, batch_shape), out_sharding, x, kernel)


@checked
def conv_transpose(
    x: Inexact[AnyArray, "*batch_and_spatial in_features"],
    kernel: Inexact[AnyArray, "*kernel_size kernel_in kernel_out"],
    bias: Inexact[AnyArray, " out_features"] | None = None,
    *,
    strides: int | Sequence[int] = 1,
    padding: PaddingLike = "SAME",
    kernel_dilation: int | Sequence[int] = 1,
    transpose_kernel: bool = False,
    dtype: Any = None,
    precision: Any = None,
    preferred_element_type: Any = None,
    out_sharding: Any = None,
) -> Inexact[jax.Array, "*batch_and_spatial_out out_features"]:
    """Transposed convolution (Flax ``ConvTranspose``'s math, ``lax.conv_transpose``).

    ``kernel`` is ``(*kernel_size, in_features, out_features)``, or with
    ``transpose_kernel=True`` ``(*kernel_size, out_features, in_features)`` (then the
    kernel of a ``conv`` gives its gradient-transpose). ``padding="CIRCULAR"`` wraps the
    output periodically, as Flax does. ``out_sharding``: the sharding of the output (a
    ``PartitionSpec`` or ``NamedSharding``); default: derived from the operands on an
    Explicit mesh (see docs/sharding.md).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.conv_transpose(jnp.ones((1, 8, 3)), jnp.ones((3, 3, 4)), padding="VALID").shape
    (1, 10, 4)
    """
    num_spatial = _check_spatial_rank("conv_transpose", x, kernel)
    k_in = kernel.shape[-1] if transpose_kernel else kernel.shape[-2]
    if x.shape[-1] != k_in:
        axis = "-1 (transpose_kernel=True)" if transpose_kernel else "-2"
        fail(
            "conv_transpose",
            f"dimension 'in_features' does not agree: x {summary(x)} has {x.shape[-1]} "
            f"channels but kernel {summary(kernel)} has {k_in} at axis {axis}",
        )
    strides_ = as_tuple(strides, num_spatial, "strides")
    k_dil = as_tuple(kernel_dilation, num_spatial, "kernel_dilation")
    x, batch_shape = _flatten_batch(x, num_spatial)
    pad = canonicalize_padding(padding, num_spatial)
    circular = pad == "CIRCULAR"
    if circular:
        pad = "VALID"
    elif pad in ("REFLECT", "CAUSAL"):
        raise LayerConfigError(f"conv_transpose does not support padding={padding!r}.")
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    if explicit_mesh(x, kernel) is None:
        y = lax.conv_transpose(
            as_array(x),
            as_array(kernel),
            strides_,
            pad,
            rhs_dilation=k_dil,
            transpose_kernel=transpose_kernel,
            precision=precision,
            preferred_element_type=preferred_element_type,
        )
    else:
        y = _conv_transpose_sharded(
            x, kernel, strides_, pad, k_dil, transpose_kernel, precision,
            preferred_element_type, None if batch_shape or circular else out_sharding,
        )  # fmt: skip
    if circular:
        y = _wrap_periodic(
            gather_dims(y, range(1, y.ndim - 1)), x.shape[1:-1], strides_, transpose_kernel
        )
    if bias is not None:
        y = y + jnp.reshape(match_trailing(bias, y), (1,) * (y.ndim - 1) + (-1,))
    return constrain(_restore_batch(y, batch_shape), out_sharding, x, kernel)


def _transpose_padding(k: int, s: int, mode: str) -> tuple[int, int]:
    """The padding of a transposed convolution (stride ``s``, dilated kernel size ``k``)
    for the forward convolution's ``"SAME"`` or ``"VALID"``, as ``lax.conv_transpose``."""
    if mode == "SAME":
        total = k + s - 2
        low = k - 1 if s > k - 1 else -(-total // 2)
    else:
        total, low = k + s - 2 + max(k - s, 0), k - 1
    return low, total - low


def _conv_transpose_sharded(
    x: Any,
    kernel: Any,
    strides: Ints,
    pad: Any,
    k_dil: Ints,
    transpose_kernel: bool,
    precision: Any,
    preferred_element_type: Any,
    out_sharding: Any,
) -> jax.Array:
    """``lax.conv_transpose`` (one batch axis, channels last) written as the input-dilated
    ``conv_general_dilated`` it is, so the output sharding can be given."""
    n = kernel.ndim - 2
    if transpose_kernel:  # flip the window, swap the kernel's in and out axes
        kernel = jnp.swapaxes(jnp.flip(kernel, tuple(range(n))), -1, -2)
    if pad in ("SAME", "VALID"):
        sizes = [(k - 1) * d + 1 for k, d in zip(kernel.shape[:n], k_dil)]
        pad = [_transpose_padding(k, s, pad) for k, s in zip(sizes, strides)]
    args = dict(
        lhs_dilation=strides,
        rhs_dilation=k_dil,
        dimension_numbers=_dimension_numbers(x.ndim),
        precision=precision,
        preferred_element_type=preferred_element_type,
    )
    return _convolve(
        lax.conv_general_dilated,
        x,
        kernel,
        ((1,) * n, pad),
        args,
        out_sharding,
        op="conv_transpose",
    )


def _wrap_periodic(
    y: jax.Array, in_spatial: Sequence[int], strides: Sequence[int], transpose_kernel: bool
) -> jax.Array:
    # Pad each spatial axis to a whole number of periods (input size x stride), aligned so
    # the input starts at a period boundary, then fold the periods onto each other.
    periods = [n * s for n, s in zip(in_spatial, strides)]
    diffs = [-(size - p) % (2 * p) for size, p in zip(y.shape[1:-1], periods)]
    if transpose_kernel:
        pads = [(d // 2, (d + 1) // 2) for d in diffs]
    else:
        pads = [((d + 1) // 2, d // 2) for d in diffs]
    y = jnp.pad(y, [(0, 0), *pads, (0, 0)])
    for i in range(1, y.ndim - 1):
        y = y.reshape(*y.shape[:i], -1, periods[i - 1], *y.shape[i + 1 :]).sum(axis=i)
    return y
