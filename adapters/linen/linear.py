"""Linear layers (``flax.linen.linear``): ``Dense``, ``DenseGeneral``, ``Einsum``,
``Conv``, ``ConvLocal``, ``ConvTranspose``, ``Embed``.

Each creates its parameters with Flax's names, shapes and initializers, promotes dtypes
with the layer's ``promote_dtype`` and computes with ``pytreemod.nn.functional``.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from adapters.core import meta
from pytreemod.nn import functional as F

from . import _traced, initializers
from .dtypes import promote_dtype
from .module import Module, compact, merge_param

Array = jax.Array
Dtype = Any
Initializer = Callable[..., Any]
PrecisionLike = Any
PaddingLike = str | int | Sequence[int | tuple[int, int]]

__all__ = [
    "Conv",
    "ConvLocal",
    "ConvTranspose",
    "Dense",
    "DenseGeneral",
    "Einsum",
    "Embed",
    "canonicalize_padding",
    "default_embed_init",
    "default_kernel_init",
]


class PromoteDtypeFn(Protocol):
    """The signature of ``promote_dtype``: arrays (or ``None``) to one dtype."""

    def __call__(self, *args: Any, dtype: Any = None, inexact: bool = True) -> list[Any]: ...


default_kernel_init: Initializer = initializers.lecun_normal()
default_embed_init: Initializer = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


def _as_tuple(x: int | Iterable[int]) -> tuple[int, ...]:
    return tuple(x) if isinstance(x, Iterable) else (x,)


def _pick(fn: Any, cls: Any) -> Any:
    """The dot_general (or conv) to use: an instance of ``cls``, else ``fn``, else None."""
    if cls is not None:
        return cls()
    return fn


def _reshaping_init(init: Initializer, flat: Callable[[tuple[int, ...]], tuple[int, ...]]) -> Any:
    """Draw ``init`` at a flattened shape and reshape (boxes keep their metadata)."""

    def wrapped(rng: Any, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Any:
        flat_shape = tuple(int(d) for d in flat(shape))
        unboxed = getattr(init, "__wrapped__", None)
        if unboxed is not None:
            # A boxing initializer names the axes of the full shape: draw the values at
            # the flat shape with the function it wraps, then box them like it does.
            try:
                probe = jax.eval_shape(lambda k: init(k, shape, dtype), rng)
            except Exception:
                probe = None
            if isinstance(probe, meta.AxisMetadata):
                value = jnp.reshape(unboxed(rng, flat_shape, dtype), shape)
                return probe.replace_boxed(value)
        value = init(rng, flat_shape, dtype)
        if isinstance(value, meta.AxisMetadata):
            return meta.replace_boxed(value, jnp.reshape(value.unbox(), shape))
        return jnp.reshape(value, shape)

    return wrapped


class DenseGeneral(Module):
    """A linear map that contracts one or more input axes into one or more feature axes.

    The axes listed in ``axis`` are summed against a kernel and replaced, at the end of the
    output, by the axes of ``features``; other axes pass through. Axes in ``batch_dims``
    are leading axes that get a separate kernel (and bias) for each of their indices. The
    kernel has shape ``(*batch, *contracted, *features)`` and the bias
    ``(*batch, *features)``; both are drawn by their initializers as if they were a flat
    matrix (and vector), then reshaped, so the fan-in and fan-out seen by variance-scaling
    initializers are the products of the contracted and feature sizes.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.DenseGeneral(features=(2, 3), axis=(-2, -1))
    >>> x = jnp.ones((5, 4, 6))
    >>> variables = layer.init(jax.random.key(0), x)
    >>> variables["params"]["kernel"].shape
    (4, 6, 2, 3)
    >>> layer.apply(variables, x).shape
    (5, 2, 3)

    Attributes:
        features: the size of the output feature axis, or a tuple of sizes for several
            output feature axes.
        axis: the input axis, or tuple of axes, to contract (default ``-1``, the last).
        batch_dims: leading input axes that index separate kernels; they must be
            ``0, 1, ..., k`` (default ``()``: one kernel shared by every position).
        use_bias: whether to add a learned bias (default ``True``).
        dtype: the dtype the computation runs in. ``None`` (the default) lets
            ``promote_dtype`` choose the common dtype of the inputs and the parameters.
        param_dtype: the dtype the parameters are created in (default ``float32``).
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        precision: the ``jax.lax.Precision`` (or a pair, one per operand) of the
            contraction; ``None`` (the default) uses JAX's default precision.
        promote_dtype: the function that casts the inputs and parameters to one dtype
            before the math, called as ``promote_dtype(*arrays, dtype=dtype)`` (default: this
            package's ``promote_dtype``). Swap it to keep some operand in another dtype.
        dot_general: a replacement for ``jax.lax.dot_general`` with the same signature
            (default ``None``: the standard contraction).
        dot_general_cls: a class whose instance, built with no arguments on each call,
            replaces ``jax.lax.dot_general`` (``Fp8DotGeneralOp`` for instance); it takes
            precedence over ``dot_general``. Default ``None``.
    """

    features: int | Sequence[int]
    axis: int | Sequence[int] = -1
    batch_dims: Sequence[int] = ()
    use_bias: bool = True
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    precision: PrecisionLike = None
    promote_dtype: PromoteDtypeFn = promote_dtype
    dot_general: Any = None
    dot_general_cls: Any = None

    @compact
    def __call__(self, inputs: Array) -> Array:
        """Apply the map.

        Args:
            inputs: an array with the axes in ``axis`` and ``batch_dims``.

        Returns:
            The input's remaining axes followed by the ``features`` axes, with the batch
            axes first.
        """
        features = _as_tuple(self.features)
        batch_dims = _as_tuple(self.batch_dims)
        if batch_dims and set(batch_dims) != set(range(max(batch_dims) + 1)):
            raise ValueError(
                f"batch_dims {batch_dims} must be consecutive leading dimensions starting from 0."
            )
        ndim = inputs.ndim
        axis = tuple(sorted(a % ndim for a in _as_tuple(self.axis)))
        batch = tuple(sorted(a % ndim for a in batch_dims))
        n_batch, n_axis, n_feat = len(batch), len(axis), len(features)
        batch_shape = tuple(inputs.shape[a] for a in batch)

        def kernel_flat(shape: tuple[int, ...]) -> tuple[int, ...]:
            lead = np.prod(shape[:n_batch]) * np.prod(shape[n_batch : n_batch + n_axis])
            return (int(lead), int(np.prod(shape[-n_feat:])))

        kernel_shape = batch_shape + tuple(inputs.shape[a] for a in axis) + features
        kernel = self.param(
            "kernel",
            _reshaping_init(self.kernel_init, kernel_flat),
            kernel_shape,
            self.param_dtype,
        )
        bias = None
        if self.use_bias:

            def bias_flat(shape: tuple[int, ...]) -> tuple[int, ...]:
                return (int(np.prod(shape[:n_batch]) * np.prod(shape[-n_feat:])),)

            bias = self.param(
                "bias",
                _reshaping_init(self.bias_init, bias_flat),
                batch_shape + features,
                self.param_dtype,
            )
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        dot_general = _pick(self.dot_general, self.dot_general_cls)
        return (_traced.dense_general if dot_general is None else F.dense_general)(
            inputs,
            kernel,
            bias,
            axis=axis,
            batch_dims=batch,
            precision=self.precision,
            dot_general=dot_general,
        )


class Dense(Module):
    """A fully connected layer acting on the last axis: ``inputs @ kernel + bias``.

    The kernel has shape ``(in_features, features)``, where ``in_features`` is the size of
    the input's last axis (read on the first call), and the bias ``(features,)``. All
    leading axes are treated as batch axes.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.Dense(features=3)
    >>> x = jnp.ones((2, 4))
    >>> variables = layer.init(jax.random.key(0), x)
    >>> variables["params"]["kernel"].shape, variables["params"]["bias"].shape
    ((4, 3), (3,))
    >>> layer.apply(variables, x).shape
    (2, 3)

    Attributes:
        features: the size of the output's last axis.
        use_bias: whether to add a learned bias (default ``True``).
        dtype: the dtype the computation runs in. ``None`` (the default) lets
            ``promote_dtype`` choose the common dtype of the inputs and the parameters.
        param_dtype: the dtype the parameters are created in (default ``float32``).
        precision: the ``jax.lax.Precision`` (or a pair, one per operand) of the
            contraction; ``None`` (the default) uses JAX's default precision.
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        promote_dtype: the function that casts the inputs and parameters to one dtype
            before the math, called as ``promote_dtype(*arrays, dtype=dtype)`` (default: this
            package's ``promote_dtype``). Swap it to keep some operand in another dtype.
        dot_general: a replacement for ``jax.lax.dot_general`` with the same signature
            (default ``None``: the standard contraction).
        dot_general_cls: a class whose instance, built with no arguments on each call,
            replaces ``jax.lax.dot_general`` (``Fp8DotGeneralOp`` for instance); it takes
            precedence over ``dot_general``. Default ``None``.
    """

    features: int
    use_bias: bool = True
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    promote_dtype: PromoteDtypeFn = promote_dtype
    dot_general: Any = None
    dot_general_cls: Any = None

    @compact
    def __call__(self, inputs: Array) -> Array:
        """Apply the layer.

        Args:
            inputs: an array of shape ``(..., in_features)``.

        Returns:
            An array of shape ``(..., features)``.
        """
        kernel = self.param(
            "kernel", self.kernel_init, (jnp.shape(inputs)[-1], self.features), self.param_dtype
        )
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        dot_general = _pick(self.dot_general, self.dot_general_cls)
        return (_traced.dense_general if dot_general is None else F.dense_general)(
            inputs,
            kernel,
            bias,
            axis=-1,
            precision=self.precision,
            dot_general=dot_general,
        )


class Einsum(Module):
    """A learned ``jnp.einsum`` between the input and a kernel, plus a bias.

    Computes ``einsum(einsum_str, inputs, kernel) + bias``. The kernel has the shape given
    by ``shape``; the bias spans the output axes whose letters come from the kernel's
    subscripts (in the order they appear in the output). The equation must be explicit
    (contain ``'->'``) and have exactly two operands, and it is given either as an
    attribute or as a call argument, not both.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.Einsum(shape=(4, 3, 5), einsum_str="abc,cde->abde")
    >>> x = jnp.ones((2, 6, 4))
    >>> variables = layer.init(jax.random.key(0), x)
    >>> variables["params"]["bias"].shape
    (3, 5)
    >>> layer.apply(variables, x).shape
    (2, 6, 3, 5)

    Attributes:
        shape: the shape of the kernel, one size per letter of the kernel's subscripts.
        einsum_str: the equation, e.g. ``'btd,dh->bth'``; ``None`` (the default) means it
            is passed at call time instead.
        use_bias: whether to add a learned bias (default ``True``).
        dtype: the dtype the computation runs in. ``None`` (the default) lets
            ``promote_dtype`` choose the common dtype of the inputs and the parameters.
        param_dtype: the dtype the parameters are created in (default ``float32``).
        precision: the ``jax.lax.Precision`` (or a pair, one per operand) of the
            contraction; ``None`` (the default) uses JAX's default precision.
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        promote_dtype: the function that casts the inputs and parameters to one dtype
            before the math, called as ``promote_dtype(*arrays, dtype=dtype)`` (default: this
            package's ``promote_dtype``). Swap it to keep some operand in another dtype.
        preferred_element_type: the dtype the einsum accumulates and returns in
            (default ``None``: decided by the operand dtypes).
    """

    shape: Sequence[int]
    einsum_str: str | None = None
    use_bias: bool = True
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    promote_dtype: PromoteDtypeFn = promote_dtype
    preferred_element_type: Dtype | None = None

    @compact
    def __call__(self, inputs: Array, einsum_str: str | None = None) -> Array:
        """Apply the layer.

        Args:
            inputs: the first operand of the equation.
            einsum_str: the equation, when the ``einsum_str`` attribute is ``None``.

        Returns:
            The einsum of ``inputs`` and the kernel, plus the bias.
        """
        einsum_str = merge_param("einsum_str", self.einsum_str, einsum_str)
        assert einsum_str is not None
        einsum_str = einsum_str.replace(" ", "")
        if "->" not in einsum_str:
            raise ValueError('`einsum_str` equation must be explicit and include "->".')
        if einsum_str.count(",") != 1:
            raise ValueError(
                "`einsum_str` equation must have exactly two operands and therefore, exactly "
                f"one comma character, instead of {einsum_str.count(',')}"
            )
        kernel = self.param("kernel", self.kernel_init, tuple(self.shape), self.param_dtype)
        bias = None
        if self.use_bias:
            bias_shape, _ = F.einsum_bias_shape(einsum_str, inputs.shape, tuple(self.shape))
            bias = self.param("bias", self.bias_init, bias_shape, self.param_dtype)
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        return F.einsum_dense(
            inputs,
            kernel,
            bias,
            equation=einsum_str,
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
        )


def canonicalize_padding(padding: PaddingLike, rank: int) -> Any:
    """Padding as ``lax`` takes it: a string unchanged, an int on both sides of every
    axis, or ``rank`` entries each an int or a ``(low, high)`` pair (NumPy integers
    included). The numbers are read by ``pytreemod.nn.functional.canonicalize_padding``."""
    if isinstance(padding, str):
        return padding
    try:
        return F.canonicalize_padding(padding, rank)
    except (ValueError, TypeError):
        raise ValueError(
            f"Invalid padding format: {padding}, should be str, int, or a sequence of len "
            f"{rank} where each element is an int or pair of ints."
        ) from None


def _kernel_size(kernel_size: int | Sequence[int]) -> tuple[int, ...]:
    return (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size)


def _check_mask(mask: Any, kernel_shape: tuple[int, ...]) -> None:
    if mask is not None and mask.shape != kernel_shape:
        raise ValueError(
            "Mask needs to have the same shape as weights. "
            f"Shapes are: {mask.shape}, {kernel_shape}"
        )


def _padding(module_padding: PaddingLike, rank: int) -> Any:
    pad = canonicalize_padding(module_padding, rank)
    return pad.upper() if isinstance(pad, str) else pad


class _Conv(Module):
    """A convolution over ``(*batch, *spatial, features)`` inputs (``Conv``,
    ``ConvLocal``)."""

    features: int
    kernel_size: int | Sequence[int]
    strides: int | Sequence[int] | None = 1
    padding: PaddingLike = "SAME"
    input_dilation: int | Sequence[int] | None = 1
    kernel_dilation: int | Sequence[int] | None = 1
    feature_group_count: int = 1
    use_bias: bool = True
    mask: Array | None = None
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    promote_dtype: PromoteDtypeFn = promote_dtype
    conv_general_dilated: Any = None
    conv_general_dilated_cls: Any = None

    @property
    def shared_weights(self) -> bool:
        """Whether one kernel is shared by every position (``Conv``) or not (``ConvLocal``)."""
        raise NotImplementedError

    @compact
    def __call__(self, inputs: Array) -> Array:
        """Convolve ``inputs``.

        Args:
            inputs: an array ``(*batch, *spatial, in_features)`` with
                ``len(kernel_size)`` spatial axes.

        Returns:
            An array ``(*batch, *out_spatial, features)``.
        """
        kernel_size = _kernel_size(self.kernel_size)
        padding = _padding(self.padding, len(kernel_size))
        in_features = jnp.shape(inputs)[-1]
        options: dict[str, Any] = dict(  # None means 1, as in Flax
            strides=1 if self.strides is None else self.strides,
            padding=padding,
            input_dilation=1 if self.input_dilation is None else self.input_dilation,
            kernel_dilation=1 if self.kernel_dilation is None else self.kernel_dilation,
        )
        if self.shared_weights:
            assert in_features % self.feature_group_count == 0
            kernel_shape = (*kernel_size, in_features // self.feature_group_count, self.features)
            bias_shape: tuple[int, ...] = (self.features,)
        else:
            if self.feature_group_count != 1:
                raise NotImplementedError(
                    "`lax.conv_general_dilated_local` does not support "
                    f"`feature_group_count != 1`, got `{self.feature_group_count}`."
                )
            flat = (1, *inputs.shape[inputs.ndim - len(kernel_size) - 1 :])
            kernel_shape, bias_shape = F.conv_local_shapes(
                flat, kernel_size, self.features, **options
            )
        _check_mask(self.mask, kernel_shape)
        kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
        if self.mask is not None:
            kernel = kernel * self.mask
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, bias_shape, self.param_dtype)
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        if not self.shared_weights:
            return F.conv_local(
                inputs,
                kernel,
                bias,
                kernel_size=kernel_size,
                precision=self.precision,
                **options,
            )
        conv_general_dilated = _pick(self.conv_general_dilated, self.conv_general_dilated_cls)
        return (_traced.conv if conv_general_dilated is None else F.conv)(
            inputs,
            kernel,
            bias,
            feature_group_count=self.feature_group_count,
            precision=self.precision,
            conv_general_dilated=conv_general_dilated,
            **options,
        )


class Conv(_Conv):
    """An N-dimensional convolution with one kernel shared by every position.

    N is ``len(kernel_size)``. Inputs are channels-last, ``(*batch, *spatial, in_features)``
    with N spatial axes and any number of batch axes (none included). The kernel has shape
    ``(*kernel_size, in_features // feature_group_count, features)`` and the bias
    ``(features,)``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.Conv(features=8, kernel_size=(3, 3), strides=2, padding="VALID")
    >>> x = jnp.ones((2, 16, 16, 3))
    >>> variables = layer.init(jax.random.key(0), x)
    >>> variables["params"]["kernel"].shape
    (3, 3, 3, 8)
    >>> layer.apply(variables, x).shape
    (2, 7, 7, 8)

    Attributes:
        features: the number of output features (the size of the output's last axis).
        kernel_size: the window size, one int per spatial axis; a bare int means a 1-D
            convolution with that window.
        strides: the step between windows, an int for every spatial axis or one per axis
            (default ``1``; ``None`` also means 1).
        padding: ``'SAME'`` (the default: output spatial size ``ceil(size / stride)``),
            ``'VALID'`` (no padding), ``'CIRCULAR'`` (periodic wrap), ``'REFLECT'``,
            ``'CAUSAL'`` (1-D only: all the padding on the left), an int padding every side
            by that amount, or one int or ``(low, high)`` pair per spatial axis.
        input_dilation: the spacing inserted between input elements, an int or one per
            spatial axis (default ``1``: none; ``None`` also means 1). A value ``d > 1``
            upsamples the input, as in a transposed convolution.
        kernel_dilation: the spacing between kernel taps (atrous convolution), an int or
            one per spatial axis (default ``1``; ``None`` also means 1).
        feature_group_count: split the input features into this many groups, each
            convolved with its own slice of the kernel (default ``1``); it must divide the
            input feature count, and equal it for a depthwise convolution.
        use_bias: whether to add a learned bias (default ``True``).
        mask: an optional array of the kernel's shape multiplied into the kernel before
            use, e.g. to zero some taps (default ``None``).
        dtype: the dtype the computation runs in. ``None`` (the default) lets
            ``promote_dtype`` choose the common dtype of the inputs and the parameters.
        param_dtype: the dtype the parameters are created in (default ``float32``).
        precision: the ``jax.lax.Precision`` (or a pair, one per operand) of the
            contraction; ``None`` (the default) uses JAX's default precision.
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        promote_dtype: the function that casts the inputs and parameters to one dtype
            before the math, called as ``promote_dtype(*arrays, dtype=dtype)`` (default: this
            package's ``promote_dtype``). Swap it to keep some operand in another dtype.
        conv_general_dilated: a replacement for ``jax.lax.conv_general_dilated`` with the
            same signature (default ``None``: the standard convolution).
        conv_general_dilated_cls: a class whose instance, built with no arguments on each
            call, replaces ``jax.lax.conv_general_dilated``; it takes precedence over
            ``conv_general_dilated``. Default ``None``.
    """

    @property
    def shared_weights(self) -> bool:
        """``True``: one kernel for every position."""
        return True


class ConvLocal(_Conv):
    """A locally connected layer: a convolution whose kernel differs at every position.

    It slides a window like ``Conv`` but learns separate weights for each output position,
    so the parameters depend on the input's spatial size, fixed by the first call. The
    kernel has shape ``(*out_spatial, prod(kernel_size) * in_features, features)`` and the
    bias ``(*out_spatial, features)``. Inputs are ``(*batch, *spatial, in_features)``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.ConvLocal(features=8, kernel_size=(3, 3))
    >>> x = jnp.ones((2, 16, 16, 3))
    >>> variables = layer.init(jax.random.key(0), x)
    >>> variables["params"]["kernel"].shape
    (16, 16, 27, 8)
    >>> layer.apply(variables, x).shape
    (2, 16, 16, 8)

    Attributes:
        features: the number of output features.
        kernel_size: the window size, one int per spatial axis (a bare int means 1-D).
        strides: the step between windows, as in ``Conv`` (default ``1``).
        padding: as in ``Conv`` (default ``'SAME'``).
        input_dilation: the spacing inserted between input elements, as in ``Conv``
            (default ``1``).
        kernel_dilation: the spacing between kernel taps, as in ``Conv`` (default ``1``).
        feature_group_count: must stay ``1`` (the default): grouped local convolutions
            are not supported.
        use_bias: whether to add a learned bias (default ``True``).
        mask: an optional array of the kernel's shape multiplied into the kernel.
        dtype: the computation dtype (default ``None``: promoted from the operands).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        precision: the ``jax.lax.Precision`` of the computation (default ``None``).
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        promote_dtype: the dtype-promotion function, as in ``Conv``.
        conv_general_dilated: accepted for symmetry with ``Conv``; unused here.
        conv_general_dilated_cls: accepted for symmetry with ``Conv``; unused here.
    """

    @property
    def shared_weights(self) -> bool:
        """``False``: one kernel per output position."""
        return False


class ConvTranspose(Module):
    """A transposed ("fractionally strided") convolution, as ``jax.lax.conv_transpose``.

    Each stride inserts spacing between input positions, so ``strides`` upsample the
    spatial axes (with ``'SAME'`` padding the output size is ``size * stride``). Inputs
    are ``(*batch, *spatial, in_features)``. The kernel has shape
    ``(*kernel_size, in_features, features)``, or ``(*kernel_size, features,
    in_features)`` with ``transpose_kernel=True``; the bias ``(features,)``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.ConvTranspose(features=8, kernel_size=(3, 3), strides=(2, 2))
    >>> x = jnp.ones((2, 16, 16, 3))
    >>> variables = layer.init(jax.random.key(0), x)
    >>> layer.apply(variables, x).shape
    (2, 32, 32, 8)

    Attributes:
        features: the number of output features (the size of the output's last axis).
        kernel_size: the window size, one int per spatial axis; a bare int means 1-D.
        strides: the upsampling step, an int or one per spatial axis (default ``None``:
            1).
        padding: ``'SAME'`` (the default), ``'VALID'``, ``'CIRCULAR'`` (the output is
            wrapped periodically, the transpose of a circular convolution), an int for
            every side, or one int or ``(low, high)`` pair per spatial axis.
        kernel_dilation: the spacing between kernel taps, an int or one per spatial axis
            (default ``None``: 1).
        use_bias: whether to add a learned bias (default ``True``).
        mask: an optional array of the kernel's shape multiplied into the kernel before
            use (default ``None``).
        dtype: the dtype the computation runs in. ``None`` (the default) lets
            ``promote_dtype`` choose the common dtype of the inputs and the parameters.
        param_dtype: the dtype the parameters are created in (default ``float32``).
        precision: the ``jax.lax.Precision`` (or a pair, one per operand) of the
            contraction; ``None`` (the default) uses JAX's default precision.
        kernel_init: initializer of the kernel (default ``lecun_normal()``).
        bias_init: initializer of the bias (default zeros).
        transpose_kernel: flip the kernel's spatial axes and swap its two feature axes,
            so the layer computes the exact gradient of a ``Conv`` with that kernel
            (default ``False``).
        promote_dtype: the function that casts the inputs and parameters to one dtype
            before the math, called as ``promote_dtype(*arrays, dtype=dtype)`` (default: this
            package's ``promote_dtype``). Swap it to keep some operand in another dtype.
        preferred_element_type: the dtype the convolution accumulates and returns in
            (default ``None``: decided by the operand dtypes).
    """

    features: int
    kernel_size: int | Sequence[int]
    strides: Sequence[int] | None = None
    padding: PaddingLike = "SAME"
    kernel_dilation: Sequence[int] | None = None
    use_bias: bool = True
    mask: Array | None = None
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    transpose_kernel: bool = False
    promote_dtype: PromoteDtypeFn = promote_dtype
    preferred_element_type: Dtype | None = None

    @compact
    def __call__(self, inputs: Array) -> Array:
        """Apply the transposed convolution.

        Args:
            inputs: an array ``(*batch, *spatial, in_features)`` with
                ``len(kernel_size)`` spatial axes.

        Returns:
            An array ``(*batch, *out_spatial, features)``.
        """
        kernel_size = _kernel_size(self.kernel_size)
        in_features = jnp.shape(inputs)[-1]
        if self.transpose_kernel:
            kernel_shape = (*kernel_size, self.features, in_features)
        else:
            kernel_shape = (*kernel_size, in_features, self.features)
        _check_mask(self.mask, kernel_shape)
        kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
        if self.mask is not None:
            kernel = kernel * self.mask
        padding = _padding(self.padding, len(kernel_size))
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        return _traced.conv_transpose(
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
    """A lookup table mapping integer ids to learned vectors.

    The table is the parameter ``embedding`` of shape ``(num_embeddings, features)``.
    Calling the layer gathers rows by id; ``attend`` goes the other way, scoring a
    query vector against every row (as in a language model's tied output layer).

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.Embed(num_embeddings=10, features=4)
    >>> ids = jnp.array([[1, 2, 3]])
    >>> variables = layer.init(jax.random.key(0), ids)
    >>> layer.apply(variables, ids).shape
    (1, 3, 4)
    >>> layer.apply(variables, jnp.ones((2, 4)), method=layer.attend).shape
    (2, 10)

    Attributes:
        num_embeddings: the number of rows (the vocabulary size); ids must lie in
            ``[0, num_embeddings)``.
        features: the length of each embedding vector.
        dtype: the dtype of the looked-up vectors and of ``attend``'s computation
            (default ``None``: the table's dtype, promoted with the query in ``attend``).
        param_dtype: the dtype the table is created in (default ``float32``).
        embedding_init: initializer of the table (default
            ``variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)``: normal entries of
            variance ``1 / features``).
        promote_dtype: the function that casts the inputs and parameters to one dtype
            before the math, called as ``promote_dtype(*arrays, dtype=dtype)`` (default: this
            package's ``promote_dtype``). Swap it to keep some operand in another dtype.
    """

    num_embeddings: int
    features: int
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    embedding_init: Initializer = default_embed_init
    promote_dtype: PromoteDtypeFn = promote_dtype

    def setup(self) -> None:
        self.embedding: jax.Array = self.param(
            "embedding",
            self.embedding_init,
            (self.num_embeddings, self.features),
            self.param_dtype,
        )

    def __call__(self, inputs: Array) -> Array:
        """Look up embeddings.

        Args:
            inputs: an integer array of ids, any shape.

        Returns:
            An array of shape ``(*inputs.shape, features)``.
        """
        if not jnp.issubdtype(inputs.dtype, jnp.integer):
            raise ValueError("Input type must be an integer or unsigned integer.")
        (embedding,) = self.promote_dtype(self.embedding, dtype=self.dtype, inexact=False)
        return F.embed(inputs, embedding)

    def attend(self, query: Array) -> Array:
        """Score a query against every embedding: ``query @ embedding.T``.

        Args:
            query: an array of shape ``(..., features)``.

        Returns:
            Logits of shape ``(..., num_embeddings)``.
        """
        query, embedding = self.promote_dtype(query, self.embedding, dtype=self.dtype)
        return F.attend(query, embedding)
