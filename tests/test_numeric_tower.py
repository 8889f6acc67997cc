"""The numeric tower: where the API says ``float``, an ``int`` and NumPy scalars are taken
(as Python's typing takes an ``int``); where it says ``int``, NumPy integers are. And they
mean the same: every variant gives exactly the result of the plain Python number.

The sweep covers every public op of ``pytreemod.nn.functional``, every public ``pm.nn``
constructor, every ``adapters.linen`` layer, every ``adapters.nnx`` module constructor and
the functions adapters defines. Which
parameters count is read from the signatures, and a test checks that the recipes below
cover each of them, so a new numeric parameter cannot escape the sweep.
"""

import dataclasses
import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn
import adapters.nnx as nnx
import pytreemod as pm
from pytreemod.nn import functional as F

KEY = jax.random.key(0)
X = jax.random.normal(jax.random.key(1), (2, 6, 4))  # batch, length, features
IMG = jax.random.normal(jax.random.key(2), (2, 5, 5, 4))  # batch, height, width, channels
Q = jax.random.normal(jax.random.key(3), (2, 3, 2, 4))  # batch, length, heads, head_dim


def _numeric(hint: Any) -> bool:
    if hint in (int, float, complex):
        return True
    return any(_numeric(a) for a in typing.get_args(hint))


def _variants(value: Any) -> list[Any]:
    """The spellings of ``value`` that must behave as ``value`` itself."""
    if isinstance(value, bool):
        return []
    if isinstance(value, float):
        assert value == int(value), "float recipes use integral values, so an int exists"
        return [int(value), np.float32(value), np.int64(int(value))]
    if isinstance(value, int):
        return [np.int64(value)]
    if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        return [tuple(np.int32(v) for v in value)]
    return []


# ----------------------------------------------------------------------------- recipes
# name -> (call, numeric keyword arguments as plain Python numbers). `call(**kwargs)`
# returns arrays to compare.


def _linen(module: Callable[..., Any], *inputs: Any, rngs: Any = None) -> Callable[..., Any]:
    def run(**kwargs: Any) -> Any:
        layer = module(**kwargs)
        variables = layer.init({"params": KEY, "dropout": KEY}, *inputs)
        return layer.apply(variables, *inputs, rngs={"dropout": KEY}, mutable=True)

    return run


def _carry(cell: Any, x: jax.Array) -> Any:
    return cell(cell.initialize_carry(x.shape), x)


F_RECIPES: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "avg_pool": (lambda **k: F.avg_pool(X, **k), {"window_shape": (2,), "strides": (1,)}),
    "max_pool": (lambda **k: F.max_pool(X, **k), {"window_shape": (2,), "strides": (2,)}),
    "min_pool": (lambda **k: F.min_pool(X, **k), {"window_shape": (3,), "strides": (1,)}),
    "pool": (
        lambda **k: F.pool(X, 0.0, jax.lax.add, **k),
        {"window_shape": (2,), "strides": (1,)},
    ),
    "batch_norm": (
        lambda **k: F.batch_norm(X, jnp.zeros(4), jnp.ones(4), **k),
        {"axis": -1, "epsilon": 1.0},
    ),
    "batch_stats": (lambda **k: F.batch_stats(X, **k), {"axis": -1}),
    "canonicalize_padding": (lambda **k: F.canonicalize_padding(**k), {"padding": 1, "rank": 2}),
    "compute_stats": (lambda **k: F.compute_stats(X, **k), {"axes": 1}),
    "conv": (
        lambda **k: F.conv(IMG, jnp.ones((3, 3, 2, 4)), **k),
        {
            "strides": 1,
            "padding": 1,
            "input_dilation": 1,
            "kernel_dilation": 1,
            "feature_group_count": 2,
        },
    ),
    "conv_local": (
        lambda **k: F.conv_local(X, jnp.ones((6, 8, 3)), **k),
        {"kernel_size": (2,), "strides": 1, "input_dilation": 1, "kernel_dilation": 1},
    ),
    "conv_local_shapes": (
        lambda **k: F.conv_local_shapes(**k),
        {"x_shape": (2, 6, 4), "kernel_size": (2,), "features": 3, "strides": 1},
    ),
    "conv_transpose": (
        lambda **k: F.conv_transpose(X, jnp.ones((3, 4, 5)), **k),
        {"strides": 2, "padding": 1, "kernel_dilation": 1},
    ),
    "dense_general": (lambda **k: F.dense_general(X, jnp.ones((4, 3)), **k), {"axis": -1}),
    "dot_product_attention": (
        lambda **k: F.dot_product_attention(Q, Q, Q, dropout_key=KEY, deterministic=False, **k),
        {"dropout_rate": 0.0},
    ),
    "dot_product_attention_weights": (
        lambda **k: F.dot_product_attention_weights(Q, Q, **k),
        {"dropout_rate": 0.0},
    ),
    "dropout": (lambda **k: F.dropout(X, key=KEY, **k), {"rate": 0.0, "broadcast_dims": (1,)}),
    "softmax_cross_entropy_with_integer_labels": (
        lambda **k: F.softmax_cross_entropy_with_integer_labels(X, jnp.zeros((2, 6), int), **k),
        {"axis": -1},
    ),
    "einsum_bias_shape": (
        lambda **k: F.einsum_bias_shape("abc,cd->abd", **k),
        {"x_shape": (2, 6, 4), "kernel_shape": (4, 3)},
    ),
    "ema": (lambda **k: F.ema(jnp.ones(3), jnp.zeros(3), **k), {"momentum": 1.0}),
    "flip_sequences": (
        lambda **k: F.flip_sequences(X, jnp.array([3, 6]), time_major=False, **k),
        {"num_batch_dims": 1},
    ),
    "group_norm": (
        lambda **k: F.group_norm(IMG, **k),
        {"num_groups": 2, "epsilon": 1.0, "reduction_axes": -1},
    ),
    "layer_norm": (
        lambda **k: F.layer_norm(X, **k),
        {"epsilon": 1.0, "reduction_axes": -1, "feature_axes": -1},
    ),
    "rms_norm": (
        lambda **k: F.rms_norm(X, **k),
        {"epsilon": 1.0, "reduction_axes": -1, "feature_axes": -1},
    ),
    "normalize": (
        lambda **k: F.normalize(X, jnp.zeros((2, 6)), jnp.ones((2, 6)), None, None, **k),
        {"reduction_axes": -1, "feature_axes": -1, "epsilon": 1.0},
    ),
    "make_attention_mask": (
        lambda **k: F.make_attention_mask(jnp.ones((1, 3)), jnp.ones((1, 2)), **k),
        {"extra_batch_dims": 1},
    ),
    "make_causal_mask": (
        lambda **k: F.make_causal_mask(jnp.ones((1, 3)), **k),
        {"extra_batch_dims": 2},
    ),
    "rnn": (
        lambda **k: F.rnn(
            lambda carry, xs, time_axis, reverse: (carry, xs * 2.0),
            X,
            initial_carry=jnp.zeros((2, 4)),
            **k,
        ),
        {"num_feature_axes": 1},
    ),
}

PM_RECIPES: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "AvgPool": (lambda **k: pm.nn.AvgPool(**k)(X), {"window_shape": (2,), "strides": (1,)}),
    "MaxPool": (lambda **k: pm.nn.MaxPool(**k)(X), {"window_shape": (2,), "strides": (2,)}),
    "MinPool": (lambda **k: pm.nn.MinPool(**k)(X), {"window_shape": (3,), "strides": (1,)}),
    "BatchNorm": (
        lambda **k: pm.apply(pm.nn.BatchNorm(**k), X, mutable="batch_stats"),
        {"features": 4, "axis": -1, "momentum": 1.0, "epsilon": 1.0},
    ),
    "Conv": (
        lambda **k: pm.nn.Conv(**k, key=KEY)(IMG),
        {
            "in_features": 4,
            "out_features": 2,
            "kernel_size": (3, 3),
            "num_spatial_dims": 2,
            "strides": (1, 1),
            "input_dilation": (1, 1),
            "kernel_dilation": (2, 2),
            "feature_group_count": 2,
        },
    ),
    "Conv1d": (
        lambda **k: pm.nn.Conv1d(**k, key=KEY)(X),
        {
            "in_features": 4,
            "out_features": 2,
            "kernel_size": (3,),
            "strides": (1,),
            "input_dilation": (1,),
            "kernel_dilation": (2,),
            "feature_group_count": 2,
        },
    ),
    "Conv2d": (
        lambda **k: pm.nn.Conv2d(**k, key=KEY)(IMG),
        {
            "in_features": 4,
            "out_features": 2,
            "kernel_size": (3, 3),
            "strides": (1, 1),
            "input_dilation": (1, 1),
            "kernel_dilation": (2, 2),
            "feature_group_count": 2,
        },
    ),
    "Conv3d": (
        lambda **k: pm.nn.Conv3d(**k, key=KEY)(IMG[..., None, :]),
        {
            "in_features": 4,
            "out_features": 2,
            "kernel_size": (3, 3, 1),
            "strides": (1, 1, 1),
            "input_dilation": (1, 1, 1),
            "kernel_dilation": (2, 2, 1),
            "feature_group_count": 2,
        },
    ),
    "ConvTranspose": (
        lambda **k: pm.nn.ConvTranspose(**k, key=KEY)(X),
        {
            "in_features": 4,
            "out_features": 2,
            "kernel_size": (3,),
            "num_spatial_dims": 1,
            "strides": (2,),
            "kernel_dilation": (1,),
        },
    ),
    "ConvTranspose1d": (
        lambda **k: pm.nn.ConvTranspose1d(**k, key=KEY)(X),
        {
            "in_features": 4,
            "out_features": 2,
            "kernel_size": (3,),
            "strides": (2,),
            "kernel_dilation": (1,),
        },
    ),
    "ConvTranspose2d": (
        lambda **k: pm.nn.ConvTranspose2d(**k, key=KEY)(IMG),
        {
            "in_features": 4,
            "out_features": 2,
            "kernel_size": (3, 3),
            "strides": (2, 2),
            "kernel_dilation": (1, 1),
        },
    ),
    "ConvTranspose3d": (
        lambda **k: pm.nn.ConvTranspose3d(**k, key=KEY)(IMG[..., None, :]),
        {
            "in_features": 4,
            "out_features": 2,
            "kernel_size": (3, 3, 1),
            "strides": (2, 2, 1),
            "kernel_dilation": (1, 1, 1),
        },
    ),
    "ConvLSTMCell": (
        lambda **k: _carry(pm.nn.ConvLSTMCell(**k, key=KEY), IMG),
        {"in_features": 4, "hidden_features": 2, "kernel_size": (3, 3), "strides": 1, "padding": 1},
    ),
    "Dropout": (
        lambda **k: pm.nn.Dropout(**k)(X, key=KEY),
        {"rate": 0.0, "broadcast_dims": (1,)},
    ),
    "Embedding": (
        lambda **k: pm.nn.Embedding(**k, key=KEY)(jnp.array([[0, 4]])),
        {"num_embeddings": 5, "features": 3},
    ),
    "GroupNorm": (
        lambda **k: pm.nn.GroupNorm(**k)(IMG),
        {"features": 4, "num_groups": 2, "epsilon": 1.0, "reduction_axes": (1, 2, 3)},
    ),
    "GroupNorm/group_size": (
        lambda **k: pm.nn.GroupNorm(4, None, **k)(IMG),
        {"group_size": 2},
    ),
    "LayerNorm": (
        lambda **k: pm.nn.LayerNorm(**k)(X),
        {"features": 4, "epsilon": 1.0, "reduction_axes": -1, "feature_axes": -1},
    ),
    "RMSNorm": (
        lambda **k: pm.nn.RMSNorm(**k)(X),
        {"features": 4, "epsilon": 1.0, "reduction_axes": -1, "feature_axes": -1},
    ),
    "Linear": (lambda **k: pm.nn.Linear(**k, key=KEY)(X), {"in_features": 4, "out_features": 3}),
    "MLP": (
        lambda **k: pm.nn.MLP(**k, key=KEY)(X),
        {"in_features": 4, "hidden_features": (5, 2), "out_features": 3},
    ),
    "ProjectHeads": (
        lambda **k: pm.nn.ProjectHeads(**k, key=KEY)(X),
        {"in_features": 4, "heads": 2, "head_dim": 3},
    ),
    "MergeHeads": (
        lambda **k: pm.nn.MergeHeads(**k, key=KEY)(Q),
        {"heads": 2, "head_dim": 4, "out_features": 3},
    ),
    "MultiHeadAttention": (
        lambda **k: pm.nn.MultiHeadAttention(**k, key=KEY)(X, key=KEY, deterministic=False),
        {
            "num_heads": 2,
            "in_features": 4,
            "qkv_features": 6,
            "out_features": 3,
            "kv_features": 4,
            "dropout_rate": 0.0,
        },
    ),
    "SimpleCell": (
        lambda **k: _carry(pm.nn.SimpleCell(**k, key=KEY), X[:, 0]),
        {"in_features": 4, "hidden_features": 3},
    ),
    "GRUCell": (
        lambda **k: _carry(pm.nn.GRUCell(**k, key=KEY), X[:, 0]),
        {"in_features": 4, "hidden_features": 3},
    ),
    "MGUCell": (
        lambda **k: _carry(pm.nn.MGUCell(**k, key=KEY), X[:, 0]),
        {"in_features": 4, "hidden_features": 3},
    ),
    "LSTMCell": (
        lambda **k: _carry(pm.nn.LSTMCell(**k, key=KEY), X[:, 0]),
        {"in_features": 4, "hidden_features": 3},
    ),
    "OptimizedLSTMCell": (
        lambda **k: _carry(pm.nn.OptimizedLSTMCell(**k, key=KEY), X[:, 0]),
        {"in_features": 4, "hidden_features": 3},
    ),
    "RNN": (
        lambda **k: pm.nn.RNN(pm.nn.SimpleCell(4, 3, key=KEY), **k)(X),
        {"unroll": 2},
    ),
}

LINEN_RECIPES: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "BatchNorm": (
        _linen(lambda **k: nn.BatchNorm(use_running_average=False, **k), X),
        {"axis": -1, "momentum": 1.0, "epsilon": 1.0},
    ),
    "Conv": (
        _linen(nn.Conv, IMG),
        {
            "features": 2,
            "kernel_size": (3, 3),
            "strides": 1,
            "padding": 1,
            "input_dilation": 1,
            "kernel_dilation": 1,
            "feature_group_count": 2,
        },
    ),
    "ConvLocal": (
        _linen(nn.ConvLocal, X),
        {
            "features": 2,
            "kernel_size": (3,),
            "strides": 1,
            "padding": 1,
            "input_dilation": 1,
            "kernel_dilation": 1,
            "feature_group_count": 1,
        },
    ),
    "ConvTranspose": (
        _linen(nn.ConvTranspose, X),
        {"features": 2, "kernel_size": (3,), "strides": 2, "padding": 1, "kernel_dilation": 1},
    ),
    "ConvLSTMCell": (
        _linen(
            lambda **k: _LinenCell(nn.ConvLSTMCell(**k), IMG.shape),
            IMG,
        ),
        {"features": 2, "kernel_size": (3, 3), "strides": 1, "padding": 1},
    ),
    "Dense": (_linen(nn.Dense, X), {"features": 3}),
    "DenseGeneral": (_linen(nn.DenseGeneral, X), {"features": 3, "axis": -1, "batch_dims": 0}),
    "Dropout": (
        _linen(lambda **k: nn.Dropout(deterministic=False, **k), X),
        {"rate": 0.0, "broadcast_dims": (1,)},
    ),
    "Einsum": (_linen(lambda **k: nn.Einsum(einsum_str="abc,cd->abd", **k), X), {"shape": (4, 3)}),
    "Embed": (_linen(nn.Embed, jnp.array([[0, 4]])), {"num_embeddings": 5, "features": 3}),
    "GroupNorm": (
        _linen(nn.GroupNorm, IMG),
        {"num_groups": 2, "epsilon": 1.0, "reduction_axes": -1},
    ),
    "GroupNorm/group_size": (
        _linen(lambda **k: nn.GroupNorm(num_groups=None, **k), IMG),
        {"group_size": 2},
    ),
    "InstanceNorm": (_linen(nn.InstanceNorm, IMG), {"epsilon": 1.0, "feature_axes": -1}),
    "LayerNorm": (
        _linen(nn.LayerNorm, X),
        {"epsilon": 1.0, "reduction_axes": -1, "feature_axes": -1},
    ),
    "RMSNorm": (
        _linen(nn.RMSNorm, X),
        {"epsilon": 1.0, "reduction_axes": -1, "feature_axes": -1},
    ),
    "MultiHeadDotProductAttention": (
        _linen(lambda **k: nn.MultiHeadDotProductAttention(deterministic=False, **k), X),
        {"num_heads": 2, "qkv_features": 6, "out_features": 3, "dropout_rate": 0.0},
    ),
    "MultiHeadAttention": (
        _linen(lambda **k: nn.MultiHeadAttention(deterministic=False, **k), X),
        {"num_heads": 2, "qkv_features": 6, "out_features": 3, "dropout_rate": 0.0},
    ),
    "SimpleCell": (
        _linen(lambda **k: _LinenCell(nn.SimpleCell(**k), X[:, 0].shape), X[:, 0]),
        {"features": 3},
    ),
    "GRUCell": (
        _linen(lambda **k: _LinenCell(nn.GRUCell(**k), X[:, 0].shape), X[:, 0]),
        {"features": 3},
    ),
    "MGUCell": (
        _linen(lambda **k: _LinenCell(nn.MGUCell(**k), X[:, 0].shape), X[:, 0]),
        {"features": 3},
    ),
    "LSTMCell": (
        _linen(lambda **k: _LinenCell(nn.LSTMCell(**k), X[:, 0].shape), X[:, 0]),
        {"features": 3},
    ),
    "OptimizedLSTMCell": (
        _linen(lambda **k: _LinenCell(nn.OptimizedLSTMCell(**k), X[:, 0].shape), X[:, 0]),
        {"features": 3},
    ),
    "RNN": (_linen(lambda **k: nn.RNN(nn.SimpleCell(3), **k), X), {"unroll": 2}),
    "PReLU": (_linen(nn.PReLU, X), {"negative_slope_init": 1.0}),
    "SpectralNorm": (
        _linen(lambda **k: _Spectral(**k), X),
        {"n_steps": 2, "epsilon": 1.0},
    ),
    "WeightNorm": (
        _linen(lambda **k: nn.WeightNorm(nn.Dense(3), **k), X),
        {"epsilon": 1.0, "feature_axes": -1},
    ),
    "Fp8DotGeneral": (
        _linen(lambda **k: nn.Dense(3, dot_general_cls=lambda: nn.Fp8DotGeneral(**k)), X),
        {"amax_history_length": 4},
    ),
    "Fp8DirectDotGeneralOp": (
        _linen(lambda **k: nn.Dense(3, dot_general_cls=lambda: nn.Fp8DirectDotGeneralOp(**k)), X),
        {"amax_history_length": 4},
    ),
    "NANOOFp8DotGeneralOp": (
        _linen(lambda **k: nn.Dense(3, dot_general_cls=lambda: nn.NANOOFp8DotGeneralOp(**k)), X),
        {"amax_history_length": 4},
    ),
    "Fp8Einsum": (_linen(lambda **k: _Fp8Einsum(**k), X), {"amax_history_length": 4}),
    # the functions adapters.linen defines (the activations are JAX's own)
    "avg_pool": (lambda **k: nn.avg_pool(X, **k), {"window_shape": (2,), "strides": (1,)}),
    "max_pool": (lambda **k: nn.max_pool(X, **k), {"window_shape": (2,), "strides": (2,)}),
    "pool": (
        lambda **k: nn.pool(X, 0.0, jax.lax.add, padding="VALID", **k),
        {"window_shape": (2,), "strides": (1,)},
    ),
    "dot_product_attention": (
        lambda **k: nn.dot_product_attention(Q, Q, Q, dropout_rng=KEY, deterministic=False, **k),
        {"dropout_rate": 0.0},
    ),
    "dot_product_attention_weights": (
        lambda **k: nn.dot_product_attention_weights(Q, Q, **k),
        {"dropout_rate": 0.0},
    ),
    "make_attention_mask": (
        lambda **k: nn.make_attention_mask(jnp.ones((1, 3)), jnp.ones((1, 2)), **k),
        {"extra_batch_dims": 1},
    ),
    "make_causal_mask": (
        lambda **k: nn.make_causal_mask(jnp.ones((1, 3)), **k),
        {"extra_batch_dims": 2},
    ),
}


class _LinenCell(nn.Module):
    """A recurrent cell applied once from its initial carry."""

    cell: nn.Module
    input_shape: tuple[int, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> Any:
        carry = self.cell.initialize_carry(KEY, self.input_shape)
        return self.cell(carry, x)


class _Fp8Einsum(nn.Module):
    amax_history_length: int = 1024

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.ones, (4, 3))
        return nn.Fp8Einsum(amax_history_length=self.amax_history_length)("abc,cd->abd", x, kernel)


class _Spectral(nn.Module):
    n_steps: int = 1
    epsilon: float = 1e-12

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        norm = nn.SpectralNorm(nn.Dense(3), n_steps=self.n_steps, epsilon=self.epsilon)
        return norm(x, update_stats=True)


def _nnx(module: Callable[..., Any], *inputs: Any) -> Callable[..., Any]:
    """Build with ``Rngs(0)``, call once; the output, the state after the call and the
    attributes holding NumPy scalars (none: one kept as a static attribute would make a
    graphdef unequal to the one of the plain Python number)."""

    def run(**kwargs: Any) -> Any:
        layer = module(**kwargs, rngs=nnx.Rngs(0))
        out = layer(*inputs)
        return out, nnx.state(layer), _Static(_numpy_attributes(layer))

    return run


def _numpy_attributes(obj: Any) -> list[str]:
    return [
        name
        for name, value in vars(obj).items()
        for v in (value if type(value) in (tuple, list) else (value,))
        if isinstance(v, np.generic)
    ]


@dataclasses.dataclass(frozen=True)
class _Static:
    """A value compared with ``==`` by ``_same`` (not a pytree, so one leaf)."""

    value: Any


NNX_RECIPES: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "BatchNorm": (
        _nnx(nnx.BatchNorm, X),
        {"num_features": 4, "axis": -1, "momentum": 1.0, "epsilon": 1.0},
    ),
    "Dropout": (
        _nnx(lambda **k: nnx.Dropout(**k, deterministic=False), X),
        {"rate": 0.0, "broadcast_dims": (1,)},
    ),
    "Dropout/rate": (_nnx(lambda **k: nnx.Dropout(**k), X), {"rate": 1.0}),
    "Embed": (_nnx(nnx.Embed, jnp.array([[0, 4]])), {"num_embeddings": 5, "features": 3}),
    "LayerNorm": (
        _nnx(nnx.LayerNorm, X),
        {"num_features": 4, "epsilon": 1.0, "reduction_axes": -1, "feature_axes": -1},
    ),
    "Linear": (_nnx(nnx.Linear, X), {"in_features": 4, "out_features": 3}),
}


# ----------------------------------------------------------------------------- the sweep

_GROUPS = {"F": F_RECIPES, "pm.nn": PM_RECIPES, "linen": LINEN_RECIPES, "nnx": NNX_RECIPES}

CASES = [
    (f"{group}:{name}", call, param, value, variant)
    for group, recipes in _GROUPS.items()
    for name, (call, kwargs) in recipes.items()
    for param, value in kwargs.items()
    for variant in _variants(value)
]


def _same(a: Any, b: Any) -> None:
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, _Static):
            assert x == y
            continue
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


_BASELINES: dict[str, Any] = {}


@pytest.mark.parametrize(
    ("name", "call", "param", "value", "variant"),
    CASES,
    ids=[f"{c[0]}-{c[2]}-{type(c[4]).__name__}" for c in CASES],
)
def test_a_number_of_any_spelling_means_the_same(
    name: str, call: Callable[..., Any], param: str, value: Any, variant: Any
) -> None:
    group, recipe = name.split(":", 1)
    kwargs = _GROUPS[group][recipe][1]
    if name not in _BASELINES:
        _BASELINES[name] = call(**kwargs)
    _same(call(**{**kwargs, param: variant}), _BASELINES[name])


def test_an_nnx_module_built_from_numpy_numbers_has_the_plain_graphdef() -> None:
    def build(n: Any, rate: Any) -> Any:
        return nnx.Sequential(nnx.Linear(n, 3, rngs=nnx.Rngs(0)), nnx.Dropout(rate))

    plain = nnx.graphdef(build(4, 0.5))
    assert nnx.graphdef(build(np.int64(4), np.float32(0.5))) == plain
    assert nnx.graphdef(build(4, np.float64(0.5))) == plain


def test_nnx_rngs_refuse_a_numpy_integer_seed_as_flax_does() -> None:
    # flax.nnx's Rngs and RngStream accept a Python int or a key, not a NumPy integer.
    with pytest.raises(ValueError, match="Invalid rng value"):
        nnx.Rngs(np.int64(0))
    with pytest.raises(ValueError, match="Invalid rng value"):
        nnx.RngStream(np.int64(0), tag="params")


def test_a_float_in_an_int_slot_is_still_refused() -> None:
    with pytest.raises(pm.ShapeError, match="flip_sequences"):
        F.flip_sequences(X, None, 1.5, False)  # pyright: ignore[reportArgumentType]


# ----------------------------------------------------------------------------- coverage


def _numeric_params(fn: Callable[..., Any]) -> set[str]:
    hints = typing.get_type_hints(fn)
    return {n for n in inspect.signature(fn).parameters if _numeric(hints.get(n))}


def _linen_numeric_fields(cls: type) -> set[str]:
    hints = typing.get_type_hints(cls)
    return {f.name for f in dataclasses.fields(cls) if f.init and _numeric(hints.get(f.name))}


def _covered(recipes: dict[str, tuple[Any, dict[str, Any]]], name: str) -> set[str]:
    return {p for key, (_, kw) in recipes.items() if key.split("/")[0] == name for p in kw}


# Numeric parameters the sweep leaves out, and why.
NOT_SWEPT = {
    "linen.SelfAttention.num_heads": "deprecated alias of MultiHeadDotProductAttention",
    "linen.SelfAttention.qkv_features": "",
    "linen.SelfAttention.out_features": "",
    "linen.SelfAttention.dropout_rate": "",
    "linen.Fp8DotGeneralOp.amax_history_length": "deprecated; Fp8DirectDotGeneralOp is swept",
    "F.conv_local.padding": "covered by conv's padding (one canonicalize_padding)",
    "F.conv_transpose.padding": "",
    "F.conv_local_shapes.padding": "",
    "F.conv_local_shapes.input_dilation": "",
    "F.conv_local_shapes.kernel_dilation": "",
    "F.avg_pool.padding": "pooling padding is a string or (low, high) pairs",
    "F.max_pool.padding": "",
    "F.min_pool.padding": "",
    "F.pool.padding": "",
    "F.dense_general.batch_dims": "an empty default; batch dims are covered by DenseGeneral",
    "pm.nn.AvgPool.padding": "",
    "pm.nn.MaxPool.padding": "",
    "pm.nn.MinPool.padding": "",
    "pm.nn.Conv.padding": "covered by F.conv",
    "pm.nn.ConvTranspose.padding": "",
    "linen.SpectralNorm.layer_instance": "",
}


def _not_swept(prefix: str) -> set[str]:
    return {k.rsplit(".", 1)[1] for k in NOT_SWEPT if k.rsplit(".", 1)[0] == prefix}


def _public_fns() -> list[tuple[str, Callable[..., Any]]]:
    return [
        (n, getattr(F, n))
        for n in F.__all__
        if inspect.isfunction(getattr(F, n)) or hasattr(getattr(F, n), "__wrapped__")
    ]


@pytest.mark.parametrize(("name", "fn"), _public_fns(), ids=[n for n, _ in _public_fns()])
def test_every_numeric_parameter_of_the_functional_ops_is_swept(
    name: str, fn: Callable[..., Any]
) -> None:
    missing = _numeric_params(fn) - _covered(F_RECIPES, name) - _not_swept(f"F.{name}")
    assert not missing, f"F.{name}: add {sorted(missing)} to F_RECIPES"


def _pm_classes() -> list[str]:
    return [
        n
        for n in pm.nn.__all__
        if isinstance(getattr(pm.nn, n), type)
        and issubclass(getattr(pm.nn, n), pm.Module)
        and _numeric_params(getattr(pm.nn, n))
    ]


@pytest.mark.parametrize("name", _pm_classes())
def test_every_numeric_parameter_of_the_layers_is_swept(name: str) -> None:
    params = _numeric_params(getattr(pm.nn, name))
    missing = params - _covered(PM_RECIPES, name) - _not_swept(f"pm.nn.{name}")
    assert not missing, f"pm.nn.{name}: add {sorted(missing)} to PM_RECIPES"


def _linen_classes() -> list[str]:
    found = []
    for n in dir(nn):
        obj = getattr(nn, n)
        if isinstance(obj, type) and issubclass(obj, nn.Module) and obj is not nn.Module:
            if _linen_numeric_fields(obj):
                found.append(n)
    return found


@pytest.mark.parametrize("name", _linen_classes())
def test_every_numeric_field_of_the_linen_layers_is_swept(name: str) -> None:
    fields = _linen_numeric_fields(getattr(nn, name))
    missing = fields - _covered(LINEN_RECIPES, name) - _not_swept(f"linen.{name}")
    assert not missing, f"linen.{name}: add {sorted(missing)} to LINEN_RECIPES"


# The NNX layers whose numeric parameters the sweep checks (the layers NNX_RECIPES builds).
NNX_LAYERS = ("BatchNorm", "Dropout", "Embed", "LayerNorm", "Linear")


def _nnx_classes() -> list[str]:
    found = []
    for n in NNX_LAYERS:
        obj = getattr(nnx, n)
        if isinstance(obj, type) and issubclass(obj, nnx.Module) and obj is not nnx.Module:
            if _numeric_params(obj.__init__):
                found.append(n)
    return found


@pytest.mark.parametrize("name", _nnx_classes())
def test_every_numeric_parameter_of_the_nnx_modules_is_swept(name: str) -> None:
    params = _numeric_params(getattr(nnx, name).__init__)
    missing = params - _covered(NNX_RECIPES, name) - _not_swept(f"nnx.{name}")
    assert not missing, f"nnx.{name}: add {sorted(missing)} to NNX_RECIPES"


def test_the_sweep_is_not_empty() -> None:
    groups = {c[0].split(":")[0] for c in CASES}
    assert groups == set(_GROUPS)
    assert set(_nnx_classes()) >= {"BatchNorm", "Dropout", "Embed", "LayerNorm", "Linear"}
    assert len(CASES) > 200
    assert all(isinstance(v, Sequence) or np.isscalar(v) for *_, v in CASES)
