# The sweep passes wrong types on purpose.
# pyright: reportArgumentType=false, reportCallIssue=false
"""Bad-input sweep, ``pytreemod.nn`` calls: inputs of the wrong rank, size, dtype or type
are a ``ShapeError`` (or ``LayerConfigError``) naming the layer and the argument, eagerly
and under ``jit``; never a JAX traceback, an empty output or NaNs."""

from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings

import pytreemod as pm

nn = pm.nn
KEY = jax.random.key(0)
FAST = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Built once: (the layer the error names, layer, minimum input rank, size of its last
# axis). A container's error names the sublayer that received the input (MLP: Linear).
LAYERS: list[tuple[str, Callable[[jax.Array], Any], int, int]] = [
    ("Linear", nn.Linear(3, 4, key=KEY), 1, 3),
    ("(MLP|Linear)", nn.MLP(3, 8, 2, key=KEY), 1, 3),
    ("Conv2d", nn.Conv2d(3, 4, 3, key=KEY), 3, 3),
    ("ConvTranspose1d", nn.ConvTranspose1d(3, 4, 3, key=KEY), 2, 3),
    ("LayerNorm", nn.LayerNorm(3), 1, 3),
    ("RMSNorm", nn.RMSNorm(3), 1, 3),
    ("GroupNorm", nn.GroupNorm(3, 1), 2, 3),
    ("MultiHeadAttention", nn.MultiHeadAttention(1, 3, key=KEY), 2, 3),
    ("ProjectHeads", nn.ProjectHeads(3, 2, 2, key=KEY), 1, 3),
]


IDS = ["Linear", "MLP", "Conv", "ConvTranspose", "LayerNorm", "RMSNorm", "GroupNorm", "MHA"]
IDS += ["ProjectHeads"]


@st.composite
def _wrong_shape(draw: st.DrawFn, min_rank: int, features: int) -> tuple[int, ...]:
    """A shape that is too short, or whose last axis is not ``features``."""
    if draw(st.booleans()):
        rank = draw(st.integers(0, min_rank - 1))
        return tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    rank = draw(st.integers(min_rank, min_rank + 2))
    lead = draw(st.lists(st.integers(3, 5), min_size=rank - 1, max_size=rank - 1))
    last = draw(st.integers(1, 6).filter(lambda n: n != features))
    return (*lead, last)


@pytest.mark.parametrize(("name", "layer", "min_rank", "features"), LAYERS, ids=IDS)
@FAST
@given(data=st.data())
def test_input_of_a_wrong_shape_is_a_shape_error(
    name: str, layer: Callable[[jax.Array], Any], min_rank: int, features: int, data: st.DataObject
) -> None:
    shape = data.draw(_wrong_shape(min_rank, features), label="shape")
    # The layer's class and method, or the path of the sublayer that failed in it.
    with pytest.raises(pm.ShapeError, match=rf"^{name}(\.__call__|\.\w+(\[\d+\])?)\("):
        layer(jnp.ones(shape))


@pytest.mark.parametrize(("name", "layer", "min_rank", "features"), LAYERS, ids=IDS)
@FAST
@given(dtype=st.sampled_from([jnp.int32, jnp.int8, jnp.uint8, jnp.bool_]))
def test_a_non_float_input_is_a_shape_error_naming_the_dtype(
    name: str, layer: Callable[[jax.Array], Any], min_rank: int, features: int, dtype: Any
) -> None:
    x = jnp.ones((2,) * (min_rank - 1) + (features,), dtype)
    with pytest.raises(
        pm.ShapeError,
        match=rf"^{name}(\.__call__|\.\w+(\[\d+\])?)\(.*dtype {jnp.dtype(dtype).name}",
    ):
        layer(x)


@pytest.mark.parametrize("bad", ["abc", [1.0, 2.0, 3.0], None, 3.0], ids=repr)
def test_a_non_array_input_is_a_shape_error(bad: Any) -> None:
    with pytest.raises(
        pm.ShapeError,
        match=r"^Linear\.__call__\(x=.*\): argument 'x' is .*, but its annotation is "
        r'Float\[Array \| np\.ndarray, "\*batch in_features"\]\. Fix: pass an array',
    ):
        nn.Linear(3, 4, key=KEY)(bad)


def test_wrong_inputs_under_jit_are_the_same_errors() -> None:
    layer = nn.Linear(3, 4, key=KEY)
    with pytest.raises(pm.ShapeError, match=r"dimension 'in_features' does not agree.*5"):
        pm.jit(layer)(jnp.ones((2, 5)))
    with pytest.raises(pm.ShapeError, match=r"dimension 'in_features' does not agree"):
        jax.jit(lambda m, x: m(x))(layer, jnp.ones((2, 5)))


# ---------------------------------------------------------------- embeddings


@pytest.mark.parametrize("ids", [[7], [-1], [0, 5]], ids=str)
def test_out_of_range_ids_are_an_error_not_nan_or_wraparound(ids: list[int]) -> None:
    emb = nn.Embedding(5, 4, key=KEY)
    with pytest.raises(pm.LayerConfigError, match=r"ids must be in \[0, num_embeddings=5\)"):
        emb(jnp.array(ids))


def test_out_of_range_ids_under_jit_give_nan_rows_never_a_wraparound() -> None:
    emb = nn.Embedding(5, 4, key=KEY)
    rows = pm.jit(lambda m, i: m(i))(emb, jnp.array([0, 9, -1, 4]))
    assert rows.shape == (4, 4)
    assert bool(jnp.isnan(rows[1]).all()) and bool(jnp.isnan(rows[2]).all())
    assert bool(jnp.isfinite(rows[0]).all()) and bool(jnp.isfinite(rows[3]).all())


def test_float_ids_and_a_wrong_attend_query_are_shape_errors() -> None:
    emb = nn.Embedding(5, 4, key=KEY)
    with pytest.raises(pm.ShapeError, match=r"argument 'ids' has dtype float32.*Integer expected"):
        emb(jnp.ones(2))
    with pytest.raises(pm.ShapeError, match=r"Embedding\.attend.*'features' does not agree"):
        emb.attend(jnp.ones((2, 3)))


# ---------------------------------------------------------------- norms, dropout


def test_batch_norm_with_the_wrong_features_is_a_shape_error() -> None:
    bn = nn.BatchNorm(4)
    with pytest.raises(pm.ShapeError, match=r"running mean is \(4,\).*\(5,\).*features=\(5,\)"):
        pm.apply(bn, jnp.ones((2, 5)), mutable="batch_stats")
    with pytest.raises(pm.ShapeError, match=r"running mean is \(4,\)"):
        bn(jnp.ones((2, 5)), use_running_average=True)


def test_norm_axes_out_of_range_are_config_errors() -> None:
    with pytest.raises(pm.LayerConfigError, match=r"axis 5 is out of range for an input with 2"):
        nn.LayerNorm(4, reduction_axes=5)(jnp.ones((2, 4)))
    with pytest.raises(pm.LayerConfigError, match=r"axis 3 is out of range"):
        pm.apply(nn.BatchNorm(4, axis=3), jnp.ones((2, 4)), mutable="batch_stats")


def test_dropout_call_errors() -> None:
    drop = nn.Dropout(0.5)
    with pytest.raises(
        pm.LayerConfigError, match=r"^Dropout: .*needs a PRNG key: call it with key=jax\.random"
    ):
        drop(jnp.ones(3))
    with pytest.raises(pm.LayerConfigError, match=r"broadcast_dims=\(5,\) names axis 5 but x"):
        nn.Dropout(0.5, broadcast_dims=(5,))(jnp.ones((2, 3)), key=KEY)
    with pytest.raises(pm.LayerConfigError, match=r"^Dropout: key=0 is not a single PRNG key"):
        drop(jnp.ones(3), key=0)
    assert nn.Dropout(1.0)(jnp.ones(3)).tolist() == [0.0, 0.0, 0.0]  # no randomness: no key


class _Dropping(pm.Module):
    drop: nn.Dropout
    attn: nn.MultiHeadAttention

    def __call__(self, x: jax.Array, key: Any = None) -> jax.Array:
        return self.attn(self.drop(x, key=key), key=key)


_BAD_KEYS = [
    (None, r"needs a PRNG key: call it with key=jax\.random\.key\(seed\)"),
    (1, r"key=1 is not a single PRNG key; pass one key"),
    (jax.random.split(KEY, 3), r"key=a batch of keys of shape \(3,\) is not a single PRNG key"),
    (jnp.ones(3), r"key=f32\[3\] is not a single PRNG key"),
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_bad_call_time_key_names_the_layers_path(jit: bool) -> None:
    model = _Dropping(nn.Dropout(0.5), nn.MultiHeadAttention(1, 4, dropout_rate=0.1, key=KEY))
    run = pm.jit(model) if jit else model
    for key, message in _BAD_KEYS:
        with pytest.raises(pm.LayerConfigError, match=r"^_Dropping\.drop: .*" + message):
            run(jnp.ones((1, 2, 4)), key=key)
    no_drop = pm.tree_at(lambda m: m.drop, model, nn.Dropout(0.5, deterministic=True))
    for key, message in _BAD_KEYS[::2] if jit else _BAD_KEYS[1::2]:
        with pytest.raises(pm.LayerConfigError, match=r"^_Dropping\.attn: .*" + message[:20]):
            no_drop(jnp.ones((1, 2, 4)), key=key)
    assert run(jnp.ones((1, 2, 4)), key=KEY).shape == (1, 2, 4)


def test_functional_dropout_rejects_a_batch_of_keys() -> None:
    with pytest.raises(
        pm.LayerConfigError, match=r"^pytreemod\.nn\.functional\.dropout: key=a batch of keys"
    ):
        F.dropout(jnp.ones(3), 0.5, jax.random.split(KEY, 2))


# ---------------------------------------------------------------- conv, pooling


@pytest.mark.parametrize(
    "layer",
    [
        nn.Conv2d(3, 4, 3, padding="VALID", key=KEY),
        nn.MaxPool((5, 5)),
        nn.AvgPool((3, 3), strides=(2, 2)),
        nn.MinPool((1, 5)),
    ],
    ids=["conv", "max_pool", "avg_pool", "min_pool"],
)
def test_a_window_larger_than_the_input_is_a_shape_error_not_an_empty_output(layer: Any) -> None:
    with pytest.raises(pm.ShapeError, match=r"gives an empty output .*use padding='SAME'"):
        layer(jnp.ones((1, 2, 2, 3)))


def test_conv_and_pool_rank_and_channel_errors() -> None:
    with pytest.raises(pm.ShapeError, match=r"has 1 axis but a 2-D convolution needs at least 3"):
        nn.Conv2d(3, 4, 3, key=KEY)(jnp.ones(3))
    with pytest.raises(pm.ShapeError, match=r"has 5 channels but kernel"):
        nn.Conv2d(3, 4, 3, key=KEY)(jnp.ones((1, 8, 8, 5)))
    with pytest.raises(pm.ShapeError, match=r"2-D window \(2, 2\) needs at least 3"):
        nn.MaxPool((2, 2))(jnp.ones(4))


# ---------------------------------------------------------------- attention


def test_attention_call_errors() -> None:
    attn = nn.MultiHeadAttention(4, 16, key=KEY)
    with pytest.raises(pm.ShapeError, match=r"'inputs_q' is f32\[16\] \(1 axis\)"):
        attn(jnp.ones(16))
    with pytest.raises(pm.ShapeError, match=r"dimension 'q_len' does not agree"):
        attn(jnp.ones((2, 5, 16)), mask=jnp.ones((2, 1, 4, 4), bool))
    with pytest.raises(pm.LayerConfigError, match=r"decode needs a decoding cache"):
        pm.apply(attn.decode, jnp.ones((2, 1, 16)), mutable="cache")
    cached = attn.init_cache(2, max_len=4)
    with pytest.raises(pm.ShapeError, match=r"MultiHeadAttention\.decode.*'batch' does not agree"):
        pm.apply(cached.decode, jnp.ones((3, 1, 16)), mutable="cache")
    with pytest.raises(pm.LayerConfigError, match=r"decoding cache is full: writing 5 step"):
        pm.apply(cached.decode, jnp.ones((2, 5, 16)), mutable="cache")


# ---------------------------------------------------------------- recurrent


def test_recurrent_call_errors() -> None:
    cell = nn.GRUCell(3, 4, key=KEY)
    rnn = nn.RNN(cell)
    with pytest.raises(pm.ShapeError, match=r"'in_features' does not agree.*7"):
        rnn(jnp.ones((2, 5, 7)))
    with pytest.raises(pm.ShapeError, match=r"RNN: inputs f32\[3\] has 1 axes but the cell"):
        rnn(jnp.ones(3))
    with pytest.raises(
        pm.ShapeError, match=r"seq_lengths i32\[3\] must have the batch shape \(2,\)"
    ):
        rnn(jnp.ones((2, 5, 3)), seq_lengths=jnp.array([1, 2, 3]))
    with pytest.raises(
        pm.ShapeError, match=r"seq_lengths i32\[2\] must have the batch shape \(4,\)"
    ):
        rnn(jnp.ones((5, 4, 3)), seq_lengths=jnp.array([1, 2]), time_major=True)
    with pytest.raises(pm.ShapeError, match=r"'in_features' does not agree"):
        cell(jnp.zeros((2, 5)), jnp.ones((2, 3)))
    with pytest.raises(pm.ShapeError, match=r"LSTMCell\.__call__"):
        nn.LSTMCell(3, 4, key=KEY)(jnp.zeros((2, 4)), jnp.ones((2, 3)))  # carry not a pair


def test_sequential_passes_errors_of_its_layers_through() -> None:
    model = nn.Sequential([nn.Linear(3, 4, key=KEY), jax.nn.relu, nn.Linear(5, 2, key=KEY)])
    with pytest.raises(pm.ShapeError, match=r"'in_features' does not agree: it is 5"):
        model(jnp.ones((1, 3)))


def test_the_id_check_keeps_grad_vmap_and_jit_working() -> None:
    emb = nn.Embedding(5, 4, key=KEY)
    ids = jnp.array([[0, 4], [1, 2]])
    grads = pm.jit(pm.grad(lambda m, i: jnp.sum(m(i) ** 2)))(emb, ids)
    assert grads.embedding.value.shape == (5, 4)
    assert float(jnp.abs(grads.embedding.value[3]).sum()) == 0.0  # id 3 is unused
    rows = pm.jit(pm.vmap(lambda m, i: m(i), in_axes=(None, 0)))(emb, ids)
    assert rows.shape == (2, 2, 4)
    assert emb(jnp.zeros((0,), jnp.int32)).shape == (0, 4)  # no ids: nothing to check


def test_error_if_needs_an_array_to_attach_the_check_to() -> None:
    from pytreemod.nn._checks import error_if

    with pytest.raises(ValueError, match=r"error_if needs an array in `x`"):
        jax.jit(lambda p: error_if(None, p, "never"))(jnp.array(True))
    assert error_if((), False, "a concrete false predicate needs no array") == ()


# ---------------------------------------------------------------- functional


F = nn.functional
IMG = jnp.ones((1, 5, 5, 3))
FUNCTIONAL: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("linear", lambda: F.linear(X3, jnp.ones((4, 5))), pm.ShapeError, r"'in_features' does"),
    ("linear-bias", lambda: F.linear(X3, jnp.ones((3, 5)), jnp.ones(4)), pm.ShapeError, r"out_f"),
    ("conv-rank", lambda: F.conv(jnp.ones(3), KERNEL), pm.ShapeError, r"needs at least 3"),
    ("conv-channels", lambda: F.conv(IMG[..., :2], KERNEL), pm.ShapeError, r"has 2 channels"),
    ("conv-padding", lambda: F.conv(IMG, KERNEL, padding="FOO"), pm.LayerConfigError, r"FOO"),
    ("conv-strides", lambda: F.conv(IMG, KERNEL, strides=0), pm.LayerConfigError, r"strides=0"),
    (
        "conv-dilation",
        lambda: F.conv(IMG, KERNEL, kernel_dilation=(1, -2)),
        pm.LayerConfigError,
        r"kernel_dilation=\(1, -2\) must be a positive int or hold positive ints",
    ),
    ("pool-window", lambda: F.max_pool(IMG, (0, 2)), pm.LayerConfigError, r"\(0, 2\) must hold"),
    (
        "pool-strides",
        lambda: F.min_pool(IMG, (2, 2), strides=(0, 1)),
        pm.LayerConfigError,
        r"min_pool: strides \(0, 1\) must hold positive ints",
    ),
    (
        "pool-padding",
        lambda: F.avg_pool(IMG, (2, 2), padding="FOO"),
        pm.LayerConfigError,
        r"avg_pool: padding 'FOO' must be 'SAME', 'VALID', 'SAME_LOWER' or 2",
    ),
    ("dropout-rate", lambda: F.dropout(X3, 1.5, KEY), pm.LayerConfigError, r"rate=1\.5 is not"),
    ("dropout-key", lambda: F.dropout(X3, 0.5, None), pm.LayerConfigError, r"needs a PRNG key"),
    (
        "layer-norm",
        lambda: F.layer_norm(X3, jnp.ones(5), None),
        pm.ShapeError,
        r"scale is f32\[5\] but x f32\[2, 3\] has \(3,\)",
    ),
    (
        "attention-heads",
        lambda: F.dot_product_attention(QKV, QKV[..., :3, :], QKV[..., :3, :]),
        pm.ShapeError,
        r"dimension 'heads' does not agree",
    ),
    (
        "attention-dim",
        lambda: F.dot_product_attention(QKV, QKV[..., :7], QKV),
        pm.ShapeError,
        r"dimension 'head_dim' does not agree",
    ),
    ("embed-float", lambda: F.embed(jnp.ones(2), jnp.ones((5, 4))), pm.ShapeError, r"Integer"),
    (
        "causal-mask-scalar",
        lambda: F.make_causal_mask(jnp.ones(())),
        pm.ShapeError,
        r"x f32\[\] has no axes; pass a \(\*batch, len\) input",
    ),
]
X3 = jnp.ones((2, 3))
KERNEL = jnp.ones((3, 3, 3, 4))
QKV = jnp.ones((2, 5, 4, 8))


@pytest.mark.parametrize(
    ("call", "cls", "match"), [c[1:] for c in FUNCTIONAL], ids=[c[0] for c in FUNCTIONAL]
)
def test_bad_input_to_a_functional_op_is_a_library_error(
    call: Callable[[], Any], cls: type[Exception], match: str
) -> None:
    with pytest.raises(cls, match=match):
        call()
