"""Attention (``flax.nnx.nn.attention``): ``dot_product_attention(_weights)``, the mask
helpers, and ``MultiHeadAttention`` with its autoregressive decoding cache.

The math is ``pytreemod.nn.functional``'s (``dot_product_attention``,
``update_kv_cache``, the masks), the functions Linen's attention calls too; this file adds
NNX's calling conventions (``promote_dtype``, ``module=`` to sow the weights into
``nnx.Intermediate``, ``is_causal``), its checks and messages, and the layer's
``query``/``key``/``value``/``out`` ``LinearGeneral`` children.
"""

import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F

from ..module import Module, first_from
from ..pytreelib import data
from ..rnglib import Rngs, RngStream
from ..variablelib import Cache, Intermediate
from . import dtypes, initializers
from .linear import LinearGeneral, default_kernel_init
from .normalization import LayerNorm

Array = jax.Array
Dtype = Any
Shape = tuple[int, ...]
Initializer = Callable[..., Any]
PromoteDtypeFn = Callable[..., Any]

__all__ = [
    "MultiHeadAttention",
    "combine_masks",
    "dot_product_attention",
    "dot_product_attention_weights",
    "make_attention_mask",
    "make_causal_mask",
]

_NO_METADATA: Mapping[str, Any] = MappingProxyType({})
_ZEROS: Any = initializers.zeros_init()


def _validate_qkv_shapes(query: Array, key: Array, value: Array | None = None) -> None:
    arrays = (query, key) if value is None else (query, key, value)
    names = "q, k" if value is None else "q, k, v"
    if any(a.ndim != query.ndim for a in arrays[1:]):
        ndims = ", ".join(str(a.ndim) for a in arrays)
        raise ValueError(f"{names} must have same rank, but got {ndims}.")
    if any(a.shape[:-3] != query.shape[:-3] for a in arrays[1:]):
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise ValueError(f"{names} batch dims must match, but got shapes {shapes}.")


def _check_weights_operands(query: Array, key: Array) -> None:
    _validate_qkv_shapes(query, key)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"q, k depths must match, but got {query.shape[-1]} and {key.shape[-1]}.")
    q_heads, k_heads = query.shape[-2], key.shape[-2]
    if q_heads % k_heads:
        raise ValueError(
            f"Query heads ({q_heads}) must be multiple of Key heads ({k_heads}) for Grouped "
            "Query Attention."
        )


def _sower(module: Module | None) -> Callable[[Array], Any] | None:
    if module is None:
        return None
    sow = module.sow  # type: ignore[attr-defined]
    return lambda weights: sow(Intermediate, "attention_weights", weights)


def dot_product_attention_weights(
    query: Array,
    key: Array,
    bias: Array | None = None,
    mask: Array | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    dtype: Dtype | None = None,
    precision: Any = None,
    module: Module | None = None,
    promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
    is_causal: bool = False,
) -> Array:
    """Attention weights ``softmax(query key^T / sqrt(depth) + bias)`` of shape
    ``(*batch, heads, q_length, kv_length)``, masked where ``mask`` is false (and above
    the diagonal with ``is_causal``), with dropout unless ``deterministic``.

    ``key`` may have fewer heads than ``query`` (grouped-query attention). With
    ``module`` the weights (before dropout) are sown into its ``nnx.Intermediate``
    collection as ``attention_weights``.

    >>> import jax.numpy as jnp
    >>> from adapters.nnx.nn.attention import dot_product_attention_weights
    >>> dot_product_attention_weights(jnp.ones((2, 5, 4, 8)), jnp.ones((2, 7, 4, 8))).shape
    (2, 4, 5, 7)
    """
    query, key = promote_dtype((query, key), dtype=dtype)
    _check_weights_operands(query, key)
    return F.dot_product_attention_weights(
        query,
        key,
        bias,
        mask,
        dropout_rate=dropout_rate,
        dropout_key=dropout_rng,
        broadcast_dropout=broadcast_dropout,
        deterministic=deterministic,
        precision=precision,
        on_weights=_sower(module),
        is_causal=is_causal,
    )


def dot_product_attention(
    query: Array,
    key: Array,
    value: Array,
    bias: Array | None = None,
    mask: Array | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    dtype: Dtype | None = None,
    precision: Any = None,
    module: Module | None = None,
    promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
    is_causal: bool = False,
) -> Array:
    """Scaled dot-product attention: ``query`` ``(*batch, q_length, heads, depth)``,
    ``key``/``value`` ``(*batch, kv_length, kv_heads, depth)`` give
    ``(*batch, q_length, heads, v_depth)``.

    Without dropout (``dropout_rate == 0``) and without ``module`` it runs
    ``jax.nn.dot_product_attention``, as Flax does; otherwise the weights of
    ``dot_product_attention_weights`` are applied to ``value``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> q = jnp.ones((2, 5, 4, 8))
    >>> nnx.dot_product_attention(q, q, q, is_causal=True).shape
    (2, 5, 4, 8)
    """
    query, key, value = promote_dtype((query, key, value), dtype=dtype)
    _validate_qkv_shapes(query, key, value)
    if key.shape[-3] != value.shape[-3]:
        raise ValueError(f"k, v lengths must match, but got {key.shape[-3]} and {value.shape[-3]}.")
    if dropout_rate == 0.0 and module is None:
        return F.dot_product_attention(
            query, key, value, bias, mask, implementation="xla", is_causal=is_causal
        )
    _check_weights_operands(query, key)
    q_heads, v_heads = query.shape[-2], value.shape[-2]
    if q_heads % v_heads:
        raise ValueError(f"Query heads ({q_heads}) must be multiple of Value heads ({v_heads})")
    return F.dot_product_attention(
        query,
        key,
        value,
        bias,
        mask,
        dropout_rate=dropout_rate,
        dropout_key=dropout_rng,
        broadcast_dropout=broadcast_dropout,
        deterministic=deterministic,
        precision=precision,
        on_weights=_sower(module),
        is_causal=is_causal,
    )


def make_attention_mask(
    query_input: Array,
    key_input: Array,
    pairwise_fn: Callable[..., Any] = jnp.multiply,
    extra_batch_dims: int = 0,
    dtype: Dtype = jnp.float32,
) -> Array:
    """A ``(*batch, 1, q_length, kv_length)`` mask ``pairwise_fn(query_input[..., :, None],
    key_input[..., None, :])`` from ``(*batch, q_length)`` and ``(*batch, kv_length)``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> nnx.make_attention_mask(jnp.ones((2, 3)), jnp.ones((2, 4))).shape
    (2, 1, 3, 4)
    """
    return F.make_attention_mask(query_input, key_input, pairwise_fn, extra_batch_dims, dtype)


def make_causal_mask(x: Array, extra_batch_dims: int = 0, dtype: Dtype = jnp.float32) -> Array:
    """A ``(*batch, 1, length, length)`` mask letting position ``i`` attend to ``j <= i``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> nnx.make_causal_mask(jnp.ones((1, 3)))[0, 0].tolist()
    [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    """
    return F.make_causal_mask(x, extra_batch_dims, dtype)


def combine_masks(*masks: Array | None, dtype: Dtype = jnp.float32) -> Array | None:
    """The logical AND of the masks that are not ``None`` (``None`` if none is), all of
    one rank.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> nnx.combine_masks(jnp.array([1, 1]), None, jnp.array([1, 0])).tolist()
    [1.0, 0.0]
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    if any(m.ndim != present[0].ndim for m in present):
        raise ValueError(f"masks must have same rank, but got {tuple(m.ndim for m in present)}.")
    return F.combine_masks(*present, dtype=dtype)


def _check_heads(num_heads: int, num_kv_heads: int, qkv_features: int) -> None:
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads})."
        )
    if qkv_features % num_heads != 0:
        raise ValueError(
            f"Memory dimension ({qkv_features}) must be divisible by 'num_heads' heads "
            f"({num_heads})."
        )


class MultiHeadAttention(Module):
    """Multi-head attention: ``query``, ``key`` and ``value`` ``LinearGeneral`` projections
    to ``(num_heads, head_dim)`` (``num_kv_heads`` for key and value: grouped-query
    attention when fewer), ``attention_fn`` over them, and the ``out`` projection back to
    ``out_features``.

    ``decode=True`` runs one step of autoregressive decoding against a cache made by
    ``init_cache``: ``cached_key``, ``cached_value`` and ``cache_index`` (``nnx.Cache``).
    With ``dropout_rate > 0`` the attention weights get dropout unless ``deterministic``;
    its keys come from the ``rngs`` of the call or a fork of ``rngs.dropout`` kept at
    construction (``keep_rngs``).

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.MultiHeadAttention(num_heads=2, in_features=4, qkv_features=8,
    ...                                decode=False, rngs=nnx.Rngs(0))
    >>> layer(jnp.ones((3, 5, 4))).shape, layer.query.kernel.shape
    ((3, 5, 4), (4, 2, 4))
    """

    def __init__(
        self,
        num_heads: int,
        in_features: int,
        qkv_features: int | None = None,
        out_features: int | None = None,
        num_kv_heads: int | None = None,
        in_kv_features: int | None = None,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        broadcast_dropout: bool = True,
        dropout_rate: float = 0.0,
        deterministic: bool | None = None,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        out_kernel_init: Initializer | None = None,
        bias_init: Initializer = _ZEROS,
        out_bias_init: Initializer | None = None,
        use_bias: bool = True,
        attention_fn: Callable[..., Array] = dot_product_attention,
        decode: bool | None = None,
        normalize_qk: bool = False,
        qkv_promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        out_promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        ln_promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        qkv_dot_general: Callable[..., Any] | None = None,
        out_dot_general: Callable[..., Any] | None = None,
        qkv_dot_general_cls: Any = None,
        out_dot_general_cls: Any = None,
        rngs: Rngs,
        keep_rngs: bool = True,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        out_kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
        out_bias_metadata: Mapping[str, Any] = _NO_METADATA,
        query_ln_scale_metadata: Mapping[str, Any] = _NO_METADATA,
        key_ln_scale_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.num_heads = num_heads
        self.in_features = in_features
        self.qkv_features = qkv_features if qkv_features is not None else in_features
        self.out_features = out_features if out_features is not None else in_features
        self.in_kv_features = in_kv_features if in_kv_features is not None else in_features
        self.num_kv_heads = num_kv_heads if num_kv_heads is not None else num_heads
        _check_heads(self.num_heads, self.num_kv_heads, self.qkv_features)
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.broadcast_dropout = broadcast_dropout
        self.dropout_rate = dropout_rate
        self.deterministic = deterministic
        self.precision = precision
        self.use_bias = use_bias
        self.attention_fn = attention_fn
        self.decode = decode
        self.normalize_qk = normalize_qk
        self.qkv_promote_dtype = qkv_promote_dtype
        self.out_promote_dtype = out_promote_dtype
        self.ln_promote_dtype = ln_promote_dtype
        self.qkv_dot_general = qkv_dot_general
        self.out_dot_general = out_dot_general
        self.qkv_dot_general_cls = qkv_dot_general_cls
        self.out_dot_general_cls = out_dot_general_cls
        self.head_dim = self.qkv_features // self.num_heads
        projection = functools.partial(
            self._projection, rngs, kernel_init, bias_init, kernel_metadata, bias_metadata
        )
        self.query = projection(self.in_features, (self.num_heads, self.head_dim))
        self.key = projection(self.in_kv_features, (self.num_kv_heads, self.head_dim))
        self.value = projection(self.in_kv_features, (self.num_kv_heads, self.head_dim))
        self.query_ln: LayerNorm | None
        self.key_ln: LayerNorm | None
        if normalize_qk:
            # QK normalisation (ViT-22B, arxiv.org/abs/2302.05442).
            self.query_ln = self._qk_norm(rngs, query_ln_scale_metadata)
            self.key_ln = self._qk_norm(rngs, key_ln_scale_metadata)
        else:
            self.query_ln = data(None)
            self.key_ln = data(None)
        self.out = self._projection(
            rngs,
            out_kernel_init or kernel_init,
            out_bias_init or bias_init,
            out_kernel_metadata or kernel_metadata,
            out_bias_metadata or bias_metadata,
            (self.num_heads, self.head_dim),
            self.out_features,
            output=True,
        )
        self.rngs: RngStream | None = (
            rngs.dropout.fork() if keep_rngs and dropout_rate > 0 else None
        )
        self.cached_key: Cache | None = data(None)
        self.cached_value: Cache | None = data(None)
        self.cache_index: Cache | None = data(None)

    def _projection(
        self,
        rngs: Rngs,
        kernel_init: Initializer,
        bias_init: Initializer,
        kernel_metadata: Mapping[str, Any],
        bias_metadata: Mapping[str, Any],
        in_features: Any,
        out_features: Any,
        *,
        output: bool = False,
    ) -> LinearGeneral:
        """An input projection (to heads), or with ``output`` the output one (from them)."""
        return LinearGeneral(
            in_features,
            out_features,
            axis=(-2, -1) if output else -1,
            kernel_init=kernel_init,
            bias_init=bias_init,
            use_bias=self.use_bias,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            precision=self.precision,
            promote_dtype=self.out_promote_dtype if output else self.qkv_promote_dtype,
            dot_general=self.out_dot_general if output else self.qkv_dot_general,
            dot_general_cls=self.out_dot_general_cls if output else self.qkv_dot_general_cls,
            rngs=rngs,
            kernel_metadata=kernel_metadata,
            bias_metadata=bias_metadata,
        )

    def _qk_norm(self, rngs: Rngs, scale_metadata: Mapping[str, Any]) -> LayerNorm:
        return LayerNorm(
            self.head_dim,
            use_bias=False,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            promote_dtype=self.ln_promote_dtype,
            rngs=rngs,
            scale_metadata=scale_metadata,
        )

    def __call__(
        self,
        inputs_q: Array,
        inputs_k: Array | None = None,
        inputs_v: Array | None = None,
        *,
        mask: Array | None = None,
        deterministic: bool | None = None,
        rngs: Rngs | RngStream | None = None,
        sow_weights: bool = False,
        decode: bool | None = None,
        is_causal: bool = False,
        out_sharding: Any = None,
        qkv_sharding: Any = None,
    ) -> Array:
        """Attend from ``inputs_q`` (``(*batch, length, in_features)``) to ``inputs_k``
        (default ``inputs_q``) with values from ``inputs_v`` (default ``inputs_k``).

        ``mask`` (``(*batch, heads, q_length, kv_length)``) is false where attention is
        not allowed; ``deterministic``/``decode`` override the attributes; ``rngs`` gives
        the dropout keys; ``sow_weights`` sows the weights into ``nnx.Intermediate``.
        """
        if rngs is None:
            rngs = self.rngs
        elif isinstance(rngs, Rngs):
            rngs = rngs.dropout
        if inputs_k is None:
            if inputs_v is not None:
                raise ValueError(
                    "`inputs_k` cannot be None if `inputs_v` is not None. To have both "
                    "`inputs_k` and `inputs_v` be the same value, pass in the value to "
                    "`inputs_k` and leave `inputs_v` as None."
                )
            inputs_k = inputs_q
        if inputs_v is None:
            inputs_v = inputs_k
        if inputs_q.shape[-1] != self.in_features:
            raise ValueError(
                f"Incompatible input dimension, got {inputs_q.shape[-1]} but module "
                f"expects {self.in_features}."
            )
        query = self.query(inputs_q, out_sharding=qkv_sharding)
        key = self.key(inputs_k, out_sharding=qkv_sharding)
        value = self.value(inputs_v, out_sharding=qkv_sharding)
        if self.query_ln is not None and self.key_ln is not None:
            query = self.query_ln(query)
            key = self.key_ln(key)
        decode = first_from(
            decode,
            self.decode,
            error_msg=(
                "No `decode` argument was provided to MultiHeadAttention\n        as either a "
                "__call__ argument, class attribute, or nnx.flag."
            ),
        )
        if decode:
            key, value, mask = self._decode_step(key, value, mask)
        deterministic, dropout_rng = self._dropout(deterministic, rngs)
        x = self.attention_fn(
            query,
            key,
            value,
            mask=mask,
            dropout_rng=dropout_rng,
            dropout_rate=self.dropout_rate,
            broadcast_dropout=self.broadcast_dropout,
            deterministic=deterministic,
            dtype=self.dtype,
            precision=self.precision,
            module=self if sow_weights else None,
            is_causal=is_causal,
        )
        return self.out(x, out_sharding=out_sharding)

    def _dropout(
        self, deterministic: bool | None, rngs: RngStream | None
    ) -> tuple[bool, Array | None]:
        if self.dropout_rate <= 0.0:  # `deterministic` is only needed with dropout
            return True, None
        deterministic = first_from(
            deterministic,
            self.deterministic,
            error_msg=(
                "No `deterministic` argument was provided to MultiHeadAttention\n"
                "          as either a __call__ argument, class attribute, or nnx.flag."
            ),
        )
        if deterministic:
            return True, None
        if rngs is None:
            raise ValueError(
                "'rngs' must be provided to __call__ method if MultiHeadAttention instance "
                "is defined with keep_rngs=False."
            )
        return False, rngs()

    def _decode_step(
        self, key: Array, value: Array, mask: Array | None
    ) -> tuple[Array, Array, Array | None]:
        """Write this step's key and value into the cache; the cache's keys and values,
        and ``mask`` combined with the mask of the positions decoded so far."""
        if self.cached_key is None or self.cached_value is None or self.cache_index is None:
            raise ValueError("Autoregressive cache not initialized, call ``init_cache`` first.")
        *batch_dims, max_length, num_kv_heads, depth_per_head = self.cached_key.shape
        expected_shape = (*batch_dims, 1, num_kv_heads, depth_per_head)
        if expected_shape != key.shape:
            raise ValueError(
                "Autoregressive cache shape error, expected key shape "
                f"{expected_shape} instead got {key.shape}."
            )
        key, value, index, step_mask = F.update_kv_cache(
            self.cached_key[...], self.cached_value[...], self.cache_index[...], key, value
        )
        self.cached_key[...] = key
        self.cached_value[...] = value
        self.cache_index[...] = index
        step_mask = jnp.broadcast_to(step_mask, (*batch_dims, 1, 1, max_length))
        return key, value, combine_masks(mask, step_mask)

    def init_cache(self, input_shape: Shape, dtype: Dtype = jnp.float32) -> None:
        """Create the decoding cache for inputs of ``input_shape`` (``(*batch,
        max_length, features)``): zero keys and values and a zero index."""
        cache_shape = (*input_shape[:-1], self.num_kv_heads, self.head_dim)
        self.cached_key = Cache(jnp.zeros(cache_shape, dtype))
        self.cached_value = Cache(jnp.zeros(cache_shape, dtype))
        self.cache_index = Cache(jnp.array(0, dtype=jnp.int32))

    def set_view(
        self,
        deterministic: bool | None = None,
        decode: bool | None = None,
        batch_size: int | Shape | None = None,
        max_length: int | None = None,
    ) -> None:
        """Set ``deterministic``/``decode`` (used by ``nnx.view``); turning ``decode`` on
        without a cache creates one for ``batch_size`` and ``max_length``."""
        if deterministic is not None:
            self.deterministic = deterministic
        if decode is None:
            return
        self.decode = decode
        if self.cached_key is None or self.cached_value is None or self.cache_index is None:
            if batch_size is None:
                raise TypeError("'batch_size' must be provided when initializing cache.")
            if max_length is None:
                raise TypeError("'max_length' must be provided when initializing cache.")
            if isinstance(batch_size, int):
                batch_size = (batch_size,)
            shape = (*batch_size, max_length, self.num_kv_heads, self.head_dim)
            self.cached_key = Cache(jnp.zeros(shape, self.dtype))
            self.cached_value = Cache(jnp.zeros(shape, self.dtype))
            self.cache_index = Cache(jnp.array(0, dtype=jnp.int32))
