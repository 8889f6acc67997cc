"""adapters.nnx split/merge/state/update over graphs of plain Python objects."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx

import pytreemod as pm
from adapters import nnx


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.layers = [nnx.Linear(2, 2, rngs=rngs), nnx.Linear(2, 2, rngs=rngs)]
        self.tied = self.layers[0]
        self.stats = {"mean": nnx.BatchStat(jnp.zeros(2)), "name": "block"}
        self.pair = (nnx.Param(jnp.ones(1)), 3)
        self.raw = jnp.arange(2.0)
        self.factor = 0.5


def test_state_paths_types_and_shared_reference_once():
    block = Block(nnx.Rngs(0))
    _, state = nnx.split(block)
    paths = [p for p, _ in state.flat_state()]
    assert paths == [
        ("layers", 0, "bias"),
        ("layers", 0, "kernel"),
        ("layers", 1, "bias"),
        ("layers", 1, "kernel"),
        ("pair", 0),
        ("raw",),
        ("stats", "mean"),
    ]
    assert state["layers"][0]["kernel"] is block.layers[0].kernel
    assert state.layers[0].kernel is block.layers[0].kernel


def test_merge_builds_a_new_graph_with_shared_references():
    block = Block(nnx.Rngs(0))
    graphdef, state = nnx.split(block)
    new = nnx.merge(graphdef, state)
    assert new is not block and type(new) is Block
    assert new.tied is new.layers[0]
    assert isinstance(new.layers, list) and isinstance(new.pair, tuple)
    assert new.stats["name"] == "block" and new.factor == 0.5 and new.pair[1] == 3
    np.testing.assert_array_equal(new.raw, block.raw)
    x = jnp.ones((1, 2))
    np.testing.assert_array_equal(new.layers[1](new.tied(x)), block.layers[1](block.layers[0](x)))


def test_shared_variable_round_trips_as_shared():
    class Tied(nnx.Module):
        def __init__(self):
            self.a = nnx.Param(jnp.ones(2))
            self.b = self.a

    graphdef, state = nnx.split(Tied())
    assert [p for p, _ in state.flat_state()] == [("a",)]
    new = nnx.merge(graphdef, state)
    assert new.a is new.b
    new.a.value = jnp.zeros(2)
    np.testing.assert_array_equal(new.b.value, jnp.zeros(2))


def test_split_with_filters_and_merge_of_several_states():
    block = Block(nnx.Rngs(0))
    graphdef, params, stats, rest = nnx.split(block, nnx.Param, nnx.BatchStat, ...)
    assert {p for p, _ in stats.flat_state()} == {("stats", "mean")}
    assert {p for p, _ in rest.flat_state()} == {("raw",)}
    assert len(params.flat_state()) == 5
    new = nnx.merge(graphdef, params, stats, rest)
    assert new.stats["mean"] is block.stats["mean"]
    with pytest.raises(ValueError, match="Non-exhaustive filters, got a non-empty remainder"):
        nnx.split(block, nnx.Param)
    with pytest.raises(
        ValueError, match=r"`\.\.\.` or `True` can only be used as the last filters, got "
    ):
        nnx.split(block, ..., nnx.Param)
    with pytest.raises(ValueError, match="merge: the state has no value at path"):
        nnx.merge(graphdef, params)


def test_state_with_filters_drops_non_matching_leaves():
    block = Block(nnx.Rngs(0))
    stats = nnx.state(block, nnx.BatchStat)
    assert [p for p, _ in stats.flat_state()] == [("stats", "mean")]
    params, stats2 = nnx.state(block, nnx.Param, nnx.BatchStat)
    assert len(params.flat_state()) == 5 and len(stats2.flat_state()) == 1
    named = nnx.state(block, nnx.PathContains("pair"))
    assert [p for p, _ in named.flat_state()] == [("pair", 0)]
    loose = nnx.state(block, nnx.PathContains("ker", exact=False))
    assert [p[-1] for p, _ in loose.flat_state()] == ["kernel", "kernel"]
    assert repr(nnx.PathContains("a")) == "PathContains('a', exact=True)"
    not_params = nnx.state(block, nnx.Not(nnx.Param))
    assert {p for p, _ in not_params.flat_state()} == {("raw",), ("stats", "mean")}
    with pytest.raises(pm.InvalidFilterError, match=r"3 \(of type int\) is not a filter"):
        nnx.state(block, 3)


def test_filters_are_pytreemods_strings_select_collections():
    block = Block(nnx.Rngs(0))
    stats = nnx.state(block, "batch_stats")
    assert [p for p, _ in stats.flat_state()] == [("stats", "mean")]
    assert nnx.Not is pm.Not and nnx.OfType is pm.OfType
    # nnx.Param is a pm.Param: pytreemod's type and collection filters select it.
    assert isinstance(block.layers[0].kernel, pm.Param) and nnx.Param.collection == "params"
    # pytreemod counts a bare array as a Param; nnx.Param (a subclass) selects Variables only.
    params = nnx.state(block, pm.Param)
    assert [p for p, _ in params.flat_state()][-1] == ("raw",)
    assert len(params.flat_state()) == 6 and len(nnx.state(block, nnx.Param).flat_state()) == 5
    either = nnx.state(block, pm.to_filter(nnx.BatchStat) | nnx.PathContains("pair"))
    assert {p for p, _ in either.flat_state()} == {("pair", 0), ("stats", "mean")}
    assert pm.to_filter(nnx.PathContains("k", exact=False)) == nnx.PathContains("k", False)


def test_with_tag_selects_an_rng_stream():
    rngs = nnx.Rngs(0, dropout=1)
    dropout = nnx.state(rngs, nnx.WithTag("dropout"))
    assert {p for p, _ in dropout.flat_state()} == {("dropout", "count"), ("dropout", "key")}
    keys = nnx.state(rngs, nnx.RngKey)
    assert {p for p, _ in keys.flat_state()} == {("default", "key"), ("dropout", "key")}


def test_graphdef_equal_for_equal_structures_and_hashable():
    a, b = Block(nnx.Rngs(0)), Block(nnx.Rngs(1))
    assert nnx.graphdef(a) == nnx.graphdef(b)
    assert hash(nnx.graphdef(a)) == hash(nnx.graphdef(b))
    b.factor = 0.25
    assert nnx.graphdef(a) != nnx.graphdef(b)


def test_update_writes_values_in_place():
    block = Block(nnx.Rngs(0))
    kernel = block.layers[0].kernel
    nnx.update(block, {"layers": {0: {"kernel": jnp.zeros((2, 2))}}, "raw": jnp.ones(2)})
    assert block.layers[0].kernel is kernel
    np.testing.assert_array_equal(kernel.value, jnp.zeros((2, 2)))
    np.testing.assert_array_equal(block.raw, jnp.ones(2))
    other = Block(nnx.Rngs(5))
    nnx.update(block, nnx.state(other))
    np.testing.assert_array_equal(block.layers[1].kernel.value, other.layers[1].kernel.value)
    np.testing.assert_array_equal(block.tied.kernel.value, other.layers[0].kernel.value)
    with pytest.raises(
        ValueError, match=r"update: no attribute or item 'nope' at path \('nope',\)"
    ):
        nnx.update(block, {"nope": jnp.ones(1)})


def test_update_cannot_assign_into_a_tuple():
    class WithTuple(nnx.Module):
        def __init__(self):
            self.t = (jnp.ones(1),)

    with pytest.raises(
        ValueError, match=r"update: cannot assign path \('t', 0\) inside an immutable"
    ):
        nnx.update(WithTuple(), {"t": {0: jnp.zeros(1)}})


def test_clone_copies_variables_and_keeps_sharing():
    block = Block(nnx.Rngs(0))
    copy = nnx.clone(block)
    assert copy.layers[0].kernel is not block.layers[0].kernel
    assert copy.tied is copy.layers[0]
    copy.layers[0].kernel.value = jnp.zeros((2, 2))
    assert float(jnp.abs(block.layers[0].kernel.value).sum()) > 0


def test_iter_graph_visits_shared_nodes_once_children_first():
    block = Block(nnx.Rngs(0))
    visited = list(nnx.iter_graph(block))
    assert visited[-1] == ((), block)
    linears = [p for p, v in visited if isinstance(v, nnx.Linear)]
    assert linears == [("layers", 0), ("layers", 1)]


def test_split_rejects_non_graph_nodes():
    with pytest.raises(TypeError, match="Expected a graph node"):
        nnx.split(jnp.ones(2))
    with pytest.raises(TypeError, match="merge expects a GraphDef first"):
        nnx.merge({}, {})  # type: ignore[arg-type]


def test_state_structure_matches_flax_nnx():
    ours = nnx.Sequential(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), nnx.Linear(3, 1, rngs=nnx.Rngs(1)))
    theirs = fnnx.Sequential(
        fnnx.Linear(2, 3, rngs=fnnx.Rngs(0)), fnnx.Linear(3, 1, rngs=fnnx.Rngs(1))
    )
    ours_flat = nnx.split(ours)[1].flat_state()
    theirs_flat = list(fnnx.to_flat_state(fnnx.split(theirs)[1]))
    assert [p for p, _ in ours_flat] == [p for p, _ in theirs_flat]
    for (_, a), (_, b) in zip(ours_flat, theirs_flat, strict=True):
        assert type(a).__name__ == type(b).__name__
        np.testing.assert_array_equal(a.value, b[...])


def test_set_attributes_train_and_eval():
    model = nnx.Sequential(nnx.Dropout(0.5), nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
    model.eval()
    assert model.layers[0].deterministic is True
    model.train()
    assert model.layers[0].deterministic is False
    model.set_attributes(rate=0.1)
    assert model.layers[0].rate == 0.1
    with pytest.raises(ValueError, match=r"Could not find at least one instance .*\['nope'\]"):
        model.set_attributes(nope=1)


def test_functional_training_step_with_jax_jit_and_grad():
    model = nnx.Sequential(nnx.Linear(2, 4, rngs=nnx.Rngs(0)), nnx.Linear(4, 1, rngs=nnx.Rngs(1)))
    graphdef, params = nnx.split(model)
    x, y = jnp.ones((3, 2)), jnp.zeros((3, 1))

    def loss(params, graphdef):
        return jnp.mean((nnx.merge(graphdef, params)(x) - y) ** 2)

    @jax.jit
    def step(params):
        grads = jax.grad(loss)(params, graphdef)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    new_params = step(params)
    assert isinstance(new_params, nnx.State)
    assert type(new_params["layers"][0]["kernel"]) is nnx.Param
    assert float(loss(new_params, graphdef)) < float(loss(params, graphdef))
    nnx.update(model, new_params)
    np.testing.assert_array_equal(model.layers[1].kernel.value, new_params.layers[1].kernel.value)
    assert hash(graphdef) == hash(nnx.graphdef(model))


def test_cycles_round_trip():
    class Node(nnx.Module):
        child: "Node"
        parent: "Node"
        w: nnx.Param

    parent, child = Node(), Node()
    parent.child, child.parent = child, parent
    child.w = nnx.Param(jnp.ones(1))
    graphdef, state = nnx.split(parent)
    assert [p for p, _ in state.flat_state()] == [("child", "w")]
    new = nnx.merge(graphdef, state)
    assert new.child.parent is new and new.child.w is child.w


def test_modules_are_pytrees_of_their_state():
    block = Block(nnx.Rngs(0))
    assert [a is b for a, b in zip(jax.tree.leaves(block), jax.tree.leaves(nnx.state(block)))] == [
        True
    ] * 7
    zeroed = jax.tree.map(jnp.zeros_like, block)
    assert type(zeroed) is Block and zeroed.tied is zeroed.layers[0]
    assert float(jnp.abs(zeroed.layers[1].kernel.value).sum()) == 0.0
    assert float(jnp.abs(block.layers[1].kernel.value).sum()) > 0.0
    x = jnp.ones((1, 2))
    out = jax.jit(lambda m, x: m.layers[1](m.tied(x)))(block, x)
    np.testing.assert_allclose(out, block.layers[1](block.layers[0](x)), rtol=1e-6)


def test_variables_copy_and_deepcopy():

    v = nnx.Param(jnp.ones(2), tag="t")
    for c in (copy.copy(v), copy.deepcopy(v)):
        assert type(c) is nnx.Param and c.tag == "t" and c is not v
        np.testing.assert_array_equal(c.value, v.value)
