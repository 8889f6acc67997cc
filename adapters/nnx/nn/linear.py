"""Linear layers (``flax.nnx.nn.linear``): ``Linear``, ``LinearGeneral``, ``Einsum``,
``Conv``, ``ConvTranspose``, ``Embed``.

Each layer draws its parameters at construction, with Flax's names, shapes, keys (one
``rngs.params()`` per parameter, kernel first) and initializers, and computes with
``pytreemod.nn.functional`` after promoting dtypes with its ``promote_dtype``.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import pytreemod as pm
from adapters.core import FrozenDict
from adapters.typing import ConvGeneralDilatedT as ConvGeneralDilatedT
from adapters.typing import DotGeneralT as DotGeneralT
from adapters.typing import Dtype as Dtype
from adapters.typing import EinsumT as EinsumT
from adapters.typing import Initializer as Initializer
from adapters.typing import LaxPadding as LaxPadding
from adapters.typing import PaddingLike as PaddingLike
from adapters.typing import PrecisionLike as PrecisionLike
from adapters.typing import PromoteDtypeFn as PromoteDtypeFn
from adapters.typing import Shape as Shape
from pytreemod.nn import functional as F

from ..module import Module, first_from
from ..pytreelib import data
from ..rnglib import Rngs
from ..variablelib import Param
from . import dtypes, initializers
from ._contraction import (
    TAKE_AS_JAX,
    LinearConfig,
    dense_general_once,
    linear_once,
    with_preferred_type,
)

Array = jax.Array
Axis = int
Size = int
_NO_METADATA: Mapping[str, Any] = MappingProxyType({})

default_kernel_init: Initializer = initializers.lecun_normal()
default_bias_init: Initializer = initializers.zeros_init()
default_embed_init: Initializer = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


def canonicalize_padding(padding: PaddingLike, rank: int) -> LaxPadding:
    """Padding as ``lax`` takes it: a mode string as given, or ``rank`` ``(low, high)`` pairs.

    An int pads every side of every spatial axis by that amount; a sequence gives one int
    (both sides) or ``(low, high)`` pair per spatial axis.

    >>> canonicalize_padding(2, 2)
    [(2, 2), (2, 2)]
    >>> canonicalize_padding([1, (0, 3)], 2)
    [(1, 1), (0, 3)]
    """
    if isinstance(padding, str):
        return padding
    if isinstance(padding, int):
        return [(padding, padding)] * rank
    if isinstance(padding, Sequence) and len(padding) == rank:
        pairs = [
            (p, p) if isinstance(p, int) else p
            for p in padding
            if isinstance(p, int) or (isinstance(p, tuple) and len(p) == 2)
        ]
        if len(pairs) == rank:
            return pairs
    raise ValueError(
        f"Invalid padding format: {padding}, should be str, int, or a sequence of len {rank} "
        "where each element is an int or pair of ints."
    )


def _canonicalize_tuple(x: int | Iterable[int]) -> tuple[int, ...]:
    return tuple(x) if isinstance(x, Iterable) else (x,)


def _reshape_value(value: Any, shape: tuple[int, ...]) -> Any:
    """``value`` reshaped; for an initializer's metadata wrapper (an object carrying
    ``raw_value``, as ``with_partitioning``'s) the wrapped value is reshaped in place."""
    if not isinstance(value, jax.Array) and hasattr(value, "raw_value"):
        value.raw_value = jnp.reshape(value.raw_value, shape)
        return value
    return jnp.reshape(value, shape)


def _check_mask(mask: Any, kernel_shape: tuple[int, ...]) -> None:
    if mask is not None and mask.shape != kernel_shape:
        raise ValueError(
            "Mask needs to have the same shape as weights. "
            f"Shapes are: {mask.shape}, {kernel_shape}"
        )


def _value(param: Param | None) -> Any:
    return None if param is None else param[...]


class LinearGeneral(Module):
    """A linear map contracting one or more input axes into one or more feature axes.

    The kernel has shape ``(*batch_sizes, *in_features, *out_features)`` and the bias
    ``(*batch_sizes, *out_features)``; both are drawn as if flat (a matrix, a vector) and
    reshaped, so variance-scaling initializers see the products as fan-in and fan-out.
    The axes ``axis`` of the input are contracted; the output keeps the other axes, then
    ``out_features``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.LinearGeneral((2, 3), (4, 5), axis=(1, -1), rngs=nnx.Rngs(0))
    >>> layer.kernel.shape, layer.bias.shape
    ((2, 3, 4, 5), (4, 5))
    >>> layer(jnp.ones((16, 2, 3))).shape
    (16, 4, 5)

    Args:
        in_features: the size, or tuple of sizes, of the contracted input axes.
        out_features: the size, or tuple of sizes, of the output feature axes.
        axis: the input axis or axes to contract (default ``-1``).
        batch_axis: a mapping ``{axis: size}`` of leading input axes (``0, 1, ...``) that
            index separate kernels (default: none).
        use_bias: whether to add a learned bias (default ``True``).
        dtype: the computation dtype (default ``None``: promoted from the operands).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        precision: the ``jax.lax.Precision`` of the contraction (default ``None``).
        promote_dtype: called as ``promote_dtype((inputs, kernel, bias), dtype=dtype)``.
        dot_general: a replacement for ``jax.lax.dot_general`` (default ``None``).
        dot_general_cls: a class built with no arguments on every call, whose instance
            replaces ``jax.lax.dot_general``; it wins over ``dot_general``.
        preferred_element_type: the dtype the contraction accumulates and returns in.
        rngs: the ``Rngs`` whose ``params`` stream draws the parameters.
        kernel_metadata: metadata of the kernel's ``Param`` (sharding...).
        bias_metadata: metadata of the bias's ``Param``.
    """

    def __init__(
        self,
        in_features: Size | Sequence[Size],
        out_features: Size | Sequence[Size],
        *,
        axis: Axis | Sequence[Axis] = -1,
        batch_axis: Mapping[Axis, Size] = FrozenDict({}),
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        precision: PrecisionLike = None,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        dot_general: Callable[..., Any] | None = None,
        dot_general_cls: Any = None,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.in_features = _canonicalize_tuple(in_features)
        self.out_features = _canonicalize_tuple(out_features)
        self.axis = _canonicalize_tuple(axis)
        self.batch_axis = FrozenDict[Axis, Size](batch_axis)
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.dot_general = dot_general
        self.dot_general_cls = dot_general_cls
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type
        if len(self.in_features) != len(self.axis):
            raise ValueError(
                "in_features and axis must have the same length. "
                f"Got {self.in_features} and {self.axis}."
            )
        if batch_axis:
            batch_dims = tuple(batch_axis.keys())
            if set(batch_dims) != set(range(max(batch_dims) + 1)):
                raise ValueError(
                    f"batch_dims {batch_dims} must be consecutive leading dimensions "
                    "starting from 0."
                )
        batch_shape = tuple(self.batch_axis.values())
        kernel_shape = (*batch_shape, *self.in_features, *self.out_features)
        n_out = int(np.prod(self.out_features))
        flat_kernel = (int(np.prod(batch_shape) * np.prod(self.in_features)), n_out)
        kernel = kernel_init(rngs.params(), flat_kernel, self.param_dtype)
        self.kernel = Param(_reshape_value(kernel, kernel_shape), **kernel_metadata)
        self.bias: Param | None = data(None)
        if use_bias:
            bias_shape = (*batch_shape, *self.out_features)
            bias = bias_init(rngs.params(), (int(np.prod(bias_shape)),), self.param_dtype)
            self.bias = Param(_reshape_value(bias, bias_shape), **bias_metadata)

    def __call__(self, inputs: Array, out_sharding: Any = None) -> Array:
        """Contract ``inputs`` over ``axis``.

        Args:
            inputs: an array with the axes of ``axis`` and ``batch_axis``.
            out_sharding: the output's sharding (default ``None``: the compiler's).

        Returns:
            The input's other axes (batch axes first), then ``out_features``.
        """
        inputs, kernel, bias = self.promote_dtype(
            (inputs, self.kernel[...], _value(self.bias)), dtype=self.dtype
        )
        if self.dot_general_cls is not None:
            dot_general = self.dot_general_cls()
        elif self.dot_general is not None:
            dot_general = self.dot_general
        else:
            dot_general = lax.dot_general
        if dot_general is lax.dot_general:
            config = LinearConfig(
                self.precision,
                self.preferred_element_type,
                out_sharding,
                self.axis,
                tuple(self.batch_axis.keys()),
            )
            return dense_general_once(config, inputs, kernel, bias)
        return F.dense_general(
            inputs,
            kernel,
            bias,
            axis=self.axis,
            batch_dims=tuple(self.batch_axis.keys()),
            precision=self.precision,
            dot_general=with_preferred_type(dot_general, self.preferred_element_type),
            out_sharding=out_sharding,
        )


class Linear(Module):
    """``inputs @ kernel + bias`` over the last axis.

    The kernel is ``(in_features, out_features)`` and the bias ``(out_features,)``, drawn
    in that order from ``rngs.params()``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.Linear(in_features=3, out_features=4, rngs=nnx.Rngs(0))
    >>> layer.kernel.shape, layer.bias.shape
    ((3, 4), (4,))
    >>> layer(jnp.ones((2, 3))).shape
    (2, 4)

    Args:
        in_features: the size of the input's last axis.
        out_features: the size of the output's last axis.
        use_bias: whether to add a learned bias (default ``True``).
        dtype: the computation dtype (default ``None``: promoted from the operands).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        precision: the ``jax.lax.Precision`` of the contraction (default ``None``).
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        dot_general: the contraction (default ``jax.lax.dot_general``).
        promote_dtype: called as ``promote_dtype((inputs, kernel, bias), dtype=dtype)``.
        preferred_element_type: the dtype the contraction accumulates and returns in.
        rngs: the ``Rngs`` whose ``params`` stream draws the parameters.
        kernel_metadata: metadata of the kernel's ``Param`` (sharding...).
        bias_metadata: metadata of the bias's ``Param``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        dot_general: Callable[..., Any] = lax.dot_general,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.kernel = Param(
            kernel_init(rngs.params(), (in_features, out_features), param_dtype),
            **kernel_metadata,
        )
        self.bias: Param | None = data(None)
        if use_bias:
            self.bias = Param(
                bias_init(rngs.params(), (out_features,), param_dtype), **bias_metadata
            )
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.dot_general = dot_general
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: Array, out_sharding: Any = None) -> Array:
        """Apply the layer to ``inputs`` of shape ``(..., in_features)``.

        Args:
            inputs: the array to transform.
            out_sharding: the output's sharding (default ``None``: the compiler's).

        Returns:
            An array of shape ``(..., out_features)``.
        """
        inputs, kernel, bias = self.promote_dtype(
            (inputs, self.kernel[...], _value(self.bias)), dtype=self.dtype
        )
        if self.dot_general is lax.dot_general:
            config = LinearConfig(self.precision, self.preferred_element_type, out_sharding)
            return linear_once(config, inputs, kernel, bias)
        return F.linear(
            inputs,
            kernel,
            bias,
            precision=self.precision,
            dot_general=with_preferred_type(self.dot_general, self.preferred_element_type),
            out_sharding=out_sharding,
        )


class Einsum(Module):
    """``einsum(einsum_str, inputs, kernel) + bias`` with a learned kernel and bias.

    The equation must be explicit (``->``) with two operands: the input, then the kernel.
    The bias, when ``bias_shape`` is given, is added to the output axes that come from the
    kernel.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.Einsum("nta,hab->nthb", (8, 2, 4), (8, 4), rngs=nnx.Rngs(0))
    >>> layer(jnp.ones((16, 11, 2))).shape
    (16, 11, 8, 4)

    Args:
        einsum_str: the equation (spaces are ignored).
        kernel_shape: the kernel's shape.
        bias_shape: the bias's shape (default ``None``: no bias).
        dtype: the computation dtype (default ``None``: promoted from the operands).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        precision: the ``jax.lax.Precision`` of the contraction (default ``None``).
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        promote_dtype: called as ``promote_dtype((inputs, kernel, bias), dtype=dtype)``.
        einsum_op: a replacement for ``jnp.einsum`` (same signature).
        preferred_element_type: the dtype the contraction accumulates and returns in.
        rngs: the ``Rngs`` whose ``params`` stream draws the parameters.
        kernel_metadata: metadata of the kernel's ``Param`` (sharding...).
        bias_metadata: metadata of the bias's ``Param``.
    """

    def __init__(
        self,
        einsum_str: str,
        kernel_shape: Shape,
        bias_shape: Shape | None = None,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        einsum_op: Callable[..., Any] = jnp.einsum,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        einsum_str = einsum_str.replace(" ", "")
        self._einsum_str_check(einsum_str)
        self.kernel = Param(
            kernel_init(rngs.params(), kernel_shape, param_dtype), **kernel_metadata
        )
        self.bias: Param | None = data(None)
        if bias_shape is not None:
            self.bias = Param(bias_init(rngs.params(), bias_shape, param_dtype), **bias_metadata)
        self.einsum_str = einsum_str
        self.kernel_shape = kernel_shape
        self.bias_shape = bias_shape
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.promote_dtype = promote_dtype
        self.einsum_op = einsum_op
        self.preferred_element_type = preferred_element_type

    def __call__(
        self, inputs: Array, einsum_str: str | None = None, out_sharding: Any = None
    ) -> Array:
        """Apply the equation (``einsum_str`` here replaces the constructor's).

        Args:
            inputs: the left operand.
            einsum_str: an equation for this call (default ``None``: the layer's).
            out_sharding: the output's sharding (default ``None``: the compiler's).

        Returns:
            The einsum's result plus the bias.
        """
        equation: str = first_from(
            einsum_str,
            self.einsum_str,
            error_msg="No `einsum_str` argument was provided to Einsum as either a "
            "__call__ argument, or class attribute.",
        ).replace(" ", "")
        self._einsum_str_check(equation)
        inputs, kernel, bias = self.promote_dtype(
            (inputs, self.kernel[...], _value(self.bias)), dtype=self.dtype
        )
        op = None if self.einsum_op is jnp.einsum else self.einsum_op
        return F.einsum_dense(
            inputs,
            kernel,
            bias,
            equation=equation,
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
            out_sharding=out_sharding,
            einsum_op=op,
        )

    def _einsum_str_check(self, einsum_str: str) -> None:
        if "->" not in einsum_str:
            raise ValueError('`einsum_str` equation must be explicit and include "->".')
        if einsum_str.count(",") != 1:
            raise ValueError(
                "`einsum_str` equation must have exactly two operands and therefore, "
                f"exactly one comma character, instead of {einsum_str.count(',')}"
            )


def _kernel_size(kernel_size: int | Sequence[int]) -> tuple[int, ...]:
    return (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size)


class Conv(Module):
    """An N-D convolution (``lax.conv_general_dilated``), channels last.

    N is ``len(kernel_size)``. Inputs are ``(*batch, *spatial, in_features)`` with any
    number of batch axes (none too). The kernel is ``(*kernel_size, in_features //
    feature_group_count, out_features)``, the bias ``(out_features,)``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.Conv(3, 4, kernel_size=(3,), padding="VALID", rngs=nnx.Rngs(0))
    >>> layer.kernel.shape
    (3, 3, 4)
    >>> layer(jnp.ones((1, 8, 3))).shape
    (1, 6, 4)

    Args:
        in_features: the number of input channels.
        out_features: the number of output channels.
        kernel_size: the window, one int per spatial axis (an int: a 1-D convolution).
        strides: the window step, an int or one per spatial axis (default ``1``).
        padding: ``'SAME'`` (default), ``'VALID'``, ``'CIRCULAR'``, ``'REFLECT'``,
            ``'CAUSAL'`` (1-D), an int, or one int or ``(low, high)`` pair per axis.
        input_dilation: spacing between input elements (default ``1``).
        kernel_dilation: spacing between kernel taps (default ``1``).
        feature_group_count: the number of channel groups (default ``1``).
        use_bias: whether to add a learned bias (default ``True``).
        mask: an optional array of the kernel's shape multiplied into the kernel.
        dtype: the computation dtype (default ``None``: promoted from the operands).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        precision: the ``jax.lax.Precision`` of the convolution (default ``None``).
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        conv_general_dilated: the convolution (default ``lax.conv_general_dilated``).
        promote_dtype: called as ``promote_dtype((inputs, kernel, bias), dtype=dtype)``.
        preferred_element_type: the dtype the convolution accumulates and returns in.
        rngs: the ``Rngs`` whose ``params`` stream draws the parameters.
        kernel_metadata: metadata of the kernel's ``Param`` (sharding...).
        bias_metadata: metadata of the bias's ``Param``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] | None = 1,
        *,
        padding: PaddingLike = "SAME",
        input_dilation: int | Sequence[int] | None = 1,
        kernel_dilation: int | Sequence[int] | None = 1,
        feature_group_count: int = 1,
        use_bias: bool = True,
        mask: Array | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        conv_general_dilated: Callable[..., Any] = lax.conv_general_dilated,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        kernel_size = _kernel_size(kernel_size)
        kernel_shape = (*kernel_size, in_features // feature_group_count, out_features)
        self.kernel_shape = kernel_shape
        self.kernel = Param(
            kernel_init(rngs.params(), kernel_shape, param_dtype), **kernel_metadata
        )
        self.bias: Param | None = data(None)
        if use_bias:
            self.bias = Param(
                bias_init(rngs.params(), (out_features,), param_dtype), **bias_metadata
            )
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = kernel_size
        self.strides = strides
        self.padding = padding
        self.input_dilation = input_dilation
        self.kernel_dilation = kernel_dilation
        self.feature_group_count = feature_group_count
        self.use_bias = use_bias
        self.mask = mask
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.conv_general_dilated = conv_general_dilated
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: Array, out_sharding: Any = None) -> Array:
        """Convolve ``inputs`` of shape ``(*batch, *spatial, in_features)``.

        Args:
            inputs: the input, channels last.
            out_sharding: the output's sharding (default ``None``: the compiler's).

        Returns:
            An array ``(*batch, *out_spatial, out_features)``.
        """
        padding = canonicalize_padding(self.padding, len(self.kernel_size))
        if padding == "CAUSAL" and len(self.kernel_size) != 1:
            raise ValueError("Causal padding is only implemented for 1D convolutions.")
        _check_mask(self.mask, self.kernel_shape)
        kernel = self.kernel[...]
        if self.mask is not None:
            kernel = kernel * self.mask
        inputs, kernel, bias = self.promote_dtype(
            (inputs, kernel, _value(self.bias)), dtype=self.dtype
        )
        return F.conv(
            inputs,
            kernel,
            bias,
            strides=self.strides if self.strides is not None else 1,
            padding=padding,
            input_dilation=self.input_dilation if self.input_dilation is not None else 1,
            kernel_dilation=self.kernel_dilation if self.kernel_dilation is not None else 1,
            feature_group_count=self.feature_group_count,
            precision=self.precision,
            conv_general_dilated=with_preferred_type(
                self.conv_general_dilated, self.preferred_element_type
            ),
            out_sharding=out_sharding,
        )


class ConvTranspose(Module):
    """A transposed convolution (``lax.conv_transpose``), channels last.

    Strides upsample: with ``'SAME'`` padding each spatial size is multiplied by its
    stride. The kernel is ``(*kernel_size, in_features, out_features)``, or
    ``(*kernel_size, out_features, in_features)`` with ``transpose_kernel=True``.
    ``padding`` is the padding of the transposed computation itself (not PyTorch's
    convention); ``'CIRCULAR'`` wraps the output periodically.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.ConvTranspose(3, 4, kernel_size=(3,), padding="VALID", rngs=nnx.Rngs(0))
    >>> layer(jnp.ones((1, 8, 3))).shape
    (1, 10, 4)

    Args:
        in_features: the number of input channels.
        out_features: the number of output channels.
        kernel_size: the window, one int per spatial axis (an int: 1-D).
        strides: the upsampling step, an int or one per axis (default ``None``: 1).
        padding: ``'SAME'`` (default), ``'VALID'``, ``'CIRCULAR'``, an int, or one int
            or ``(low, high)`` pair per spatial axis.
        kernel_dilation: spacing between kernel taps (default ``None``: 1).
        use_bias: whether to add a learned bias (default ``True``).
        mask: an optional array of the kernel's shape multiplied into the kernel.
        dtype: the computation dtype (default ``None``: promoted from the operands).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        precision: the ``jax.lax.Precision`` of the convolution (default ``None``).
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        transpose_kernel: flip the spatial axes and swap the channel axes of the kernel,
            giving the gradient of a ``Conv`` with that kernel (default ``False``).
        promote_dtype: called as ``promote_dtype((inputs, kernel, bias), dtype=dtype)``.
        preferred_element_type: the dtype the convolution accumulates and returns in.
        rngs: the ``Rngs`` whose ``params`` stream draws the parameters.
        kernel_metadata: metadata of the kernel's ``Param`` (sharding...).
        bias_metadata: metadata of the bias's ``Param``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] | None = None,
        *,
        padding: PaddingLike = "SAME",
        kernel_dilation: int | Sequence[int] | None = None,
        use_bias: bool = True,
        mask: Array | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike | None = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        transpose_kernel: bool = False,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        kernel_size = _kernel_size(kernel_size)
        self.kernel_size = kernel_size
        self.in_features = in_features
        self.out_features = out_features
        self.strides = strides
        self.padding = padding
        self.kernel_dilation = kernel_dilation
        self.use_bias = use_bias
        self.mask = mask
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.transpose_kernel = transpose_kernel
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type
        channels = (out_features, in_features) if transpose_kernel else (in_features, out_features)
        self.kernel_shape = (*kernel_size, *channels)
        self.kernel = Param(
            kernel_init(rngs.params(), self.kernel_shape, param_dtype), **kernel_metadata
        )
        self.bias: Param | None = data(None)
        if use_bias:
            self.bias = Param(
                bias_init(rngs.params(), (out_features,), param_dtype), **bias_metadata
            )

    def __call__(self, inputs: Array) -> Array:
        """Apply the transposed convolution to ``(*batch, *spatial, in_features)``.

        Args:
            inputs: the input, channels last.

        Returns:
            An array ``(*batch, *out_spatial, out_features)``.
        """
        _check_mask(self.mask, self.kernel_shape)
        kernel = self.kernel[...]
        if self.mask is not None:
            kernel = kernel * self.mask
        padding = canonicalize_padding(self.padding, len(self.kernel_size))
        inputs, kernel, bias = self.promote_dtype(
            (inputs, kernel, _value(self.bias)), dtype=self.dtype
        )
        return F.conv_transpose(
            inputs,
            kernel,
            bias,
            strides=self.strides if self.strides is not None else 1,
            padding=padding,
            kernel_dilation=self.kernel_dilation if self.kernel_dilation is not None else 1,
            transpose_kernel=self.transpose_kernel,
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
        )


class Embed(Module):
    """A lookup table from integer ids in ``[0, num_embeddings)`` to vectors.

    The table is the ``Param`` ``embedding`` of shape ``(num_embeddings, features)``.
    Calling gathers rows (an id past the end gives a NaN row; with one embedding every
    id gets it); ``attend`` scores query vectors against every row.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.Embed(num_embeddings=5, features=3, rngs=nnx.Rngs(0))
    >>> layer(jnp.array([[0, 1], [4, 2]])).shape
    (2, 2, 3)
    >>> layer.attend(jnp.ones((2, 3))).shape
    (2, 5)

    Args:
        num_embeddings: the number of rows (the vocabulary size).
        features: the length of each embedding.
        dtype: the dtype of the looked-up vectors (default ``None``: the table's).
        param_dtype: the dtype of the table (default ``float32``).
        embedding_init: initializer of the table (default
            ``variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)``).
        promote_dtype: called as ``promote_dtype((embedding,), dtype=dtype,
            inexact=False)`` in ``__call__`` and ``promote_dtype((query, embedding),
            dtype=dtype)`` in ``attend``.
        rngs: the ``Rngs`` whose ``params`` stream draws the table.
        embedding_metadata: metadata of the table's ``Param`` (sharding...).
    """

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        embedding_init: Initializer = default_embed_init,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        rngs: Rngs,
        embedding_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.embedding = Param(
            embedding_init(rngs.params(), (num_embeddings, features), param_dtype),
            **embedding_metadata,
        )
        self.num_embeddings = num_embeddings
        self.features = features
        self.dtype = dtype or self.embedding.get_value().dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype

    def __call__(self, inputs: Array, out_sharding: Any = None) -> Array:
        """Look up the rows of integer ``inputs`` (any shape).

        Args:
            inputs: an integer array of ids.
            out_sharding: the output's sharding (default ``None``: the compiler's).

        Returns:
            An array of shape ``(*inputs.shape, features)``.
        """
        if not jnp.issubdtype(inputs.dtype, jnp.integer):
            raise ValueError("Input type must be an integer or unsigned integer.")
        (embedding,) = self.promote_dtype((self.embedding[...],), dtype=self.dtype, inexact=False)
        if out_sharding is None:  # as Flax: JAX shards the take (or refuses, if ambiguous)
            with pm.sharding.use_explicit_mesh_policy(TAKE_AS_JAX):
                return F.embed(inputs, embedding)
        return F.embed(inputs, embedding, out_sharding=out_sharding)

    def attend(self, query: Array, out_sharding: Any = None) -> Array:
        """Score ``query`` (last axis ``features``) against every embedding.

        Args:
            query: an array of shape ``(..., features)``.
            out_sharding: the output's sharding (default ``None``: the compiler's).

        Returns:
            Logits of shape ``(..., num_embeddings)`` (``query @ embedding.T``).
        """
        query, embedding = self.promote_dtype((query, self.embedding[...]), dtype=self.dtype)
        return F.attend(query, embedding, out_sharding=out_sharding)
