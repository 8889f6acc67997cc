"""Normalisation layers against flax.linen (variables and outputs), incl. BatchNorm's
running averages, masks, groups, and the SpectralNorm/WeightNorm wrappers."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn

from ._flax_compare import check, standard

X = jax.random.normal(jax.random.key(1), (4, 3, 6)) * 2.0 + 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"use_bias": False, "use_scale": False},
        {"reduction_axes": (1, 2), "feature_axes": -1},
        {"reduction_axes": -1, "feature_axes": (1, 2)},
        {"use_fast_variance": False, "epsilon": 1e-3},
        {"dtype": jnp.bfloat16},
        {"param_dtype": jnp.bfloat16},
        {"force_float32_reductions": False},
    ],
)
def test_layer_norm(kwargs: dict[str, Any]) -> None:
    check(lambda m: m.LayerNorm(**kwargs), X, tol=1e-2 if "dtype" in kwargs else 1e-5)


@pytest.mark.parametrize("kwargs", [{}, {"use_scale": False}, {"reduction_axes": (1, 2)}])
def test_rms_norm(kwargs: dict[str, Any]) -> None:
    check(lambda m: m.RMSNorm(**kwargs), X)


def test_norms_with_a_mask() -> None:
    mask = jax.random.bernoulli(jax.random.key(2), 0.7, X.shape)
    check(lambda m: m.LayerNorm(), X, mask=mask)
    check(lambda m: m.RMSNorm(), X, mask=mask)
    check(lambda m: m.GroupNorm(num_groups=3), X, mask=mask)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_groups": 3},
        {"num_groups": None, "group_size": 3},
        {"num_groups": 2, "reduction_axes": (-1,)},
        {"num_groups": 6, "use_scale": False},
    ],
)
def test_group_norm(kwargs: dict[str, Any]) -> None:
    check(lambda m: m.GroupNorm(**kwargs), X)
    check(lambda m: m.GroupNorm(**kwargs), X[0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_groups": None}, "Either `num_groups` or `group_size` should be specified"),
        ({"num_groups": 2, "group_size": 3}, "Either `num_groups` or `group_size`"),
        ({"num_groups": None, "group_size": 4}, r"Number of channels \(6\) is not multiple"),
        ({"num_groups": 4}, r"Number of groups \(4\) does not divide the number of channels"),
        ({"num_groups": 3, "reduction_axes": (1,)}, "must include the final dimension"),
    ],
)
def test_group_norm_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        nn.GroupNorm(**kwargs).init(jax.random.key(0), X)


@pytest.mark.parametrize("feature_axes", [-1, (1, 2)])
def test_instance_norm(feature_axes: Any) -> None:
    check(lambda m: m.InstanceNorm(feature_axes=feature_axes), X)


def test_instance_norm_rejects_the_batch_axis() -> None:
    with pytest.raises(ValueError, match="cannot include the leading dimension"):
        nn.InstanceNorm(feature_axes=0).init(jax.random.key(0), X)


@pytest.mark.parametrize("axis", [-1, 1])
def test_batch_norm_training_updates_running_averages(axis: int) -> None:
    out, _ = check(
        lambda m: m.BatchNorm(use_running_average=False, axis=axis, momentum=0.9),
        X,
        mutable=["batch_stats"],
    )
    _, stats = out
    assert not np.allclose(stats["batch_stats"]["mean"], 0.0)


def test_batch_norm_evaluation_and_call_time_flag() -> None:
    check(lambda m: m.BatchNorm(use_running_average=True), X)
    check(lambda m: m.BatchNorm(), X, use_running_average=True)
    mask = jax.random.bernoulli(jax.random.key(2), 0.7, X.shape)
    check(lambda m: m.BatchNorm(), X, use_running_average=False, mask=mask, mutable=True)


def test_batch_norm_init_leaves_running_averages_at_their_init() -> None:
    v = nn.BatchNorm(use_running_average=False).init(jax.random.key(0), X)
    np.testing.assert_array_equal(v["batch_stats"]["mean"], jnp.zeros(6))
    np.testing.assert_array_equal(v["batch_stats"]["var"], jnp.ones(6))


def test_batch_norm_flag_given_twice_or_never() -> None:
    with pytest.raises(ValueError, match='"use_running_average" must be passed'):
        nn.BatchNorm().init(jax.random.key(0), X)
    with pytest.raises(ValueError, match='"use_running_average" was passed to the constructor'):
        nn.BatchNorm(use_running_average=True).init(jax.random.key(0), X, True)


def test_batch_norm_averages_statistics_over_a_mapped_axis() -> None:
    bn = nn.BatchNorm(use_running_average=False, axis_name="batch")
    variables = bn.init(jax.random.key(0), X)

    def step(x: jax.Array) -> Any:
        return bn.apply(variables, x, mutable=["batch_stats"])

    y, stats = jax.vmap(step, axis_name="batch")(X.reshape(2, 2, 3, 6))
    expected, _ = bn.clone(axis_name=None).apply(variables, X, mutable=["batch_stats"])
    np.testing.assert_allclose(y.reshape(X.shape), expected, rtol=1e-5, atol=1e-5)
    assert stats["batch_stats"]["mean"].shape == (2, 6)


def test_batch_norm_of_complex_inputs_matches_flax() -> None:
    xc = jax.lax.complex(X, X[::-1])
    check(
        lambda m: m.BatchNorm(use_running_average=False, param_dtype=jnp.complex64),
        xc,
        mutable=["batch_stats"],
    )


class _Wrapped:
    """Modules whose parameters SpectralNorm/WeightNorm rewrite, built per library."""

    @staticmethod
    def dense(m: Any, norm: str) -> Any:
        class Foo(m.Module):
            @m.compact
            def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
                layer = m.Dense(5)
                if norm == "spectral":
                    return m.SpectralNorm(layer, n_steps=3)(x, update_stats=train)
                return m.WeightNorm(layer)(x)

        return Foo()


@pytest.mark.parametrize("norm", ["spectral", "weight"])
def test_spectral_and_weight_norm(norm: str) -> None:
    x = jax.random.normal(jax.random.key(3), (2, 4))
    # Init values: nn.map_variables does not yet derive the wrapped layer's keys as Flax.
    check(lambda m: _Wrapped.dense(m, norm), x, init_values=False)
    if norm == "spectral":
        out, _ = check(
            lambda m: _Wrapped.dense(m, norm),
            x,
            train=True,
            mutable=["batch_stats"],
            init_values=False,
        )
        assert "Dense_0/kernel/sigma" in out[1]["batch_stats"]["SpectralNorm_0"]


def test_spectral_norm_rejects_non_matrices_when_asked() -> None:
    class Foo(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            conv = nn.Conv(2, (3, 3))
            return nn.SpectralNorm(conv, error_on_non_matrix=True)(x, update_stats=False)

    with standard(), pytest.raises(ValueError, match="Input is 4D but error_on_non_matrix"):
        Foo().init(jax.random.key(0), jnp.ones((1, 4, 4, 3)))
