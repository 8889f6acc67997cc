"""adapters.nnx randomness: streams, key derivation and the graph-wide rng helpers
(split_rngs, fork_rngs, with_rngs, reseed), compared with flax.nnx where it is the oracle."""

from typing import Any

import jax
import numpy as np
import pytest
from flax import nnx as fnnx

from adapters import nnx


def _data(key: jax.Array) -> np.ndarray:
    return np.asarray(jax.random.key_data(key))


def _same_key(a: jax.Array, b: jax.Array) -> bool:
    return bool(np.array_equal(_data(a), _data(b)))


def _shape(stream: nnx.RngStream) -> tuple[int, ...]:
    return tuple(stream.key.get_value().shape)


# ----------------------------------------------------------------------------- streams


def test_keys_match_flax_for_every_stream_and_call():
    ours, theirs = nnx.Rngs(0, params=3), fnnx.Rngs(0, params=3)
    for _ in range(3):
        assert _same_key(ours.params(), theirs.params())
        assert _same_key(ours(), theirs())
        assert _same_key(ours.dropout(), theirs.dropout())  # falls back to default
    assert int(ours.default.count.get_value()) == 6


def test_key_is_fold_in_of_seed_and_count():
    rngs = nnx.Rngs(params=5)
    rngs.params()
    assert _same_key(rngs.params(), jax.random.fold_in(jax.random.key(5), 1))


def test_access_iteration_and_seeds():
    rngs = nnx.Rngs({"params": 3}, dropout=jax.random.key(1))
    assert "params" in rngs and len(rngs) == 2 and sorted(rngs) == ["dropout", "params"]
    assert rngs["params"] is rngs.params
    raw = nnx.Rngs(params=jax.random.key_data(jax.random.key(3)))  # uint32 key data
    copied = nnx.Rngs(params=rngs.params)  # a stream: its key, a fresh counter
    assert _same_key(raw.params(), copied.params())
    assert rngs.params.key.get_metadata("tag") == "params"
    assert isinstance(rngs.params.count, nnx.RngCount) and isinstance(rngs.params.key, nnx.RngKey)


def test_missing_stream_errors_and_dunders():
    rngs = nnx.Rngs(params=0)
    with pytest.raises(AttributeError, match=r"No RngStream named 'dropout' found in Rngs\."):
        rngs.dropout()
    with pytest.raises(KeyError, match=r"No RngStream named 'dropout' found in Rngs\."):
        rngs["dropout"]
    with pytest.raises(AttributeError):
        _ = nnx.Rngs(0).__json__  # a dunder never falls back to a stream


def test_invalid_seed_raises():
    with pytest.raises(ValueError, match=r"Invalid rng value: 1\.5, expected a jax\.Array"):
        nnx.RngStream(1.5, tag="x")  # type: ignore[arg-type]


def test_samplers_and_initializers_match_flax():
    ours, theirs = nnx.Rngs(0, params=1), fnnx.Rngs(0, params=1)
    np.testing.assert_array_equal(ours.normal((4,)), theirs.normal((4,)))
    np.testing.assert_array_equal(ours.params.uniform((4,)), theirs.params.uniform((4,)))
    np.testing.assert_array_equal(ours.lecun_normal()((2, 3)), theirs.lecun_normal()((2, 3)))


def test_stream_split_fork_broadcast_match_flax():
    ours, theirs = nnx.RngStream(0, tag="a"), fnnx.RngStream(0, tag="a")
    assert _same_key(ours.split((2, 3)).key.get_value(), theirs.split((2, 3)).key[...])
    assert _same_key(ours.fork().key.get_value(), theirs.fork().key[...])
    wide = ours.broadcast(4)
    assert _shape(wide) == (4,) and wide.count.get_value().shape == (4,)
    assert _same_key(wide.key.get_value()[0], wide.key.get_value()[3])
    with pytest.warns(DeprecationWarning, match="'split' argument of 'fork' is deprecated"):
        assert _shape(ours.fork(split=4)) == (4,)


def test_rngs_split_broadcast_fork_per_filter():
    rngs = nnx.Rngs(params=1, dropout=2, noise=3)
    split = rngs.split({"params": 4, "dropout": None, ...: (2, 3)})
    assert [_shape(split[n]) for n in ("params", "dropout", "noise")] == [(4,), (), (2, 3)]
    wide = rngs.broadcast({"params": 4, "dropout": None})
    assert [_shape(wide[n]) for n in ("params", "dropout", "noise")] == [(4,), (), ()]
    # two keys of params were drawn above; fork seeds each stream with its next key
    expected = jax.random.fold_in(jax.random.fold_in(jax.random.key(1), 2), 0)
    assert _same_key(rngs.fork().params(), expected)


# ----------------------------------------------------------------------------- graph helpers


def test_split_rngs_in_place_restores_and_copies():
    rngs = nnx.Rngs(params=0, dropout=1)
    backups = nnx.split_rngs(rngs, splits=4, only="params")
    assert _shape(rngs.params) == (4,) and _shape(rngs.dropout) == ()
    assert rngs.params.count.get_value().shape == (4,)
    nnx.restore_rngs(backups)
    assert _shape(rngs.params) == () and int(rngs.params.count.get_value()) == 1
    with nnx.split_rngs(rngs, splits=(2, 3)):
        assert _shape(rngs.dropout) == (2, 3)
    assert _shape(rngs.dropout) == ()
    for graph in (True, False):
        copy = nnx.split_rngs(rngs, splits=4, graph=graph, graph_updates=False)
        assert _shape(copy.params) == (4,) and _shape(rngs.params) == ()


def test_split_rngs_keys_match_flax_and_squeeze():
    ours, theirs = nnx.Rngs(params=0), fnnx.Rngs(params=0)
    nnx.split_rngs(ours, splits=4)
    fnnx.split_rngs(theirs, splits=4)
    assert _same_key(ours.params.key.get_value(), theirs.params.key[...])
    squeezed = nnx.Rngs(params=0)
    nnx.split_rngs(squeezed, splits=1, squeeze=True)
    assert _shape(squeezed.params) == () and squeezed.params.count.get_value().shape == ()
    with pytest.raises(ValueError, match="squeeze=True is only supported for splits=1"):
        nnx.split_rngs(ours, splits=2, squeeze=True)


def test_split_rngs_decorator_undoes_after_the_call():
    seen = []

    @nnx.split_rngs(splits=4)
    def f(rngs):
        seen.append(_shape(rngs.default))

    rngs = nnx.Rngs(0)
    f(rngs)
    assert seen == [(4,)] and _shape(rngs.default) == ()


def test_fork_rngs_in_place_and_copy():
    rngs = nnx.Rngs(params=0)
    original = rngs.params.key.get_value()
    with nnx.fork_rngs(rngs):
        assert not _same_key(rngs.params.key.get_value(), original)
    assert _same_key(rngs.params.key.get_value(), original)
    forked = nnx.fork_rngs(rngs, graph=False, graph_updates=False)
    theirs = fnnx.Rngs(params=0)
    theirs.params()  # the in-place fork above consumed one key
    expected: Any = fnnx.fork_rngs(theirs, graph=False, graph_updates=False)
    assert _same_key(forked.params.key.get_value(), expected.params.key[...])


@pytest.mark.parametrize("graph", [True, False])
def test_with_rngs_rules(graph):
    rngs = nnx.Rngs(params=0, dropout=1, noise=2)
    kw = {"graph": graph, "graph_updates": False}
    out = nnx.with_rngs(rngs, split={"params": 4}, broadcast={"noise": 4}, fork=..., **kw)
    assert [_shape(out[n]) for n in ("params", "dropout", "noise")] == [(4,), (), (4,)]
    assert not _same_key(out.dropout.key.get_value(), rngs.dropout.key.get_value())
    assert _shape(rngs.params) == () and int(rngs.params.count.get_value()) == 1
    kept = nnx.with_rngs(rngs, fork="params", **kw)
    assert kept.dropout is not rngs.dropout
    assert _same_key(kept.dropout.key.get_value(), rngs.dropout.key.get_value())
    with pytest.raises(ValueError, match="matches multiple rules"):
        nnx.with_rngs(rngs, split={"params": 4}, fork="params", **kw)


def test_with_rngs_decorator_and_in_place_error():
    @nnx.with_rngs(split=4, graph=False, graph_updates=False)
    def f(r):
        return _shape(r.params)

    assert f(nnx.Rngs(params=0)) == (4,)
    with pytest.raises(NotImplementedError, match="graph_updates=True is not supported"):
        nnx.with_rngs(nnx.Rngs(0), split=2)


def test_reseed_policies():
    rngs = nnx.Rngs(params=0, dropout=1)
    rngs.dropout()
    nnx.reseed(rngs, dropout=7)
    assert int(rngs.dropout.count.get_value()) == 0
    expected = jax.random.fold_in(jax.random.key(7), 0)
    assert _same_key(rngs.dropout.key.get_value(), expected)
    nnx.split_rngs(rngs, splits=4, only="params")
    with pytest.raises(ValueError, match="non-scalar key, found key with shape"):
        nnx.reseed(rngs, params=3)
    nnx.reseed(rngs, policy="match_shape", params=3)
    assert _shape(rngs.params) == (4,)
    with pytest.raises(ValueError, match='policy must be "scalars_only", "match_shape"'):
        nnx.reseed(rngs, policy="nope", params=3)  # type: ignore[arg-type]


def test_string_filter_is_a_stream_tag():
    rngs = nnx.Rngs(params=0, dropout=1)
    _, params, rest = nnx.split(rngs, "params", ...)
    assert {path[0] for path, _ in nnx.to_flat_state(params)} == {"params"}
    assert len(nnx.to_flat_state(rest)) == 2
    counts = nnx.state(rngs, nnx.RngCount)
    assert len(nnx.to_flat_state(counts)) == 2


def test_split_rngs_with_vmap_builds_flax_ensemble():
    def make(lib):
        @lib.split_rngs(splits=3)
        @lib.vmap(in_axes=(0,), out_axes=0)
        def create(rngs):
            return lib.Linear(2, 3, rngs=rngs)

        return create(lib.Rngs(0))

    ours, theirs = make(nnx), make(fnnx)
    assert ours.kernel.shape == (3, 2, 3)
    np.testing.assert_array_equal(ours.kernel[...], theirs.kernel[...])
