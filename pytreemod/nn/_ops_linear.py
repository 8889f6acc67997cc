"""Affine maps: ``linear``, the attention head projections, embedding lookup and ``attend``."""

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Float, Integer

from .._shapecheck import AnyArray, checked
from ._ops_common import promote_dtype


def _add_bias(y: jax.Array, bias: AnyArray | None) -> jax.Array:
    if bias is None:
        return y
    # Explicit broadcast (rank promotion may be "raise"), as Flax writes it.
    return y + jnp.reshape(bias, (1,) * (y.ndim - bias.ndim) + bias.shape)


@checked
def linear(
    x: Float[AnyArray, "*batch in_features"],
    kernel: Float[AnyArray, "in_features out_features"],
    bias: Float[AnyArray, " out_features"] | None = None,
    *,
    dtype: Any = None,
    precision: Any = None,
) -> Float[jax.Array, "*batch out_features"]:
    """``x @ kernel + bias`` over the last axis of ``x`` (Flax ``Dense``'s math).

    **Arguments:** ``x`` of shape ``(*batch, in_features)``; ``kernel`` of shape
    ``(in_features, out_features)``; optional ``bias`` of shape ``(out_features,)``;
    ``dtype``: computation dtype (default: the common dtype of the arguments);
    ``precision``: passed to ``lax.dot_general``.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.linear(jnp.ones((8, 3)), jnp.ones((3, 4)), jnp.zeros(4)).shape
    (8, 4)
    """
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    y = lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=precision)
    return _add_bias(y, bias)


@checked
def project_heads(
    x: Float[AnyArray, "*batch in_features"],
    kernel: Float[AnyArray, "in_features heads head_dim"],
    bias: Float[AnyArray, "heads head_dim"] | None = None,
    *,
    dtype: Any = None,
    precision: Any = None,
) -> Float[jax.Array, "*batch heads head_dim"]:
    """Project features to ``(heads, head_dim)`` (Flax ``DenseGeneral(features=(h, d))``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.project_heads(jnp.ones((2, 5, 16)), jnp.ones((16, 4, 8))).shape
    (2, 5, 4, 8)
    """
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    y = lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=precision)
    return _add_bias(y, bias)


@checked
def merge_heads(
    x: Float[AnyArray, "*batch heads head_dim"],
    kernel: Float[AnyArray, "heads head_dim out_features"],
    bias: Float[AnyArray, " out_features"] | None = None,
    *,
    dtype: Any = None,
    precision: Any = None,
) -> Float[jax.Array, "*batch out_features"]:
    """Project ``(heads, head_dim)`` back to features (Flax ``DenseGeneral(axis=(-2, -1))``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.merge_heads(jnp.ones((2, 5, 4, 8)), jnp.ones((4, 8, 16))).shape
    (2, 5, 16)
    """
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    dims = (((x.ndim - 2, x.ndim - 1), (0, 1)), ((), ()))
    y = lax.dot_general(x, kernel, dims, precision=precision)
    return _add_bias(y, bias)


@checked
def embed(
    ids: Integer[AnyArray, "*batch"],
    embedding: Float[AnyArray, "num_embeddings features"],
    *,
    dtype: Any = None,
) -> Float[jax.Array, "*batch features"]:
    """Look up rows of ``embedding`` (Flax ``Embed``): output ``(*ids.shape, features)``.

    Ids outside ``[0, num_embeddings)`` give NaN rows (``jnp.take``'s fill mode), as in
    Flax; negative ids are not wrapped.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.embed(jnp.array([[0, 2]]), jnp.eye(3)).shape
    (1, 2, 3)
    """
    if dtype is not None:
        embedding = jnp.asarray(embedding, dtype)
    if embedding.shape[0] == 1:
        return jnp.broadcast_to(embedding, (*ids.shape, embedding.shape[1]))
    return jnp.take(embedding, ids, axis=0)


@checked
def attend(
    query: Float[AnyArray, "*batch features"],
    embedding: Float[AnyArray, "num_embeddings features"],
    *,
    dtype: Any = None,
    precision: Any = None,
) -> Float[jax.Array, "*batch num_embeddings"]:
    """``query @ embedding.T``: logits over the vocabulary with a tied embedding.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.attend(jnp.ones((2, 3)), jnp.ones((10, 3))).shape
    (2, 10)
    """
    query, embedding = promote_dtype(query, embedding, dtype=dtype)
    dims = (((query.ndim - 1,), (1,)), ((), ()))
    return lax.dot_general(query, embedding, dims, precision=precision)
