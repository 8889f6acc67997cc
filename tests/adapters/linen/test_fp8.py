"""fp8 ops: the quantisation helpers equal Flax's, the fp8 dot products stay close to
the float32 ones, and the scales/histories are updated through their gradients."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn
from adapters.linen import fp8_ops

from ._flax_compare import standard


def _flax_fp8() -> Any:
    return pytest.importorskip("flax.linen.fp8_ops")


def test_helpers_match_flax() -> None:
    ref = _flax_fp8()
    x = jax.random.normal(jax.random.key(0), (8, 4)) * 30.0
    scale = jnp.array([0.5])
    history = jnp.array([3.0, 7.0, 0.0])
    e4m3 = jnp.float8_e4m3fn
    for name, args in [
        ("quantize", (x, e4m3, scale, jnp.float32)),
        ("qdq", (x, e4m3, scale, jnp.float32)),
        ("compute_scale", (jnp.float32(7.0), scale, jnp.float32(448.0))),
        ("compute_amax_history", (x, history)),
        ("update_fp8_meta", (x, e4m3, scale, history)),
        ("quantize_dequantize_update", (x, e4m3, scale, history, jnp.float32)),
    ]:
        ours, theirs = getattr(fp8_ops, name)(*args), getattr(ref, name)(*args)
        jax.tree.map(
            lambda a, b: np.testing.assert_array_equal(
                np.asarray(a, np.float32), np.asarray(b, np.float32)
            ),
            ours,
            theirs,
        )


def test_scale_keeps_its_old_value_for_zero_or_infinite_amax() -> None:
    old = jnp.float32(2.0)
    assert fp8_ops.compute_scale(jnp.float32(0.0), old, 448.0) == old
    assert fp8_ops.compute_scale(jnp.float32(jnp.inf), old, 448.0) == old
    np.testing.assert_allclose(fp8_ops.compute_scale(jnp.float32(448.0), old, 448.0), 1.0)


def _representable(x: jax.Array, dtype: Any) -> jax.Array:
    return fp8_ops.qdq(x, dtype, jnp.ones((1,)), jnp.float32)


@pytest.mark.parametrize("eqn", ["mk,kn->mn", "...k,nk->...n"])
def test_fp8_einsum_is_close_to_einsum(eqn: str) -> None:
    x = _representable(jax.random.normal(jax.random.key(1), (2, 8, 16)), jnp.float8_e4m3fn)
    w_shape = (16, 32) if eqn.startswith("mk") else (32, 16)
    w = _representable(jax.random.normal(jax.random.key(2), w_shape), jnp.float8_e4m3fn)
    x = x[0] if eqn.startswith("mk") else x
    layer = nn.Fp8Einsum()
    variables = layer.init(jax.random.key(0), eqn, x, w)
    assert set(variables) == {fp8_ops.OVERWRITE_WITH_GRADIENT}
    out = jax.jit(lambda v, a, b: layer.apply(v, eqn, a, b))(variables, x, w)
    np.testing.assert_allclose(out, jnp.einsum(eqn, x, w), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("quant_cls", [nn.Fp8DotGeneral, nn.NANOOFp8DotGeneralOp])
def test_dense_with_injected_fp8_dot_general(quant_cls: Any) -> None:
    e4m3 = jnp.float8_e4m3fn if quant_cls is nn.Fp8DotGeneral else jnp.float8_e4m3fnuz
    x = _representable(jax.random.uniform(jax.random.key(1), (16, 32)), e4m3)
    plain = nn.DenseGeneral(64)
    fp8 = nn.DenseGeneral(64, dot_general_cls=quant_cls)
    with standard():
        variables = jax.jit(fp8.init)(jax.random.key(0), x)
    state = variables[fp8_ops.OVERWRITE_WITH_GRADIENT][f"{quant_cls.__name__}_0"]
    assert {k: v.shape for k, v in state.items()} == {
        "input_amax_history": (1024,),
        "kernel_amax_history": (1024,),
        "output_grad_amax_history": (1024,),
        "input_scale": (1,),
        "kernel_scale": (1,),
        "output_grad_scale": (1,),
    }

    def loss(module: Any, v: Any) -> jax.Array:
        return jnp.mean(module.apply(v, x))

    with standard():
        y_plain = loss(plain, {"params": variables["params"]})
        y_fp8, grads = jax.jit(jax.value_and_grad(lambda v: loss(fp8, v)))(variables)
    np.testing.assert_allclose(y_fp8, y_plain, atol=1e-2)
    new_state = grads[fp8_ops.OVERWRITE_WITH_GRADIENT][f"{quant_cls.__name__}_0"]
    np.testing.assert_allclose(new_state["input_amax_history"][0], jnp.max(jnp.abs(x)))


def test_meta_dtype_accumulates_reused_statistics_by_max() -> None:
    f32 = jnp.dtype("float32")

    def outer(x: jax.Array, history: jax.Array, scale: jax.Array) -> jax.Array:
        h = jax.lax.convert_element_type(history, fp8_ops.fp32_max_grad)
        s = jax.lax.convert_element_type(scale, fp8_ops.fp32_max_grad)

        def body(carry: jax.Array, _: Any) -> tuple[jax.Array, None]:
            return fp8_ops.in_qdq(f32, jnp.float8_e4m3fn, carry, s, h), None

        out, _ = jax.lax.scan(body, jnp.array([x], f32), None, length=3)
        return out[0]

    grad = jax.jit(jax.grad(outer, (0, 1, 2)))
    _, history, scale = grad(2.0, jnp.zeros(3), jnp.ones(1))
    np.testing.assert_allclose(history, [2.0, 0.0, 0.0])
    _, history, scale = grad(3.0, history, scale)
    np.testing.assert_allclose(history, [3.0, 0.0, 2.0])
    np.testing.assert_allclose(scale, [2.0 / 448])


def test_fixed_precision_warnings_and_deprecation() -> None:
    x = jnp.ones((2, 3))
    dims = (((1,), (0,)), ((), ()))
    with pytest.warns(UserWarning, match="will set the precision/preferred_element_type"):
        fp8_ops.dot_general_with_precision(x, x.T, dims, jax.lax.Precision.HIGHEST)
    one, history = jnp.ones((1,)), jnp.zeros((4,))
    with pytest.warns(UserWarning, match='will set the "precision"'):
        fp8_ops.fp8_scaled_dot_general(
            x,
            x.T,
            dims,
            jax.lax.Precision.HIGHEST,
            jnp.float32,
            lhs_scale=one,
            rhs_scale=one,
            grad_scale=one,
            lhs_amax_history=history,
            rhs_amax_history=history,
            grad_amax_history=history,
        )
    with pytest.warns(DeprecationWarning, match="The Fp8DotGeneralOp is deprecated"):
        nn.Fp8DotGeneralOp()
