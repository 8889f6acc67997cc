"""Conv (1/2/3-D, strides, dilations, groups, paddings) and ConvTranspose vs lax and Flax."""

import inspect
import pydoc
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import pytreemod as pm

from ._compare import close, jcall, linen, make, randn, run_linen

Key = Callable[[], jax.Array]

CONFIGS: list[dict[str, Any]] = [
    dict(kernel_size=(3,), padding="SAME"),
    dict(kernel_size=(3,), padding="CAUSAL", kernel_dilation=2),
    dict(kernel_size=(3, 3), strides=2, padding="VALID"),
    dict(kernel_size=(3, 3), padding="CIRCULAR"),
    dict(kernel_size=(2, 3), padding=[(1, 0), 2], kernel_dilation=(2, 1)),
    dict(kernel_size=(3, 3), padding=1, input_dilation=2),
    dict(kernel_size=(3, 3), padding="REFLECT", strides=(1, 2)),
    dict(kernel_size=(3, 3), feature_group_count=2),
    dict(kernel_size=(2, 2, 2), padding="SAME", strides=(1, 2, 1)),
]


def _input(getkey: Key, kernel_size: tuple[int, ...], batch: tuple[int, ...] = (2,)) -> jax.Array:
    spatial = (9, 8, 5)[: len(kernel_size)]
    return randn(getkey(), (*batch, *spatial, 4))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: str(sorted(c.items())))
def test_conv_matches_flax(getkey: Key, config: dict[str, Any]) -> None:
    nn = linen()
    layer = make(pm.nn.Conv, 4, 6, bias_init=jax.nn.initializers.normal(), key=getkey(), **config)
    x = _input(getkey, config["kernel_size"])
    ref = run_linen(nn.Conv(6, **config), pm.to_variables(layer), x)
    y = jcall(layer, x)
    assert y.shape == ref.shape
    close(y, ref)


def test_conv_matches_lax_reference(getkey: Key) -> None:
    layer = make(pm.nn.Conv2d, 4, 6, 3, strides=2, padding="VALID", key=getkey())
    x = _input(getkey, (3, 3))

    def reference(layer: pm.nn.Conv, x: jax.Array) -> jax.Array:
        y = lax.conv_general_dilated(
            x, layer.kernel.value, (2, 2), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        assert layer.bias is not None
        return y + layer.bias.value.reshape(1, 1, 1, 6)

    close(jcall(layer, x), jcall(reference, layer, x))


def test_conv_circular_padding_is_periodic(getkey: Key) -> None:
    layer = make(pm.nn.Conv1d, 1, 1, 3, padding="CIRCULAR", use_bias=False, key=getkey())
    x = randn(getkey(), (1, 7, 1))

    def reference(layer: pm.nn.Conv, x: jax.Array) -> jax.Array:
        w = layer.kernel.value[:, 0, 0]
        padded = jnp.concatenate([x[:, -1:], x, x[:, :1]], axis=1)[0, :, 0]
        return jnp.stack([padded[i : i + 3] @ w for i in range(7)])

    close(jcall(layer, x)[0, :, 0], jcall(reference, layer, x))


def test_conv_batch_axes_none_one_several(getkey: Key) -> None:
    layer = make(pm.nn.Conv2d, 4, 6, (3, 3), key=getkey())
    x = _input(getkey, (3, 3), batch=(2, 3))
    many, none, one = jcall(lambda m, v: (m(v), m(v[1, 2]), m(v[1])), layer, x)
    assert many.shape == (2, 3, 9, 8, 6)
    close(many[1, 2], none)  # unbatched input
    close(many[1], one)


def test_conv_classes_fix_the_number_of_spatial_dims(getkey: Key) -> None:
    def shape(cls: type, *args: object, **kwargs: object) -> tuple[int, ...]:
        layer = jax.eval_shape(lambda k: cls(*args, key=k, **kwargs), getkey())
        return layer.kernel.shape

    assert shape(pm.nn.Conv1d, 2, 3, 5) == (5, 2, 3)
    assert shape(pm.nn.Conv2d, 2, 3, 5) == (5, 5, 2, 3)
    assert shape(pm.nn.Conv3d, 2, 3, (1, 2, 3)) == (1, 2, 3, 2, 3)
    assert shape(pm.nn.Conv, 2, 3, 4, num_spatial_dims=2) == (4, 4, 2, 3)
    assert shape(pm.nn.Conv2d, 4, 6, 3, feature_group_count=2) == (3, 3, 2, 6)


def test_conv_default_kernel_init_is_flax_default(getkey: Key) -> None:
    nn = linen()
    key = getkey()
    layer = pm.nn.Conv1d(2, 3, 2, key=key)  # the kernel draws from the layer's key
    flax_init = nn.Conv.__dataclass_fields__["kernel_init"].default
    close(layer.kernel.value, flax_init(key, (2, 2, 3), jnp.float32), tol=0)


def test_conv_configuration_errors(getkey: Key) -> None:
    with pytest.raises(pm.LayerConfigError, match=r"num_spatial_dims"):
        pm.nn.Conv(2, 3, 3, key=getkey())
    with pytest.raises(pm.LayerConfigError, match=r"divisible by feature_group_count=2"):
        pm.nn.Conv2d(3, 4, 3, feature_group_count=2, key=getkey())
    with pytest.raises(pm.LayerConfigError, match=r"Unknown padding 'FULL'"):
        pm.nn.Conv2d(2, 4, 3, padding="FULL", key=getkey())
    with pytest.raises(pm.LayerConfigError, match=r"strides=\(1, 2, 3\) has 3 entries"):
        pm.nn.Conv2d(2, 4, 3, strides=(1, 2, 3), key=getkey())
    with pytest.raises(pm.LayerConfigError, match=r"CAUSAL.*only defined for 1-D"):
        layer = jax.eval_shape(lambda k: pm.nn.Conv2d(2, 4, 3, padding="CAUSAL", key=k), getkey())
        jax.eval_shape(lambda m, v: m(v), layer, jnp.ones((1, 5, 5, 2)))


def test_conv_channel_mismatch_is_a_shape_error(getkey: Key) -> None:
    layer = make(pm.nn.Conv2d, 4, 6, 3, key=getkey())
    with pytest.raises(
        pm.ShapeError,
        match=r"Conv2d.__call__\(x=f32\[2, 8, 8, 5\]\): dimension 'in_features' does not "
        r"agree: x f32\[2, 8, 8, 5\] has 5 channels but kernel f32\[3, 3, 4, 6\] takes 4",
    ):
        layer(jnp.ones((2, 8, 8, 5)))


TRANSPOSE_CONFIGS: list[dict[str, Any]] = [
    dict(kernel_size=(3,), padding="VALID"),
    dict(kernel_size=(3,), strides=(2,), padding="SAME"),
    dict(kernel_size=(3, 3), strides=(2, 2), padding="SAME"),
    dict(kernel_size=(4, 4), strides=(2, 2), padding="CIRCULAR"),
    dict(kernel_size=(4, 4), strides=(2, 2), padding="CIRCULAR", transpose_kernel=True),
    dict(kernel_size=(3, 2), strides=(1, 2), padding=[(1, 2), (0, 1)], kernel_dilation=(2, 1)),
]


@pytest.mark.parametrize("config", TRANSPOSE_CONFIGS, ids=lambda c: str(sorted(c.items())))
def test_conv_transpose_matches_flax(getkey: Key, config: dict[str, Any]) -> None:
    nn = linen()
    layer = make(
        pm.nn.ConvTranspose, 4, 6, bias_init=jax.nn.initializers.normal(), key=getkey(), **config
    )
    x = _input(getkey, config["kernel_size"])
    ref = run_linen(nn.ConvTranspose(6, **config), pm.to_variables(layer), x)
    y = jcall(layer, x)
    assert y.shape == ref.shape
    close(y, ref)


def test_conv_transpose_matches_lax_reference(getkey: Key) -> None:
    layer = make(pm.nn.ConvTranspose2d, 4, 6, 3, strides=2, use_bias=False, key=getkey())
    x = _input(getkey, (3, 3))

    def reference(layer: pm.nn.ConvTranspose, x: jax.Array) -> jax.Array:
        return lax.conv_transpose(
            x, layer.kernel.value, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    y = jcall(layer, x)
    assert y.shape == (2, 18, 16, 6)
    close(y, jcall(reference, layer, x))


def test_conv_transpose_with_transpose_kernel_is_the_gradient_of_conv(getkey: Key) -> None:
    conv = make(pm.nn.Conv1d, 4, 6, 3, strides=2, padding="VALID", use_bias=False, key=getkey())
    up = jax.eval_shape(
        lambda k: pm.nn.ConvTranspose1d(
            6, 4, 3, strides=2, padding="VALID", use_bias=False, transpose_kernel=True, key=k
        ),
        getkey(),
    )
    up = pm.tree_at(lambda m: m.kernel, up, conv.kernel)
    x = randn(getkey(), (2, 9, 4))
    ct = randn(getkey(), (2, 4, 6))

    def both(conv: pm.nn.Conv, up: pm.nn.ConvTranspose, x: jax.Array, ct: jax.Array):
        _, vjp = jax.vjp(conv, x)
        return up(ct), vjp(ct)[0]

    transposed, grad = jcall(both, conv, up, x, ct)
    close(transposed, grad)


def test_conv_transpose_shape_error(getkey: Key) -> None:
    layer = jax.eval_shape(lambda k: pm.nn.ConvTranspose2d(4, 3, 3, key=k), jax.random.key(0))
    with pytest.raises(pm.ShapeError, match=r"ConvTranspose2d.__call__.*'in_features'.*has 2"):
        jax.eval_shape(lambda m, v: m(v), layer, jnp.ones((1, 4, 4, 2)))


def _help_text(obj: Any) -> str:
    """What ``help(obj)`` prints (without terminal bold)."""
    return pydoc.plain(pydoc.render_doc(obj))


# ----------------------------------------------------------------------------- signatures

CONVS = [pm.nn.Conv1d, pm.nn.Conv2d, pm.nn.Conv3d]
CONV_TRANSPOSES = [pm.nn.ConvTranspose1d, pm.nn.ConvTranspose2d, pm.nn.ConvTranspose3d]


@pytest.mark.parametrize("cls", CONVS + CONV_TRANSPOSES, ids=lambda c: c.__name__)
def test_convolutions_show_their_options_in_signature_and_help(cls: Any) -> None:
    sig = inspect.signature(cls)
    base = inspect.signature(pm.nn.Conv if cls in CONVS else pm.nn.ConvTranspose)
    assert list(sig.parameters)[:3] == ["in_features", "out_features", "kernel_size"]
    assert "kwargs" not in sig.parameters and "num_spatial_dims" not in sig.parameters
    for name, param in list(sig.parameters.items())[3:]:
        assert param.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert param.default == base.parameters[name].default, name  # the base's defaults
    assert sig.parameters["padding"].default == "SAME"
    assert sig.parameters["key"].default is inspect.Parameter.empty  # required
    assert sig.parameters["use_bias"].annotation is bool
    page = _help_text(cls)
    assert "strides: int | collections.abc.Sequence[int] = 1" in page
    assert "_pytreemod" not in page and "**kwargs" not in page


def test_options_given_by_keyword_still_reach_the_layer() -> None:
    conv = pm.nn.Conv2d(3, 4, 3, strides=2, padding="VALID", use_bias=False, key=jax.random.key(0))
    assert (conv.strides, conv.padding, conv.bias) == ((2, 2), "VALID", None)


def test_numpy_float64_operands_promote_as_jax_numpy_does() -> None:
    import warnings

    import numpy as np

    from pytreemod.nn import functional as F

    x, kernel = np.ones((2, 5, 5, 3)), np.ones((3, 3, 3, 2))  # float64, x64 off
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "float64 is not available" cast warning
        y = F.conv(x, kernel)
    assert y.dtype == jnp.float32 and y.shape == (2, 5, 5, 2)
    assert float(y[0, 2, 2, 0]) == 27.0
