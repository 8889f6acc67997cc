"""Attention (``flax.linen.attention``): ``dot_product_attention(_weights)``, the mask
helpers and ``MultiHeadDotProductAttention`` (alias ``MultiHeadAttention``) with its
autoregressive decoding cache.

The math is ``pytreemod.nn.functional``'s (``dot_product_attention``,
``update_kv_cache``, the masks); the layer builds Flax's ``query``/``key``/``value``/``out``
``DenseGeneral`` children.
"""

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F

from . import initializers
from .dtypes import promote_dtype
from .linear import DenseGeneral, default_kernel_init
from .module import Module, compact, merge_param
from .normalization import LayerNorm

Array = jax.Array
Dtype = Any
Initializer = Callable[..., Any]

__all__ = [
    "MultiHeadAttention",
    "MultiHeadDotProductAttention",
    "SelfAttention",
    "combine_masks",
    "dot_product_attention",
    "dot_product_attention_weights",
    "make_attention_mask",
    "make_causal_mask",
]


def _check_qk(query: Array, key: Array) -> None:
    assert query.ndim == key.ndim, "q, k must have same rank."
    assert query.shape[:-3] == key.shape[:-3], "q, k batch dims must match."
    assert query.shape[-2] == key.shape[-2], "q, k num_heads must match."
    assert query.shape[-1] == key.shape[-1], "q, k depths must match."


def _sower(module: Any) -> Callable[[Array], Any] | None:
    if module is None:
        return None
    return lambda weights: module.sow("intermediates", "attention_weights", weights)


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
    module: Any = None,
    force_fp32_for_softmax: bool = False,
    einsum_dot_general: Callable[..., Array] | None = None,
    einsum: Callable[..., Array] | None = None,
) -> Array:
    """Attention weights ``softmax(query key^T / sqrt(depth) + bias)``, ``(..., heads,
    q_length, kv_length)``, masked where ``mask`` is false, with dropout unless
    ``deterministic``. With ``module`` the weights (before dropout) are sown into its
    ``intermediates`` as ``attention_weights``."""
    if (precision or einsum_dot_general) and einsum:
        raise ValueError(
            "precision/einsum_dot_general and einsum are mutually exclusive. Please specify "
            "only one of them."
        )
    query, key = promote_dtype(query, key, dtype=dtype)
    _check_qk(query, key)
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
        force_fp32_for_softmax=force_fp32_for_softmax,
        einsum_dot_general=einsum_dot_general,
        qk_einsum=einsum,
        on_weights=_sower(module),
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
    module: Any = None,
    force_fp32_for_softmax: bool = False,
    einsum_dot_general: Callable[..., Array] | None = None,
    qk_attn_weights_einsum: Callable[..., Array] | None = None,
    attn_weights_value_einsum: Callable[..., Array] | None = None,
) -> Array:
    """Scaled dot-product attention over ``query`` ``(..., q_length, heads, depth)``,
    ``key`` and ``value`` ``(..., kv_length, heads, depth)``; see
    ``dot_product_attention_weights`` for the weights. The two einsums can be replaced
    (``qk_attn_weights_einsum`` and ``attn_weights_value_einsum``, together)."""
    if (qk_attn_weights_einsum is None) != (attn_weights_value_einsum is None):
        raise ValueError(
            "qk_attn_weights_einsum and attn_weights_value_einsum must be specified together."
        )
    if (precision or einsum_dot_general) and (qk_attn_weights_einsum or attn_weights_value_einsum):
        raise ValueError(
            "precision/einsum_dot_general and qk_attn_weights_einsum/"
            "attn_weights_value_einsum are mutually exclusive. Please specify only one of "
            "them."
        )
    query, key, value = promote_dtype(query, key, value, dtype=dtype)
    _check_qk(query, key)
    assert query.shape[:-3] == value.shape[:-3], "q, k, v batch dims must match."
    assert query.shape[-2] == value.shape[-2], "q, k, v num_heads must match."
    assert key.shape[-3] == value.shape[-3], "k, v lengths must match."
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
        force_fp32_for_softmax=force_fp32_for_softmax,
        einsum_dot_general=einsum_dot_general,
        qk_einsum=qk_attn_weights_einsum,
        av_einsum=attn_weights_value_einsum,
        on_weights=_sower(module),
    )


class MultiHeadDotProductAttention(Module):
    """Multi-head dot-product attention, as in the Transformer.

    Queries come from ``inputs_q`` and keys and values from ``inputs_k`` and ``inputs_v``
    (both default to the queries' input: self-attention). Each is projected by a
    ``DenseGeneral`` child (``query``, ``key``, ``value``) to ``(num_heads, head_dim)``
    with ``head_dim = qkv_features // num_heads``; ``attention_fn`` mixes the values with
    softmax weights of the scaled query-key products, and the ``out`` child maps the heads
    back to ``out_features``. Dropout on the weights draws from the ``'dropout'`` rng
    stream. With ``decode=True`` the keys and values seen so far are kept in the
    ``'cache'`` collection (``cached_key``, ``cached_value``, ``cache_index``).

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=16)
    >>> q, kv = jnp.ones((2, 5, 8)), jnp.ones((2, 7, 6))  # (batch, length, features)
    >>> variables = layer.init(jax.random.key(0), q, kv)
    >>> variables["params"]["query"]["kernel"].shape  # (features, num_heads, head_dim)
    (8, 4, 4)
    >>> layer.apply(variables, q, kv).shape
    (2, 5, 8)

    Attributes:
        num_heads: the number of attention heads; it must divide ``qkv_features``.
        dtype: the dtype of the computation (default ``None``: promoted from the inputs
            and the parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        qkv_features: the total width of the query, key and value projections, split
            evenly across the heads (default ``None``: ``inputs_q``'s last axis).
        out_features: the size of the output's last axis (default ``None``:
            ``inputs_q``'s last axis).
        broadcast_dropout: draw one dropout mask for all the batch axes (default
            ``True``) instead of one per example.
        dropout_rate: the probability of dropping an attention weight (default ``0.0``:
            no dropout).
        deterministic: ``True`` turns dropout off. Give it here or at call time, not
            both (default ``None``; only needed when ``dropout_rate > 0``).
        precision: the ``jax.lax.Precision`` of the projections and of the attention
            einsums (default ``None``).
        kernel_init: initializer of the query, key and value kernels (default
            ``lecun_normal()``).
        out_kernel_init: initializer of the output kernel (default ``None``:
            ``kernel_init``).
        bias_init: initializer of the query, key and value biases (default zeros).
        out_bias_init: initializer of the output bias (default ``None``: ``bias_init``).
        use_bias: whether the four projections have biases (default ``True``).
        attention_fn: the function computing attention from the projected
            ``(query, key, value)``, each ``(..., length, num_heads, head_dim)`` (default
            ``dot_product_attention``). It receives only the keyword arguments it
            declares among ``mask``, ``dropout_rng``, ``dropout_rate``,
            ``broadcast_dropout``, ``deterministic``, ``dtype``, ``precision``,
            ``force_fp32_for_softmax`` and the two einsums.
        decode: run as an autoregressive decoder with a key/value cache (default
            ``False``). Initialising with a full-length input sizes the cache; each later
            call (with ``mutable=['cache']``) takes one position.
        normalize_qk: apply a bias-free ``LayerNorm`` to the projected queries and keys,
            children ``query_ln`` and ``key_ln`` (default ``False``).
        force_fp32_for_softmax: compute the softmax in float32 whatever ``dtype`` is
            (default ``False``).
        qkv_dot_general: a ``jax.lax.dot_general`` replacement for the query, key and
            value projections (default ``None``).
        out_dot_general: a ``jax.lax.dot_general`` replacement for the output projection
            (default ``None``).
        qkv_dot_general_cls: a class built with no arguments to make the query, key and
            value projections' ``dot_general``; wins over ``qkv_dot_general`` (default
            ``None``).
        out_dot_general_cls: the same for the output projection (default ``None``).
        qk_attn_weights_einsum_cls: a factory called with no arguments that returns the
            einsum of queries and keys (default ``None``: ``jnp.einsum``). Set it
            together with ``attn_weights_value_einsum_cls``.
        attn_weights_value_einsum_cls: a factory called with no arguments that returns
            the einsum of the weights and values (default ``None``: ``jnp.einsum``).
    """

    num_heads: int
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    qkv_features: int | None = None
    out_features: int | None = None
    broadcast_dropout: bool = True
    dropout_rate: float = 0.0
    deterministic: bool | None = None
    precision: Any = None
    kernel_init: Initializer = default_kernel_init
    out_kernel_init: Initializer | None = None
    bias_init: Initializer = initializers.zeros_init()
    out_bias_init: Initializer | None = None
    use_bias: bool = True
    attention_fn: Callable[..., Array] = dot_product_attention
    decode: bool = False
    normalize_qk: bool = False
    force_fp32_for_softmax: bool = False
    qkv_dot_general: Any = None
    out_dot_general: Any = None
    qkv_dot_general_cls: Any = None
    out_dot_general_cls: Any = None
    qk_attn_weights_einsum_cls: Callable[..., Callable[..., Array]] | None = None
    attn_weights_value_einsum_cls: Callable[..., Callable[..., Array]] | None = None

    @compact
    def __call__(
        self,
        inputs_q: Array,
        inputs_k: Array | None = None,
        inputs_v: Array | None = None,
        *,
        inputs_kv: Array | None = None,
        mask: Array | None = None,
        deterministic: bool | None = None,
        dropout_rng: Array | None = None,
        sow_weights: bool = False,
    ) -> Array:
        """Attend from the queries to the keys and values.

        Args:
            inputs_q: the queries' input ``(..., q_length, q_features)``.
            inputs_k: the keys' input ``(..., kv_length, k_features)`` (default ``None``:
                ``inputs_q``).
            inputs_v: the values' input ``(..., kv_length, v_features)`` (default
                ``None``: ``inputs_k``).
            inputs_kv: a deprecated single input for both keys and values; use
                ``inputs_k`` instead.
            mask: a boolean array broadcastable to ``(..., num_heads, q_length,
                kv_length)``, ``False`` where attention is not allowed (default ``None``).
            deterministic: ``True`` turns dropout off, when the attribute is ``None``.
            dropout_rng: a key for the dropout (default ``None``: ``make_rng('dropout')``).
            sow_weights: store the attention weights in the ``'intermediates'``
                collection as ``attention_weights`` (default ``False``).

        Returns:
            An array ``(..., q_length, out_features)``.
        """
        inputs_k, inputs_v = _resolve_kv(inputs_q, inputs_k, inputs_v, inputs_kv)
        features = self.out_features or inputs_q.shape[-1]
        qkv_features = self.qkv_features or inputs_q.shape[-1]
        assert qkv_features % self.num_heads == 0, (
            f"Memory dimension ({qkv_features}) must be divisible by number of heads "
            f"({self.num_heads})."
        )
        head_dim = qkv_features // self.num_heads
        dense = functools.partial(
            DenseGeneral,
            axis=-1,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            features=(self.num_heads, head_dim),
            kernel_init=self.kernel_init,
            bias_init=self.bias_init,
            use_bias=self.use_bias,
            precision=self.precision,
            dot_general=self.qkv_dot_general,
            dot_general_cls=self.qkv_dot_general_cls,
        )
        query = dense(name="query")(inputs_q)
        key = dense(name="key")(inputs_k)
        value = dense(name="value")(inputs_v)
        if self.normalize_qk:
            norm = functools.partial(
                LayerNorm, use_bias=False, dtype=self.dtype, param_dtype=self.param_dtype
            )
            query = norm(name="query_ln")(query)
            key = norm(name="key_ln")(key)
        if self.decode:
            key, value, mask = self._decode_step(query, key, value, mask)
        attn_kwargs = self._attention_kwargs(mask, deterministic, dropout_rng, sow_weights)
        x = self.attention_fn(query, key, value, **attn_kwargs)
        return DenseGeneral(
            features=features,
            axis=(-2, -1),
            kernel_init=self.out_kernel_init or self.kernel_init,
            bias_init=self.out_bias_init or self.bias_init,
            use_bias=self.use_bias,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            precision=self.precision,
            dot_general=self.out_dot_general,
            dot_general_cls=self.out_dot_general_cls,
            name="out",
        )(x)

    def _attention_kwargs(
        self,
        mask: Array | None,
        deterministic: bool | None,
        dropout_rng: Array | None,
        sow_weights: bool,
    ) -> dict[str, Any]:
        """The keyword arguments ``attention_fn`` accepts, dropout resolved."""
        if self.dropout_rate > 0.0:
            m_deterministic = merge_param("deterministic", self.deterministic, deterministic)
            if not m_deterministic and dropout_rng is None:
                dropout_rng = self.make_rng("dropout")
        else:
            m_deterministic = True
        attn_kwargs: dict[str, Any] = dict(
            mask=mask,
            dropout_rng=dropout_rng,
            dropout_rate=self.dropout_rate,
            broadcast_dropout=self.broadcast_dropout,
            deterministic=m_deterministic,
            dtype=self.dtype,
            precision=self.precision,
            force_fp32_for_softmax=self.force_fp32_for_softmax,
            qk_attn_weights_einsum=(
                self.qk_attn_weights_einsum_cls() if self.qk_attn_weights_einsum_cls else None
            ),
            attn_weights_value_einsum=(
                self.attn_weights_value_einsum_cls() if self.attn_weights_value_einsum_cls else None
            ),
        )
        accepted = inspect.signature(self.attention_fn).parameters
        attn_kwargs = {k: v for k, v in attn_kwargs.items() if k in accepted}
        if sow_weights:
            attn_kwargs["module"] = self
        return attn_kwargs

    def _decode_step(
        self, query: Array, key: Array, value: Array, mask: Array | None
    ) -> tuple[Array, Array, Array | None]:
        """Write this step's key/value into the cache; attend to everything so far."""
        is_initialized = self.has_variable("cache", "cached_key")
        cached_key = self.variable("cache", "cached_key", jnp.zeros, key.shape, key.dtype)
        cached_value = self.variable("cache", "cached_value", jnp.zeros, value.shape, value.dtype)
        cache_index = self.variable("cache", "cache_index", lambda: jnp.array(0, dtype=jnp.int32))
        if not is_initialized:
            return key, value, mask
        *batch_dims, _, num_heads, depth = cached_key.value.shape
        expected = (*batch_dims, 1, num_heads, depth)
        if expected != query.shape:
            raise ValueError(
                "Autoregressive cache shape error, expected query shape "
                f"{tuple(expected)} instead got {query.shape}."
            )
        new_key, new_value, new_index, step_mask = F.update_kv_cache(
            cached_key.value, cached_value.value, cache_index.value, key, value
        )
        cached_key.value = new_key
        cached_value.value = new_value
        cache_index.value = new_index
        step_mask = jnp.broadcast_to(step_mask, (*batch_dims, 1, 1, step_mask.shape[-1]))
        return new_key, new_value, combine_masks(mask, step_mask)


def _resolve_kv(
    inputs_q: Array, inputs_k: Array | None, inputs_v: Array | None, inputs_kv: Array | None
) -> tuple[Array, Array]:
    if inputs_kv is not None:
        if inputs_k is not None or inputs_v is not None:
            raise ValueError(
                "If either `inputs_k` or `inputs_v` is not None, `inputs_kv` must be None. If "
                "`inputs_kv` is not None, both `inputs_k` and `inputs_v` must be None. We "
                "recommend using `inputs_k` and `inputs_v` args, since `inputs_kv` will be "
                "deprecated soon. See https://github.com/google/flax/discussions/3389 for "
                "more information."
            )
        warnings.warn(
            "The inputs_kv arg will be deprecated soon. Use inputs_k and inputs_v instead. "
            "See https://github.com/google/flax/discussions/3389 for more information.",
            DeprecationWarning,
            stacklevel=3,
        )
        return inputs_kv, inputs_kv
    if inputs_k is None:
        if inputs_v is not None:
            raise ValueError(
                "`inputs_k` cannot be None if `inputs_v` is not None. To have both `inputs_k` "
                "and `inputs_v` be the same value, pass in the value to `inputs_k` and leave "
                "`inputs_v` as None."
            )
        inputs_k = inputs_q
    if inputs_v is None:
        inputs_v = inputs_k
    elif inputs_v.shape[-1] == inputs_v.shape[-2]:
        warnings.warn(
            f"You are passing an array of shape {inputs_v.shape} to the `inputs_v` arg, when "
            "you may have intended to pass it to the `mask` arg. As of Flax version 0.7.4, "
            "the function signature of MultiHeadDotProductAttention's `__call__` method has "
            "changed to `__call__(inputs_q, inputs_k=None, inputs_v=None, *, inputs_kv=None, "
            "mask=None, deterministic=None)`. Use the kwarg `mask` instead. See "
            "https://github.com/google/flax/discussions/3389 and read the docstring for more "
            "information.",
            DeprecationWarning,
            stacklevel=3,
        )
    return inputs_k, inputs_v


class MultiHeadAttention(MultiHeadDotProductAttention):
    """``MultiHeadDotProductAttention`` under a shorter name.

    The same layer: its fields, parameters and call are those of
    ``MultiHeadDotProductAttention``.

    Attributes:
        num_heads: the number of attention heads.
        dtype: the dtype of the computation (default ``None``: promoted).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        qkv_features: the total width of the projections (default: the input's).
        out_features: the size of the output's last axis (default: the input's).
        broadcast_dropout: one dropout mask for all batch axes (default ``True``).
        dropout_rate: the attention-weight dropout probability (default ``0.0``).
        deterministic: ``True`` turns dropout off (default ``None``: at call time).
        precision: the ``jax.lax.Precision`` of the computation (default ``None``).
        kernel_init: initializer of the query, key and value kernels.
        out_kernel_init: initializer of the output kernel (default: ``kernel_init``).
        bias_init: initializer of the query, key and value biases (default zeros).
        out_bias_init: initializer of the output bias (default: ``bias_init``).
        use_bias: whether the projections have biases (default ``True``).
        attention_fn: the attention function (default ``dot_product_attention``).
        decode: run as an autoregressive decoder with a cache (default ``False``).
        normalize_qk: layer-normalise queries and keys (default ``False``).
        force_fp32_for_softmax: softmax in float32 (default ``False``).
        qkv_dot_general: a ``dot_general`` for the input projections.
        out_dot_general: a ``dot_general`` for the output projection.
        qkv_dot_general_cls: a class making the input projections' ``dot_general``.
        out_dot_general_cls: a class making the output projection's ``dot_general``.
        qk_attn_weights_einsum_cls: a factory of the query-key einsum.
        attn_weights_value_einsum_cls: a factory of the weights-value einsum.
    """


class SelfAttention(MultiHeadDotProductAttention):
    """Self-attention: multi-head attention with keys and values from the queries' input.

    Deprecated by Flax (it warns when called): call ``MultiHeadDotProductAttention`` with
    ``inputs_q`` alone instead. The fields are those of ``MultiHeadDotProductAttention``.

    Attributes:
        num_heads: the number of attention heads.
        dtype: the dtype of the computation (default ``None``: promoted).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        qkv_features: the total width of the projections (default: the input's).
        out_features: the size of the output's last axis (default: the input's).
        broadcast_dropout: one dropout mask for all batch axes (default ``True``).
        dropout_rate: the attention-weight dropout probability (default ``0.0``).
        deterministic: ``True`` turns dropout off (default ``None``: at call time).
        precision: the ``jax.lax.Precision`` of the computation (default ``None``).
        kernel_init: initializer of the query, key and value kernels.
        out_kernel_init: initializer of the output kernel (default: ``kernel_init``).
        bias_init: initializer of the query, key and value biases (default zeros).
        out_bias_init: initializer of the output bias (default: ``bias_init``).
        use_bias: whether the projections have biases (default ``True``).
        attention_fn: the attention function (default ``dot_product_attention``).
        decode: run as an autoregressive decoder with a cache (default ``False``).
        normalize_qk: layer-normalise queries and keys (default ``False``).
        force_fp32_for_softmax: softmax in float32 (default ``False``).
        qkv_dot_general: a ``dot_general`` for the input projections.
        out_dot_general: a ``dot_general`` for the output projection.
        qkv_dot_general_cls: a class making the input projections' ``dot_general``.
        out_dot_general_cls: a class making the output projection's ``dot_general``.
        qk_attn_weights_einsum_cls: a factory of the query-key einsum.
        attn_weights_value_einsum_cls: a factory of the weights-value einsum.
    """

    @compact
    def __call__(  # type: ignore[override]
        self,
        inputs_q: Array,
        mask: Array | None = None,
        deterministic: bool | None = None,
        dropout_rng: Array | None = None,
        sow_weights: bool = False,
    ) -> Array:
        """Attend from ``inputs_q`` to itself.

        Args:
            inputs_q: the input ``(..., length, features)``.
            mask: a boolean array broadcastable to ``(..., num_heads, length, length)``,
                ``False`` where attention is not allowed (default ``None``).
            deterministic: ``True`` turns dropout off, when the attribute is ``None``.
            dropout_rng: a key for the dropout (default ``None``: ``make_rng('dropout')``).
            sow_weights: store the attention weights in ``'intermediates'`` (default
                ``False``).

        Returns:
            An array ``(..., length, out_features)``.
        """
        warnings.warn(
            "SelfAttention will be deprecated soon. Use "
            "`MultiHeadDotProductAttention.__call__(inputs_q)` instead. See "
            "https://github.com/google/flax/discussions/3389 for more information.",
            DeprecationWarning,
            stacklevel=2,
        )
        return super().__call__(
            inputs_q,
            mask=mask,
            deterministic=deterministic,
            dropout_rng=dropout_rng,
            sow_weights=sow_weights,
        )


def make_attention_mask(
    query_input: Array,
    key_input: Array,
    pairwise_fn: Callable[..., Any] = jnp.multiply,
    extra_batch_dims: int = 0,
    dtype: Dtype = jnp.float32,
) -> Array:
    """A ``(..., 1, q_length, kv_length)`` mask ``pairwise_fn(query_input[..., :, None],
    key_input[..., None, :])`` for ``(..., q_length)`` and ``(..., kv_length)`` inputs."""
    return F.make_attention_mask(query_input, key_input, pairwise_fn, extra_batch_dims, dtype)


def make_causal_mask(x: Array, extra_batch_dims: int = 0, dtype: Dtype = jnp.float32) -> Array:
    """A ``(..., 1, length, length)`` mask letting position ``i`` attend to ``j <= i``."""
    return F.make_causal_mask(x, extra_batch_dims, dtype)


def combine_masks(*masks: Array | None, dtype: Dtype = jnp.float32) -> Array | None:
    """The logical AND of the masks that are not ``None`` (``None`` if none is given)."""
    present = [m for m in masks if m is not None]
    assert all(m.ndim == present[0].ndim for m in present), (
        f"masks must have same rank: {tuple(m.ndim for m in present)}"
    )
    return F.combine_masks(*present, dtype=dtype)
