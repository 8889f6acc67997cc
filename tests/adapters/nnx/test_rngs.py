"""adapters.nnx.Rngs: streams, counters and key derivation (compared with flax.nnx)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx

from adapters import nnx


def _same_key(a: jax.Array, b: jax.Array) -> bool:
    return bool(np.array_equal(jax.random.key_data(a), jax.random.key_data(b)))


def test_keys_match_flax_for_every_stream_and_call():
    ours, theirs = nnx.Rngs(0, params=3), fnnx.Rngs(0, params=3)
    for _ in range(3):
        assert _same_key(ours.params(), theirs.params())
        assert _same_key(ours(), theirs())
        assert _same_key(ours.dropout(), theirs.dropout())  # falls back to default


def test_each_call_gives_a_new_key_and_same_seed_is_deterministic():
    a, b = nnx.Rngs(7), nnx.Rngs(7)
    k1, k2 = a(), a()
    assert not _same_key(k1, k2)
    assert _same_key(k1, b())
    assert int(a.default.count.value) == 2


def test_key_is_fold_in_of_seed_and_count():
    rngs = nnx.Rngs(params=5)
    rngs.params()
    assert _same_key(rngs.params(), jax.random.fold_in(jax.random.key(5), 1))


def test_item_and_attribute_access_share_the_stream():
    rngs = nnx.Rngs(params=1)
    first = rngs["params"]()
    assert not _same_key(first, rngs.params())
    assert "params" in rngs and len(rngs) == 1 and list(rngs) == ["params"]
    assert [name for name, _ in rngs.items()] == ["params"]


def test_mapping_and_key_and_stream_seeds():
    key = jax.random.key(3)
    from_key, from_int = nnx.Rngs(params=key), nnx.Rngs({"params": 3})
    assert _same_key(from_key.params(), from_int.params())
    raw = nnx.Rngs(params=jax.random.key_data(jax.random.key(3)))  # uint32 key data
    assert _same_key(raw.params(), nnx.Rngs(params=3).params())
    copied = nnx.Rngs(params=from_key.params)  # a stream: its key, counter reset
    assert _same_key(copied.params(), nnx.Rngs(params=3).params())


def test_random_helpers_match_flax():
    x = nnx.Rngs(0).normal((2,))
    np.testing.assert_array_equal(x, fnnx.Rngs(0).normal((2,)))
    u = nnx.Rngs(params=1).params.uniform((3,), minval=2.0, maxval=3.0)
    np.testing.assert_array_equal(
        u, fnnx.Rngs(params=1).params.uniform((3,), minval=2.0, maxval=3.0)
    )
    assert bool(jnp.all((u >= 2.0) & (u < 3.0)))


def test_fork_and_split_match_flax():
    ours, theirs = nnx.Rngs(0, params=1), fnnx.Rngs(0, params=1)
    assert _same_key(ours.fork().params(), theirs.fork().params())
    split = nnx.Rngs(params=1).split(4)
    assert split.params.key.value.shape == (4,)
    assert _same_key(split.params.key.value, fnnx.Rngs(params=1).split(4).params.key[...])


def test_missing_stream_without_default_raises():
    rngs = nnx.Rngs(params=0)
    with pytest.raises(AttributeError, match=r"No RngStream named 'dropout' found in Rngs\."):
        rngs.dropout()
    with pytest.raises(KeyError, match=r"No RngStream named 'dropout' found in Rngs\."):
        rngs["dropout"]
    with pytest.raises(AttributeError, match=r"No RngStream named 'default' found in Rngs\."):
        rngs()


def test_invalid_seed_raises():
    with pytest.raises(ValueError, match=r"Invalid rng value: 1\.5, expected a jax\.Array"):
        nnx.RngStream(1.5, tag="x")  # type: ignore[arg-type]


def test_rngs_state_is_in_the_graph():
    rngs = nnx.Rngs(0)
    rngs()
    _, state = nnx.split(rngs)
    flat = dict(state.flat_state())
    assert set(flat) == {("default", "count"), ("default", "key")}
    assert isinstance(flat[("default", "count")], nnx.RngCount)
    assert int(flat[("default", "count")].value) == 1
