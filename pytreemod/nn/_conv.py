"""``Conv`` (``Conv1d``/``Conv2d``/``Conv3d``) and ``ConvTranspose`` (and its 1-3 D forms)."""

from collections.abc import Sequence
from typing import Any, Required, TypedDict, Unpack

import jax
import jax.numpy as jnp
from jaxtyping import Float

from .._errors import LayerConfigError
from .._module import Module, field
from .._shapecheck import AnyArray, checked
from .._trace_cache import trace_once
from .._variables import Param
from . import _ops_conv as F
from ._init import (
    Initializer,
    bias_value,
    default_bias_init,
    default_kernel_init,
    kernel_bias_keys,
)
from ._ops_common import as_tuple, var_value
from ._ops_conv import PaddingLike
from ._validate import layer_args, nonempty_output, positive_ints


def _kernel_size(
    kernel_size: int | Sequence[int], num_spatial_dims: int | None, owner: str = "Conv"
) -> tuple[int, ...]:
    if isinstance(kernel_size, int):
        if num_spatial_dims is None:
            raise LayerConfigError(
                f"kernel_size={kernel_size} is a single int, so the number of spatial "
                "dimensions is unknown: pass num_spatial_dims=..., a tuple kernel_size, or "
                "use Conv1d/Conv2d/Conv3d."
            )
        positive_ints(owner, "kernel_size", kernel_size)
        return (kernel_size,) * num_spatial_dims
    size = positive_ints(owner, "kernel_size", kernel_size, allow_int=False)
    if num_spatial_dims is not None and len(size) != num_spatial_dims:
        raise LayerConfigError(
            f"kernel_size={size} has {len(size)} entries but num_spatial_dims={num_spatial_dims}."
        )
    return size


def _padding(padding: PaddingLike) -> Any:
    # Static fields must be hashable: lists of pairs become tuples of pairs.
    if isinstance(padding, (str, int)):
        return padding
    return tuple(p if isinstance(p, int) else tuple(p) for p in padding)


class ConvOptions(TypedDict, total=False):
    """Keyword arguments of ``Conv1d``/``Conv2d``/``Conv3d`` (see ``Conv``)."""

    strides: int | Sequence[int]
    padding: PaddingLike
    input_dilation: int | Sequence[int]
    kernel_dilation: int | Sequence[int]
    feature_group_count: int
    use_bias: bool
    dtype: Any
    param_dtype: Any
    precision: Any
    kernel_init: Initializer
    bias_init: Initializer
    key: Required[jax.Array]


class ConvTransposeOptions(TypedDict, total=False):
    """Keyword arguments of ``ConvTranspose1d``/``2d``/``3d`` (see ``ConvTranspose``)."""

    strides: int | Sequence[int]
    padding: PaddingLike
    kernel_dilation: int | Sequence[int]
    transpose_kernel: bool
    use_bias: bool
    dtype: Any
    param_dtype: Any
    precision: Any
    kernel_init: Initializer
    bias_init: Initializer
    key: Required[jax.Array]


class Conv(Module, typecheck=True):
    """An N-dimensional convolution, channels last (Flax ``Conv``).

    **Arguments:**

    - ``in_features``, ``out_features``: input and output channels.
    - ``kernel_size``: an int (with ``num_spatial_dims``) or one size per spatial axis.
    - ``num_spatial_dims``: 1, 2 or 3 (default: ``len(kernel_size)``); ``Conv1d``,
      ``Conv2d``, ``Conv3d`` fix it.
    - ``strides`` (default 1), ``input_dilation`` (default 1; ``d`` is a transposed
      convolution with stride ``d``), ``kernel_dilation`` (default 1; atrous): an int or
      one per spatial axis.
    - ``padding``: ``"SAME"`` (default), ``"VALID"``, ``"CIRCULAR"`` (periodic),
      ``"REFLECT"``, ``"CAUSAL"`` (1-D), an int, or one int or ``(low, high)`` pair per
      spatial axis.
    - ``feature_group_count``: channel groups (default 1; ``in_features`` for depthwise).
    - ``use_bias`` (default ``True``), ``dtype`` (default ``None``: inferred),
      ``param_dtype`` (default ``float32``), ``precision`` (default ``None``).
    - ``kernel_init``: default ``lecun_normal()`` (Flax's Conv default); ``bias_init``:
      default ``zeros``.
    - ``key``: PRNG key (keyword-only).

    **Parameters:** ``kernel`` ``(*kernel_size, in_features // feature_group_count,
    out_features)`` and ``bias`` ``(out_features,)``: Flax's layout and names.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> conv = pm.nn.Conv(3, 8, (3, 3), strides=2, key=jax.random.key(0))
    >>> conv.kernel.shape          # (*kernel_size, in_features, out_features)
    (3, 3, 3, 8)
    >>> x = jnp.ones((2, 16, 16, 3))  # (*batch, height, width, in_features)
    >>> conv(x).shape              # (*batch, height / 2, width / 2, out_features)
    (2, 8, 8, 8)
    """

    kernel: Param[jax.Array]
    bias: Param[jax.Array] | None
    in_features: int = field(static=True)
    out_features: int = field(static=True)
    kernel_size: tuple[int, ...] = field(static=True)
    strides: tuple[int, ...] = field(static=True)
    padding: Any = field(static=True)
    input_dilation: tuple[int, ...] = field(static=True, repr=False)
    kernel_dilation: tuple[int, ...] = field(static=True, repr=False)
    feature_group_count: int = field(static=True, repr=False)
    dtype: Any = field(static=True, default=None, repr=False)
    precision: Any = field(static=True, default=None, repr=False)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        *,
        num_spatial_dims: int | None = None,
        strides: int | Sequence[int] = 1,
        padding: PaddingLike = "SAME",
        input_dilation: int | Sequence[int] = 1,
        kernel_dilation: int | Sequence[int] = 1,
        feature_group_count: int = 1,
        use_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        key: jax.Array,
    ):
        layer_args(
            "Conv",
            sizes={
                "in_features": in_features,
                "out_features": out_features,
                "feature_group_count": feature_group_count,
            },
            key=key,
            dtype=dtype,
            param_dtype=param_dtype,
            fns={"kernel_init": kernel_init, "bias_init": bias_init},
        )
        size = _kernel_size(kernel_size, num_spatial_dims)
        n = len(size)
        if in_features % feature_group_count or out_features % feature_group_count:
            raise LayerConfigError(
                f"Conv: in_features={in_features} and out_features={out_features} must both "
                f"be divisible by feature_group_count={feature_group_count}."
            )
        # Check every setting before spending time on initialisation.
        F.canonicalize_padding(padding, n)
        self.strides = as_tuple(strides, n, "strides", "Conv")
        self.input_dilation = as_tuple(input_dilation, n, "input_dilation", "Conv")
        self.kernel_dilation = as_tuple(kernel_dilation, n, "kernel_dilation", "Conv")
        kkey, bkey = kernel_bias_keys(key, bias_init, use_bias)
        shape = (*size, in_features // feature_group_count, out_features)
        self.kernel = Param(kernel_init(kkey, shape, param_dtype))
        self.bias = (
            Param(bias_value(bias_init, bkey, (out_features,), param_dtype)) if use_bias else None
        )
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = size
        self.padding = _padding(padding)
        self.feature_group_count = feature_group_count
        self.dtype = dtype
        self.precision = precision

    @trace_once
    @checked
    def __call__(
        self, x: Float[AnyArray, "*batch_and_spatial in_features"], *, out_sharding: Any = None
    ) -> Float[jax.Array, "*batch_and_spatial_out out_features"]:
        """Convolve ``x`` of shape ``(*batch, *spatial, in_features)``; ``out_sharding``:
        the output's sharding (default: derived on an Explicit mesh, see docs/sharding.md)."""
        y = F.conv(
            x,
            var_value(self.kernel),
            var_value(self.bias),
            strides=self.strides,
            padding=self.padding,
            input_dilation=self.input_dilation,
            kernel_dilation=self.kernel_dilation,
            feature_group_count=self.feature_group_count,
            dtype=self.dtype,
            precision=self.precision,
            out_sharding=out_sharding,
        )
        return nonempty_output("conv", x, y, "kernel")


class Conv1d(Conv):
    """``Conv`` with one spatial axis: input ``(*batch, length, in_features)``.

    **Arguments:** (``Conv``'s, with ``num_spatial_dims=1``)

    - ``in_features``, ``out_features``: input and output channels.
    - ``kernel_size``: an int (the same size on each of the 1 spatial axes) or 1
      sizes.
    - ``strides`` (default 1), ``input_dilation`` (default 1), ``kernel_dilation``
      (default 1): an int or one per spatial axis.
    - ``padding``: ``"SAME"`` (default), ``"VALID"``, ``"CIRCULAR"``, ``"REFLECT"``,
      ``"CAUSAL"``, an int, or one int or ``(low, high)`` pair per spatial axis.
    - ``feature_group_count``: channel groups (default 1; ``in_features`` for depthwise).
    - ``use_bias`` (default ``True``), ``dtype`` (default ``None``: inferred),
      ``param_dtype`` (default ``float32``), ``precision`` (default ``None``).
    - ``kernel_init`` (default ``lecun_normal()``), ``bias_init`` (default ``zeros``).
    - ``key``: PRNG key (keyword-only, required).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> conv = pm.nn.Conv1d(4, 8, 3, padding="CAUSAL", key=jax.random.key(0))
    >>> conv(jnp.ones((2, 10, 4))).shape  # (batch, length, in) -> (batch, length, out)
    (2, 10, 8)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        **kwargs: Unpack[ConvOptions],
    ):
        super().__init__(in_features, out_features, kernel_size, num_spatial_dims=1, **kwargs)


class Conv2d(Conv):
    """``Conv`` with two spatial axes: input ``(*batch, height, width, in_features)``.

    **Arguments:** (``Conv``'s, with ``num_spatial_dims=2``)

    - ``in_features``, ``out_features``: input and output channels.
    - ``kernel_size``: an int (the same size on each of the 2 spatial axes) or 2
      sizes.
    - ``strides`` (default 1), ``input_dilation`` (default 1), ``kernel_dilation``
      (default 1): an int or one per spatial axis.
    - ``padding``: ``"SAME"`` (default), ``"VALID"``, ``"CIRCULAR"``, ``"REFLECT"``,
      an int, or one int or ``(low, high)`` pair per spatial axis.
    - ``feature_group_count``: channel groups (default 1; ``in_features`` for depthwise).
    - ``use_bias`` (default ``True``), ``dtype`` (default ``None``: inferred),
      ``param_dtype`` (default ``float32``), ``precision`` (default ``None``).
    - ``kernel_init`` (default ``lecun_normal()``), ``bias_init`` (default ``zeros``).
    - ``key``: PRNG key (keyword-only, required).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> conv = pm.nn.Conv2d(3, 8, 3, padding="VALID", key=jax.random.key(0))
    >>> conv(jnp.ones((2, 16, 16, 3))).shape  # (batch, h, w, in) -> (batch, h-2, w-2, out)
    (2, 14, 14, 8)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        **kwargs: Unpack[ConvOptions],
    ):
        super().__init__(in_features, out_features, kernel_size, num_spatial_dims=2, **kwargs)


class Conv3d(Conv):
    """``Conv`` with three spatial axes: input ``(*batch, depth, height, width, in)``.

    **Arguments:** (``Conv``'s, with ``num_spatial_dims=3``)

    - ``in_features``, ``out_features``: input and output channels.
    - ``kernel_size``: an int (the same size on each of the 3 spatial axes) or 3
      sizes.
    - ``strides`` (default 1), ``input_dilation`` (default 1), ``kernel_dilation``
      (default 1): an int or one per spatial axis.
    - ``padding``: ``"SAME"`` (default), ``"VALID"``, ``"CIRCULAR"``, ``"REFLECT"``,
      an int, or one int or ``(low, high)`` pair per spatial axis.
    - ``feature_group_count``: channel groups (default 1; ``in_features`` for depthwise).
    - ``use_bias`` (default ``True``), ``dtype`` (default ``None``: inferred),
      ``param_dtype`` (default ``float32``), ``precision`` (default ``None``).
    - ``kernel_init`` (default ``lecun_normal()``), ``bias_init`` (default ``zeros``).
    - ``key``: PRNG key (keyword-only, required).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> conv = pm.nn.Conv3d(1, 4, 2, key=jax.random.key(0))
    >>> conv(jnp.ones((2, 4, 4, 4, 1))).shape  # (batch, d, h, w, in) -> (..., out)
    (2, 4, 4, 4, 4)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        **kwargs: Unpack[ConvOptions],
    ):
        super().__init__(in_features, out_features, kernel_size, num_spatial_dims=3, **kwargs)


class ConvTranspose(Module, typecheck=True):
    """A transposed ("fractionally strided") convolution, channels last (Flax
    ``ConvTranspose``): with ``strides=s`` it upsamples by ``s``.

    **Arguments:** as ``Conv`` (no input dilation or groups), plus ``transpose_kernel``
    (default ``False``): store the kernel as ``(*kernel_size, out_features, in_features)``
    and flip it, so that the kernel of a ``Conv`` gives that convolution's transpose.
    ``padding``: ``"SAME"`` (default), ``"VALID"``, ``"CIRCULAR"`` or explicit pairs.
    Defaults: ``lecun_normal()`` kernel, zero bias (Flax's).

    **Parameters:** ``kernel`` ``(*kernel_size, in_features, out_features)`` and ``bias``
    ``(out_features,)``.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> up = pm.nn.ConvTranspose(3, 8, (3, 3), strides=2, key=jax.random.key(0))
    >>> x = jnp.ones((2, 8, 8, 3))  # (*batch, height, width, in_features)
    >>> up(x).shape                 # (*batch, 2 height, 2 width, out_features)
    (2, 16, 16, 8)
    """

    kernel: Param[jax.Array]
    bias: Param[jax.Array] | None
    in_features: int = field(static=True)
    out_features: int = field(static=True)
    kernel_size: tuple[int, ...] = field(static=True)
    strides: tuple[int, ...] = field(static=True)
    padding: Any = field(static=True)
    kernel_dilation: tuple[int, ...] = field(static=True, repr=False)
    transpose_kernel: bool = field(static=True, repr=False)
    dtype: Any = field(static=True, default=None, repr=False)
    precision: Any = field(static=True, default=None, repr=False)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        *,
        num_spatial_dims: int | None = None,
        strides: int | Sequence[int] = 1,
        padding: PaddingLike = "SAME",
        kernel_dilation: int | Sequence[int] = 1,
        transpose_kernel: bool = False,
        use_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        key: jax.Array,
    ):
        layer_args(
            "ConvTranspose",
            sizes={"in_features": in_features, "out_features": out_features},
            key=key,
            dtype=dtype,
            param_dtype=param_dtype,
            fns={"kernel_init": kernel_init, "bias_init": bias_init},
        )
        size = _kernel_size(kernel_size, num_spatial_dims, "ConvTranspose")
        n = len(size)
        F.canonicalize_padding(padding, n)
        self.strides = as_tuple(strides, n, "strides", "ConvTranspose")
        self.kernel_dilation = as_tuple(kernel_dilation, n, "kernel_dilation", "ConvTranspose")
        kkey, bkey = kernel_bias_keys(key, bias_init, use_bias)
        io = (out_features, in_features) if transpose_kernel else (in_features, out_features)
        self.kernel = Param(kernel_init(kkey, (*size, *io), param_dtype))
        self.bias = (
            Param(bias_value(bias_init, bkey, (out_features,), param_dtype)) if use_bias else None
        )
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = size
        self.padding = _padding(padding)
        self.transpose_kernel = transpose_kernel
        self.dtype = dtype
        self.precision = precision

    @trace_once
    @checked
    def __call__(
        self, x: Float[AnyArray, "*batch_and_spatial in_features"], *, out_sharding: Any = None
    ) -> Float[jax.Array, "*batch_and_spatial_out out_features"]:
        """Transposed-convolve ``x`` of shape ``(*batch, *spatial, in_features)``;
        ``out_sharding``: the output's sharding (default: derived on an Explicit mesh)."""
        return F.conv_transpose(
            x,
            var_value(self.kernel),
            var_value(self.bias),
            strides=self.strides,
            padding=self.padding,
            kernel_dilation=self.kernel_dilation,
            transpose_kernel=self.transpose_kernel,
            dtype=self.dtype,
            precision=self.precision,
            out_sharding=out_sharding,
        )


class ConvTranspose1d(ConvTranspose):
    """``ConvTranspose`` with one spatial axis: input ``(*batch, length, in_features)``.

    **Arguments:** (``ConvTranspose``'s, with ``num_spatial_dims=1``)

    - ``in_features``, ``out_features``: input and output channels.
    - ``kernel_size``: an int (the same size on each of the 1 spatial axes) or 1
      sizes.
    - ``strides`` (default 1; ``s`` upsamples by ``s``), ``kernel_dilation`` (default 1):
      an int or one per spatial axis.
    - ``padding``: ``"SAME"`` (default), ``"VALID"``, ``"CIRCULAR"``, or one
      ``(low, high)`` pair per spatial axis.
    - ``transpose_kernel`` (default ``False``): store the kernel as ``(*kernel_size,
      out_features, in_features)`` and flip it (a ``Conv``'s kernel gives its transpose).
    - ``use_bias`` (default ``True``), ``dtype`` (default ``None``: inferred),
      ``param_dtype`` (default ``float32``), ``precision`` (default ``None``).
    - ``kernel_init`` (default ``lecun_normal()``), ``bias_init`` (default ``zeros``).
    - ``key``: PRNG key (keyword-only, required).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> up = pm.nn.ConvTranspose1d(4, 8, 3, strides=2, key=jax.random.key(0))
    >>> up(jnp.ones((2, 10, 4))).shape  # (batch, length, in) -> (batch, 2 length, out)
    (2, 20, 8)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        **kwargs: Unpack[ConvTransposeOptions],
    ):
        super().__init__(in_features, out_features, kernel_size, num_spatial_dims=1, **kwargs)


class ConvTranspose2d(ConvTranspose):
    """``ConvTranspose`` with two spatial axes: input ``(*batch, height, width, in)``.

    **Arguments:** (``ConvTranspose``'s, with ``num_spatial_dims=2``)

    - ``in_features``, ``out_features``: input and output channels.
    - ``kernel_size``: an int (the same size on each of the 2 spatial axes) or 2
      sizes.
    - ``strides`` (default 1; ``s`` upsamples by ``s``), ``kernel_dilation`` (default 1):
      an int or one per spatial axis.
    - ``padding``: ``"SAME"`` (default), ``"VALID"``, ``"CIRCULAR"``, or one
      ``(low, high)`` pair per spatial axis.
    - ``transpose_kernel`` (default ``False``): store the kernel as ``(*kernel_size,
      out_features, in_features)`` and flip it (a ``Conv``'s kernel gives its transpose).
    - ``use_bias`` (default ``True``), ``dtype`` (default ``None``: inferred),
      ``param_dtype`` (default ``float32``), ``precision`` (default ``None``).
    - ``kernel_init`` (default ``lecun_normal()``), ``bias_init`` (default ``zeros``).
    - ``key``: PRNG key (keyword-only, required).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> up = pm.nn.ConvTranspose2d(3, 8, 3, strides=2, key=jax.random.key(0))
    >>> up(jnp.ones((2, 8, 8, 3))).shape  # (batch, h, w, in) -> (batch, 2h, 2w, out)
    (2, 16, 16, 8)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        **kwargs: Unpack[ConvTransposeOptions],
    ):
        super().__init__(in_features, out_features, kernel_size, num_spatial_dims=2, **kwargs)


class ConvTranspose3d(ConvTranspose):
    """``ConvTranspose`` with three spatial axes: input ``(*batch, d, h, w, in)``.

    **Arguments:** (``ConvTranspose``'s, with ``num_spatial_dims=3``)

    - ``in_features``, ``out_features``: input and output channels.
    - ``kernel_size``: an int (the same size on each of the 3 spatial axes) or 3
      sizes.
    - ``strides`` (default 1; ``s`` upsamples by ``s``), ``kernel_dilation`` (default 1):
      an int or one per spatial axis.
    - ``padding``: ``"SAME"`` (default), ``"VALID"``, ``"CIRCULAR"``, or one
      ``(low, high)`` pair per spatial axis.
    - ``transpose_kernel`` (default ``False``): store the kernel as ``(*kernel_size,
      out_features, in_features)`` and flip it (a ``Conv``'s kernel gives its transpose).
    - ``use_bias`` (default ``True``), ``dtype`` (default ``None``: inferred),
      ``param_dtype`` (default ``float32``), ``precision`` (default ``None``).
    - ``kernel_init`` (default ``lecun_normal()``), ``bias_init`` (default ``zeros``).
    - ``key``: PRNG key (keyword-only, required).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> up = pm.nn.ConvTranspose3d(1, 4, 2, strides=2, key=jax.random.key(0))
    >>> up(jnp.ones((2, 4, 4, 4, 1))).shape  # (batch, d, h, w, in) -> (..., 2d, 2h, 2w, out)
    (2, 8, 8, 8, 4)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        **kwargs: Unpack[ConvTransposeOptions],
    ):
        super().__init__(in_features, out_features, kernel_size, num_spatial_dims=3, **kwargs)
