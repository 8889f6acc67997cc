"""Recurrent cells, RNN and Bidirectional of pytreemod.nn, and the recurrent functions of
pytreemod.nn.functional: textbook references, Flax Linen (and adapters.linen) given the
same parameters, and the RNN options."""

from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import pytreemod as pm
from pytreemod.nn import functional as F

from ._compare import close, jcall, linen, make, randn, standard_promotion

Key = Callable[[], jax.Array]
sigmoid = jax.nn.sigmoid

CELLS: dict[str, Callable[..., Any]] = {
    "lstm": lambda m, **kw: m.LSTMCell(4, **kw),
    "optimized_lstm": lambda m, **kw: m.OptimizedLSTMCell(4, **kw),
    "gru": lambda m, **kw: m.GRUCell(4, **kw),
    "mgu": lambda m, **kw: m.MGUCell(4, **kw),
    "mgu_no_reset": lambda m, **kw: m.MGUCell(4, reset_gate=False, **kw),
    "simple": lambda m, **kw: m.SimpleCell(4, **kw),
    "simple_residual": lambda m, **kw: m.SimpleCell(4, residual=True, **kw),
}


OURS: dict[str, tuple[str, dict[str, Any]]] = {
    "lstm": ("LSTMCell", {}),
    "optimized_lstm": ("OptimizedLSTMCell", {}),
    "gru": ("GRUCell", {}),
    "mgu": ("MGUCell", {}),
    "mgu_no_reset": ("MGUCell", {"reset_gate": False}),
    "simple": ("SimpleCell", {}),
    "simple_residual": ("SimpleCell", {"residual": True}),
}


def ours(name: str, key: jax.Array, **kwargs: Any) -> Any:
    """The pytreemod cell ``name`` (3 input features, 4 hidden) with random parameters."""
    cls, extra = OURS[name]
    return make(getattr(pm.nn, cls), 3, 4, key=key, **extra, **kwargs)


def flax_params(cell: Any) -> Any:
    """The Flax ``params`` of a cell: its projections."""
    return pm.to_variables(cell)["params"]["projections"]


def random_carry(cell: Any, shape: tuple[int, ...], key: jax.Array) -> Any:
    leaves, tree = jax.tree.flatten(cell.initialize_carry(shape))
    keys = jax.random.split(key, len(leaves))
    return tree.unflatten([randn(k, x.shape) for k, x in zip(keys, leaves)])


@pytest.mark.parametrize("name", list(CELLS))
def test_cell_parameters_are_flax_cells(getkey: Key, name: str) -> None:
    nn = linen()
    cell = ours(name, getkey())
    x, carry = jnp.ones((2, 3)), cell.initialize_carry((2, 3))
    with standard_promotion():
        ref = jax.eval_shape(lambda: CELLS[name](nn).init(jax.random.key(0), carry, x)["params"])
    mine = flax_params(cell)
    assert jax.tree.map(lambda a: (a.shape, a.dtype), mine) == jax.tree.map(
        lambda a: (a.shape, a.dtype), ref
    )


@pytest.mark.parametrize("name", list(CELLS))
def test_cell_matches_flax_on_the_same_parameters(getkey: Key, name: str) -> None:
    nn = linen()
    cell = ours(name, getkey())
    x = randn(getkey(), (2, 5, 3))
    carry = random_carry(cell, x.shape, getkey())
    with standard_promotion():
        ref = jax.jit(CELLS[name](nn).apply)({"params": flax_params(cell)}, carry, x)
    mine = jcall(lambda c, h, v: c(h, v), cell, carry, x)
    jax.tree.map(close, mine, ref)


def test_conv_lstm_cell_matches_flax(getkey: Key) -> None:
    nn = linen()
    cell = make(pm.nn.ConvLSTMCell, 2, 3, (3, 3), key=getkey())
    x = randn(getkey(), (2, 5, 5, 2))
    carry = random_carry(cell, x.shape, getkey())
    assert cell.num_feature_axes == 3 and carry[0].shape == (2, 5, 5, 3)
    assert pm.to_variables(cell)["params"]["projections"]["hh"]["kernel"].shape == (3, 3, 3, 12)
    with standard_promotion():
        ref = jax.jit(nn.ConvLSTMCell(3, (3, 3)).apply)({"params": flax_params(cell)}, carry, x)
    jax.tree.map(close, jcall(lambda c, h, v: c(h, v), cell, carry, x), ref)


def test_lstm_matches_the_textbook_equations(getkey: Key) -> None:
    cell = ours("lstm", getkey())
    x = randn(getkey(), (2, 3))
    c, h = random_carry(cell, x.shape, getkey())
    p = flax_params(cell)

    def pre(gate: str) -> jax.Array:
        hidden = p[f"h{gate}"]
        return x @ p[f"i{gate}"]["kernel"] + h @ hidden["kernel"] + hidden["bias"][None]

    i, f, g, o = sigmoid(pre("i")), sigmoid(pre("f")), jnp.tanh(pre("g")), sigmoid(pre("o"))
    new_c = f * c + i * g
    (c2, h2), y = jcall(lambda m, a, b, v: m((a, b), v), cell, c, h, x)
    close(c2, new_c)
    close(h2, o * jnp.tanh(new_c))
    close(y, h2, tol=0)


def test_gru_matches_the_textbook_equations(getkey: Key) -> None:
    cell = ours("gru", getkey(), bias_init=jax.nn.initializers.normal())
    x = randn(getkey(), (2, 3))
    h = random_carry(cell, x.shape, getkey())
    p = flax_params(cell)

    def lin(name: str, v: jax.Array) -> jax.Array:
        out = v @ p[name]["kernel"]
        return out + p[name]["bias"][None] if "bias" in p[name] else out

    r = sigmoid(lin("ir", x) + lin("hr", h))
    z = sigmoid(lin("iz", x) + lin("hz", h))
    n = jnp.tanh(lin("in", x) + r * lin("hn", h))
    new_h, y = jcall(lambda m, a, v: m(a, v), cell, h, x)
    close(new_h, (1 - z) * n + z * h)
    close(y, new_h, tol=0)


def test_optimized_lstm_equals_lstm(getkey: Key) -> None:
    cell = ours("lstm", getkey())
    skeleton = ours("optimized_lstm", getkey())
    fused = jax.tree.unflatten(jax.tree.structure(skeleton), jax.tree.leaves(cell))
    x = randn(getkey(), (2, 3))
    carry = random_carry(cell, x.shape, getkey())
    step = lambda m, c, v: m(c, v)
    jax.tree.map(close, jcall(step, fused, carry, x), jcall(step, cell, carry, x))


def test_default_initializers_are_flax_defaults(getkey: Key) -> None:
    cell = pm.nn.LSTMCell(3, 4, key=getkey())
    p = flax_params(cell)
    close(p["hi"]["kernel"] @ p["hi"]["kernel"].T, jnp.eye(4), tol=1e-5)  # orthogonal
    close(p["hi"]["bias"], jnp.zeros(4), tol=0)
    assert "bias" not in p["ii"]
    mgu = flax_params(pm.nn.MGUCell(3, 4, key=getkey()))
    close(mgu["if"]["bias"], jnp.ones(4), tol=0)  # forget bias: ones
    close(mgu["in"]["bias"], jnp.zeros(4), tol=0)
    assert "bias" not in flax_params(pm.nn.MGUCell(3, 4, reset_gate=False, key=getkey()))["hn"]


def test_initialize_carry(getkey: Key) -> None:
    cell = pm.nn.LSTMCell(3, 4, key=getkey())
    c, h = cell.initialize_carry((2, 7, 3))
    assert c.shape == h.shape == (2, 7, 4) and not jnp.any(c)
    normal = pm.nn.GRUCell(3, 4, carry_init=jax.nn.initializers.normal(), key=getkey())
    a = normal.initialize_carry((2, 3), key=jax.random.key(1))
    b = normal.initialize_carry((2, 3), key=jax.random.key(2))
    assert a.shape == (2, 4) and not jnp.allclose(a, b)
    normal = jax.nn.initializers.normal()  # orthogonal() has no float16 QR on CPU
    half = pm.nn.SimpleCell(
        3, 4, param_dtype=jnp.float16, recurrent_kernel_init=normal, key=getkey()
    )
    assert half.initialize_carry((3,)).dtype == jnp.float16


def test_base_cell_is_abstract() -> None:
    base = pm.nn.RNNCellBase()
    for call in (lambda: base(None, None), lambda: base.initialize_carry((1,))):
        with pytest.raises(NotImplementedError):
            call()
    with pytest.raises(NotImplementedError):
        _ = base.num_feature_axes


def test_cell_reports_a_wrong_input_size(getkey: Key) -> None:
    cell = pm.nn.GRUCell(3, 4, key=getkey())
    with pytest.raises(pm.ShapeError, match="in_features"):
        cell(cell.initialize_carry((2, 3)), jnp.ones((2, 5)))


# ----------------------------------------------------------------------------- RNN

X = randn(jax.random.key(7), (3, 5, 3))  # (batch, time, features)
LENGTHS = jnp.array([5, 2, 3])


def loop(cell: Any, carry: Any, xs: jax.Array) -> tuple[list[Any], list[jax.Array]]:
    """Every step's carry and output, by a Python loop over axis 1."""
    carries, ys = [], []
    for t in range(xs.shape[1]):
        carry, y = cell(carry, xs[:, t])
        carries.append(carry)
        ys.append(y)
    return carries, ys


def test_rnn_equals_a_loop_over_its_cell(getkey: Key) -> None:
    cell = ours("lstm", getkey())
    carry, ys = jcall(lambda r, x: r(x, return_carry=True), pm.nn.RNN(cell), X)
    carries, expected = loop(cell, cell.initialize_carry(X[:, 0].shape), X)
    close(ys, jnp.stack(expected, axis=1))
    jax.tree.map(close, carry, carries[-1])
    assert jcall(pm.nn.RNN(cell), X).shape == (3, 5, 4)


def test_rnn_seq_lengths_return_each_sequence_carry_at_its_end(getkey: Key) -> None:
    cell = ours("gru", getkey())
    rnn = pm.nn.RNN(cell, return_carry=True)
    carry, ys = jcall(lambda r, x, n: r(x, seq_lengths=n), rnn, X, LENGTHS)
    carries, expected = loop(cell, cell.initialize_carry(X[:, 0].shape), X)
    close(ys, jnp.stack(expected, axis=1))  # padded steps are computed, not zeroed
    for b, n in enumerate(LENGTHS.tolist()):
        close(carry[b], carries[n - 1][b])


def test_rnn_reverse_and_keep_order(getkey: Key) -> None:
    cell = ours("simple", getkey())
    flipped = X[:, ::-1]
    _, expected = loop(cell, cell.initialize_carry(X[:, 0].shape), flipped)
    backwards = jcall(pm.nn.RNN(cell, reverse=True), X)
    close(backwards, jnp.stack(expected, axis=1))
    aligned = jcall(lambda r, x: r(x, reverse=True, keep_order=True), pm.nn.RNN(cell), X)
    close(aligned, backwards[:, ::-1])
    # with lengths, each sequence is reversed within its length; padding stays last
    n = 2
    short = jcall(lambda r, x, m: r(x, seq_lengths=m), pm.nn.RNN(cell, reverse=True), X, LENGTHS)
    _, expected = loop(cell, cell.initialize_carry(X[:1, 0].shape), X[1:2, :n][:, ::-1])
    close(short[1, :n], jnp.stack(expected, axis=1)[0])


def test_rnn_time_major_and_initial_carry(getkey: Key) -> None:
    cell = ours("mgu", getkey())
    start = random_carry(cell, X[:, 0].shape, getkey())
    batch_major = jcall(lambda r, x, c: r(x, initial_carry=c), pm.nn.RNN(cell), X, start)
    rnn = pm.nn.RNN(cell, time_major=True)
    time_major = jcall(lambda r, x, c: r(x, initial_carry=c), rnn, jnp.swapaxes(X, 0, 1), start)
    close(time_major, jnp.swapaxes(batch_major, 0, 1))
    _, expected = loop(cell, start, X)
    close(batch_major, jnp.stack(expected, axis=1))


def test_rnn_key_draws_a_random_initial_carry(getkey: Key) -> None:
    cell = pm.nn.SimpleCell(3, 4, carry_init=jax.nn.initializers.normal(1.0), key=getkey())
    rnn = pm.nn.RNN(cell, return_carry=True)
    first = jcall(lambda r, x, k: r(x, key=k), rnn, X, jax.random.key(1))
    second = jcall(lambda r, x, k: r(x, key=k), rnn, X, jax.random.key(2))
    start = cell.initialize_carry(X[:, 0].shape, key=jax.random.key(1))
    _, expected = loop(cell, start, X)
    close(first[1], jnp.stack(expected, axis=1))
    assert not jnp.allclose(first[1], second[1])


def test_rnn_unroll_and_multiple_batch_axes(getkey: Key) -> None:
    cell = ours("lstm", getkey())
    xs = jnp.stack([X, 2 * X])  # (2, 3, time, features)
    unrolled = jcall(pm.nn.RNN(cell, unroll=5), xs)
    close(unrolled, jcall(pm.nn.RNN(cell), xs))
    close(unrolled[1], jcall(pm.nn.RNN(cell), 2 * X))


def test_conv_lstm_rnn(getkey: Key) -> None:
    cell = make(pm.nn.ConvLSTMCell, 2, 3, (3,), key=getkey())
    x = randn(getkey(), (2, 4, 6, 2))  # (batch, time, width, channels)
    (c, h), ys = jcall(lambda r, v: r(v, return_carry=True), pm.nn.RNN(cell), x)
    assert ys.shape == (2, 4, 6, 3) and c.shape == (2, 6, 3)
    close(h, ys[:, -1])


def test_rnn_gradients_flow_to_the_cell(getkey: Key) -> None:
    rnn = pm.nn.RNN(ours("gru", getkey()))
    grads = jax.jit(jax.grad(lambda r, x: jnp.sum(r(x, seq_lengths=LENGTHS) ** 2)))(rnn, X)
    g = flax_params(grads.cell)
    assert jnp.all(jnp.isfinite(g["hr"]["kernel"])) and jnp.any(g["hr"]["kernel"] != 0)


RNN_OPTIONS: list[dict[str, Any]] = [
    {"return_carry": True},
    {"return_carry": True, "reverse": True, "seq_lengths": LENGTHS},
    {"return_carry": True, "reverse": True, "keep_order": True, "seq_lengths": LENGTHS},
    {"time_major": True, "reverse": True},
]


@pytest.mark.parametrize("options", RNN_OPTIONS)
def test_rnn_matches_flax_on_the_same_parameters(getkey: Key, options: dict[str, Any]) -> None:
    nn = linen()
    cell = ours("lstm", getkey())
    variables = {"params": {"cell": flax_params(cell)}}
    lengths = options.pop("seq_lengths", None)
    with standard_promotion():
        ref = jax.jit(lambda v, x, n: nn.RNN(nn.LSTMCell(4), **options).apply(v, x, seq_lengths=n))(
            variables, X, lengths
        )
    mine = jcall(lambda r, x, n: r(x, seq_lengths=n), pm.nn.RNN(cell, **options), X, lengths)
    jax.tree.map(close, mine, ref)


def test_bidirectional_equals_adapters_linen(getkey: Key) -> None:
    import adapters.linen as anl

    forward, backward = ours("lstm", getkey()), ours("gru", getkey())
    layer = pm.nn.Bidirectional(pm.nn.RNN(forward), pm.nn.RNN(backward), return_carry=True)
    mine = jcall(lambda m, x, n: m(x, seq_lengths=n), layer, X, LENGTHS)
    variables = {
        "params": {
            "forward_rnn": {"cell": flax_params(forward)},
            "backward_rnn": {"cell": flax_params(backward)},
        }
    }
    linen_layer = anl.Bidirectional(anl.RNN(anl.LSTMCell(4)), anl.RNN(anl.GRUCell(4)))
    with standard_promotion():
        ref = jax.jit(lambda v, x, n: linen_layer.apply(v, x, seq_lengths=n, return_carry=True))(
            variables, X, LENGTHS
        )
    jax.tree.map(close, mine, ref)
    assert mine[1].shape == (3, 5, 8)


def test_bidirectional_merge_carries_and_shared_rnn(getkey: Key) -> None:
    rnn = pm.nn.RNN(ours("simple", getkey()))
    shared = pm.nn.Bidirectional(rnn, rnn, merge_fn=jnp.add)
    assert list(pm.to_variables(shared)["params"]) == ["forward_rnn"]  # one set of weights
    start = (random_carry(rnn.cell, X[:, 0].shape, getkey()),) * 2
    (fwd, bwd), out = jcall(
        lambda m, x, c: m(x, initial_carry=c, return_carry=True), shared, X, start
    )
    expected = jcall(lambda r, x, c: r(x, initial_carry=c), rnn, X, start[0])
    backwards = jcall(lambda r, x, c: r(x, initial_carry=c, reverse=True), rnn, X, start[1])
    close(out, expected + backwards[:, ::-1])
    close(fwd, expected[:, -1])
    close(bwd, backwards[:, -1])


# ----------------------------------------------------------------------------- functional


def test_dense_projections_run_flax_parameters(getkey: Key) -> None:
    cell = ours("gru", getkey())
    x = randn(getkey(), (2, 3))
    h = random_carry(cell, x.shape, getkey())
    step = F.gru_cell(h, x, F.dense_projections(flax_params(cell)))
    jax.tree.map(close, step, jcall(lambda m, a, v: m(a, v), cell, h, x))
    with pytest.raises(pm.LayerConfigError, match="no parameters for the projection 'ir'"):
        F.gru_cell(h, x, F.dense_projections({}))


def test_fused_lstm_cell_needs_four_gates() -> None:
    with pytest.raises(pm.LayerConfigError, match="takes 4 input kernels"):
        F.fused_lstm_cell((jnp.zeros(2), jnp.zeros(2)), jnp.ones(3), [jnp.ones((3, 2))] * 3, [], [])


def test_rnn_needs_a_carry() -> None:
    with pytest.raises(pm.LayerConfigError, match="give initial_carry or init_carry"):
        F.rnn(lambda *a: a[:2], jnp.ones((2, 3, 1)), num_feature_axes=1)


def test_select_last_carry() -> None:
    carries = (jnp.arange(12).reshape(4, 3), jnp.arange(24).reshape(4, 3, 2))
    first, second = F.select_last_carry(carries, jnp.array([1, 4, 0]))
    np.testing.assert_array_equal(first, [0, 10, 11])  # length 0 picks the last step
    np.testing.assert_array_equal(second, [[0, 1], [20, 21], [22, 23]])


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 6), min_size=1, max_size=3),
    time_major=st.booleans(),
)
def test_flip_sequences_is_an_involution(lengths: list[int], time_major: bool) -> None:
    batch = len(lengths)
    x = np.arange(batch * 6 * 2).reshape(batch, 6, 2)
    if time_major:
        x = np.swapaxes(x, 0, 1)
    seq = np.array(lengths)
    once = F.flip_sequences(x, seq, 1, time_major)
    np.testing.assert_array_equal(F.flip_sequences(once, seq, 1, time_major), x)
    seqs = np.swapaxes(np.asarray(once), 0, 1) if time_major else np.asarray(once)
    plain = np.swapaxes(x, 0, 1) if time_major else x
    for b, n in enumerate(lengths):  # the first n steps reversed in place
        np.testing.assert_array_equal(seqs[b, :n], plain[b, :n][::-1])
