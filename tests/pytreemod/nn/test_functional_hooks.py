"""The general functional ops the Linen adapters need: ``dense_general``,
``einsum_dense``, ``conv_local``, and the replaceable dot/conv/einsum hooks."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pytreemod as pm
from pytreemod.nn import functional as F

from ._compare import close, linen, randn, run_linen


@pytest.mark.parametrize(
    ("x_shape", "kernel_shape", "axis", "batch_dims", "equation"),
    [
        ((2, 3, 4), (4, 5), -1, (), "abc,cd->abd"),
        ((2, 3, 4), (3, 4, 5, 6), (1, 2), (), "abc,bcde->ade"),
        ((2, 3, 4), (2, 4, 5), -1, (0,), "abc,acd->abd"),
        ((2, 3, 4, 5), (2, 3, 5, 7), 3, (0, 1), "abcd,abde->abce"),
        ((2, 3, 4), (2, 7), 0, (), "abc,ad->bcd"),
    ],
)
def test_dense_general_matches_einsum(
    getkey: Any,
    x_shape: tuple[int, ...],
    kernel_shape: tuple[int, ...],
    axis: Any,
    batch_dims: Any,
    equation: str,
) -> None:
    x, kernel = randn(getkey(), x_shape), randn(getkey(), kernel_shape)
    y = F.dense_general(x, kernel, axis=axis, batch_dims=batch_dims)
    close(y, jnp.einsum(equation, x, kernel))


def test_dense_general_bias_broadcasts_over_kept_axes(getkey: Any) -> None:
    x, kernel, bias = (
        randn(getkey(), (2, 3, 4)),
        randn(getkey(), (2, 4, 5)),
        randn(getkey(), (2, 5)),
    )
    y = F.dense_general(x, kernel, bias, batch_dims=(0,))
    close(y, jnp.einsum("abc,acd->abd", x, kernel) + bias[:, None, :])


def test_dense_general_takes_complex_arrays() -> None:
    x = jnp.ones((2, 3), jnp.complex64) * (1 + 1j)
    y = F.dense_general(x, jnp.ones((3, 4), jnp.float32))
    assert y.dtype == jnp.complex64
    close(y, jnp.full((2, 4), 3 + 3j))


def test_dense_general_rejects_a_kernel_of_other_sizes() -> None:
    with pytest.raises(pm.ShapeError, match="does not start with x's batch and contracted"):
        F.dense_general(jnp.ones((2, 3)), jnp.ones((4, 5)))


def test_dot_general_hooks_are_called() -> None:
    calls: list[Any] = []

    def dot(lhs: Any, rhs: Any, dims: Any, precision: Any = None, **kw: Any) -> Any:
        calls.append(dims)
        return 2 * lax.dot_general(lhs, rhs, dims, precision=precision)

    x, kernel = jnp.ones((2, 3)), jnp.ones((3, 4))
    close(F.linear(x, kernel, dot_general=dot), 6 * jnp.ones((2, 4)))
    close(F.dense_general(x, kernel, dot_general=dot), 6 * jnp.ones((2, 4)))
    assert calls == [(((1,), (0,)), ((), ()))] * 2


def test_conv_hook_is_called() -> None:
    seen: list[str] = []

    def conv_fn(*args: Any, **kwargs: Any) -> Any:
        seen.append("conv")
        return lax.conv_general_dilated(*args, **kwargs)

    y = F.conv(jnp.ones((1, 5, 2)), jnp.ones((3, 2, 4)), conv_general_dilated=conv_fn)
    assert seen == ["conv"] and y.shape == (1, 5, 4)


def test_conv_transpose_preferred_element_type() -> None:
    x, kernel = jnp.ones((1, 4, 2), jnp.bfloat16), jnp.ones((3, 2, 5), jnp.bfloat16)
    y = F.conv_transpose(x, kernel, preferred_element_type=jnp.float32)
    assert y.dtype == jnp.float32


@pytest.mark.parametrize(
    ("equation", "x_shape", "kernel_shape", "bias_shape", "broadcast"),
    [
        ("abc,cde->abde", (3, 4, 5), (5, 6, 7), (6, 7), (1, 1, 6, 7)),
        ("ab...,bc...->a...c", (3, 4, 6), (4, 5, 6), (6, 5), (1, 6, 5)),
        ("a b c , c d -> a b d", (3, 4, 5), (5, 2), (2,), (1, 1, 2)),
    ],
)
def test_einsum_dense_bias_shapes_and_values(
    getkey: Any,
    equation: str,
    x_shape: tuple[int, ...],
    kernel_shape: tuple[int, ...],
    bias_shape: tuple[int, ...],
    broadcast: tuple[int, ...],
) -> None:
    assert F.einsum_bias_shape(equation, x_shape, kernel_shape) == (bias_shape, broadcast)
    x, kernel, bias = (
        randn(getkey(), x_shape),
        randn(getkey(), kernel_shape),
        randn(getkey(), bias_shape),
    )
    y = F.einsum_dense(x, kernel, bias, equation=equation)
    close(y, jnp.einsum(equation.replace(" ", ""), x, kernel) + bias.reshape(broadcast))


@pytest.mark.parametrize("padding", ["SAME", "VALID", "CIRCULAR", ((1, 0),)])
def test_conv_local_matches_flax(getkey: Any, padding: Any) -> None:
    nn = linen()
    x = randn(getkey(), (2, 7, 3))
    kernel_shape, bias_shape = F.conv_local_shapes(x.shape, (3,), 4, padding=padding)
    kernel, bias = randn(getkey(), kernel_shape), randn(getkey(), bias_shape)
    layer = nn.ConvLocal(4, (3,), padding=padding)
    ref = run_linen(layer, {"params": {"kernel": kernel, "bias": bias}}, x)
    close(F.conv_local(x, kernel, bias, kernel_size=(3,), padding=padding), ref)


def test_conv_local_shapes_follow_strides() -> None:
    assert F.conv_local_shapes((1, 8, 8, 2), (3, 3), 5, strides=2) == ((4, 4, 18, 5), (4, 4, 5))


def test_compute_stats_of_complex_inputs_is_real_variance() -> None:
    x = jnp.array([[1 + 1j, -1 - 1j, 2j, 0j]], jnp.complex64)
    mean, var = F.compute_stats(x, -1)
    assert mean is not None and var.dtype == jnp.float32
    close(var, np.var(np.asarray(x), axis=-1))
    y = F.normalize(x, mean, var, None, None, reduction_axes=-1, feature_axes=-1, epsilon=0.0)
    assert y.dtype == jnp.complex64


def test_compute_stats_in_low_precision_when_not_forced() -> None:
    x = jnp.ones((2, 4), jnp.bfloat16)
    _, var = F.compute_stats(x, -1, force_float32_reductions=False)
    assert var.dtype == jnp.bfloat16
    _, var32 = F.compute_stats(x, -1)
    assert var32.dtype == jnp.float32


def test_attention_hooks(getkey: Any) -> None:
    q = randn(getkey(), (2, 5, 3, 4)).astype(jnp.bfloat16)
    recorded: list[jax.Array] = []
    w = F.dot_product_attention_weights(
        q, q, force_fp32_for_softmax=True, on_weights=recorded.append
    )
    assert w.dtype == jnp.float32 and recorded[0] is w
    assert F.dot_product_attention_weights(q, q).dtype == jnp.bfloat16
    used: list[str] = []

    def einsum(eq: str, a: Any, b: Any) -> Any:
        used.append(eq)
        return jnp.einsum(eq, a, b)

    x = randn(getkey(), (2, 5, 3, 4))
    y = F.dot_product_attention(x, x, x, qk_einsum=einsum, av_einsum=einsum)
    assert used == ["...qhd,...khd->...hqk", "...hqk,...khd->...qhd"]
    close(y, F.dot_product_attention(x, x, x))


def test_attention_hook_combinations_that_conflict() -> None:
    x = jnp.ones((1, 4, 1, 2))
    with pytest.raises(pm.LayerConfigError, match="must be given together"):
        F.dot_product_attention(x, x, x, qk_einsum=jnp.einsum)
    with pytest.raises(pm.LayerConfigError, match="mutually exclusive"):
        F.dot_product_attention(
            x, x, x, precision=lax.Precision.HIGHEST, qk_einsum=jnp.einsum, av_einsum=jnp.einsum
        )


def test_attention_of_complex_inputs() -> None:
    x = jax.lax.complex(jnp.ones((2, 3, 1, 2)), jnp.zeros((2, 3, 1, 2)))
    y = F.dot_product_attention(x, x, x)
    assert y.dtype == jnp.complex64
    close(y, x)
