"""Conv (1/2/3-D, strides, dilations, groups, paddings) and ConvTranspose vs lax and Flax."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import pytreemod as pm

from ._compare import close, linen, run_linen

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
    return jax.random.normal(getkey(), (*batch, *spatial, 4))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: str(sorted(c.items())))
def test_conv_matches_flax(getkey: Key, config: dict[str, Any]) -> None:
    nn = linen()
    layer = pm.nn.Conv(4, 6, bias_init=jax.nn.initializers.normal(), key=getkey(), **config)
    x = _input(getkey, config["kernel_size"])
    ref = run_linen(nn.Conv(6, **config), pm.to_variables(layer), x)
    y = layer(x)
    assert y.shape == ref.shape
    close(y, ref)


def test_conv_matches_lax_reference(getkey: Key) -> None:
    layer = pm.nn.Conv2d(4, 6, 3, strides=2, padding="VALID", key=getkey())
    x = _input(getkey, (3, 3))
    ref = lax.conv_general_dilated(
        x, layer.kernel.value, (2, 2), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    assert layer.bias is not None
    close(layer(x), ref + layer.bias.value.reshape(1, 1, 1, 6))


def test_conv_circular_padding_is_periodic(getkey: Key) -> None:
    layer = pm.nn.Conv1d(1, 1, 3, padding="CIRCULAR", use_bias=False, key=getkey())
    x = jax.random.normal(getkey(), (1, 7, 1))
    w = layer.kernel.value[:, 0, 0]
    padded = jnp.concatenate([x[:, -1:], x, x[:, :1]], axis=1)[0, :, 0]
    ref = jnp.stack([padded[i : i + 3] @ w for i in range(7)])
    close(layer(x)[0, :, 0], ref)


def test_conv_batch_axes_none_one_several(getkey: Key) -> None:
    layer = pm.nn.Conv2d(4, 3, (3, 3), key=getkey())
    x = _input(getkey, (3, 3), batch=(2, 3))
    many = layer(x)
    assert many.shape == (2, 3, 9, 8, 3)
    close(many[1, 2], layer(x[1, 2]))  # unbatched input
    close(many[1], layer(x[1]))


def test_conv_classes_fix_the_number_of_spatial_dims(getkey: Key) -> None:
    assert pm.nn.Conv1d(2, 3, 5, key=getkey()).kernel.shape == (5, 2, 3)
    assert pm.nn.Conv2d(2, 3, 5, key=getkey()).kernel.shape == (5, 5, 2, 3)
    assert pm.nn.Conv3d(2, 3, (1, 2, 3), key=getkey()).kernel.shape == (1, 2, 3, 2, 3)
    assert pm.nn.Conv(2, 3, 4, num_spatial_dims=2, key=getkey()).kernel.shape == (4, 4, 2, 3)
    grouped = pm.nn.Conv2d(4, 6, 3, feature_group_count=2, key=getkey())
    assert grouped.kernel.shape == (3, 3, 2, 6)


def test_conv_default_kernel_init_is_flax_default(getkey: Key) -> None:
    nn = linen()
    key = getkey()
    layer = pm.nn.Conv2d(4, 6, 3, key=key)
    kkey, _ = jax.random.split(key)
    flax_init = nn.Conv.__dataclass_fields__["kernel_init"].default
    close(layer.kernel.value, flax_init(kkey, (3, 3, 4, 6), jnp.float32), tol=0)


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
        pm.nn.Conv2d(2, 4, 3, padding="CAUSAL", key=getkey())(jnp.ones((1, 5, 5, 2)))


def test_conv_channel_mismatch_is_a_shape_error(getkey: Key) -> None:
    layer = pm.nn.Conv2d(4, 6, 3, key=getkey())
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
    layer = pm.nn.ConvTranspose(4, 3, bias_init=jax.nn.initializers.normal(), key=getkey(),
                                **config)
    x = _input(getkey, config["kernel_size"])
    ref = run_linen(nn.ConvTranspose(3, **config), pm.to_variables(layer), x)
    y = layer(x)
    assert y.shape == ref.shape
    close(y, ref)


def test_conv_transpose_matches_lax_reference(getkey: Key) -> None:
    layer = pm.nn.ConvTranspose2d(4, 3, 3, strides=2, use_bias=False, key=getkey())
    x = _input(getkey, (3, 3))
    ref = lax.conv_transpose(x, layer.kernel.value, (2, 2), "SAME",
                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
    close(layer(x), ref)
    assert layer(x).shape == (2, 18, 16, 3)


def test_conv_transpose_with_transpose_kernel_is_the_gradient_of_conv(getkey: Key) -> None:
    conv = pm.nn.Conv1d(2, 3, 3, strides=2, padding="VALID", use_bias=False, key=getkey())
    up = pm.nn.ConvTranspose1d(3, 2, 3, strides=2, padding="VALID", use_bias=False,
                               transpose_kernel=True, key=getkey())
    up = pm.tree_at(lambda m: m.kernel, up, conv.kernel)
    x = jax.random.normal(getkey(), (1, 9, 2))
    y, vjp = jax.vjp(conv, x)
    ct = jax.random.normal(getkey(), y.shape)
    close(up(ct), vjp(ct)[0])


def test_conv_transpose_shape_error(getkey: Key) -> None:
    layer = pm.nn.ConvTranspose2d(4, 3, 3, key=getkey())
    with pytest.raises(pm.ShapeError, match=r"ConvTranspose2d.__call__.*'in_features'.*has 2"):
        layer(jnp.ones((1, 4, 4, 2)))
