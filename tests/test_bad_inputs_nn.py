# The sweep passes wrong types on purpose.
# pyright: reportArgumentType=false, reportCallIssue=false
"""Bad-input sweep, ``pytreemod.nn`` constructors: wrong types, sizes, dtypes, keys and
settings are a ``LayerConfigError`` naming the layer, the argument and a fix, raised
before any parameter is initialised (never a ``ZeroDivisionError`` from an initializer
or a JAX shape error from deep inside ``jax.random``)."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm

nn = pm.nn
KEY = jax.random.key(0)


def _cell(**kwargs: Any) -> pm.nn.GRUCell:
    return nn.GRUCell(3, 4, key=KEY, **kwargs)


# (id, constructor call, regex the LayerConfigError message must match)
CASES: list[tuple[str, Callable[[], Any], str]] = [
    # sizes: zero, negative, float, string
    ("linear-in-zero", lambda: nn.Linear(0, 4, key=KEY), r"Linear: in_features=0 must be a posi"),
    ("linear-in-neg", lambda: nn.Linear(-1, 4, key=KEY), r"Linear: in_features=-1 must be"),
    ("linear-out-zero", lambda: nn.Linear(3, 0, key=KEY), r"Linear: out_features=0"),
    (
        "linear-float",
        lambda: nn.Linear(3.5, 4, key=KEY),
        r"in_features=3\.5 must be a positive int",
    ),
    ("linear-str", lambda: nn.Linear("3", 4, key=KEY), r"in_features='3' must be a positive int"),
    ("linear-bool", lambda: nn.Linear(True, 4, key=KEY), r"in_features=True must be"),
    ("mlp-hidden-neg", lambda: nn.MLP(3, -1, 2, key=KEY), r"MLP: hidden_features\[0\]=-1"),
    ("mlp-hidden-list", lambda: nn.MLP(3, [4, 0], 2, key=KEY), r"hidden_features\[1\]=0"),
    ("conv-in-zero", lambda: nn.Conv2d(0, 4, 3, key=KEY), r"Conv: in_features=0"),
    ("conv-out-zero", lambda: nn.Conv2d(3, 0, 3, key=KEY), r"Conv: out_features=0"),
    ("convt-in-zero", lambda: nn.ConvTranspose2d(0, 4, 3, key=KEY), r"ConvTranspose: in_feat"),
    ("conv1d-kernel", lambda: nn.Conv1d(3, 4, (3, 3), key=KEY), r"2 entries but num_spatial_d"),
    ("conv3d-strides", lambda: nn.Conv3d(3, 4, 3, strides=(1, 1), key=KEY), r"2 entries but"),
    ("convt1d-out-neg", lambda: nn.ConvTranspose1d(3, -4, 3, key=KEY), r"out_features=-4"),
    ("convt3d-dilation", lambda: nn.ConvTranspose3d(3, 4, 2, kernel_dilation=-1, key=KEY), r"k"),
    ("convt-kernel-int", lambda: nn.ConvTranspose(3, 4, 3, key=KEY), r"num_spatial_dims"),
    ("embedding-zero", lambda: nn.Embedding(0, 4, key=KEY), r"Embedding: num_embeddings=0"),
    ("embedding-neg", lambda: nn.Embedding(5, -1, key=KEY), r"Embedding: features=-1"),
    ("layernorm-zero", lambda: nn.LayerNorm(0), r"LayerNorm: features=0 must be"),
    ("rmsnorm-neg", lambda: nn.RMSNorm(-2), r"RMSNorm: features=-2 must be"),
    ("batchnorm-zero", lambda: nn.BatchNorm(0), r"BatchNorm: features=0 must be"),
    ("groupnorm-zero", lambda: nn.GroupNorm(0, 1), r"GroupNorm: features=0 must be"),
    ("mha-heads-zero", lambda: nn.MultiHeadAttention(0, 16, key=KEY), r"num_heads=0 must be"),
    ("mha-heads-neg", lambda: nn.MultiHeadAttention(-2, 16, key=KEY), r"num_heads=-2 must"),
    ("mha-qkv-zero", lambda: nn.MultiHeadAttention(4, 16, qkv_features=0, key=KEY), r"qkv_feat"),
    ("project-heads-zero", lambda: nn.ProjectHeads(16, 0, 4, key=KEY), r"ProjectHeads: heads=0"),
    ("merge-heads-zero", lambda: nn.MergeHeads(4, 0, 16, key=KEY), r"MergeHeads: head_dim=0"),
    ("lstm-hidden-zero", lambda: nn.LSTMCell(3, 0, key=KEY), r"LSTMCell: hidden_features=0"),
    ("lstm-in-neg", lambda: nn.LSTMCell(-1, 4, key=KEY), r"LSTMCell: in_features=-1"),
    ("gru-hidden-zero", lambda: nn.GRUCell(3, 0, key=KEY), r"GRUCell: hidden_features=0"),
    ("mgu-hidden-zero", lambda: nn.MGUCell(3, 0, key=KEY), r"MGUCell: hidden_features=0"),
    ("simple-hidden-zero", lambda: nn.SimpleCell(3, 0, key=KEY), r"SimpleCell: hidden_feat"),
    ("optlstm-zero", lambda: nn.OptimizedLSTMCell(3, 0, key=KEY), r"OptimizedLSTMCell: hidden"),
    ("convlstm-zero", lambda: nn.ConvLSTMCell(3, 0, (3, 3), key=KEY), r"ConvLSTMCell: hidden"),
    # divisibility and mutually exclusive settings
    ("mha-not-divisible", lambda: nn.MultiHeadAttention(3, 16, key=KEY), r"not divisible by num"),
    ("conv-groups", lambda: nn.Conv2d(3, 4, 3, feature_group_count=2, key=KEY), r"divisible by"),
    ("conv-groups-zero", lambda: nn.Conv2d(3, 4, 3, feature_group_count=0, key=KEY), r"feature_g"),
    ("groupnorm-groups", lambda: nn.GroupNorm(4, 5), r"num_groups=5 does not divide the 4"),
    ("groupnorm-both", lambda: nn.GroupNorm(4, 2, group_size=2), r"exactly one of num_groups"),
    ("groupnorm-size", lambda: nn.GroupNorm(4, None, group_size=3), r"multiple of group_size=3"),
    # kernels, strides, dilations, windows, padding
    ("conv-kernel-zero", lambda: nn.Conv2d(3, 4, 0, key=KEY), r"kernel_size=\(0,\) must hold"),
    ("conv-kernel-neg", lambda: nn.Conv(3, 4, (3, -1), key=KEY), r"kernel_size=\(3, -1\)"),
    ("conv-kernel-rank", lambda: nn.Conv2d(3, 4, (3, 3, 3), key=KEY), r"3 entries but num_spa"),
    ("conv-kernel-int", lambda: nn.Conv(3, 4, 3, key=KEY), r"num_spatial_dims=\.\.\."),
    ("conv-kernel-str", lambda: nn.Conv(3, 4, "3x3", key=KEY), r"kernel_size='3x3' must be"),
    (
        "conv-strides-zero",
        lambda: nn.Conv2d(3, 4, 3, strides=0, key=KEY),
        r"Conv: strides=0 must be a positive int",
    ),
    ("conv-strides-neg", lambda: nn.Conv2d(3, 4, 3, strides=(1, -1), key=KEY), r"Conv: strid"),
    ("conv-strides-len", lambda: nn.Conv2d(3, 4, 3, strides=(1, 1, 1), key=KEY), r"3 entries"),
    ("conv-dilation", lambda: nn.Conv2d(3, 4, 3, kernel_dilation=0, key=KEY), r"kernel_dilat"),
    ("conv-in-dilation", lambda: nn.Conv2d(3, 4, 3, input_dilation=0, key=KEY), r"input_dilat"),
    ("conv-padding", lambda: nn.Conv2d(3, 4, 3, padding="FOO", key=KEY), r"Unknown padding 'FOO'"),
    ("convt-kernel", lambda: nn.ConvTranspose(3, 4, (0, 3), key=KEY), r"ConvTranspose: kernel_s"),
    ("convt-strides", lambda: nn.ConvTranspose2d(3, 4, 3, strides=0, key=KEY), r"ConvTranspo"),
    ("convt-padding", lambda: nn.ConvTranspose2d(3, 4, 3, padding="X", key=KEY), r"Unknown pad"),
    ("convlstm-kernel-int", lambda: nn.ConvLSTMCell(3, 4, 3, key=KEY), r"kernel_size=3 must be"),
    ("convlstm-kernel-0", lambda: nn.ConvLSTMCell(3, 4, (0, 3), key=KEY), r"kernel_size=\(0, 3"),
    ("pool-window-int", lambda: nn.MaxPool(2), r"MaxPool: window_shape=2 must be a tuple"),
    ("pool-window-zero", lambda: nn.AvgPool((0, 2)), r"AvgPool: window_shape=\(0, 2\)"),
    ("pool-strides-zero", lambda: nn.MinPool((2, 2), strides=(0, 1)), r"MinPool: strides"),
    ("pool-strides-len", lambda: nn.MaxPool((2, 2), strides=(1,)), r"different lengths"),
    ("pool-padding-str", lambda: nn.MaxPool((2, 2), padding="FOO"), r"padding='FOO' is not"),
    ("pool-padding-pairs", lambda: nn.AvgPool((2, 2), padding=((1, 1),)), r"2 \(low, high\)"),
    # probabilities and numbers
    ("dropout-high", lambda: nn.Dropout(1.5), r"Dropout: rate=1\.5 is not a probability"),
    ("dropout-neg", lambda: nn.Dropout(-0.1), r"rate=-0\.1 is not a probability"),
    ("dropout-str", lambda: nn.Dropout("0.5"), r"Dropout: rate='0\.5' must be a number"),
    (
        "dropout-dims",
        lambda: nn.Dropout(0.5, broadcast_dims=("a",)),
        r"broadcast_dims='a' must be an int",
    ),
    ("mha-dropout", lambda: nn.MultiHeadAttention(4, 16, dropout_rate=2.0, key=KEY), r"dropout"),
    ("batchnorm-momentum", lambda: nn.BatchNorm(4, momentum=2.0), r"momentum=2\.0 is not a pro"),
    ("layernorm-eps-neg", lambda: nn.LayerNorm(4, epsilon=-1.0), r"epsilon=-1\.0 must be >= 0"),
    ("rmsnorm-eps-str", lambda: nn.RMSNorm(4, epsilon="1e-6"), r"epsilon='1e-6' must be a num"),
    ("groupnorm-eps", lambda: nn.GroupNorm(4, 2, epsilon=-1e-6), r"GroupNorm: epsilon"),
    ("batchnorm-eps", lambda: nn.BatchNorm(4, epsilon=None), r"BatchNorm: epsilon=None"),
    # enumerated settings
    ("mha-impl", lambda: nn.MultiHeadAttention(4, 16, implementation="foo", key=KEY), r"'xla'"),
    # keys
    ("key-none", lambda: nn.Linear(3, 4, key=None), r"Linear: key=None is not a single PRNG"),
    ("key-int", lambda: nn.Conv2d(3, 4, 3, key=0), r"Conv: key=0 is not a single PRNG key"),
    ("key-batch", lambda: nn.Embedding(5, 4, key=jax.random.split(KEY)), r"shape \(2,\)"),
    ("key-norm", lambda: nn.LayerNorm(4, key="k"), r"LayerNorm: key='k' is not a single"),
    ("key-cell", lambda: nn.LSTMCell(3, 4, key=1), r"LSTMCell: key=1 is not"),
    ("key-mha", lambda: nn.MultiHeadAttention(4, 16, key=jnp.zeros(3)), r"MultiHeadAttention"),
    # dtypes
    ("param-dtype-int", lambda: nn.Linear(3, 4, param_dtype=jnp.int32, key=KEY), r"not a float"),
    ("param-dtype-bool", lambda: nn.Embedding(5, 4, param_dtype=bool, key=KEY), r"param_dtype"),
    ("param-dtype-junk", lambda: nn.Conv2d(3, 4, 3, param_dtype="junk", key=KEY), r"not a dtype"),
    ("dtype-junk", lambda: nn.Linear(3, 4, dtype="foo", key=KEY), r"dtype='foo' is not a dtype"),
    ("dtype-unhashable", lambda: nn.Linear(3, 4, dtype=["f4"], key=KEY), r"\['f4'\] is not a dt"),
    ("norm-dtype-junk", lambda: nn.LayerNorm(4, dtype="foo"), r"LayerNorm: dtype='foo'"),
    ("norm-param-int", lambda: nn.BatchNorm(4, param_dtype=jnp.int8), r"BatchNorm: param_dty"),
    ("cell-param-int", lambda: nn.GRUCell(3, 4, param_dtype=jnp.int32, key=KEY), r"GRUCell"),
    # callables
    ("linear-init", lambda: nn.Linear(3, 4, kernel_init=3, key=KEY), r"kernel_init=3 is not"),
    ("norm-init", lambda: nn.LayerNorm(4, scale_init="ones"), r"scale_init='ones' is not"),
    ("cell-carry-init", lambda: _cell(carry_init=None), r"GRUCell: carry_init=None is not"),
    ("mlp-activation", lambda: nn.MLP(3, 4, 2, activation=3, key=KEY), r"activation=3 is not"),
    ("embed-init", lambda: nn.Embedding(5, 4, embedding_init=1.0, key=KEY), r"embedding_in"),
    ("lambda-fn", lambda: nn.Lambda(3), r"Lambda: fn=3 is not callable"),
    # containers
    ("rnn-cell-linear", lambda: nn.RNN(nn.Linear(3, 4, key=KEY)), r"RNN: cell=Linear.*not a"),
    ("rnn-cell-int", lambda: nn.RNN(3), r"RNN: cell=3 is not a recurrent cell"),
    ("rnn-unroll", lambda: nn.RNN(_cell(), unroll=0), r"RNN: unroll=0 must be a positive"),
    ("bidirectional", lambda: nn.Bidirectional(3, nn.RNN(_cell())), r"forward_rnn=3 is not"),
    ("bidirectional-merge", lambda: nn.Bidirectional(nn.RNN(_cell()), nn.RNN(_cell()), 3), r"me"),
    ("sequential-int", lambda: nn.Sequential(3), r"Sequential: layers=3 is not a list"),
    ("sequential-module", lambda: nn.Sequential(nn.Identity()), r"Sequential\(\[layer\]\)"),
    ("sequential-str", lambda: nn.Sequential("relu"), r"layers='relu' is not a list"),
    ("sequential-item", lambda: nn.Sequential([nn.Identity(), 3]), r"layers\[1\]=3 is not"),
    # methods that build state
    ("cache-max-len-zero", lambda: _mha().init_cache(2, max_len=0), r"max_len=0 must be"),
    ("cache-max-len-neg", lambda: _mha().init_cache(2, max_len=-1), r"max_len=-1 must be"),
    ("cache-batch-neg", lambda: _mha().init_cache((2, -1), max_len=4), r"batch_shape=\(2, -1\)"),
]


def _mha() -> pm.nn.MultiHeadAttention:
    return nn.MultiHeadAttention(4, 16, key=KEY)


@pytest.mark.parametrize(("build", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_constructor_argument_is_a_layer_config_error(
    build: Callable[[], Any], match: str
) -> None:
    with pytest.raises(pm.LayerConfigError, match=match):
        build()


def test_every_public_layer_class_is_swept() -> None:
    """Each Module class exported by ``pytreemod.nn`` appears in at least one case."""
    source = Path(__file__).read_text()
    layers = [
        name
        for name in nn.__all__
        if isinstance(getattr(nn, name), type) and issubclass(getattr(nn, name), pm.Module)
    ]
    # RNNCellBase is an abstract base with no arguments.
    missing = [name for name in layers if f"nn.{name}(" not in source and name != "RNNCellBase"]
    assert missing == []


def test_unknown_and_positional_arguments_are_python_type_errors() -> None:
    with pytest.raises(TypeError, match=r"missing 1 required keyword-only argument: 'key'"):
        nn.Linear(3, 4)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'features'"):
        nn.Linear(3, 4, features=5, key=KEY)
    with pytest.raises(TypeError, match=r"takes 1 positional argument but 2 were given"):
        nn.Identity(3)


def test_valid_edge_values_still_build() -> None:
    """The checks reject only what cannot work: these are fine."""
    assert nn.MLP(3, [], 2, key=KEY)(jnp.ones((1, 3))).shape == (1, 2)
    assert nn.Linear(1, 1, key=KEY, param_dtype=jnp.bfloat16).kernel.value.dtype == jnp.bfloat16
    assert nn.Conv2d(3, 4, (1, 1), strides=(2, 1), key=KEY).strides == (2, 1)
    assert nn.Dropout(0.0).rate == 0.0 and nn.Dropout(1).rate == 1.0
    assert nn.LayerNorm(4, epsilon=0).epsilon == 0.0
    assert nn.RNN(_cell(), unroll=True).unroll is True
    raw_key = jax.random.PRNGKey(0)  # a legacy uint32[2] key is accepted too
    assert nn.Linear(3, 4, key=raw_key).kernel.value.shape == (3, 4)
    stacked = pm.vmap(lambda k: nn.Linear(3, 4, key=k))(jax.random.split(KEY, 3))
    assert stacked.kernel.value.shape == (3, 3, 4)


def test_a_dtype_accepted_for_activations_is_still_checked_as_a_parameter_dtype() -> None:
    # dtype checks remember what passed, keyed by the check made: int32 passes as `dtype`
    # (no floating requirement) and must still fail as `param_dtype`.
    nn.Linear(3, 4, dtype=jnp.int32, key=KEY)
    with pytest.raises(pm.LayerConfigError, match=r"Linear: param_dtype=int32 is not a float"):
        nn.Linear(3, 4, param_dtype=jnp.int32, key=KEY)
