"""LayerNorm, RMSNorm, GroupNorm, BatchNorm: numerics vs jnp and Flax; BatchNorm state."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytreemod as pm
from pytreemod.nn import functional as F

from ._compare import close, jcall, linen, make, randn, run_linen

Key = Callable[[], jax.Array]
normal = jax.nn.initializers.normal(1.0)


def _x(getkey: Key, shape: tuple[int, ...] = (4, 5, 6)) -> jax.Array:
    return 3.0 + 2.0 * randn(getkey(), shape)


# ----------------------------------------------------------------------------- LayerNorm


def test_layer_norm_matches_reference_and_flax(getkey: Key) -> None:
    nn = linen()
    norm = make(pm.nn.LayerNorm, 6, scale_init=normal, bias_init=normal, key=getkey())
    x = _x(getkey)

    def reference(norm: pm.nn.LayerNorm, x: jax.Array) -> jax.Array:
        assert norm.scale is not None and norm.bias is not None
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        scale, bias = norm.scale.value[None, None], norm.bias.value[None, None]
        return (x - mean) / jnp.sqrt(var + 1e-6) * scale + bias

    y = jcall(norm, x)
    close(y, jcall(reference, norm, x))
    close(y, run_linen(nn.LayerNorm(), pm.to_variables(norm), x))


def test_layer_norm_defaults_are_flax_defaults() -> None:
    nn = linen()
    norm = pm.nn.LayerNorm(6)
    assert norm.epsilon == nn.LayerNorm.epsilon == 1e-6
    assert norm.scale is not None and norm.bias is not None
    assert norm.scale.value.tolist() == [1.0] * 6 and norm.bias.value.tolist() == [0.0] * 6
    assert pm.nn.RMSNorm(6).epsilon == nn.RMSNorm.epsilon == 1e-6
    assert pm.nn.GroupNorm(6, 3).epsilon == nn.GroupNorm.epsilon == 1e-6
    bn = pm.nn.BatchNorm(6)
    flax_bn = (nn.BatchNorm.epsilon, nn.BatchNorm.momentum)
    assert (bn.epsilon, bn.momentum) == flax_bn == (1e-5, 0.99)


def test_layer_norm_options_match_flax(getkey: Key) -> None:
    nn = linen()
    x = _x(getkey)
    norm = make(
        pm.nn.LayerNorm,
        (5, 6),
        reduction_axes=(1, 2),
        feature_axes=(1, 2),
        use_bias=False,
        scale_init=normal,
        key=getkey(),
    )
    ref = run_linen(
        nn.LayerNorm(reduction_axes=(1, 2), feature_axes=(1, 2), use_bias=False),
        pm.to_variables(norm),
        x,
    )
    close(jcall(norm, x), ref)
    slow = pm.nn.LayerNorm(6, use_fast_variance=False)
    ref = run_linen(nn.LayerNorm(use_fast_variance=False), pm.to_variables(slow), x)
    close(jcall(slow, x), ref)


def test_layer_norm_in_bfloat16_keeps_float32_statistics() -> None:
    x = jnp.array([[100.0, 101.0, 102.0]], jnp.bfloat16)
    y = jcall(pm.nn.LayerNorm(3), x)
    assert y.dtype == jnp.float32  # the parameters are float32, as in Flax
    close(y, jnp.array([[-1.2247, 0.0, 1.2247]]), tol=1e-2)
    half = pm.nn.LayerNorm(3, dtype=jnp.bfloat16)
    assert jax.eval_shape(half, x).dtype == jnp.bfloat16


def test_layer_norm_with_mask_matches_flax(getkey: Key) -> None:
    nn = linen()
    x = _x(getkey)
    mask = jnp.arange(6)[None, None, :] < 4
    norm = pm.nn.LayerNorm(6)
    ref = run_linen(nn.LayerNorm(), pm.to_variables(norm), x, mask=mask)
    close(jcall(lambda m, v, k: m(v, mask=k), norm, x, mask), ref)


def test_layer_norm_feature_mismatch(getkey: Key) -> None:
    with pytest.raises(
        pm.ShapeError,
        match=r"LayerNorm.__call__\(x=f32\[4, 5, 6\]\): dimension 'features' does not agree: "
        r"scale is f32\[7\] but x f32\[4, 5, 6\] has \(6,\) at feature axes 2",
    ):
        jax.eval_shape(pm.nn.LayerNorm(7), _x(getkey))


# ----------------------------------------------------------------------------- RMSNorm


def test_rms_norm_matches_reference_and_flax(getkey: Key) -> None:
    nn = linen()
    norm = make(pm.nn.RMSNorm, 6, scale_init=normal, key=getkey())
    x = _x(getkey)

    def reference(norm: pm.nn.RMSNorm, x: jax.Array) -> jax.Array:
        assert norm.scale is not None
        rms = jnp.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)
        return x / rms * norm.scale.value[None, None]

    y = jcall(norm, x)
    close(y, jcall(reference, norm, x))
    close(y, run_linen(nn.RMSNorm(), pm.to_variables(norm), x))


# ----------------------------------------------------------------------------- GroupNorm


@pytest.mark.parametrize(("groups", "size"), [(3, None), (None, 1), (1, None)])
def test_group_norm_matches_reference_and_flax(
    getkey: Key, groups: int | None, size: int | None
) -> None:
    nn = linen()
    norm = make(
        pm.nn.GroupNorm,
        6,
        groups,
        group_size=size,
        scale_init=normal,
        bias_init=normal,
        key=getkey(),
    )
    x = _x(getkey, (2, 4, 5, 6))
    ref = run_linen(nn.GroupNorm(num_groups=groups, group_size=size), pm.to_variables(norm), x)
    y = jcall(norm, x)
    close(y, ref)

    def reference(norm: pm.nn.GroupNorm, x: jax.Array) -> jax.Array:
        g = norm.num_groups
        xg = x.reshape(2, 4, 5, g, 6 // g)
        mean = xg.mean((1, 2, 4), keepdims=True)
        var = ((xg - mean) ** 2).mean((1, 2, 4), keepdims=True)
        assert norm.scale is not None and norm.bias is not None
        out = ((xg - mean) / jnp.sqrt(var + 1e-6)).reshape(x.shape)
        return out * norm.scale.value.reshape(1, 1, 1, 6) + norm.bias.value.reshape(1, 1, 1, 6)

    close(y, jcall(reference, norm, x))


def test_group_norm_configuration_errors() -> None:
    with pytest.raises(pm.LayerConfigError, match=r"num_groups=4 does not divide the 6"):
        pm.nn.GroupNorm(6, 4)
    with pytest.raises(pm.LayerConfigError, match=r"exactly one of num_groups and group_size"):
        pm.nn.GroupNorm(6, 3, group_size=2)
    with pytest.raises(pm.LayerConfigError, match=r"GroupNorm: this scale_init needs a PRNG key"):
        pm.nn.GroupNorm(6, 3, scale_init=normal)


# ----------------------------------------------------------------------------- BatchNorm


def _bn_reference(x: jax.Array, mean: jax.Array, var: jax.Array, bn: pm.nn.BatchNorm) -> jax.Array:
    assert bn.scale is not None and bn.bias is not None
    return (x - mean) / jnp.sqrt(var + bn.epsilon) * bn.scale.value[None] + bn.bias.value[None]


def test_batch_norm_train_matches_reference_and_flax(getkey: Key) -> None:
    nn = linen()
    bn = make(pm.nn.BatchNorm, 6, momentum=0.9, scale_init=normal, bias_init=normal, key=getkey())
    x = _x(getkey, (8, 6))
    y, new = jcall(lambda m, v: pm.apply(m, v, mutable="batch_stats"), bn, x)
    mean, var = x.mean(0), x.var(0)
    close(y, jcall(_bn_reference, x, mean[None], var[None], bn))
    close(new.mean.value, 0.9 * bn.mean.value + 0.1 * mean)  # from random running stats
    close(new.var.value, 0.9 * bn.var.value + 0.1 * var)
    ref, updates = run_linen(
        nn.BatchNorm(use_running_average=False, momentum=0.9),
        pm.to_variables(bn),
        x,
        mutable=["batch_stats"],
    )
    close(y, ref)
    close(new.mean.value, updates["batch_stats"]["mean"])
    close(new.var.value, updates["batch_stats"]["var"])
    assert not jnp.allclose(bn.mean.value, new.mean.value)  # the input model is unchanged


def test_batch_norm_eval_reads_running_stats_and_writes_nothing(getkey: Key) -> None:
    nn = linen()
    bn = pm.nn.BatchNorm(6, use_running_average=True)
    bn = pm.tree_at(
        lambda m: (m.mean, m.var),
        bn,
        (pm.BatchStat(jnp.arange(6.0)), pm.BatchStat(jnp.full(6, 2.0))),
    )
    x = _x(getkey, (8, 6))
    y, same = pm.apply(bn, x, mutable=False)  # no collection mutable: eval only reads
    assert same is bn
    close(y, jcall(_bn_reference, x, jnp.arange(6.0)[None], jnp.full((1, 6), 2.0), bn))
    close(y, run_linen(nn.BatchNorm(use_running_average=True), pm.to_variables(bn), x))
    close(jcall(bn, x), y)  # eval works outside apply too


def test_batch_norm_train_outside_apply_or_immutable_is_an_error(getkey: Key) -> None:
    bn = pm.nn.BatchNorm(6)
    x = _x(getkey, (8, 6))
    with pytest.raises(pm.StateWriteError, match=r"outside pytreemod.apply"):
        bn(x)
    with pytest.raises(
        pm.StateWriteError, match=r"Cannot update \.mean: collection 'batch_stats' is not mutable"
    ):
        pm.apply(bn, x, mutable="params")

    class Net(pm.Module):
        blocks: tuple[pm.nn.BatchNorm, ...]

        def __call__(self, v: jax.Array) -> jax.Array:
            return self.blocks[0](v)

    with pytest.raises(pm.StateWriteError, match=r"Cannot update \.blocks\[0\]\.mean"):
        pm.apply(Net((bn,)), x, mutable="cache")


def test_batch_norm_call_argument_overrides_the_field(getkey: Key) -> None:
    bn = pm.nn.BatchNorm(6)
    x = _x(getkey, (8, 6))
    a, b = jcall(lambda m, v: (m(v, use_running_average=True), m(v, True)), bn, x)
    close(a, b)
    train = pm.nn.BatchNorm(6, use_running_average=True)
    _, new = jcall(lambda m, v: pm.apply(m, v, False, mutable="batch_stats"), train, x)
    assert not jnp.allclose(new.mean.value, 0.0)


def test_batch_norm_running_stats_over_several_steps_under_jit(getkey: Key) -> None:
    bn = pm.nn.BatchNorm(6, momentum=0.5)

    @pm.jit
    def step(model: pm.nn.BatchNorm, x: jax.Array) -> tuple[jax.Array, pm.nn.BatchNorm]:
        return pm.apply(model, x, mutable="batch_stats")

    xs = [_x(getkey, (8, 6)) for _ in range(3)]
    model = bn
    for x in xs:
        _, model = step(model, x)
    expected = jnp.zeros(6)
    for x in xs:
        expected = 0.5 * expected + 0.5 * x.mean(0)
    close(model.mean.value, expected)


def test_batch_norm_cross_replica_stats_under_vmap(getkey: Key) -> None:
    bn = pm.nn.BatchNorm(6, axis_name="batch", momentum=0.0)
    x = _x(getkey, (8, 6))

    def per_example(model: pm.nn.BatchNorm, xi: jax.Array) -> tuple[jax.Array, pm.nn.BatchNorm]:
        return pm.apply(model, xi, mutable="batch_stats")

    step = pm.jit(pm.vmap(per_example, in_axes=(None, 0), out_axes=(0, None), axis_name="batch"))
    y, new = step(bn, x)
    close(new.mean.value, x.mean(0))  # statistics over the whole mapped batch
    close(new.var.value, x.var(0))
    plain, _ = jcall(
        lambda m, v: pm.apply(m, v, mutable="batch_stats"), bn.replace(axis_name=None), x
    )
    close(y, plain)  # same as normalising the batch at once


def test_batch_norm_vmapped_ensemble_keeps_one_state_per_member(getkey: Key) -> None:
    models = pm.jit(pm.vmap(lambda _: pm.nn.BatchNorm(6, momentum=0.0)))(jnp.arange(3))
    xs = _x(getkey, (3, 8, 6))

    def run(m: pm.nn.BatchNorm, x: jax.Array) -> tuple[jax.Array, pm.nn.BatchNorm]:
        return pm.apply(m, x, mutable="batch_stats")

    _, new = pm.jit(pm.vmap(run))(models, xs)
    close(new.mean.value, xs.mean(1))


def test_batch_norm_multiple_feature_axes_match_flax(getkey: Key) -> None:
    nn = linen()
    bn = make(pm.nn.BatchNorm, (5, 6), axis=(1, 2), scale_init=normal, key=getkey())
    x = _x(getkey)
    y, new = jcall(lambda m, v: pm.apply(m, v, mutable="batch_stats"), bn, x)
    ref, updates = run_linen(
        nn.BatchNorm(use_running_average=False, axis=(1, 2)),
        pm.to_variables(bn),
        x,
        mutable=["batch_stats"],
    )
    close(y, ref)
    close(new.var.value, updates["batch_stats"]["var"])


def test_functional_batch_stats_pmean_matches_global(getkey: Key) -> None:
    x = _x(getkey, (4, 3, 6))
    mean, var = jax.jit(
        jax.vmap(lambda xi: F.batch_stats(xi, axis_name="i"), axis_name="i", out_axes=None)
    )(x)
    close(mean, x.reshape(-1, 6).mean(0))
    close(var, x.reshape(-1, 6).var(0))


# ------------------------------------------------------------------- normalize's arithmetic


@pytest.mark.parametrize(
    ("x_dtype", "stat_dtype", "param_dtype", "epsilon"),
    [
        (jnp.float32, jnp.float32, jnp.float32, 1e-5),
        (jnp.bfloat16, jnp.float32, jnp.float32, 1e-5),
        (jnp.bfloat16, jnp.bfloat16, jnp.bfloat16, 1e-3),
        (jnp.float32, jnp.float32, jnp.bfloat16, 1),  # an int epsilon, a bf16 scale and bias
        (jnp.float16, jnp.float32, jnp.complex64, 0.5),  # a complex scale makes it complex
    ],
)
def test_normalize_is_the_numpy_formula_bit_for_bit(
    getkey: Key, x_dtype: Any, stat_dtype: Any, param_dtype: Any, epsilon: float
) -> None:
    # normalize binds lax arithmetic directly where jax.numpy's promotion adds nothing;
    # the result must be exactly what the jax.numpy operators give, dtype included.
    x = _x(getkey, (3, 4, 6)).astype(x_dtype)
    mean = randn(getkey(), (6,)).astype(stat_dtype)
    var = (1.0 + jnp.abs(randn(getkey(), (6,)))).astype(stat_dtype)
    scale = randn(getkey(), (6,)).astype(param_dtype)
    bias = randn(getkey(), (6,)).astype(param_dtype)
    got = F.normalize(
        x, mean, var, scale, bias, reduction_axes=(0, 1), feature_axes=-1, epsilon=epsilon
    )
    with jax.numpy_dtype_promotion("standard"):
        m, v, s, b = (a.reshape(1, 1, 6) for a in (mean, var, scale, bias))
        y = x.astype(jnp.promote_types(x.dtype, var.dtype)) - m
        mul = jax.lax.rsqrt(v + epsilon) * s
        want = (y * mul + b).astype(jnp.result_type(x, scale, bias))
    assert got.dtype == want.dtype
    assert jnp.array_equal(got, want)


def test_numpy_float64_statistics_promote_as_jax_numpy_does() -> None:
    import warnings

    import numpy as np

    x = np.array([[3.0, 1.0]])  # float64, x64 off
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = F.batch_norm(x, np.array([1.0, 1.0]), np.array([4.0, 1.0]), epsilon=0.0)
    assert y.dtype == jnp.float32
    assert y.tolist() == [[1.0, 0.0]]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_default_norm_parameters_are_jax_numpys_ones_and_zeros(dtype: Any) -> None:
    # The norms build their default parameters and statistics without jax.numpy's
    # argument handling: the same arrays, and the same equations in an init's jaxpr.
    bn = pm.nn.BatchNorm(3, param_dtype=dtype)
    expected = (jnp.ones(3, dtype), jnp.zeros(3, dtype), jnp.zeros(3), jnp.ones(3))
    for got, want in zip((bn.scale, bn.bias, bn.mean, bn.var), expected, strict=True):
        assert got is not None and got.value.dtype == want.dtype
        np.testing.assert_array_equal(got.value, want)
    ours = jax.make_jaxpr(lambda: pm.nn.LayerNorm((2, 3), param_dtype=dtype))()
    theirs = jax.make_jaxpr(lambda: (jnp.ones((2, 3), dtype), jnp.zeros((2, 3), dtype)))()
    assert str(ours) == str(theirs)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_l2_normalize_gives_unit_rows_and_keeps_directions(rows: int, cols: int, seed: int) -> None:
    x = jax.random.normal(jax.random.key(seed), (rows, cols)) + 0.1
    unit = F.l2_normalize(x, axis=1)
    np.testing.assert_allclose(jnp.linalg.norm(unit, axis=1), np.ones(rows), rtol=1e-5)
    np.testing.assert_allclose(unit * jnp.linalg.norm(x, axis=1, keepdims=True), x, rtol=1e-5)
    whole = F.l2_normalize(x)  # every axis
    np.testing.assert_allclose(jnp.linalg.norm(whole), 1.0, rtol=1e-5)


def test_power_iteration_finds_the_largest_singular_value() -> None:
    matrix = jnp.asarray([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0], [0.2, 0.0, 0.1]])
    u = jnp.ones((1, 3))
    u, v, sigma = F.spectral_power_iteration(matrix, u, n_steps=50)
    top = np.linalg.svd(np.asarray(matrix), compute_uv=False)[0]
    np.testing.assert_allclose(sigma, top, rtol=1e-4)
    assert u.shape == (1, 3) and v.shape == (1, 4)
    grads = jax.grad(lambda m: F.spectral_power_iteration(m, jnp.ones((1, 3)), 1)[1].sum())(matrix)
    np.testing.assert_array_equal(grads, np.zeros_like(matrix))  # u and v carry no gradient
