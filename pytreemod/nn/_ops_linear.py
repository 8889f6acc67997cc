"""Affine maps: ``linear``, the attention head projections, embedding lookup and ``attend``."""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Float, Inexact, Integer

from .._shapecheck import AnyArray, checked, fail, python_numbers, summary
from .._sharding._ops import (
    constrain,
    contraction,
    einsum_contraction,
    gather_rows,
    match_trailing,
    out_kwargs,
    sharding_errors,
)
from ._ops_common import promote_dtype


def _add_bias(y: jax.Array, bias: AnyArray | None) -> jax.Array:
    if bias is None:
        return y
    b: Any = match_trailing(bias, y)
    # Explicit broadcast (rank promotion may be "raise"), as Flax writes it.
    return y + jnp.reshape(b, (1,) * (y.ndim - b.ndim) + b.shape)


DotGeneral = Callable[..., Any]
"""A function with ``lax.dot_general``'s signature (e.g. an fp8 or quantised one)."""


@checked
def linear(
    x: Inexact[AnyArray, "*batch in_features"],
    kernel: Inexact[AnyArray, "in_features out_features"],
    bias: Inexact[AnyArray, " out_features"] | None = None,
    *,
    dtype: Any = None,
    precision: Any = None,
    dot_general: DotGeneral | None = None,
    out_sharding: Any = None,
) -> Inexact[jax.Array, "*batch out_features"]:
    """``x @ kernel + bias`` over the last axis of ``x`` (Flax ``Dense``'s math).

    **Arguments:** ``x`` of shape ``(*batch, in_features)``; ``kernel`` of shape
    ``(in_features, out_features)``; optional ``bias`` of shape ``(out_features,)``;
    ``dtype``: computation dtype (default: the common dtype of the arguments);
    ``precision``: passed to ``lax.dot_general``; ``dot_general``: a replacement for
    ``lax.dot_general`` (same signature).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.linear(jnp.ones((8, 3)), jnp.ones((3, 4)), jnp.zeros(4)).shape
    (8, 4)
    """
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    dot = dot_general or lax.dot_general
    x, kernel, derived = contraction(x, kernel, (x.ndim - 1,), (0,), op="linear")
    kw = out_kwargs(out_sharding, derived, x, kernel)
    with sharding_errors("linear", x=x, kernel=kernel):
        y = dot(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=precision, **kw)
        return constrain(_add_bias(y, bias), out_sharding, x, kernel)


def _axes(ndim: int, axes: int | Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(a % ndim for a in ((axes,) if isinstance(axes, int) else axes)))


@python_numbers
def dense_general(
    x: AnyArray,
    kernel: AnyArray,
    bias: AnyArray | None = None,
    *,
    axis: int | Sequence[int] = -1,
    batch_dims: int | Sequence[int] = (),
    dtype: Any = None,
    precision: Any = None,
    dot_general: DotGeneral | None = None,
    out_sharding: Any = None,
) -> jax.Array:
    """Contract ``axis`` of ``x`` with a kernel (Flax ``DenseGeneral``'s math).

    ``kernel`` is ``(*batch_shape, *contracted_shape, *features)`` where ``batch_shape``
    is ``x``'s shape at ``batch_dims`` (leading axes, one kernel per index) and
    ``contracted_shape`` at ``axis``; ``bias`` is ``(*batch_shape, *features)``. The output
    keeps ``x``'s other axes in order, then ``features``. Any inexact dtype (complex too).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.dense_general(jnp.ones((2, 3, 4)), jnp.ones((3, 4, 5)), axis=(1, 2)).shape
    (2, 5)
    """
    ndim = x.ndim
    axes, batch = _axes(ndim, axis), _axes(ndim, batch_dims)
    n_batch, n_axis = len(batch), len(axes)
    expected = tuple(x.shape[a] for a in batch) + tuple(x.shape[a] for a in axes)
    if tuple(kernel.shape[: n_batch + n_axis]) != expected:
        fail(
            "dense_general",
            f"kernel {summary(kernel)} does not start with x's batch and contracted sizes "
            f"{expected} (x {summary(x)}, axis={axes}, batch_dims={batch})",
        )
    features = tuple(kernel.shape[n_batch + n_axis :])
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    dot = dot_general or lax.dot_general
    contract = tuple(range(n_batch, n_batch + n_axis))
    dims = ((axes, contract), (batch, tuple(range(n_batch))))
    x, kernel, derived = contraction(
        x, kernel, axes, contract, batch, tuple(range(n_batch)), op="dense_general"
    )
    kw = out_kwargs(out_sharding, derived, x, kernel)
    with sharding_errors("dense_general", x=x, kernel=kernel):
        y = dot(x, kernel, dims, precision=precision, **kw)
        if bias is not None:
            kept = [a for a in range(ndim) if a not in axes]
            lead = tuple(x.shape[a] if a in batch else 1 for a in kept)
            y = y + match_trailing(jnp.reshape(bias, lead + features), y)
        return constrain(y, out_sharding, x, kernel)


@checked
def project_heads(
    x: Float[AnyArray, "*batch in_features"],
    kernel: Float[AnyArray, "in_features heads head_dim"],
    bias: Float[AnyArray, "heads head_dim"] | None = None,
    *,
    dtype: Any = None,
    precision: Any = None,
    out_sharding: Any = None,
) -> Float[jax.Array, "*batch heads head_dim"]:
    """Project features to ``(heads, head_dim)`` (Flax ``DenseGeneral(features=(h, d))``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.project_heads(jnp.ones((2, 5, 16)), jnp.ones((16, 4, 8))).shape
    (2, 5, 4, 8)
    """
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    x, kernel, derived = contraction(x, kernel, (x.ndim - 1,), (0,), op="project_heads")
    kw = out_kwargs(out_sharding, derived, x, kernel)
    with sharding_errors("project_heads", x=x, kernel=kernel):
        y = lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=precision, **kw)
        return constrain(_add_bias(y, bias), out_sharding, x, kernel)


@checked
def merge_heads(
    x: Float[AnyArray, "*batch heads head_dim"],
    kernel: Float[AnyArray, "heads head_dim out_features"],
    bias: Float[AnyArray, " out_features"] | None = None,
    *,
    dtype: Any = None,
    precision: Any = None,
    out_sharding: Any = None,
) -> Float[jax.Array, "*batch out_features"]:
    """Project ``(heads, head_dim)`` back to features (Flax ``DenseGeneral(axis=(-2, -1))``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.merge_heads(jnp.ones((2, 5, 4, 8)), jnp.ones((4, 8, 16))).shape
    (2, 5, 16)
    """
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    dims = (((x.ndim - 2, x.ndim - 1), (0, 1)), ((), ()))
    x, kernel, derived = contraction(x, kernel, dims[0][0], (0, 1), op="merge_heads")
    kw = out_kwargs(out_sharding, derived, x, kernel)
    with sharding_errors("merge_heads", x=x, kernel=kernel):
        y = lax.dot_general(x, kernel, dims, precision=precision, **kw)
        return constrain(_add_bias(y, bias), out_sharding, x, kernel)


@checked
def embed(
    ids: Integer[AnyArray, "*batch"],
    embedding: Inexact[AnyArray, "num_embeddings features"],
    *,
    dtype: Any = None,
    out_sharding: Any = None,
) -> Inexact[jax.Array, "*batch features"]:
    """Look up rows of ``embedding`` (Flax ``Embed``): output ``(*ids.shape, features)``.

    As in Flax (``jnp.take``): ids ``>= num_embeddings`` give NaN rows, and negative ids
    down to ``-num_embeddings`` count from the end (the ``Embedding`` layer rejects both
    eagerly and gives NaN rows for both under ``jit``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.embed(jnp.array([[0, 2]]), jnp.eye(3)).shape
    (1, 2, 3)
    """
    if dtype is not None:
        embedding = jnp.asarray(embedding, dtype)
    if embedding.shape[0] == 1:
        return jnp.broadcast_to(embedding, (*ids.shape, embedding.shape[1]))
    embedding, derived = gather_rows(embedding, ids, op="embed")
    kw = out_kwargs(out_sharding, derived, embedding, ids)
    if not kw:
        return constrain(jnp.take(embedding, ids, axis=0), out_sharding, embedding, ids)
    with sharding_errors("embed", embedding=embedding, ids=ids):
        # jnp.take's semantics (negative ids count from the end, ids past the end give
        # NaN rows) with the output sharding stated.
        return jnp.asarray(embedding).at[ids].get(mode="fill", **kw)


@checked
def attend(
    query: Inexact[AnyArray, "*batch features"],
    embedding: Inexact[AnyArray, "num_embeddings features"],
    *,
    dtype: Any = None,
    precision: Any = None,
    out_sharding: Any = None,
) -> Inexact[jax.Array, "*batch num_embeddings"]:
    """``query @ embedding.T``: logits over the vocabulary with a tied embedding.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.attend(jnp.ones((2, 3)), jnp.ones((10, 3))).shape
    (2, 10)
    """
    query, embedding = promote_dtype(query, embedding, dtype=dtype)
    dims = (((query.ndim - 1,), (1,)), ((), ()))
    query, embedding, derived = contraction(query, embedding, (query.ndim - 1,), (1,), op="attend")
    kw = out_kwargs(out_sharding, derived, query, embedding)
    with sharding_errors("attend", query=query, embedding=embedding):
        y = lax.dot_general(query, embedding, dims, precision=precision, **kw)
        return constrain(y, out_sharding, query, embedding)


@python_numbers
def einsum_bias_shape(
    equation: str, x_shape: Sequence[int], kernel_shape: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The bias of an ``einsum_dense``: its shape (the output's axes that come from the
    kernel, in output order) and that shape broadcast against the output.

    >>> einsum_bias_shape("abc,cde->abde", (3, 4, 5), (5, 6, 7))
    ((6, 7), (1, 1, 6, 7))
    """
    from opt_einsum import parser as einsum_parser

    x = jax.ShapeDtypeStruct(tuple(x_shape), jnp.float32)
    k = jax.ShapeDtypeStruct(tuple(kernel_shape), jnp.float32)
    inputs, result, _ = einsum_parser.parse_einsum_input((equation.replace(" ", ""), x, k))
    kernel_axes = {c: i for i, c in enumerate(inputs.split(",")[1])}
    bias = tuple(kernel_shape[kernel_axes[c]] for c in result if c in kernel_axes)
    broadcast = tuple(kernel_shape[kernel_axes[c]] if c in kernel_axes else 1 for c in result)
    return bias, broadcast


def einsum_dense(
    x: AnyArray,
    kernel: AnyArray,
    bias: AnyArray | None = None,
    *,
    equation: str,
    dtype: Any = None,
    precision: Any = None,
    preferred_element_type: Any = None,
    out_sharding: Any = None,
    einsum_op: Callable[..., Any] | None = None,
) -> jax.Array:
    """``einsum(equation, x, kernel) + bias`` (Flax ``Einsum``'s math); ``bias`` has the
    shape ``einsum_bias_shape`` gives. ``einsum_op``: a replacement for ``jnp.einsum``
    (same signature); it is given ``preferred_element_type`` only when that is set.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.einsum_dense(jnp.ones((3, 5)), jnp.ones((5, 2)), jnp.ones(2), equation="ab,bc->ac")
    Array([[6., 6.],
           [6., 6.],
           [6., 6.]], dtype=float32)
    """
    equation = equation.replace(" ", "")
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    x, kernel, derived = einsum_contraction(equation, x, kernel, op="einsum_dense")
    kw = out_kwargs(out_sharding, derived, x, kernel)
    with sharding_errors("einsum_dense", x=x, kernel=kernel):
        if einsum_op is None:
            y = jnp.einsum(
                equation,
                x,
                kernel,
                precision=precision,
                preferred_element_type=preferred_element_type,
                **kw,
            )
        else:
            if preferred_element_type is not None:
                kw = {**kw, "preferred_element_type": preferred_element_type}
            y = einsum_op(equation, x, kernel, precision=precision, **kw)
        if bias is not None:
            _, broadcast = einsum_bias_shape(equation, x.shape, kernel.shape)
            y = y + match_trailing(jnp.reshape(bias, broadcast), y)
        return constrain(y, out_sharding, x, kernel)
