"""Recurrent layers against flax.linen: the same variables (names, shapes, dtypes and
initial values for the same key), carries, outputs and gradients on Flax's variables, for
every cell and every RNN / Bidirectional option."""

import logging
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn
from adapters.linen.recurrent import flip_sequences

from ._flax_compare import assert_same_tree, check, flax_linen, standard

X = jax.random.normal(jax.random.key(1), (3, 5, 2))  # (batch, time, features)
STEP = X[:, 0]
IMAGES = jax.random.normal(jax.random.key(2), (2, 3, 4, 4, 2))  # (batch, time, h, w, c)
LENGTHS = jnp.array([5, 2, 3])


def check_scanned(build: Callable[[Any], Any], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``check`` without comparing initial values (those are compared once, in
    ``test_rnn_initial_parameters_match_flax``)."""
    return check(build, *args, init_values=False, **kwargs)


CELLS: list[tuple[str, Callable[[Any], Any]]] = [
    ("lstm", lambda m: m.LSTMCell(4)),
    ("optimized_lstm", lambda m: m.OptimizedLSTMCell(4)),
    ("gru", lambda m: m.GRUCell(4)),
    ("mgu", lambda m: m.MGUCell(4)),
    ("mgu_no_reset", lambda m: m.MGUCell(4, reset_gate=False)),
    ("simple", lambda m: m.SimpleCell(4)),
    ("simple_residual", lambda m: m.SimpleCell(4, residual=True)),
    ("lstm_relu", lambda m: m.LSTMCell(4, gate_fn=jax.nn.hard_sigmoid, activation_fn=m.relu)),
    ("gru_inits", lambda m: m.GRUCell(4, kernel_init=m.initializers.normal(), bias_init=m.ones)),
    ("mgu_inits", lambda m: m.MGUCell(4, forget_bias_init=m.zeros, activation_bias_init=m.ones)),
]


def _carry(build: Callable[[Any], Any], shape: tuple[int, ...]) -> Any:
    """A random carry of the cell's structure (zeros would hide the recurrent kernels)."""
    with standard():
        zeros = build(flax_linen()).initialize_carry(jax.random.key(0), shape)
    leaves, tree = jax.tree.flatten(zeros)
    keys = jax.random.split(jax.random.key(3), len(leaves))
    return tree.unflatten([jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])


@pytest.mark.parametrize(("name", "build"), CELLS, ids=[n for n, _ in CELLS])
def test_cell_matches_flax(name: str, build: Callable[[Any], Any]) -> None:
    carry = _carry(build, STEP.shape)
    check(build, carry, STEP, init_values=True)


def test_conv_lstm_cell_matches_flax() -> None:
    def build(m: Any) -> Any:
        return m.ConvLSTMCell(3, kernel_size=(3, 3))

    step = IMAGES[:, 0]
    carry = _carry(build, step.shape)
    check(build, carry, step, init_values=True)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dtype": jnp.bfloat16},
        # (orthogonal() has no bfloat16 QR on CPU, in Flax too)
        {"param_dtype": jnp.bfloat16, "recurrent_kernel_init": jax.nn.initializers.normal()},
    ],
    ids=["dtype", "param_dtype"],
)
@pytest.mark.parametrize("cell", ["LSTMCell", "OptimizedLSTMCell", "GRUCell"])
def test_cell_dtypes_match_flax(cell: str, kwargs: dict[str, Any]) -> None:
    def build(m: Any) -> Any:
        return getattr(m, cell)(4, **kwargs)

    carry = _carry(build, STEP.shape)
    _, variables = check(build, carry, STEP, init_values=True, tol=1e-2)
    kernel = variables["params"]["hr" if cell == "GRUCell" else "hi"]["kernel"]
    assert kernel.dtype == kwargs.get("param_dtype", jnp.float32)


@pytest.mark.parametrize(
    "build",
    [
        lambda m: m.LSTMCell(4),
        lambda m: m.GRUCell(4, carry_init=m.initializers.normal()),
        lambda m: m.SimpleCell(4, param_dtype=jnp.float16),
        lambda m: m.ConvLSTMCell(4, (3, 3), carry_init=m.initializers.uniform()),
    ],
    ids=["lstm", "gru_normal", "simple_f16", "conv_uniform"],
)
def test_initialize_carry_matches_flax(build: Callable[[Any], Any]) -> None:
    shape = (2, 6, 6, 3)
    with standard():
        ref = build(flax_linen()).initialize_carry(jax.random.key(5), shape)
        ours = build(nn).initialize_carry(jax.random.key(5), shape)
    assert_same_tree(ours, ref, tol=0.0)
    assert build(nn).num_feature_axes == build(flax_linen()).num_feature_axes


def test_num_feature_axes() -> None:
    assert nn.LSTMCell(3).num_feature_axes == 1
    assert nn.ConvLSTMCell(3, (3, 3, 3)).num_feature_axes == 4
    with pytest.raises(NotImplementedError):
        nn.RNNCellBase().initialize_carry(jax.random.key(0), (2, 3))
    with pytest.raises(NotImplementedError):
        _ = nn.RNNCellBase().num_feature_axes


def test_optimized_lstm_equals_lstm_on_the_same_parameters() -> None:
    carry = _carry(lambda m: m.LSTMCell(4), STEP.shape)
    with standard():
        variables = nn.LSTMCell(4).init(jax.random.key(0), carry, STEP)
        a = nn.LSTMCell(4).apply(variables, carry, STEP)
        b = nn.OptimizedLSTMCell(4).apply(variables, carry, STEP)
    assert_same_tree(b, a)


RNN_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("default", {}, {}),
    ("reverse", {"reverse": True, "return_carry": True, "unroll": 2}, {}),
    ("lengths_carry", {"return_carry": True}, {"seq_lengths": LENGTHS}),
    (
        "lengths_reverse",
        {"return_carry": True, "reverse": True, "keep_order": True},
        {"seq_lengths": LENGTHS},
    ),
    ("call_overrides", {}, {"return_carry": True, "reverse": True, "keep_order": True}),
    (
        "zero_length_reverse",
        {"return_carry": True, "reverse": True},
        {"seq_lengths": jnp.array([0, 5, 1])},
    ),
]


@pytest.mark.parametrize(("name", "attrs", "call"), RNN_CASES, ids=[n for n, _, _ in RNN_CASES])
def test_rnn_matches_flax(name: str, attrs: dict[str, Any], call: dict[str, Any]) -> None:
    check_scanned(lambda m: m.RNN(m.LSTMCell(4), **attrs), X, **call)


def test_rnn_initial_parameters_match_flax() -> None:
    check(lambda m: m.RNN(m.SimpleCell(4)), X, init_values=True)


def test_rnn_time_major_and_batch_axes_match_flax() -> None:
    xt = jnp.swapaxes(X, 0, 1)
    check_scanned(
        lambda m: m.RNN(m.GRUCell(4), time_major=True, reverse=True, return_carry=True),
        xt,
        seq_lengths=LENGTHS,
    )
    many = jnp.reshape(jnp.concatenate([X, X]), (2, 3, 5, 2))  # two batch axes
    check_scanned(lambda m: m.RNN(m.SimpleCell(4), return_carry=True), many)


def test_rnn_without_batch_axes() -> None:
    rnn = nn.RNN(nn.SimpleCell(4), return_carry=True)
    with standard():
        (carry, ys), variables = rnn.init_with_output(jax.random.key(0), X[0])
        (_, batched) = rnn.apply(variables, X[:1])
    assert carry.shape == (4,) and ys.shape == (5, 4)
    np.testing.assert_allclose(ys, batched[0], rtol=1e-6)


def test_rnn_initial_carry_and_init_key_match_flax() -> None:
    carry = _carry(lambda m: m.LSTMCell(4), STEP.shape)
    check_scanned(lambda m: m.RNN(m.LSTMCell(4), return_carry=True), X, initial_carry=carry)
    check_scanned(
        lambda m: m.RNN(m.GRUCell(4, carry_init=m.initializers.normal()), return_carry=True),
        X,
        init_key=jax.random.key(9),
    )


def test_conv_lstm_rnn_matches_flax() -> None:
    out, _ = check_scanned(
        lambda m: m.RNN(
            m.ConvLSTMCell(3, (2, 2), use_bias=False, padding=((0, 1), (1, 0))),
            return_carry=True,
        ),
        IMAGES,
        seq_lengths=jnp.array([1, 3]),
    )
    assert out[1].shape == (2, 3, 4, 4, 3)


def test_rnn_with_per_step_parameters_matches_flax() -> None:
    def build(m: Any) -> Any:
        return m.RNN(
            m.SimpleCell(4),
            variable_broadcast=False,
            variable_axes={"params": 0},
            split_rngs={"params": True},
        )

    _, variables = check_scanned(build, X)
    assert variables["params"]["cell"]["i"]["kernel"].shape == (5, 2, 4)


def test_rnn_equals_a_loop_over_the_cell() -> None:
    rnn = nn.RNN(nn.GRUCell(4), return_carry=True)
    with standard():
        (carry, ys), variables = rnn.init_with_output(jax.random.key(0), X, seq_lengths=LENGTHS)
        cell_vars = {"params": variables["params"]["cell"]}
        h = rnn.cell.initialize_carry(jax.random.key(0), STEP.shape)
        hs = []
        for t in range(X.shape[1]):
            h, y = rnn.cell.apply(cell_vars, h, X[:, t])
            np.testing.assert_allclose(ys[:, t], y, rtol=1e-5, atol=1e-6)
            hs.append(h)
    for b, n in enumerate(LENGTHS.tolist()):
        np.testing.assert_allclose(carry[b], hs[n - 1][b], rtol=1e-5, atol=1e-6)


def test_nn_scan_over_a_cell_class_matches_flax() -> None:
    def build(m: Any) -> Any:
        scanned = m.scan(
            m.LSTMCell,
            in_axes=1,
            out_axes=1,
            variable_broadcast="params",
            split_rngs={"params": False},
        )
        return scanned(4)

    carry = _carry(lambda m: m.LSTMCell(4), STEP.shape)
    check_scanned(build, carry, X)


BIDI_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("default", {}, {}),
    (
        "lengths_time_major",
        {"return_carry": True, "time_major": True},
        {"seq_lengths": jnp.array([1, 2, 3, 3, 2])},
    ),
]


@pytest.mark.parametrize(("name", "attrs", "call"), BIDI_CASES, ids=[n for n, _, _ in BIDI_CASES])
def test_bidirectional_matches_flax(name: str, attrs: dict[str, Any], call: dict[str, Any]) -> None:
    def build(m: Any) -> Any:
        return m.Bidirectional(m.RNN(m.LSTMCell(4)), m.RNN(m.GRUCell(3)), **attrs)

    out, _ = check_scanned(build, X, **call)  # (time_major: 3 steps of a batch of 5)
    merged = out[1] if attrs.get("return_carry") else out
    assert merged.shape[-1] == 7


def test_bidirectional_merge_fn() -> None:
    layer = nn.Bidirectional(nn.RNN(nn.SimpleCell(4)), nn.RNN(nn.SimpleCell(4)), merge_fn=jnp.add)
    with standard():
        out, variables = layer.init_with_output(jax.random.key(0), X)
        forward = nn.RNN(nn.SimpleCell(4)).apply({"params": variables["params"]["forward_rnn"]}, X)
        backward = nn.RNN(nn.SimpleCell(4), reverse=True, keep_order=True).apply(
            {"params": variables["params"]["backward_rnn"]}, X
        )
    np.testing.assert_allclose(out, forward + backward, rtol=1e-6)


def test_bidirectional_init_key_matches_flax() -> None:
    def build(m: Any) -> Any:
        normal = m.initializers.normal()
        return m.Bidirectional(
            m.RNN(m.SimpleCell(4, carry_init=normal)), m.RNN(m.GRUCell(3, carry_init=normal))
        )

    check_scanned(build, X, init_key=jax.random.key(4), return_carry=True)


def test_bidirectional_shared_rnn_shares_parameters_and_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def build(m: Any) -> Any:
        rnn = m.RNN(m.SimpleCell(4))
        return m.Bidirectional(rnn, rnn)

    with caplog.at_level(logging.WARNING):
        _, variables = check_scanned(build, X)
    assert list(variables["params"]) == ["forward_rnn"]
    assert "share parameters" in caplog.text


def test_gradients_match_flax() -> None:
    fl = flax_linen()

    def build(m: Any) -> Any:
        return m.RNN(m.OptimizedLSTMCell(4))

    def grads(m: Any, variables: Any) -> Any:
        def loss(v: Any, x: jax.Array) -> jax.Array:
            return jnp.sum(build(m).apply(v, x, seq_lengths=LENGTHS) ** 2)

        return jax.grad(loss, argnums=(0, 1))(variables, X)

    with standard():
        variables = build(fl).init(jax.random.key(0), X)
        assert_same_tree(grads(nn, variables), grads(fl, variables), tol=1e-4)


@pytest.mark.parametrize(
    ("shape", "time_major"),
    [((2, 5), False), ((2, 5, 3), False), ((5, 2), True), ((5, 2, 3), True)],
)
@pytest.mark.parametrize("lengths", [None, [4, 2]])
def test_flip_sequences_matches_flax(
    shape: tuple[int, ...], time_major: bool, lengths: list[int] | None
) -> None:
    x = jnp.arange(int(np.prod(shape))).reshape(shape)
    seq = None if lengths is None else jnp.array(lengths)
    with standard():
        ref = flax_linen().recurrent.flip_sequences(x, seq, num_batch_dims=1, time_major=time_major)
    ours = flip_sequences(x, seq, num_batch_dims=1, time_major=time_major)
    np.testing.assert_array_equal(ours, ref)
