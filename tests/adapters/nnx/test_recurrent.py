"""adapters.nnx recurrent layers against flax.nnx 0.12.8 (the reference): the same
parameters, carries, outputs and RNG use."""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters import nnx
from adapters.nnx.nn import recurrent

X = jax.random.normal(jax.random.key(0), (2, 4, 3))
LENGTHS = jnp.array([4, 2])


def _same(ours, theirs):
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def _state(module, lib):
    return {
        p: jax.random.key_data(v[...]) if jnp.issubdtype(v.dtype, jax.dtypes.prng_key) else v[...]
        for p, v in lib.to_flat_state(lib.state(module))
    }


CELLS = {
    "lstm": lambda lib: lib.LSTMCell(3, 2, rngs=lib.Rngs(0)),
    "optimized": lambda lib: lib.OptimizedLSTMCell(3, 2, rngs=lib.Rngs(0)),
    "gru": lambda lib: lib.GRUCell(3, 2, rngs=lib.Rngs(0)),
}


def _cells(lib):
    return {name: build(lib) for name, build in CELLS.items()}


def _run_all(rnns, x, lengths):
    return {name: rnn(x, seq_lengths=lengths, return_carry=True) for name, rnn in rnns.items()}


def test_rnn_matches_flax():
    # Every cell in one compiled call per library (compilations are the cost here).
    ours, theirs = _cells(nnx), _cells(fnnx)
    for name in CELLS:
        _same(_state(ours[name], nnx), _state(theirs[name], fnnx))
    rnns = {n: nnx.RNN(c, reverse=True, keep_order=True) for n, c in ours.items()}
    theirs_rnns = {n: fnnx.RNN(c, reverse=True, keep_order=True) for n, c in theirs.items()}
    _same(nnx.jit(_run_all)(rnns, X, LENGTHS), fnnx.jit(_run_all)(theirs_rnns, X, LENGTHS))


def test_cell_step_and_carry_init():
    cell = nnx.LSTMCell(3, 2, rngs=nnx.Rngs(0))
    c, h = cell.initialize_carry((5, 3), nnx.Rngs(1), carry_init=nnx.initializers.ones)
    assert c.shape == (5, 2) and bool((h == 1).all())
    (c, h), y = cell((c, h), jnp.ones((5, 3)))
    assert y is h and cell.num_feature_axes == 1
    h0 = nnx.GRUCell(3, 2, rngs=nnx.Rngs(0)).initialize_carry((5, 3), nnx.Rngs(1))
    assert h0.shape == (5, 2) and not h0.any()


def _time_major(rnn, x):
    return rnn(jnp.swapaxes(x, 0, 1))


@pytest.mark.filterwarnings("ignore:carry_init is provided in __init__")
def test_time_major_and_carry_stream_match_flax():
    def build(lib):
        cell = lib.LSTMCell(3, 2, carry_init=lib.initializers.normal(), rngs=lib.Rngs(0))
        return lib.RNN(cell, time_major=True, rngs=lib.Rngs(carry=5))

    ours, theirs = build(nnx), build(fnnx)
    _same(nnx.jit(_time_major)(ours, X), fnnx.jit(_time_major)(theirs, X))
    _same(_state(ours, nnx), _state(theirs, fnnx))  # the carry stream advanced alike


def _twice(rnn, x):
    return rnn(x), rnn(x)


def _dropout_rnn(lib, broadcast):
    class Cell(lib.SimpleCell):
        def __init__(self, rngs):
            super().__init__(3, 2, rngs=rngs)
            self.drop = lib.Dropout(0.5, deterministic=False, rng_collection="rd", rngs=rngs)

        def __call__(self, carry, x):
            h, _ = super().__call__(carry, x)
            h = self.drop(h)
            return h, h

    cell = Cell(lib.Rngs(0, rd=1))
    cell.residual = True
    return lib.RNN(cell, broadcast_rngs="rd" if broadcast else None)


def test_rng_streams_in_the_loop_match_flax():
    ours = {b: _dropout_rnn(nnx, b) for b in (True, False)}
    theirs = {b: _dropout_rnn(fnnx, b) for b in (True, False)}
    _same(nnx.jit(_twice_each)(ours, X), fnnx.jit(_twice_each)(theirs, X))
    for b in (True, False):
        _same(_state(ours[b], nnx), _state(theirs[b], fnnx))
    # broadcast: one key per call for every step; carried: a key per step
    assert int(ours[True].cell.drop.rngs.count[...]) == 2
    assert int(ours[False].cell.drop.rngs.count[...]) == 8


def _twice_each(rnns, x):
    return [_twice(rnn, x) for rnn in rnns.values()]


def _both(bi, x):
    return bi(x, return_carry=True, seq_lengths=LENGTHS)


def test_bidirectional_matches_flax():
    def build(lib):
        return lib.nn.recurrent.Bidirectional(
            lib.RNN(lib.GRUCell(3, 2, rngs=lib.Rngs(0))),
            lib.RNN(lib.GRUCell(3, 2, rngs=lib.Rngs(1))),
        )

    _same(nnx.jit(_both)(build(nnx), X), fnnx.jit(_both)(build(fnnx), X))


def test_flip_sequences_keeps_padding_at_the_end():
    x = jnp.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    flipped = recurrent.flip_sequences(x, jnp.array([3, 2]), 1, False)
    assert flipped.tolist() == [[3, 2, 1, 0], [5, 4, 0, 0]]


@pytest.mark.parametrize(
    ("run", "error", "match"),
    [
        (lambda: nnx.LSTMCell(3, 2, rngs=nnx.Rngs(0)).initialize_carry((1, 3)), ValueError,
         "RNGs must be provided to initialize the cell carry"),
        (lambda: nnx.RNN(nnx.GRUCell(3, 2, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(0).carry),
         ValueError, "Expected rngs to be a jax.Array, int, Rngs, or bool"),
        (lambda: recurrent.Bidirectional(None, None, rngs=3), TypeError,  # type: ignore[arg-type]
         "rngs must be a Rngs, jax.Array, int, or bool"),
        (lambda: recurrent.RNNCellBase().initialize_carry((1, 3)), NotImplementedError, None),
        (lambda: recurrent.RNNCellBase()(None, X), NotImplementedError, None),
        (lambda: recurrent.RNNCellBase().num_feature_axes, NotImplementedError, None),
    ],
)  # fmt: skip
def test_errors(run, error, match):
    with pytest.raises(error, match=match):
        run()


def test_deprecated_arguments_warn():
    with pytest.warns(UserWarning, match="keep_rngs argument is deprecated"):
        cell = nnx.GRUCell(3, 2, keep_rngs=True, rngs=nnx.Rngs(0))
    assert cell.initialize_carry((1, 3)).shape == (1, 2)  # from the kept carry stream
    with pytest.warns(UserWarning, match="carry_init is provided in __init__"):
        nnx.SimpleCell(3, 2, carry_init=nnx.initializers.ones, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("cell", ["GRUCell", "LSTMCell"])
def test_rnn_in_tree_mode_matches_flax_and_graph_mode(cell: str) -> None:
    # In tree mode the broadcast streams are split on a copy of the cell (no in-place
    # split to restore), as Flax's RNN does.
    x = jnp.arange(24.0).reshape(2, 4, 3) / 24
    outs = []
    for lib in (nnx, fnnx):
        for graph in (True, False):
            with lib.set_graph_mode(graph):
                layer = lib.RNN(getattr(lib, cell)(3, 5, rngs=lib.Rngs(0)))
                outs.append(np.asarray(layer(x)))
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=1e-6)
