"""``MultiHeadAttention`` (self and cross attention, masks, a decoding cache) and its
head projections ``ProjectHeads``/``MergeHeads``."""

import math
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.numpy as jnp
from jaxtyping import Float, Shaped

from .._errors import AxisMetadataError, LayerConfigError
from .._meta import AxisMetadata, peel, rebox
from .._module import Module, field
from .._shapecheck import AnyArray, checked
from .._sharding._trees import logical_zeros
from .._trace_cache import trace_once
from .._variables import Cache, Param
from .._where import layer_name
from . import _ops_attention as A
from . import _ops_linear as L
from ._init import (
    Initializer,
    bias_value,
    default_bias_init,
    default_kernel_init,
    kernel_bias_keys,
)
from ._normalization import LayerNorm
from ._ops_common import unboxed, var_value
from ._validate import (
    callable_arg,
    layer_args,
    one_of,
    positive_int,
    positive_ints,
    prng_key,
    probability,
)

if TYPE_CHECKING:
    _Key = jax.Array
else:  # checked by the layer (a LayerConfigError naming its path), not by beartype
    _Key = Any

_MHA = TypeVar("_MHA", bound="MultiHeadAttention")


class ProjectHeads(Module, typecheck=True):
    """Project features to ``(heads, head_dim)`` (Flax ``DenseGeneral(features=(h, d))``).

    **Parameters:** ``kernel`` ``(in_features, heads, head_dim)``, ``bias`` ``(heads,
    head_dim)``. Defaults: ``lecun_normal()`` kernel, zero bias (Flax's). As in Flax, the
    kernel initializer is called with the matrix shape ``(in_features, heads * head_dim)``
    and its result reshaped, so fan-in and fan-out are the real ones.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> proj = pm.nn.ProjectHeads(16, 4, 8, key=jax.random.key(0))
    >>> proj(jnp.ones((2, 5, 16))).shape  # (*batch, in_features) -> (*batch, heads, head_dim)
    (2, 5, 4, 8)
    """

    kernel: Param[jax.Array]
    bias: Param[jax.Array] | None
    dtype: Any = field(static=True, default=None, repr=False)
    precision: Any = field(static=True, default=None, repr=False)

    def __init__(
        self,
        in_features: int,
        heads: int,
        head_dim: int,
        *,
        use_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        key: jax.Array,
    ):
        layer_args(
            "ProjectHeads",
            sizes={"in_features": in_features, "heads": heads, "head_dim": head_dim},
            key=key,
            dtype=dtype,
            param_dtype=param_dtype,
            fns={"kernel_init": kernel_init, "bias_init": bias_init},
        )
        kkey, bkey = kernel_bias_keys(key, bias_init, use_bias)
        shape = (in_features, heads, head_dim)
        self.kernel = Param(_init_flat(kernel_init, kkey, shape, 1, param_dtype))
        self.bias = (
            Param(_init_flat(bias_init, bkey, (heads, head_dim), 2, param_dtype, vector=True))
            if use_bias
            else None
        )
        self.dtype = dtype
        self.precision = precision

    @trace_once
    @checked
    def __call__(
        self, x: Float[AnyArray, "*batch in_features"], *, out_sharding: Any = None
    ) -> Float[jax.Array, "*batch heads head_dim"]:
        """Project ``x`` of shape ``(*batch, in_features)``; ``out_sharding``: the
        output's sharding (default: derived on an Explicit mesh)."""
        return L.project_heads(
            x,
            var_value(self.kernel),
            var_value(self.bias),
            dtype=self.dtype,
            precision=self.precision,
            out_sharding=out_sharding,
        )


class MergeHeads(Module, typecheck=True):
    """Project ``(heads, head_dim)`` back to features (Flax ``DenseGeneral(axis=(-2, -1))``).

    **Parameters:** ``kernel`` ``(heads, head_dim, out_features)``, ``bias``
    ``(out_features,)``. Defaults: ``lecun_normal()`` kernel (fan-in ``heads * head_dim``),
    zero bias.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> merge = pm.nn.MergeHeads(4, 8, 16, key=jax.random.key(0))
    >>> merge(jnp.ones((2, 5, 4, 8))).shape  # (*batch, heads, head_dim) -> (*batch, out)
    (2, 5, 16)
    """

    kernel: Param[jax.Array]
    bias: Param[jax.Array] | None
    dtype: Any = field(static=True, default=None, repr=False)
    precision: Any = field(static=True, default=None, repr=False)

    def __init__(
        self,
        heads: int,
        head_dim: int,
        out_features: int,
        *,
        use_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        key: jax.Array,
    ):
        layer_args(
            "MergeHeads",
            sizes={"heads": heads, "head_dim": head_dim, "out_features": out_features},
            key=key,
            dtype=dtype,
            param_dtype=param_dtype,
            fns={"kernel_init": kernel_init, "bias_init": bias_init},
        )
        kkey, bkey = kernel_bias_keys(key, bias_init, use_bias)
        shape = (heads, head_dim, out_features)
        self.kernel = Param(_init_flat(kernel_init, kkey, shape, 2, param_dtype))
        self.bias = (
            Param(bias_value(bias_init, bkey, (out_features,), param_dtype)) if use_bias else None
        )
        self.dtype = dtype
        self.precision = precision

    @trace_once
    @checked
    def __call__(
        self, x: Float[AnyArray, "*batch heads head_dim"], *, out_sharding: Any = None
    ) -> Float[jax.Array, "*batch out_features"]:
        """Project ``x`` of shape ``(*batch, heads, head_dim)``; ``out_sharding``: the
        output's sharding (default: derived on an Explicit mesh)."""
        return L.merge_heads(
            x,
            var_value(self.kernel),
            var_value(self.bias),
            dtype=self.dtype,
            precision=self.precision,
            out_sharding=out_sharding,
        )


def _init_flat(
    init: Initializer,
    key: jax.Array,
    shape: tuple[int, ...],
    split: int,
    dtype: Any,
    *,
    vector: bool = False,
) -> Any:
    """Initialise a ``shape`` kernel as the matrix ``(prod(shape[:split]),
    prod(shape[split:]))`` and reshape it, as Flax's ``DenseGeneral`` does, so fan-in and
    fan-out are the real ones. An initializer wrapped by ``with_partitioning`` with one
    name per axis of the full shape is called with the full shape instead (give it
    ``in_axis``/``out_axis`` for the right fan-in, e.g. ``lecun_normal(in_axis=0,
    out_axis=(1, 2))`` for ``ProjectHeads``)."""
    flat: tuple[int, ...] = (math.prod(shape[:split]), math.prod(shape[split:]))
    if vector:  # a bias: initialised as the vector (prod(shape),)
        flat = (math.prod(shape),)
    try:  # tracing only: does the initializer box its result with per-axis names?
        probe = jax.eval_shape(lambda k: init(k, shape, dtype), key)
    except AxisMetadataError:
        raise LayerConfigError(
            f"A partitioned kernel initializer names the axes of the flattened {flat} "
            f"matrix; name each axis of the kernel's full shape {shape} instead."
        ) from None
    except Exception:  # an initializer that cannot be traced: assume a plain array
        probe = None
    names = getattr(probe, "names", None)
    if isinstance(probe, AxisMetadata) and names is not None and len(names) != len(shape):
        raise LayerConfigError(
            f"A partitioned kernel initializer names the axes of the flattened {flat} "
            f"matrix; name each axis of the kernel's full shape {shape} instead."
        )
    if isinstance(probe, AxisMetadata):
        return init(key, shape, dtype)
    value = init(key, flat, dtype)
    return jnp.reshape(value, shape)


class MultiHeadAttention(Module, typecheck=True):
    """Multi-head dot-product attention (Flax ``MultiHeadDotProductAttention``).

    ``layer(x)`` is self-attention, ``layer(x, memory)`` cross-attention
    (``layer(q, k, v)`` with separate values). ``mask`` (true = attend) has shape
    ``(*batch, heads, q_len, kv_len)`` or broadcasts to it (``make_causal_mask``,
    ``make_attention_mask``).

    **Arguments:**

    - ``num_heads``; ``in_features``: features of the query input.
    - ``qkv_features``: total size of queries/keys/values (default ``in_features``),
      split over the heads; ``out_features``: output size (default ``in_features``).
    - ``kv_features``: features of the key/value inputs (default ``in_features``).
    - ``use_bias`` (default ``True``); ``normalize_qk`` (default ``False``): LayerNorm on
      queries and keys (ViT-22B).
    - ``dropout_rate`` (default ``0.0``) and ``broadcast_dropout`` (default ``True``) for
      dropout on the attention weights (needs ``key=`` at call time in training).
    - ``kernel_init``: default ``lecun_normal()``; ``bias_init``: default ``zeros``
      (Flax's); ``out_kernel_init``/``out_bias_init`` for the output projection (default:
      the same). ``dtype``, ``param_dtype`` (default ``float32``), ``precision``,
      ``implementation`` (see ``functional.dot_product_attention``).
    - ``key``: PRNG key (keyword-only).

    **Parameters:** ``query``, ``key``, ``value`` (``ProjectHeads``: kernel ``(in,
    heads, head_dim)``) and ``out`` (``MergeHeads``: kernel ``(heads, head_dim, out)``):
    Flax's names and shapes.

    **Decoding cache:** ``init_cache(batch_shape, max_len)`` returns a copy holding
    ``cached_key``, ``cached_value`` (``(*batch, max_len, heads, head_dim)``) and
    ``cache_index`` in the ``cache`` collection; each ``decode(x_step)`` call attends from
    the new positions to everything decoded so far and writes the cache, so it runs as
    ``y, layer = pm.apply(layer.decode, x_step, mutable="cache")``. Decoding past
    ``max_len`` is an error, never a silent overwrite: eagerly a ``LayerConfigError``;
    under ``jit``/``scan`` the compiled call fails (a ``JaxRuntimeError``) with the same
    "The decoding cache is full" message (in a program sharded over several devices,
    XLA ends the process after printing it; see ``pytreemod.nn._checks``). With kernels
    boxed with logical names, the cached keys/values are ``LogicallyPartitioned`` with
    ``("batch", None, heads, head_dim)`` (the kernels' names), created with the sharding
    the active rules give them on the mesh set with ``jax.set_mesh``.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> attn = pm.nn.MultiHeadAttention(4, 32, key=jax.random.key(0))
    >>> x = jnp.ones((2, 10, 32))                     # (*batch, length, in_features)
    >>> mask = pm.nn.make_causal_mask(jnp.ones((2, 10)))  # (*batch, 1, length, length)
    >>> attn(x, mask=mask).shape                      # (*batch, length, out_features)
    (2, 10, 32)
    >>> layer = attn.init_cache(2, max_len=10)
    >>> y, layer = pm.apply(layer.decode, x[:, :1], mutable="cache")  # one step
    >>> y.shape, int(layer.cache_index.value)
    ((2, 1, 32), 1)
    """

    query: ProjectHeads
    key: ProjectHeads
    value: ProjectHeads
    out: MergeHeads
    query_ln: LayerNorm | None
    key_ln: LayerNorm | None
    cached_key: Cache[jax.Array] | None
    cached_value: Cache[jax.Array] | None
    cache_index: Cache[jax.Array] | None
    num_heads: int = field(static=True)
    head_dim: int = field(static=True)
    dropout_rate: float = field(static=True, default=0.0, repr=False)
    broadcast_dropout: bool = field(static=True, default=True, repr=False)
    dtype: Any = field(static=True, default=None, repr=False)
    precision: Any = field(static=True, default=None, repr=False)
    implementation: str | None = field(static=True, default=None, repr=False)

    def __init__(
        self,
        num_heads: int,
        in_features: int,
        *,
        qkv_features: int | None = None,
        out_features: int | None = None,
        kv_features: int | None = None,
        use_bias: bool = True,
        normalize_qk: bool = False,
        dropout_rate: float = 0.0,
        broadcast_dropout: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        out_kernel_init: Initializer | None = None,
        out_bias_init: Initializer | None = None,
        implementation: str | None = None,
        key: jax.Array,
    ):
        sizes = {"num_heads": num_heads, "in_features": in_features}
        optional = {"qkv_features": qkv_features, "out_features": out_features}
        optional["kv_features"] = kv_features
        sizes.update({k: v for k, v in optional.items() if v is not None})
        layer_args(
            "MultiHeadAttention",
            sizes=sizes,
            key=key,
            dtype=dtype,
            param_dtype=param_dtype,
            fns={"kernel_init": kernel_init, "bias_init": bias_init},
        )
        callable_arg("MultiHeadAttention", "out_kernel_init", out_kernel_init, optional=True)
        callable_arg("MultiHeadAttention", "out_bias_init", out_bias_init, optional=True)
        probability("MultiHeadAttention", "dropout_rate", dropout_rate)
        one_of("MultiHeadAttention", "implementation", implementation, (None, "xla", "cudnn"))
        qkv = qkv_features or in_features
        if qkv % num_heads:
            raise LayerConfigError(
                f"MultiHeadAttention: qkv_features={qkv} is not divisible by "
                f"num_heads={num_heads}; pick sizes with qkv_features % num_heads == 0."
            )
        head_dim = qkv // num_heads
        kv_in = kv_features or in_features
        out = out_features or in_features
        kq, kk, kv, ko = jax.random.split(key, 4)
        common = dict(use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, precision=precision)
        self.query = ProjectHeads(
            in_features,
            num_heads,
            head_dim,
            kernel_init=kernel_init,
            bias_init=bias_init,
            key=kq,
            **common,
        )
        self.key = ProjectHeads(
            kv_in,
            num_heads,
            head_dim,
            kernel_init=kernel_init,
            bias_init=bias_init,
            key=kk,
            **common,
        )
        self.value = ProjectHeads(
            kv_in,
            num_heads,
            head_dim,
            kernel_init=kernel_init,
            bias_init=bias_init,
            key=kv,
            **common,
        )
        self.out = MergeHeads(
            num_heads,
            head_dim,
            out,
            kernel_init=out_kernel_init or kernel_init,
            bias_init=out_bias_init or bias_init,
            key=ko,
            **common,
        )
        if normalize_qk:
            self.query_ln = LayerNorm(
                head_dim, use_bias=False, dtype=dtype, param_dtype=param_dtype
            )
            self.key_ln = LayerNorm(head_dim, use_bias=False, dtype=dtype, param_dtype=param_dtype)
        else:
            self.query_ln = self.key_ln = None
        self.cached_key = self.cached_value = self.cache_index = None
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dropout_rate = dropout_rate
        self.broadcast_dropout = broadcast_dropout
        self.dtype = dtype
        self.precision = precision
        self.implementation = implementation

    def _qkv(self, q_in: Any, k_in: Any, v_in: Any) -> tuple[Any, Any, Any]:
        q, k, v = self.query(q_in), self.key(k_in), self.value(v_in)
        if self.query_ln is not None and self.key_ln is not None:
            q, k = self.query_ln(q), self.key_ln(k)
        return q, k, v

    @trace_once
    @checked
    def __call__(
        self,
        inputs_q: Float[AnyArray, "*batch q_len q_features"],
        inputs_k: Float[AnyArray, "*batch kv_len kv_features"] | None = None,
        inputs_v: Float[AnyArray, "*batch kv_len v_features"] | None = None,
        *,
        mask: Shaped[AnyArray, "*#batch #heads #q_len #kv_len"] | None = None,
        key: _Key | None = None,
        deterministic: bool = False,
        out_sharding: Any = None,
    ) -> Float[jax.Array, "*batch q_len out_features"]:
        """Attend from ``inputs_q`` to ``inputs_k`` (default: ``inputs_q``, self-attention)
        with values from ``inputs_v`` (default: ``inputs_k``).

        ``key`` drives the attention dropout when ``dropout_rate > 0`` and not
        ``deterministic``. ``out_sharding``: the sharding of the output projection's result
        (default: derived on an Explicit mesh, see docs/sharding.md).
        """
        if inputs_k is None:
            if inputs_v is not None:
                raise LayerConfigError(
                    f"{layer_name(self, sys._getframe(1))}: inputs_v was given without "
                    "inputs_k; pass both (or only inputs_k to use it as the values too)."
                )
            inputs_k = inputs_q
        if inputs_v is None:
            inputs_v = inputs_k
        q, k, v = self._qkv(inputs_q, inputs_k, inputs_v)
        x = self._attend(q, k, v, mask, key, deterministic)
        return self.out(x, out_sharding=out_sharding)

    def _attend(
        self, q: Any, k: Any, v: Any, mask: Any, key: _Key | None, deterministic: bool
    ) -> Any:
        dropping = self.dropout_rate > 0.0 and not deterministic
        if dropping and key is None:
            raise LayerConfigError(
                f"{layer_name(self, sys._getframe(1))}: MultiHeadAttention(dropout_rate="
                f"{self.dropout_rate}) in training needs a PRNG key: call it with "
                "key=jax.random.key(seed), or pass deterministic=True."
            )
        if dropping:
            prng_key(layer_name(self, sys._getframe(1)), key, calling=True)
        return A.dot_product_attention(
            q,
            k,
            v,
            mask=mask,
            dropout_rate=self.dropout_rate,
            dropout_key=key,
            broadcast_dropout=self.broadcast_dropout,
            deterministic=not dropping,
            dtype=self.dtype,
            precision=self.precision,
            implementation=None if dropping else self.implementation,
        )

    def init_cache(
        self: _MHA, batch_shape: int | tuple[int, ...], max_len: int, *, dtype: Any = None
    ) -> _MHA:
        """A copy of this layer with an empty decoding cache for ``max_len`` positions.

        ``batch_shape``: the batch dimensions of the inputs ``decode`` will get (an int or
        a tuple); ``dtype``: of the cached keys/values (default: the key kernel's). For a
        stack of layers built with ``pm.vmap``, call it under ``pm.vmap`` too, so each layer
        gets its own cache.
        """
        batch = positive_ints("MultiHeadAttention.init_cache", "batch_shape", batch_shape)
        positive_int("MultiHeadAttention.init_cache", "max_len", max_len)
        kernel = var_value(self.key.kernel)
        dtype = dtype or self.dtype or kernel.dtype
        kv_dim = var_value(self.value.kernel).shape[-1]
        return self.replace(
            cached_key=Cache(
                _cache_zeros((*batch, max_len, self.num_heads, self.head_dim), dtype, self.key)
            ),
            cached_value=Cache(
                _cache_zeros((*batch, max_len, self.num_heads, kv_dim), dtype, self.value)
            ),
            cache_index=Cache(jnp.zeros((), jnp.int32)),
        )

    @checked
    def decode(
        self,
        inputs: Float[AnyArray, "*batch steps in_features"],
        *,
        mask: Shaped[AnyArray, "*#batch #heads #steps #max_len"] | None = None,
        out_sharding: Any = None,
    ) -> Float[jax.Array, "*batch steps out_features"]:
        """Causal self-attention for the next ``steps`` positions (usually 1) over the
        cache; writes the new keys/values and index (run inside
        ``pm.apply(..., mutable="cache")``).

        ``mask``, if given, is combined with the causal cache mask (shape ``(*batch,
        heads, steps, max_len)``, e.g. to hide padding). ``out_sharding``: the output's
        sharding (default: derived on an Explicit mesh).
        """
        if self.cached_key is None or self.cached_value is None or self.cache_index is None:
            raise LayerConfigError(
                f"{layer_name(self, sys._getframe(1))}.decode needs a decoding cache: build "
                "the layer for decoding with `layer = layer.init_cache(batch_shape, max_len)` "
                "first."
            )
        q, k, v = self._qkv(inputs, inputs, inputs)
        old_key, old_value = self.cached_key.get(), self.cached_value.get()
        new_key, new_value, new_index, cache_mask = A.update_kv_cache(
            unboxed(old_key), unboxed(old_value), self.cache_index.get(), k, v
        )
        # The cache keeps its boxes (its logical names) across writes.
        self.cached_key.set(rebox(peel(old_key)[0], new_key))
        self.cached_value.set(rebox(peel(old_value)[0], new_value))
        self.cache_index.set(new_index)
        # Read the cache back through the apply call: later calls in it see the same state.
        k_all, v_all = unboxed(self.cached_key.get()), unboxed(self.cached_value.get())
        x = A.dot_product_attention(
            q,
            k_all,
            v_all,
            mask=A.combine_masks(mask, cache_mask),
            dtype=self.dtype,
            precision=self.precision,
            implementation=self.implementation,
        )
        return self.out(x, out_sharding=out_sharding)


def _cache_zeros(shape: tuple[int, ...], dtype: Any, projection: ProjectHeads) -> Any:
    """A decoding cache ``(*batch, max_len, heads, head_dim)`` of zeros. When the
    projection's kernel is boxed with names (``(in, heads, head_dim)``), the cache is boxed
    as ``LogicallyPartitioned`` with ``("batch", None..., None, heads, head_dim)``: the
    first batch axis is ``"batch"``, the time axis is unnamed (each step writes one
    position, which ``update_kv_cache`` keeps replicated) and the heads and head_dim take
    the kernel's names, so under active rules and a mesh it is created with the sharding
    the keys and values projected into it have."""
    names = getattr(getattr(projection.kernel, "value", None), "names", None)
    if names is None or len(names) != 3:
        return jnp.zeros(shape, dtype)
    n_batch = len(shape) - 3
    batch: tuple[str | None, ...] = ("batch", *[None] * (n_batch - 1)) if n_batch else ()
    taken = {names[1], names[2]}
    if "batch" in taken:  # a kernel axis named "batch" (unusual): leave the batch unnamed
        batch = (None,) * n_batch
    return logical_zeros(shape, dtype, (*batch, None, names[1], names[2]))
