"""Initializer defaults (Flax Linen's published ones) and the activation re-exports."""

from typing import Any

import jax
import numpy as np
import pytest

import pytreemod as pm
from pytreemod.nn import initializers

from ._compare import close, linen


def test_defaults_are_flax_defaults() -> None:
    nn = linen()
    key = jax.random.key(0)
    fields = nn.Dense.__dataclass_fields__
    close(initializers.default_kernel_init(key, (3, 4)), fields["kernel_init"].default(key, (3, 4)))
    close(initializers.default_bias_init(key, (4,)), fields["bias_init"].default(key, (4,)))
    embed = nn.Embed.__dataclass_fields__["embedding_init"].default
    close(initializers.default_embed_init(key, (6, 4)), embed(key, (6, 4)))
    for layer in (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.BatchNorm):
        assert layer.__dataclass_fields__["scale_init"].default is jax.nn.initializers.ones
    assert nn.LayerNorm.__dataclass_fields__["bias_init"].default is jax.nn.initializers.zeros


def test_partitioned_initializer_boxes_the_parameter() -> None:
    init = pm.with_partitioning(initializers.lecun_normal(), (None, "mlp"))
    layer = pm.nn.Linear(3, 4, kernel_init=init, key=jax.random.key(0))
    assert isinstance(layer.kernel.value, pm.Partitioned)
    assert layer.kernel.value.names == (None, "mlp")


def test_attention_kernels_accept_full_shape_partitioning() -> None:
    init = pm.with_partitioning(
        initializers.lecun_normal(in_axis=0, out_axis=(1, 2)), ("embed", "heads", None)
    )
    proj = pm.nn.ProjectHeads(4, 2, 2, kernel_init=init, key=jax.random.key(0))
    assert isinstance(proj.kernel.value, pm.Partitioned) and proj.kernel.shape == (4, 2, 2)
    flat = pm.with_partitioning(initializers.lecun_normal(), ("embed", "heads"))
    with pytest.raises(pm.LayerConfigError, match=r"names the axes of the flattened \(4, 4\)"):
        pm.nn.ProjectHeads(4, 2, 2, kernel_init=flat, key=jax.random.key(0))


@pytest.mark.parametrize("dtype", [jax.numpy.float32, jax.numpy.bfloat16, "float16"])
def test_default_bias_is_the_zeros_initializers_array_and_equation(dtype: object) -> None:
    from pytreemod.nn._init import bias_value

    key = jax.random.key(0)
    made = bias_value(initializers.default_bias_init, key, (5,), dtype)
    reference = jax.nn.initializers.zeros(key, (5,), dtype)
    assert made.dtype == reference.dtype and made.shape == reference.shape
    assert made.weak_type == reference.weak_type
    assert bool((made == reference).all())
    ours = jax.make_jaxpr(lambda k: bias_value(initializers.default_bias_init, k, (5,), dtype))
    theirs = jax.make_jaxpr(lambda k: jax.nn.initializers.zeros(k, (5,), dtype))
    assert str(ours(key)) == str(theirs(key))


def test_a_custom_bias_initializer_is_called_with_the_bias_key() -> None:
    from pytreemod.nn._init import bias_value

    seen: list[tuple[object, ...]] = []

    def init(key: jax.Array, shape: tuple[int, ...], dtype: object = None) -> jax.Array:
        seen.append((key, shape, dtype))
        return jax.numpy.ones(shape)

    key = jax.random.key(3)
    assert bias_value(init, key, (2,), jax.numpy.float32).tolist() == [1.0, 1.0]
    assert seen == [(key, (2,), jax.numpy.float32)]


_jax_lecun = jax.nn.initializers.lecun_normal()


@pytest.mark.parametrize("shape", [(3, 4), (3, 3, 8, 16), (1, 1, 5, 7), (2, 3, 4, 5, 6)])
@pytest.mark.parametrize("dtype", [jax.numpy.float32, jax.numpy.bfloat16, "float16"])
def test_default_kernel_init_is_jax_lecun_normal_bit_for_bit(
    shape: tuple[int, ...], dtype: object
) -> None:
    key = jax.random.key(7)
    ours = initializers.default_kernel_init(key, shape, dtype)
    theirs = _jax_lecun(key, shape, dtype)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert np.array_equal(np.asarray(ours, np.float32), np.asarray(theirs, np.float32))
    traced = [
        jax.make_jaxpr(lambda k, f=f: f(k, shape, dtype))(key)
        for f in (initializers.default_kernel_init, _jax_lecun)
    ]
    assert str(traced[0]) == str(traced[1])  # the same equations on the same constants
    jitted = [
        jax.jit(lambda k, f=f: f(k, shape, dtype))(key)
        for f in (initializers.default_kernel_init, _jax_lecun)
    ]
    assert np.array_equal(np.asarray(jitted[0], np.float32), np.asarray(jitted[1], np.float32))


def test_default_kernel_init_on_an_explicit_mesh_traces_as_jax() -> None:
    mesh = jax.make_mesh(
        (2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Explicit,) * 2
    )
    key = jax.random.key(0)
    with jax.set_mesh(mesh):
        traced = [
            jax.make_jaxpr(lambda k, f=f: f(k, (8, 16), jax.numpy.float32))(key)
            for f in (initializers.default_kernel_init, _jax_lecun)
        ]
    assert str(traced[0]) == str(traced[1])


def test_default_kernel_init_leaves_other_calls_to_jax() -> None:
    key = jax.random.key(1)
    init: Any = initializers.default_kernel_init  # JAX's signature, out_sharding too
    same = lambda a, b: np.array_equal(np.asarray(a), np.asarray(b))
    assert same(init(key, (3, 4)), _jax_lecun(key, (3, 4)))  # no dtype: JAX's default
    assert same(init(key, [3, 4], "float32"), _jax_lecun(key, [3, 4], "float32"))
    assert same(
        init(key, (3, 4), jax.numpy.complex64), _jax_lecun(key, (3, 4), jax.numpy.complex64)
    )
    assert same(
        init(key, (3, 4), jax.numpy.float32, out_sharding=None),
        _jax_lecun(key, (3, 4), jax.numpy.float32, out_sharding=None),
    )
