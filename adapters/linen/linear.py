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
    """A linear map contracting ``axis`` of the input to ``features`` (an int or tuple).

    ``batch_dims`` are leading axes with one kernel per index. The kernel
    ``(*batch, *contracted, *features)`` is initialised as a flat matrix, as Flax does.
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
        """Apply the map to ``inputs``."""
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
    """``inputs @ kernel + bias`` over the last axis: kernel ``(in, features)``, bias
    ``(features,)``; defaults ``lecun_normal()`` and zeros."""

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
        """Apply the layer to ``inputs`` ``(..., in)``."""
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
    """``einsum(einsum_str, inputs, kernel) + bias`` with a kernel of shape ``shape``; the
    bias covers the output axes that come from the kernel. ``einsum_str`` is given here or
    at call time (exactly once) and must be explicit (``'->'``) with two operands."""

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
        """Apply the layer to ``inputs``."""
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
        """Convolve ``inputs``."""
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
    """An N-D convolution (N = ``len(kernel_size)``, an int meaning 1-D), channels last,
    with any number of batch axes. Kernel ``(*kernel_size, in // feature_group_count,
    features)``; ``padding`` ``'SAME'``, ``'VALID'``, ``'CIRCULAR'``, ``'REFLECT'``,
    ``'CAUSAL'`` (1-D), an int or per-axis pairs; ``mask`` multiplies the kernel."""

    @property
    def shared_weights(self) -> bool:
        """``True``: one kernel for every position."""
        return True


class ConvLocal(_Conv):
    """A locally connected (unshared) convolution: kernel ``(*out_spatial,
    prod(kernel_size) * in, features)``, bias ``(*out_spatial, features)``."""

    @property
    def shared_weights(self) -> bool:
        """``False``: one kernel per output position."""
        return False


class ConvTranspose(Module):
    """A transposed convolution (``lax.conv_transpose``): kernel ``(*kernel_size, in,
    features)`` (``(*kernel_size, features, in)`` with ``transpose_kernel``);
    ``padding='CIRCULAR'`` wraps the output periodically."""

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
        """Apply the transposed convolution to ``inputs``."""
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
    """An embedding table ``embedding`` ``(num_embeddings, features)``: ``__call__`` looks
    up integer ids, ``attend(query)`` gives ``query @ embedding.T``. Default init:
    ``variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)``."""

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
        """The embeddings of integer ``inputs``: shape ``(*inputs.shape, features)``."""
        if not jnp.issubdtype(inputs.dtype, jnp.integer):
            raise ValueError("Input type must be an integer or unsigned integer.")
        (embedding,) = self.promote_dtype(self.embedding, dtype=self.dtype, inexact=False)
        return F.embed(inputs, embedding)

    def attend(self, query: Array) -> Array:
        """Logits over the vocabulary: ``query @ embedding.T``."""
        query, embedding = self.promote_dtype(query, self.embedding, dtype=self.dtype)
        return F.attend(query, embedding)
