"""adapters.nnx State: Flax's nested mapping, flat states, pure dicts and key paths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx

from adapters import nnx, serialization
from adapters.nnx import statelib, traversals


def _model(lib, seed: int):
    rngs = lib.Rngs(seed)
    return lib.Sequential(lib.Linear(2, 3, rngs=rngs), lib.BatchNorm(3, rngs=rngs))


def test_state_key_paths_match_flax_for_checkpoints():
    ours = jax.tree_util.tree_flatten_with_path(nnx.state(_model(nnx, 0)))[0]
    theirs = jax.tree_util.tree_flatten_with_path(fnnx.state(_model(fnnx, 0)))[0]
    assert [p for p, _ in ours] == [p for p, _ in theirs]
    for (_, a), (_, b) in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)
    assert ours[0][0] == (
        jax.tree_util.DictKey("layers"),
        jax.tree_util.DictKey(0),
        jax.tree_util.DictKey("bias"),
        jax.tree_util.GetAttrKey("value"),
    )


def test_state_pytree_round_trip_and_repr_like_flax():
    def build(lib):
        return lib.State({"b": {"k": lib.Param(jnp.ones(2))}, "a": lib.Variable(1)})

    ours, theirs = build(nnx), build(fnnx)
    assert repr(ours) == repr(theirs)
    doubled = jax.tree.map(lambda x: 2 * x, ours)
    assert isinstance(doubled, nnx.State) and type(doubled["b"]["k"]) is nnx.Param
    np.testing.assert_array_equal(doubled.b.k[...], [2.0, 2.0])
    leaves, treedef = jax.tree.flatten(ours)
    rebuilt = jax.tree.unflatten(treedef, leaves)
    assert list(rebuilt) == ["a", "b"]
    assert rebuilt.raw_mapping["b"]["k"].get_raw_value() is ours.b.k.get_raw_value()


def test_flat_state_split_filter_merge():
    state = nnx.State({"x": nnx.Param(1), "y": {"z": nnx.BatchStat(2)}, "w": nnx.Cache(3)})
    flat = nnx.to_flat_state(state)
    assert flat.paths == (("w",), ("x",), ("y", "z")) and len(flat) == 3
    assert flat[0][0] == ("w",) and flat[1:].paths == (("x",), ("y", "z"))
    params, rest = flat.split(nnx.Param, ...)
    assert params.paths == (("x",),) and rest.paths == (("w",), ("y", "z"))
    assert nnx.FlatState.merge(params, rest).paths == flat.paths
    only = flat.filter(nnx.BatchStat)
    assert only.paths == (("y", "z"),)
    with pytest.raises(ValueError, match="Non-exhaustive filters, got a non-empty remainder"):
        flat.split(nnx.Param)
    assert nnx.from_flat_state(flat).raw_mapping.keys() == {"w", "x", "y"}
    leaves, treedef = jax.tree.flatten(flat)
    assert leaves == [3, 1, 2] and jax.tree.unflatten(treedef, leaves).paths == flat.paths


def test_split_filter_merge_diff_map_state():
    state = nnx.State({"a": nnx.Param(1), "b": {"c": nnx.BatchStat(2), "d": nnx.Param(3)}})
    params, stats = nnx.split_state(state, nnx.Param, nnx.BatchStat)
    assert nnx.to_pure_dict(params) == {"a": 1, "b": {"d": 3}}
    assert nnx.to_pure_dict(nnx.filter_state(state, nnx.BatchStat)) == {"b": {"c": 2}}
    merged = nnx.merge_state(params, stats)
    assert nnx.to_pure_dict(merged) == nnx.to_pure_dict(state)
    assert nnx.to_pure_dict(statelib.diff(state, params)) == {"b": {"c": 2}}
    plus = nnx.map_state(lambda path, v: v.replace(v.get_value() + len(path)), state)
    assert nnx.to_pure_dict(plus) == {"a": 2, "b": {"c": 4, "d": 5}}
    with pytest.raises(ValueError, match="Non-exhaustive filters"):
        nnx.split_state(state, nnx.Param)
    with pytest.raises(ValueError, match=r"`\.\.\.` or `True` can only be used as the last"):
        nnx.split_state(state, ..., nnx.Param)
    assert nnx.to_pure_dict(state | params) == nnx.to_pure_dict(state)


def test_state_methods_are_deprecated_in_favour_of_functions():
    state = nnx.State({"a": nnx.Param(1)})
    with pytest.warns(DeprecationWarning, match="use the equivalent `nnx.filter_state`"):
        state.filter(nnx.Param)
    with pytest.warns(DeprecationWarning, match="use the equivalent `nnx.to_flat_state`"):
        state.flat_state()
    with pytest.warns(DeprecationWarning, match="use the equivalent `nnx.merge_state`"):
        nnx.State.merge(state)


def test_mapping_views_write_through():
    state = nnx.State({"a": nnx.Param(1), "b": {"c": nnx.Param(2)}})
    state.b.d = nnx.Param(5)
    assert state["b"]["d"].get_value() == 5
    del state.b["c"]
    assert list(state["b"]) == ["d"] and "a" in state
    with pytest.raises(AttributeError, match="No attribute 'missing' in State"):
        _ = state.missing
    with pytest.raises(ValueError, match="Expected a dictionary when `_copy=False`"):
        nnx.State([("a", 1)], _copy=False)


def test_pure_dicts_and_msgpack_round_trip():
    graphdef, state = nnx.split(_model(nnx, 0))
    pure = nnx.to_pure_dict(state)
    assert list(pure["layers"]) == [0, 1]
    raw = serialization.msgpack_restore(serialization.msgpack_serialize(pure))
    restored = jax.tree.map(jnp.asarray, raw)
    assert list(nnx.restore_int_paths(restored)["layers"]) == [0, 1]
    _, other = nnx.split(_model(nnx, 3))
    nnx.replace_by_pure_dict(other, restored)  # '0'/'1' keys match int paths
    assert type(other["layers"][0]["kernel"]) is nnx.Param
    rebuilt = nnx.merge(graphdef, other)
    jax.tree.map(np.testing.assert_array_equal, nnx.to_pure_dict(nnx.state(rebuilt)), pure)
    with pytest.raises(ValueError, match=r"key in pure_dict not available in state: \('extra',\)"):
        nnx.replace_by_pure_dict(other, {"extra": 1})


def test_traversals_flatten_and_unflatten():
    xs = {"foo": 1, "bar": {"a": 2, "b": {}}}
    assert traversals.flatten_mapping(xs) == {("foo",): 1, ("bar", "a"): 2}
    assert traversals.flatten_mapping(xs, sep="/") == {"foo": 1, "bar/a": 2}
    flat = traversals.flatten_mapping(xs, keep_empty_nodes=True)
    assert flat[("bar", "b")] is traversals.empty_node
    assert traversals.unflatten_mapping(flat) == xs
    assert traversals.unflatten_mapping({"bar/a": 2}, sep="/") == {"bar": {"a": 2}}
    leafy = traversals.flatten_mapping(xs, is_leaf=lambda path, x: path == ("bar",))
    assert leafy == {("foo",): 1, ("bar",): {"a": 2, "b": {}}}
    assert traversals.flatten_to_sequence(xs) == [(("foo",), 1), (("bar", "a"), 2)]
    with pytest.raises(AssertionError, match="expected Mapping; got int"):
        traversals.flatten_mapping(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected Mapping or Iterable; got int"):
        traversals.unflatten_mapping(1)
