"""partition/combine, state/structure_of, to_variables/from_variables."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest

import pytreemod as pm
from tests.helpers import tree_allclose


def _f32(*shape: int, fill: float = 1.0) -> jax.Array:
    return jnp.full(shape, fill, dtype=jnp.float32)


class Block(pm.Module):
    w: pm.Param
    mean: pm.BatchStat
    bare: jax.Array
    activation: Callable[[jax.Array], jax.Array] = pm.field(static=True, default=jax.nn.relu)
    scale: float = 0.5


class Net(pm.Module):
    blocks: list[Block]
    head: dict[str, Any]
    a: pm.Param
    b: pm.Param


def make_net() -> Net:
    shared = pm.Param(_f32(3, fill=2.0))
    blocks = [
        Block(pm.Param(_f32(2, 2, fill=i)), pm.BatchStat(_f32(2, fill=-i)), _f32(1, fill=10 + i))
        for i in range(2)
    ]
    return Net(blocks, {"cache": pm.Cache(_f32(4)), "n": 3}, shared, shared)


def test_partition_groups_by_first_match() -> None:
    net = make_net()
    structure, params, stats, rest = pm.partition(net, "params", pm.BatchStat)
    assert isinstance(structure, pm.Structure)
    assert set(params) == {"blocks", "a"}  # the tied `b` is stored once, under `a`
    assert set(params["blocks"][0]) == {"w", "bare"}  # bare arrays are params
    assert params["blocks"][1]["w"] is net.blocks[1].w.value
    assert stats == {
        "blocks": {0: {"mean": net.blocks[0].mean.value}, 1: {"mean": net.blocks[1].mean.value}}
    }
    assert rest == {"head": {"cache": net.head["cache"].value}}
    # First match wins: the BatchStats match both filters and go to the first.
    _, first, second, rest2 = pm.partition(net, pm.BatchStat, True)
    assert set(first["blocks"][0]) == {"mean"}
    assert "mean" not in second["blocks"][0]
    assert "head" in second
    assert rest2 == {}


def test_partition_states_are_plain_nested_dicts() -> None:
    _, params, _ = pm.partition(make_net(), "params")
    assert type(params) is dict
    assert type(params["blocks"]) is dict
    assert list(params["blocks"]) == [0, 1]  # sequence indices as int keys
    for leaf in jax.tree.leaves(params):
        assert isinstance(leaf, jax.Array)


def test_partition_without_filters_puts_everything_in_rest() -> None:
    net = make_net()
    structure, rest = pm.partition(net)
    assert pm.combine(structure, rest) == net
    assert rest == pm.state(net)


@pytest.mark.parametrize(
    "filters",
    [(), ("params",), ("params", "batch_stats"), (pm.BatchStat, pm.PathContains(0), "cache")],
)
def test_combine_inverts_partition(filters: tuple[Any, ...]) -> None:
    net = make_net()
    structure, *states = pm.partition(net, *filters)
    new = pm.combine(structure, *states)
    assert type(new) is Net
    assert new == net
    assert new.blocks[0].activation is jax.nn.relu
    assert type(new.blocks[0].mean) is pm.BatchStat
    assert pm.structure_of(new) == structure
    # The order of the states does not matter.
    assert pm.combine(structure, *reversed(states)) == net


def test_tied_variables_stay_tied() -> None:
    net = make_net()
    assert net.a is net.b
    structure, params, rest = pm.partition(net, "params")
    assert "b" not in params
    new = pm.combine(structure, params, rest)
    assert new.a is new.b
    updated = pm.combine(structure, {**params, "a": _f32(3, fill=7.0)}, rest)
    assert updated.a is updated.b
    assert tree_allclose(updated.b.value, _f32(3, fill=7.0))
    assert structure.alias.count(None) == len(structure.alias) - 1
    # Untying changes the structure.
    untied = net.replace(b=pm.Param(net.b.value))
    assert pm.structure_of(untied) != structure
    assert "b" in pm.state(untied)


def test_combine_missing_value_raises() -> None:
    structure, params, stats, _ = pm.partition(make_net(), "params", "batch_stats")
    with pytest.raises(
        pm.StateMismatchError,
        match=r"No state has a value for \.head\.cache \(collection 'cache'\).*including the rest",
    ):
        pm.combine(structure, params, stats)


def test_combine_value_in_two_states_raises() -> None:
    structure, params, rest = pm.partition(make_net(), "params")
    with pytest.raises(pm.StateMismatchError, match=r"\.blocks\[0\]\.w has a value in 2 states"):
        pm.combine(structure, params, rest, params)


def test_combine_extra_entries_raise() -> None:
    structure, params, rest = pm.partition(make_net(), "params")
    with pytest.raises(
        pm.StateMismatchError, match=r"hold 1 value\(s\) the structure has no place for: \.zzz"
    ):
        pm.combine(structure, params, {**rest, "zzz": _f32(1)})
    nested = {**params, "blocks": {**params["blocks"], 5: {"w": _f32(1)}}}
    with pytest.raises(pm.StateMismatchError, match=r"\.blocks\[5\]\.w"):
        pm.combine(structure, nested, rest)
    # The tied alias has no place of its own either.
    with pytest.raises(pm.StateMismatchError, match=r"no place for: \.b"):
        pm.combine(structure, {**params, "b": _f32(3)}, rest)


def test_combine_requires_structure_first() -> None:
    _, params, rest = pm.partition(make_net(), "params")
    with pytest.raises(
        pm.StateMismatchError, match=r"expects the Structure returned by partition.*got dict"
    ):
        pm.combine(params, rest)  # pyright: ignore[reportArgumentType]


def test_root_variable_raises() -> None:
    for tree in (pm.Param(_f32(2)), _f32(2)):
        with pytest.raises(pm.StateMismatchError, match="The whole tree is a single variable"):
            pm.partition(tree, "params")
        with pytest.raises(pm.StateMismatchError, match="put it inside a Module or a dict"):
            pm.to_variables(tree)


def test_state_and_structure_of() -> None:
    net = make_net()
    assert pm.state(net, "cache") == {"head": {"cache": net.head["cache"].value}}
    assert pm.state(net, None) == {}
    everything = pm.state(net)
    assert set(everything) == {"blocks", "head", "a"}
    structure = pm.structure_of(net)
    assert structure == pm.partition(net, "params")[0]
    assert len(structure.paths) == 9  # 2 x (w, mean, bare) + cache + a + b (alias)
    assert structure.paths[0] == ("blocks", 0, "w")
    assert structure.types[:3] == (pm.Param, pm.BatchStat, None)
    assert structure.collection(2) == "params"
    assert structure.collection(1) == "batch_stats"
    assert structure.paths[-1] == ("b",)
    assert structure.alias[-1] == structure.paths.index(("a",))
    assert "slots=9" in repr(structure)


def test_structure_equality_and_hash() -> None:
    net = make_net()
    s = pm.structure_of(net)
    other_values = jax.tree.map(lambda x: x + 1 if isinstance(x, jax.Array) else x, net)
    other_values = other_values.replace(b=other_values.a)  # re-tie after tree.map
    s2 = pm.structure_of(other_values)
    assert s == s2
    assert hash(s) == hash(s2)
    assert {s: "cached"}[s2] == "cached"
    assert s != pm.structure_of(net.replace(head={"cache": pm.Cache(_f32(4)), "n": 4}))
    assert s != pm.structure_of(
        net.replace(blocks=[b.replace(activation=jax.nn.tanh) for b in net.blocks])
    )
    assert s != pm.structure_of(net.replace(head={"cache": pm.BatchStat(_f32(4)), "n": 3}))
    assert s != "not a structure"


def test_combine_under_jit_and_grad_of_params_only() -> None:
    net = make_net()
    structure, params, rest = pm.partition(net, "params")
    x = _f32(2)

    def loss(params: dict[str, Any]) -> jax.Array:
        model = pm.combine(structure, params, rest)
        out = sum(jnp.sum(b.w.value @ x) + jnp.sum(b.bare) for b in model.blocks)
        return out + jnp.sum(model.a.value) + jnp.sum(model.b.value)

    grads = jax.jit(jax.grad(loss))(params)
    assert jax.tree.structure(grads) == jax.tree.structure(params)
    # a and b are one variable: both uses contribute to its gradient.
    assert tree_allclose(grads["a"], _f32(3, fill=2.0))
    assert tree_allclose(grads["blocks"][0]["bare"], _f32(1))


def test_optax_accepts_states() -> None:
    net = make_net()
    structure, params, rest = pm.partition(net, "params")
    opt = optax.adam(1e-2)
    grads = jax.tree.map(jnp.ones_like, params)
    # optax itself is not clean under the suite's strict dtype promotion (b1 ** count).
    with jax.numpy_dtype_promotion("standard"):
        opt_state: Any = opt.init(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        new_params: Any = optax.apply_updates(params, updates)
    assert jax.tree.structure(opt_state[0].mu) == jax.tree.structure(params)
    assert jax.tree.structure(new_params) == jax.tree.structure(params)
    new = pm.combine(structure, new_params, rest)
    assert new.a is new.b
    assert tree_allclose(new.a.value, _f32(3, fill=2.0 - 1e-2), atol=1e-4)
    assert tree_allclose(new.blocks[0].mean.value, net.blocks[0].mean.value)  # untouched


def test_boxes_are_state_leaves() -> None:
    class Boxed(pm.Module):
        w: pm.Param
        raw: pm.Partitioned

    tree = Boxed(pm.Param(pm.Partitioned(_f32(2, 3), ("a", "b"))), pm.Partitioned(_f32(2), ("c",)))
    structure, params, rest = pm.partition(tree, "params")
    assert rest == {}
    assert isinstance(params["w"], pm.Partitioned)
    assert params["w"].names == ("a", "b")
    assert structure.types == (pm.Param, None)
    assert pm.combine(structure, params, rest) == tree
    assert isinstance(pm.to_variables(tree)["params"]["raw"], pm.Partitioned)


def test_to_variables_groups_by_collection() -> None:
    class Lora(pm.Param, collection="lora"):
        pass

    net = make_net()
    tree = {"net": net, "adapter": Lora(_f32(2))}
    variables = pm.to_variables(tree)
    assert set(variables) == {"params", "batch_stats", "cache", "lora"}
    assert variables["lora"] == {"adapter": tree["adapter"].value}
    assert variables["cache"] == {"net": {"head": {"cache": net.head["cache"].value}}}
    assert set(variables["params"]["net"]) == {"blocks", "a"}


def test_from_variables_round_trip() -> None:
    net = make_net()
    variables = pm.to_variables(net)
    for template in (net, pm.structure_of(net)):
        new = pm.from_variables(template, variables)
        assert new == net
        assert new.a is new.b
    doubled = jax.tree.map(lambda x: x * 2, variables)
    new = pm.from_variables(net, doubled)
    assert tree_allclose(new.blocks[1].mean.value, net.blocks[1].mean.value * 2)
    assert type(new.blocks[1].mean) is pm.BatchStat


def test_from_variables_errors() -> None:
    net = make_net()
    v = pm.to_variables(net)
    no_cache = {k: x for k, x in v.items() if k != "cache"}
    with pytest.raises(
        pm.StateMismatchError,
        match=r"variables\['cache'\] has no value for \.head\.cache \(collections given: "
        r"batch_stats, params\)",
    ):
        pm.from_variables(net, no_cache)
    no_a = {**v, "params": {k: x for k, x in v["params"].items() if k != "a"}}
    with pytest.raises(pm.StateMismatchError, match=r"variables\['params'\] has no value for \.a"):
        pm.from_variables(net, no_a)
    with pytest.raises(
        pm.StateMismatchError, match=r"variables\['params'\] holds 1 value\(s\).*: \.q"
    ):
        pm.from_variables(net, {**v, "params": {**v["params"], "q": _f32(1)}})
    with pytest.raises(pm.StateMismatchError, match=r"variables\['foo'\] holds 1 value"):
        pm.from_variables(net, {**v, "foo": {"a": _f32(3)}})
    # A value in the wrong collection is both missing and extra: missing is reported.
    moved = {**v, "params": {**v["params"], "blocks": v["batch_stats"]["blocks"]}}
    with pytest.raises(
        pm.StateMismatchError, match=r"variables\['params'\] has no value for \.blocks\[0\]\.w"
    ):
        pm.from_variables(net, moved)
