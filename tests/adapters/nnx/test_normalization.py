"""adapters.nnx normalization layers against flax.nnx 0.12.8 (the reference): the same
parameters and running averages, the same outputs bit for bit, the same errors."""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters import nnx

X = jax.random.normal(jax.random.key(0), (2, 3, 8))


def _flat(module, lib):
    return {
        tuple(map(str, path)): np.asarray(v[...])
        for path, v in lib.to_flat_state(lib.state(module))
    }


def _assert_same(ours, theirs):
    a, b = _flat(ours, nnx), _flat(theirs, fnnx)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=str(k))


BUILDERS = {
    "batch": lambda lib: lib.BatchNorm(8, momentum=0.9, rngs=lib.Rngs(0)),
    "layer": lambda lib: lib.LayerNorm(
        8, reduction_axes=(1, 2), use_fast_variance=False, rngs=lib.Rngs(0)
    ),
    "rms": lambda lib: lib.RMSNorm(8, rngs=lib.Rngs(0)),
    "group": lambda lib: lib.GroupNorm(8, num_groups=None, group_size=2, rngs=lib.Rngs(0)),
    "instance": lambda lib: lib.InstanceNorm(
        8, dtype=jnp.float16, param_dtype=jnp.bfloat16, use_scale=False, rngs=lib.Rngs(0)
    ),
    "spectral": lambda lib: lib.SpectralNorm(
        lib.Linear(8, 5, rngs=lib.Rngs(0)), n_steps=3, rngs=lib.Rngs(1)
    ),
    "weight": lambda lib: lib.WeightNorm(
        lib.Linear(8, 5, rngs=lib.Rngs(0)), feature_axes=None, rngs=lib.Rngs(1)
    ),
}


def _zoo(lib):
    return {name: build(lib) for name, build in BUILDERS.items()}


def _call_all(zoo, x):
    return {name: layer(x) for name, layer in zoo.items()}


def test_matches_flax_twice():
    # Every layer in one compiled call per library (compilations are the cost here).
    ours, theirs = _zoo(nnx), _zoo(fnnx)
    for name in BUILDERS:
        _assert_same(ours[name], theirs[name])
    for _ in range(2):  # the second call sees the state the first one left
        with jax.numpy_dtype_promotion("standard"):  # flax mixes dtypes implicitly
            expected = fnnx.jit(_call_all)(theirs, X)
        got = nnx.jit(_call_all)(ours, X)
        for name in BUILDERS:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
            _assert_same(ours[name], theirs[name])


def _call(module, x):
    return module(x)


def test_batchnorm_modes_and_mask():
    ours, theirs = BUILDERS["batch"](nnx), BUILDERS["batch"](fnnx)
    mask = X > 0
    np.testing.assert_array_equal(
        nnx.jit(_call_masked)(ours, X, mask), fnnx.jit(_call_masked)(theirs, X, mask)
    )
    _assert_same(ours, theirs)
    ours.eval()
    theirs.eval()
    before = np.asarray(ours.mean[...])
    np.testing.assert_array_equal(nnx.jit(_call)(ours, X), fnnx.jit(_call)(theirs, X))
    np.testing.assert_array_equal(ours.mean[...], before)  # evaluation leaves them alone
    assert type(ours.mean) is nnx.BatchStat and type(ours.scale) is nnx.Param


def _call_masked(module, x, mask):
    return module(x, mask=mask)


def test_metadata_and_absent_params():
    layer = nnx.LayerNorm(3, use_bias=False, scale_metadata={"note": "x"}, rngs=nnx.Rngs(0))
    assert layer.bias is None and layer.scale.note == "x"
    assert [p for p, _ in nnx.to_flat_state(nnx.state(layer))] == [("scale",)]


class _Cube(nnx.Module):
    """A layer with one rank-3 parameter."""

    def __init__(self):
        self.kernel = nnx.Param(jnp.ones((2, 3, 4)))

    def __call__(self, x):
        return x @ self.kernel[...].reshape(6, 4)


def test_spectralnorm_stats_are_batchstats_keyed_by_path():
    cube = nnx.SpectralNorm(_Cube(), rngs=nnx.Rngs(1))
    assert sorted(cube.batch_stats) == [("kernel", "sigma"), ("kernel", "u")]
    assert cube.batch_stats[("kernel", "u")].shape == (1, 4)  # the kernel as (6, 4)
    u = np.asarray(cube.batch_stats[("kernel", "u")][...])
    cube.eval()  # update_stats=False
    nnx.jit(_call)(cube, jnp.ones((1, 6)))
    np.testing.assert_array_equal(cube.batch_stats[("kernel", "u")][...], u)
    nnx.jit(_call)(cube, jnp.ones((1, 6)))  # the kernel was normalised in place
    assert cube.layer_instance.kernel.shape == (2, 3, 4)
    cube.train()
    nnx.jit(_call)(cube, jnp.ones((1, 6)))
    assert not np.array_equal(cube.batch_stats[("kernel", "u")][...], u)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: nnx.GroupNorm(6, num_groups=None, rngs=nnx.Rngs(0)), "Either `num_groups`"),
        (lambda: nnx.GroupNorm(6, num_groups=4, rngs=nnx.Rngs(0)), r"Number of groups \(4\)"),
        (
            lambda: nnx.GroupNorm(6, num_groups=None, group_size=4, rngs=nnx.Rngs(0)),
            r"Number of features \(6\) is not multiple of the group size \(4\)",
        ),
        (
            lambda: nnx.BatchNorm(3, use_running_average=None, rngs=nnx.Rngs(0))(jnp.ones((2, 3))),
            "No `use_running_average` argument was provided to BatchNorm",
        ),
        (
            lambda: nnx.InstanceNorm(3, feature_axes=(0, -1), rngs=nnx.Rngs(0))(jnp.ones((2, 3))),
            "cannot include the leading dimension",
        ),
        (
            lambda: nnx.SpectralNorm(_Cube(), error_on_non_matrix=True, rngs=nnx.Rngs(1)),
            "Layer instance parameter is 3D but error_on_non_matrix is True",
        ),
    ],
)
def test_errors(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_spectralnorm_refuses_changed_params_at_call_time():
    layer = nnx.SpectralNorm(nnx.Linear(3, 4, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
    layer.error_on_non_matrix = True
    layer.layer_instance.kernel = nnx.Param(jnp.ones((3, 1, 4)))
    with pytest.raises(ValueError, match="is 3D but error_on_non_matrix"):
        layer(jnp.ones((2, 3)))
    layer = nnx.SpectralNorm(nnx.Linear(3, 4, rngs=nnx.Rngs(0)), n_steps=0, rngs=nnx.Rngs(1))
    layer.n_steps = 1  # no u/sigma were made for the kernel
    with pytest.raises(RuntimeError, match=r"Could not find the path for u batch stat"):
        layer(jnp.ones((2, 3)))


def test_weightnorm_refuses_new_params():
    layer = nnx.WeightNorm(
        nnx.Linear(3, 4, rngs=nnx.Rngs(0)), variable_filter=..., rngs=nnx.Rngs(1)
    )
    assert sorted(layer.scales) == [("bias",), ("kernel",)]
    layer.layer_instance.extra = nnx.Param(jnp.ones(4))
    with pytest.raises(
        RuntimeError, match=r"Could not find the scale corresponding to the param \('extra',\)"
    ):
        layer(jnp.ones((2, 3)))


def test_view_switches_batchnorm_to_running_statistics_as_flax():
    def run(lib):
        model = lib.Sequential(
            lib.Linear(8, 8, rngs=lib.Rngs(1)), lib.BatchNorm(8, rngs=lib.Rngs(0))
        )
        evaluating = lib.view(model, use_running_average=True)
        out = evaluating(X)
        flags = (model.layers[1].use_running_average, evaluating.layers[1].use_running_average)
        return out, flags, np.asarray(model.layers[1].mean[...])

    (ours, our_flags, our_mean), (theirs, their_flags, their_mean) = run(nnx), run(fnnx)
    assert our_flags == their_flags == (False, True)  # the view is a copy; the model keeps its mode
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(our_mean, their_mean)  # running averages left alone
    assert not our_mean.any()
