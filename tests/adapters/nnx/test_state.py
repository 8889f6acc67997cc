"""adapters.nnx State: pure dicts, replace_by_pure_dict, msgpack round trips, pytree laws."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx

from adapters import nnx, serialization


def _model(seed: int) -> nnx.Sequential:
    rngs = nnx.Rngs(seed)
    return nnx.Sequential(nnx.Linear(2, 3, rngs=rngs), nnx.Linear(3, 1, rngs=rngs))


def test_to_pure_dict_has_int_keys_for_list_entries_like_flax():
    pure = nnx.to_pure_dict(nnx.state(_model(0)))
    rngs = fnnx.Rngs(0)
    theirs = fnnx.Sequential(fnnx.Linear(2, 3, rngs=rngs), fnnx.Linear(3, 1, rngs=rngs))
    expected = fnnx.to_pure_dict(fnnx.state(theirs))
    assert list(pure["layers"]) == [0, 1] == list(expected["layers"])
    jax.tree.map(np.testing.assert_array_equal, pure, expected)
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(pure))


def test_msgpack_round_trip_restores_another_model():
    model = _model(0)
    graphdef, state = nnx.split(model)
    restored = serialization.msgpack_restore(
        serialization.msgpack_serialize(nnx.to_pure_dict(state))
    )
    other = _model(2)
    _, other_state = nnx.split(other)
    nnx.replace_by_pure_dict(other_state, restored)
    rebuilt = nnx.merge(graphdef, other_state)
    x = jnp.ones((4, 2))
    np.testing.assert_array_equal(rebuilt(x), model(x))
    assert type(other_state["layers"][0]["kernel"]) is nnx.Param


def test_replace_by_pure_dict_accepts_string_int_keys_and_subsets():
    state = nnx.state(_model(0))
    nnx.replace_by_pure_dict(state, {"layers": {"1": {"bias": jnp.full((1,), 7.0)}}})
    np.testing.assert_array_equal(state["layers"][1]["bias"].value, jnp.full((1,), 7.0))
    assert state["layers"][0]["bias"].value.shape == (3,)  # untouched
    state.replace_by_pure_dict({"layers": {0: {"bias": jnp.ones(3)}}})
    np.testing.assert_array_equal(state["layers"][0]["bias"].value, jnp.ones(3))


def test_replace_by_pure_dict_rejects_unknown_keys():
    state = nnx.state(_model(0))
    with pytest.raises(
        ValueError, match=r"key in pure_dict not available in state: \('layers', 2, 'bias'\)"
    ):
        nnx.replace_by_pure_dict(state, {"layers": {2: {"bias": jnp.ones(1)}}})
    with pytest.raises(ValueError, match=r"key in pure_dict not available in state: \('extra',\)"):
        nnx.replace_by_pure_dict(state, {"extra": jnp.ones(1)})


def test_restore_int_paths():
    assert nnx.restore_int_paths({"layers": {"0": {"w": 1}, "x": 2}}) == {
        "layers": {0: {"w": 1}, "x": 2}
    }


def test_state_is_a_pytree_and_round_trips_through_tree_map():
    state = nnx.state(_model(0))
    doubled = jax.tree.map(lambda x: 2 * x, state)
    assert isinstance(doubled, nnx.State)
    assert type(doubled["layers"][0]["kernel"]) is nnx.Param
    np.testing.assert_array_equal(
        doubled["layers"][0]["kernel"].value, 2 * state["layers"][0]["kernel"].value
    )
    leaves, treedef = jax.tree.flatten(state)
    assert len(leaves) == 4
    rebuilt = jax.tree.unflatten(treedef, leaves)
    assert rebuilt == state and rebuilt != doubled
    assert [p for p, _ in rebuilt.flat_state()] == [p for p, _ in state.flat_state()]
    assert all(
        a.value is b.value for (_, a), (_, b) in zip(rebuilt.flat_state(), state.flat_state())
    )
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(state)]
    assert paths[0].startswith("[('layers', 0, 'bias')]")


def test_state_mapping_helpers():
    state = nnx.state(_model(0))
    assert list(state) == ["layers"] and len(state["layers"]) == 2
    params = state.filter(nnx.Param)
    assert params == state
    (only,) = (state.split(...),)
    assert only == state
    flat = nnx.to_flat_state(state)
    assert nnx.State.from_flat_path(flat) == state
    merged = nnx.State.merge(state.filter(nnx.PathContains(0)), state.filter(nnx.PathContains(1)))
    assert merged == state
    del state["layers"]
    assert len(state) == 0 and repr(state) == "State({})"
    with pytest.raises(AttributeError, match="No attribute 'missing' in State"):
        _ = state.missing


def test_unavailable_name_raises_clear_attribute_error():
    with pytest.raises(
        AttributeError,
        match=r"implements a subset of flax.nnx \(.*Linear.*\); `jit` is not available",
    ):
        _ = nnx.jit  # type: ignore[attr-defined]
    assert "Linear" in nnx.SUPPORTED and "jit" not in nnx.SUPPORTED


def test_attribute_writes_reach_nested_states():
    state = nnx.State({"a": nnx.Param(jnp.array(1)), "b": {"c": nnx.Param(jnp.array(2))}})
    state.b.d = nnx.Param(jnp.array(5))
    assert int(state["b"]["d"][...]) == 5
    del state.b.c
    assert list(state["b"]) == ["d"]
