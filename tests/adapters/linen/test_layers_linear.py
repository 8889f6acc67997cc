"""Linear layers against flax.linen: same variables (paths, shapes, dtypes, values at
init) and the same outputs on Flax's variables."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn

from ._flax_compare import check, flax_linen, standard

X3 = jax.random.normal(jax.random.key(1), (2, 5, 3))
X4 = jax.random.normal(jax.random.key(2), (2, 6, 6, 3))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"use_bias": False},
        {"dtype": jnp.bfloat16},
        {"param_dtype": jnp.bfloat16},
        {"kernel_init": jax.nn.initializers.normal(), "bias_init": jax.nn.initializers.ones},
        {"precision": jax.lax.Precision.HIGHEST},
    ],
)
def test_dense(kwargs: dict[str, Any]) -> None:
    check(lambda m: m.Dense(4, **kwargs), X3, tol=1e-2 if kwargs.get("dtype") else 1e-5)


def test_dense_complex_params_and_inputs() -> None:
    check(lambda m: m.Dense(2, param_dtype=jnp.complex64), jnp.ones((1, 2)))
    check(lambda m: m.Dense(2), jnp.ones((1, 2), jnp.complex64))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"features": (4, 2)},
        {"features": 4, "axis": (-2, -1)},
        {"features": (2, 3), "axis": 1, "batch_dims": 0},
        {"features": 4, "axis": -1, "batch_dims": (0,), "use_bias": False},
        {"features": 5, "axis": 0},
    ],
)
def test_dense_general(kwargs: dict[str, Any]) -> None:
    check(lambda m: m.DenseGeneral(**kwargs), X3)


def test_dense_general_rejects_non_leading_batch_dims() -> None:
    with pytest.raises(ValueError, match="must be consecutive leading dimensions"):
        nn.DenseGeneral(3, batch_dims=(1,)).init(jax.random.key(0), X3)


def test_dense_calls_an_injected_dot_general() -> None:
    calls: list[Any] = []

    def dot(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[2])
        return jax.lax.dot_general(*args, **kwargs)

    nn.Dense(4, dot_general=dot).init(jax.random.key(0), X3)
    nn.Dense(4, dot_general_cls=lambda: dot).init(jax.random.key(0), X3)
    assert len(calls) == 2


@pytest.mark.parametrize(
    ("equation", "shape", "x_shape"),
    [
        ("abc,cde->abde", (3, 6, 7), (2, 5, 3)),
        ("ab...,bc...->a...c", (4, 5, 6), (3, 4, 6)),
        ("  ab c , c d  -  >a b d ", (3, 4), (2, 5, 3)),
    ],
)
def test_einsum(equation: str, shape: tuple[int, ...], x_shape: tuple[int, ...]) -> None:
    x = jax.random.normal(jax.random.key(3), x_shape)
    init = jax.nn.initializers.normal()
    check(lambda m: m.Einsum(shape, equation, bias_init=init), x)
    check(lambda m: m.Einsum(shape, bias_init=init), x, equation)


@pytest.mark.parametrize(
    ("equation", "message"),
    [
        ("abc,cde", "must be explicit and include"),
        ("abc->", "exactly one comma character, instead of 0"),
        ("abc,cde,efg->abdfg", "instead of 2"),
    ],
)
def test_einsum_errors(equation: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        nn.Einsum((3, 6, 7), equation).init(jax.random.key(0), X3)


def test_einsum_str_given_twice_or_never() -> None:
    with pytest.raises(ValueError, match='"einsum_str" was passed to the constructor and at call'):
        nn.Einsum((3, 4), "abc,cd->abd").init(jax.random.key(0), X3, "abc,cd->abd")
    with pytest.raises(ValueError, match='"einsum_str" must be passed to the constructor or'):
        nn.Einsum((3, 4)).init(jax.random.key(0), X3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": (3, 3)},
        {"kernel_size": (3, 3), "strides": 2, "use_bias": False},
        {"kernel_size": (2, 3), "padding": "VALID", "kernel_dilation": 2},
        {"kernel_size": (3, 3), "padding": "CIRCULAR"},
        {"kernel_size": (3, 3), "padding": "REFLECT"},
        {"kernel_size": (3, 3), "padding": 1, "input_dilation": (2, 1)},
        {"kernel_size": (3, 3), "padding": [(1, 2), 0]},
        {"kernel_size": (3, 3), "feature_group_count": 3},
        {"kernel_size": (3, 3), "mask": jnp.tril(jnp.ones((3, 3, 3, 6)))},
        {"kernel_size": (3, 3), "strides": None, "input_dilation": None, "kernel_dilation": None},
    ],
)
def test_conv(kwargs: dict[str, Any]) -> None:
    check(lambda m: m.Conv(6, **kwargs), X4)


@pytest.mark.parametrize(
    "x_shape", [(5, 3), (2, 5, 3), (2, 4, 5, 3)], ids=["unbatched", "batch", "two batch axes"]
)
def test_conv_batch_axes_and_int_kernel_size(x_shape: tuple[int, ...]) -> None:
    x = jnp.arange(float(jnp.prod(jnp.array(x_shape)))).reshape(x_shape)
    check(lambda m: m.Conv(4, 3), x)
    check(lambda m: m.Conv(4, (3,), padding="CAUSAL", kernel_dilation=2), x)


def test_conv_mask_of_wrong_shape() -> None:
    with pytest.raises(ValueError, match="Mask needs to have the same shape as weights"):
        nn.Conv(6, (3, 3), mask=jnp.ones((3, 3))).init(jax.random.key(0), X4)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": (3, 3)},
        {"kernel_size": (3, 2), "strides": (2, 1), "padding": "VALID"},
        {"kernel_size": (3, 3), "padding": "CIRCULAR"},
    ],
)
def test_conv_local(kwargs: dict[str, Any]) -> None:
    check(lambda m: m.ConvLocal(4, **kwargs), X4)


def test_conv_local_rejects_feature_groups() -> None:
    with pytest.raises(NotImplementedError, match="feature_group_count != 1"):
        nn.ConvLocal(4, (3, 3), feature_group_count=3).init(jax.random.key(0), X4)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": (3, 3)},
        {"kernel_size": (3, 3), "strides": (2, 2), "use_bias": False},
        {"kernel_size": (3, 3), "padding": "VALID", "kernel_dilation": (2, 2)},
        {"kernel_size": (3, 3), "strides": (2, 1), "padding": "CIRCULAR"},
        {"kernel_size": (3, 3), "transpose_kernel": True, "strides": (2, 2)},
        {"kernel_size": (3, 3), "transpose_kernel": True, "padding": "CIRCULAR"},
        {"kernel_size": (3, 3), "mask": jnp.tril(jnp.ones((3, 3, 3, 4)))},
    ],
)
def test_conv_transpose(kwargs: dict[str, Any]) -> None:
    check(lambda m: m.ConvTranspose(4, **kwargs), X4)


def test_conv_transpose_unbatched_and_multibatch() -> None:
    check(lambda m: m.ConvTranspose(4, (3,)), X3[0])
    check(lambda m: m.ConvTranspose(4, (3,), strides=(2,)), X4[:, :, :4])


def test_embed_lookup_and_attend() -> None:
    ids = jnp.array([[0, 3, 9], [1, 1, 2]])
    check(lambda m: m.Embed(10, 4), ids)
    check(lambda m: m.Embed(10, 4, dtype=jnp.bfloat16), ids, tol=1e-2)
    check(lambda m: m.Embed(1, 4), ids)
    query = jax.random.normal(jax.random.key(5), (2, 4))
    check(lambda m: m.Embed(10, 4), query, method="attend")


def test_embed_rejects_float_ids() -> None:
    with pytest.raises(ValueError, match="Input type must be an integer or unsigned integer"):
        nn.Embed(10, 4).init(jax.random.key(0), jnp.ones((2,)))


@pytest.mark.parametrize(
    ("padding", "rank", "expected"),
    [
        ("SAME", 2, "SAME"),
        (2, 3, [(2, 2)] * 3),
        ([1, (2, 3)], 2, [(1, 1), (2, 3)]),
        ((1, 2), 2, [(1, 1), (2, 2)]),
        (np.int64(2), 2, [(2, 2)] * 2),
        ((np.int32(1), (np.int64(0), 2)), 2, [(1, 1), (0, 2)]),
    ],
)
def test_canonicalize_padding(padding: Any, rank: int, expected: Any) -> None:
    assert nn.linear.canonicalize_padding(padding, rank) == expected


@pytest.mark.parametrize("padding", [(1, 2, 3), [(1, 2, 3)], "SAME ".split(), None, 1.5])
def test_canonicalize_padding_rejects(padding: Any) -> None:
    with pytest.raises(ValueError, match="Invalid padding format"):
        nn.linear.canonicalize_padding(padding, 2)


def test_default_initializers_are_flax_defaults() -> None:
    assert nn.Dense.__dataclass_fields__["bias_init"].default is jax.nn.initializers.zeros
    assert getattr(nn.linear.default_kernel_init, "__name__", None) == "init"
    key = jax.random.key(0)
    expected = jax.nn.initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)
    assert jnp.array_equal(nn.linear.default_embed_init(key, (3, 4)), expected(key, (3, 4)))


def test_partitioned_kernels_of_several_axes_match_flax() -> None:
    fl = flax_linen()
    x = jnp.ones((3, 8))
    boxes = []
    for m in (nn, fl):
        init = m.with_logical_partitioning(m.initializers.lecun_normal(), ("embed", "heads", "kv"))
        with standard():
            variables = m.DenseGeneral((2, 4), kernel_init=init).init(jax.random.key(0), x)
        boxes.append(variables["params"]["kernel"])
    ours, theirs = boxes
    assert isinstance(ours, nn.LogicallyPartitioned) and ours.names == theirs.names
    np.testing.assert_array_equal(ours.value, theirs.value)
