"""``adapters.cursor``: editing immutable pytrees through a cursor, as ``flax.cursor``."""

import copy
import dataclasses
from typing import Any, NamedTuple

import flax.cursor
import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adapters.linen as nn
import pytreemod as pm
from adapters import struct
from adapters.core import FrozenDict, freeze
from adapters.cursor import AccessType, Cursor, _traverse_tree, cursor, is_named_tuple
from adapters.errors import CursorFindError, TraverseTreeError


class Pair(NamedTuple):
    first: Any
    second: Any = None


@dataclasses.dataclass(frozen=True)
class Plain:
    a: Any
    b: Any = None
    hidden: int = dataclasses.field(default=0, init=False)


@struct.dataclass
class Node:
    value: Any
    tag: str = struct.field(pytree_node=False, default="n")


class Linear(pm.Module):
    weight: pm.Param
    bias: pm.Param
    n_out: int = pm.field(static=True)

    def __init__(self, n_in: int, n_out: int, *, key: jax.Array) -> None:
        self.weight = pm.Param(jax.random.normal(key, (n_in, n_out)))
        self.bias = pm.Param(jnp.zeros(n_out))
        self.n_out = n_out


class Stack(pm.Module):
    layers: tuple[Linear, ...]


# --- set / build on each kind of container -------------------------------------------


def test_set_on_nested_dict_list_tuple_leaves_the_original() -> None:
    tree = {"a": [1, (2, 3)], "b": 4}
    assert cursor(tree)["a"][1][0].set(20) == {"a": [1, (20, 3)], "b": 4}
    assert cursor(tree)["b"].set("x") == {"a": [1, (2, 3)], "b": "x"}
    assert tree == {"a": [1, (2, 3)], "b": 4}


def test_set_on_the_root_returns_the_value() -> None:
    assert cursor({"a": 1}).set(5) == 5


def test_build_applies_every_recorded_change_bottom_up() -> None:
    tree = {"a": 1, "b": (2, 3), "c": [4, 5]}
    c = cursor(tree)
    c["b"][1] = 30
    c["c"][0] = 40
    c["a"] = (7, 8)
    c["a"][0] = 70  # a change below a replaced value edits the new value
    assert c.build() == {"a": (70, 8), "b": (2, 30), "c": [40, 5]}
    c["b"][1] = 31  # later assignments overwrite earlier ones
    assert c.build()["b"] == (2, 31)
    assert tree == {"a": 1, "b": (2, 3), "c": [4, 5]}


def test_containers_keep_their_types() -> None:
    frozen = freeze({"a": {"b": 1}})
    out = cursor(frozen)["a"]["b"].set(2)
    assert isinstance(out, FrozenDict) and isinstance(out["a"], FrozenDict)
    assert out == freeze({"a": {"b": 2}}) and frozen["a"]["b"] == 1
    assert cursor((1, [2]))[1][0].set(3) == (1, [3])
    assert type(cursor([1, (2,)])[1][0].set(3)[1]) is tuple


def test_named_tuple_by_attribute_and_by_index() -> None:
    t = Pair(Pair(0, 1), Pair(2, 3))
    assert is_named_tuple(t) and not is_named_tuple((1, 2))
    c = cursor(t)
    c.first.first = 10
    c[0][1] = 11  # index 1 of a named tuple is its second field
    c.second[0] = 12
    assert c.build() == Pair(Pair(10, 11), Pair(12, 3))
    assert c[0] is c.first  # both spellings reach the same child cursor
    assert t == Pair(Pair(0, 1), Pair(2, 3))


def test_dataclass_and_struct_dataclass() -> None:
    assert cursor(Plain({"k": 1})).a["k"].set(2) == Plain({"k": 2})
    node = Node(value=[1, 2], tag="t")
    new = cursor(node).value[1].set(5)
    assert isinstance(new, Node) and new.value == [1, 5] and new.tag == "t"
    assert cursor(node).tag.set("u").tag == "u"
    assert node.value == [1, 2]


def test_linen_module_fields_and_linen_variables() -> None:
    dense = nn.Dense(3)
    wider = cursor(dense).features.set(5)
    assert isinstance(wider, nn.Dense) and wider.features == 5 and dense.features == 3
    params = nn.Dense(2).init(jax.random.key(0), jnp.ones((1, 3)))["params"]
    new = cursor(params)["kernel"].set(jnp.zeros((3, 2)))
    np.testing.assert_array_equal(new["kernel"], np.zeros((3, 2)))
    np.testing.assert_array_equal(new["bias"], params["bias"])
    assert not bool(jnp.all(params["kernel"] == 0))


def test_pytreemod_module_fields_and_variable_values() -> None:
    lin = Linear(2, 3, key=jax.random.key(0))
    new = cursor(lin).weight.value.set(jnp.ones((2, 3)))
    assert isinstance(new, Linear) and isinstance(new.weight, pm.Param)
    np.testing.assert_array_equal(new.weight.value, np.ones((2, 3)))
    assert new.bias is lin.bias
    assert not bool(jnp.all(lin.weight.value == 1))  # original unchanged
    assert cursor(lin).n_out.set(4).n_out == 4  # a static field
    stack = Stack(layers=(lin, lin))
    out = cursor(stack).layers[1].bias.value.set(jnp.ones(3))
    np.testing.assert_array_equal(out.layers[1].bias.value, np.ones(3))
    assert out.layers[0] is lin


def test_pytreemod_variable_other_attribute_raises() -> None:
    lin = Linear(2, 3, key=jax.random.key(0))
    c = cursor(lin)
    c.bias.collection = "stats"
    with pytest.raises(TypeError, match="Cannot set 'collection' on Param: a cursor can"):
        c.build()


# --- apply_update, find, find_all -----------------------------------------------------


def test_apply_update_paths_and_no_descent_below_a_change() -> None:
    seen: list[str] = []

    def update(path: str, value: Any) -> Any:
        seen.append(path)
        if path == "a":
            return [0]  # replaced: its children are not visited
        return value * 10 if isinstance(value, int) else value

    tree = {"a": [1, 2], "b": Pair(3, {"c": 4})}
    assert cursor(tree).apply_update(update).build() == {"a": [0], "b": Pair(30, {"c": 40})}
    assert seen == ["a", "b", "b/first", "b/second", "b/second/c"]  # the root is not visited
    assert tree == {"a": [1, 2], "b": Pair(3, {"c": 4})}


def test_apply_update_on_pytreemod_module() -> None:
    lin = Linear(2, 3, key=jax.random.key(0))

    def double_weights(path: str, value: Any) -> Any:
        return value * 2 if path == "weight/value" else value

    new = cursor(lin).apply_update(double_weights).build()
    np.testing.assert_allclose(new.weight.value, 2 * lin.weight.value)
    np.testing.assert_array_equal(new.bias.value, lin.bias.value)


def test_apply_update_matches_flax_on_the_same_linen_variables() -> None:
    x = jnp.ones((1, 2))
    params = flax.linen.Dense(3).init(jax.random.key(0), x)["params"]

    def update(path: str, value: Any) -> Any:
        return value + 1 if path.endswith("kernel") else value

    ours = cursor(params).apply_update(update).build()
    theirs = flax.cursor.cursor(params).apply_update(update).build()
    np.testing.assert_array_equal(ours["kernel"], theirs["kernel"])
    np.testing.assert_array_equal(ours["bias"], theirs["bias"])


def test_find_returns_the_single_match_and_edits_through_it() -> None:
    tree = {"enc": {"w": 1, "b": 2}, "dec": {"w": 3, "b": 4}}
    c = cursor(tree)
    found = c.find(lambda path, v: path == "dec")
    assert found._path == "['dec']"
    found["w"] += 10
    assert c.build() == {"enc": {"w": 1, "b": 2}, "dec": {"w": 13, "b": 4}}


def test_find_errors() -> None:
    c = cursor({"a": (1,), "b": {"a": (2,)}})
    with pytest.raises(CursorFindError, match="No object found given the conditions"):
        c.find(lambda path, v: path == "zzz")
    with pytest.raises(
        CursorFindError,
        match=r"More than one object found .* following paths: \['a'\] and \['b'\]\['a'\]",
    ):
        c.find(lambda path, v: path.endswith("a"))


def test_find_reports_several_leaf_matches() -> None:
    # Two int leaves match: the error names both paths (Flax 0.12 raises a TypeError
    # here, asking an int cursor for its length).
    c = cursor({"a": 1, "b": 2})
    with pytest.raises(CursorFindError, match=r"paths: \['a'\] and \['b'\]"):
        c.find(lambda path, v: isinstance(v, int))


def test_find_all_stops_at_matches_and_changes_show_in_build() -> None:
    t = Pair(Pair(1, Pair(2)), Pair(3))
    c = cursor(t)
    found = list(c.find_all(lambda path, v: isinstance(v, Pair)))
    assert [f._path for f in found] == [".first", ".second"]  # not .first.second
    for f in found:
        f.first *= -1
    assert c.build() == Pair(Pair(-1, Pair(2)), Pair(-3))


def test_traverse_tree_paths_and_argument_errors() -> None:
    tree = Pair([5, {"k": 5}], 6)
    paths = list(_traverse_tree((), tree, cond_fn=lambda path, v: v == 5))
    assert paths == [
        (("first", AccessType.ATTR), (0, AccessType.ITEM)),
        (("first", AccessType.ATTR), (1, AccessType.ITEM), ("k", AccessType.ITEM)),
    ]
    with pytest.raises(TraverseTreeError, match="Both update_fn and cond_fn are None"):
        next(_traverse_tree((), tree))
    with pytest.raises(TraverseTreeError, match="Both update_fn and cond_fn are not None"):
        next(_traverse_tree((), tree, update_fn=lambda p, v: v, cond_fn=lambda p, v: True))


def test_dataclass_traversal_skips_non_init_fields() -> None:
    paths = [p for (p,) in _traverse_tree((), Plain(1, 2), cond_fn=lambda path, v: True)]
    assert paths == [("a", AccessType.ATTR), ("b", AccessType.ATTR)]


# --- access errors, paths, repr, iteration, operators --------------------------------


def test_access_errors() -> None:
    with pytest.raises(TypeError, match="Cannot index into 3"):
        cursor(3)[0]
    with pytest.raises(KeyError, match="Key z not found in"):
        cursor({"a": 1})["z"]
    with pytest.raises(AttributeError, match="Attribute nope not found in"):
        cursor(Plain(1)).nope  # noqa: B018 (the access is what raises)
    with pytest.raises(
        NotImplementedError,
        match="__iter__ method only implemented for tuples and lists, not type <class 'dict'>",
    ):
        iter(cursor({"a": 1}))
    with pytest.raises(
        NotImplementedError,
        match="__reversed__ method only implemented for tuples and lists, not type",
    ):
        reversed(cursor({"a": 1}))


def test_path_spells_the_accesses() -> None:
    c = cursor([Pair({("x", 1): [0]}), 2])
    assert c[0].first[("x", 1)][0]._path == "[0].first[('x', 1)][0]"
    assert c[1]._path == "[1]" and c._path == ""


def test_repr_matches_flax() -> None:
    def edit(c: Any) -> Any:
        c["a"][1] = (1, 2)
        c["a"][1][0] = freeze({"k": 1}) if isinstance(c, Cursor) else flax.core.freeze({"k": 1})
        c["b"].first = None
        return c

    tree = {"a": [0, 1], "b": Pair(1, "s")}
    ours, theirs = edit(cursor(tree)), edit(flax.cursor.cursor(tree))
    assert repr(cursor(tree)) == repr(flax.cursor.cursor(tree))
    assert repr(ours) == repr(theirs) and "_changes={\n" in repr(ours)
    assert str(ours) == str(tree)


def test_iteration_yields_child_cursors() -> None:
    c = cursor(([1, 2], [3, 4]))
    assert len(c) == 2
    for i, child in enumerate(c):
        child[0] += i
    for i, child in enumerate(reversed(c)):
        child[1] *= i + 2
    assert c.build() == ([1, 6], [4, 8])


def test_operators_apply_to_the_wrapped_object() -> None:
    c = cursor({"x": 6})["x"]
    assert (c + 1, 1 + c, c - 1, 10 - c, c * 2, 2 * c) == (7, 7, 5, 4, 12, 12)
    assert (c / 4, 12 / c, c // 4, 13 // c, c % 4, 13 % c) == (1.5, 2.0, 1, 2, 2, 1)
    assert (divmod(c, 4), divmod(13, c), c**2, 2**c) == ((1, 2), (2, 1), 36, 64)
    assert (c << 1, 1 << c, c >> 1, 64 >> c) == (12, 64, 3, 1)
    assert (c & 3, 3 & c, c ^ 3, 3 ^ c, c | 1, 1 | c) == (2, 2, 5, 5, 7, 7)
    assert (-c, +c, abs(-c), ~c, round(c + 0.4), round(c + 0.46, 1)) == (-6, 6, 6, -7, 6, 6.5)
    assert (c < 7, c <= 6, c == 6, c != 6, c > 5, c >= 7) == (True, True, True, False, True, False)
    m = cursor(jnp.eye(2))
    np.testing.assert_array_equal(m @ jnp.ones(2), np.ones(2))
    np.testing.assert_array_equal(jnp.ones(2) @ m, np.ones(2))


# --- the law: set replaces exactly one node, the original stays ------------------------


def _replace_at(tree: Any, path: list[Any], value: Any) -> Any:
    if not path:
        return value
    key, rest = path[0], path[1:]
    if isinstance(tree, dict):
        return {**tree, key: _replace_at(tree[key], rest, value)}
    items = list(tree)
    items[key] = _replace_at(items[key], rest, value)
    return type(tree)(items)


trees = st.recursive(
    st.integers(),
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.lists(kids, max_size=3).map(tuple)
        | st.dictionaries(st.text("ab", max_size=2), kids, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(tree=trees, value=st.integers(), data=st.data())
def test_set_replaces_one_node_and_keeps_the_original(tree: Any, value: int, data: Any) -> None:
    before = copy.deepcopy(tree)
    path: list[Any] = []
    node, c = tree, cursor(tree)
    while isinstance(node, (dict, list, tuple)) and node and data.draw(st.booleans()):
        key = data.draw(
            st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node)))
        )
        path.append(key)
        node, c = node[key], c[key]
    assert c.set(value) == _replace_at(tree, path, value)
    assert tree == before
    assert cursor(tree).apply_update(lambda p, v: v).build() == tree
