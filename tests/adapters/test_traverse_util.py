"""``adapters.traverse_util`` agrees with ``flax.traverse_util``."""

import flax.traverse_util as ftu
import jax
from hypothesis import given
from hypothesis import strategies as st

from adapters import traverse_util as tu
from adapters.core import freeze

XS = {"foo": 1, "bar": {"a": 2, "b": {}}, "baz": {"c": {"d": 3}}}


def test_flatten_variants_match_flax() -> None:
    assert (
        tu.flatten_dict(XS)
        == ftu.flatten_dict(XS)
        == {
            ("foo",): 1,
            ("bar", "a"): 2,
            ("baz", "c", "d"): 3,
        }
    )
    assert tu.flatten_dict(XS, sep="/") == ftu.flatten_dict(XS, sep="/")
    kept = tu.flatten_dict(XS, keep_empty_nodes=True)
    assert kept[("bar", "b")] is tu.empty_node
    assert tu.unflatten_dict(kept) == XS
    stop = lambda path, value: path == ("baz", "c")
    assert tu.flatten_dict(XS, is_leaf=stop) == ftu.flatten_dict(XS, is_leaf=stop)
    assert tu.flatten_dict(XS, is_leaf=stop)[("baz", "c")] == {"d": 3}
    assert tu.flatten_dict(freeze(XS)) == tu.flatten_dict(XS)
    assert tu.flatten_dict({}, keep_empty_nodes=True) == {}


def test_unflatten_with_sep_and_empty_node_is_a_leafless_pytree() -> None:
    flat = tu.flatten_dict(XS, sep=".", keep_empty_nodes=True)
    assert tu.unflatten_dict(flat, sep=".") == XS
    assert jax.tree.leaves(tu.empty_node) == []


def test_path_aware_map() -> None:
    params = {"a": {"x": 10, "y": 3}, "b": {"x": 20}, "e": {}}
    f = lambda path, v: v + 5 if "x" in path else -v
    assert tu.path_aware_map(f, params) == ftu.path_aware_map(f, params)
    assert tu.path_aware_map(f, params) == {"a": {"x": 15, "y": -3}, "b": {"x": 25}, "e": {}}


_trees = st.recursive(
    st.integers(),
    lambda children: st.dictionaries(st.sampled_from("abcd"), children, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.sampled_from("abcd"), _trees, max_size=3))
def test_flatten_laws(xs: dict) -> None:
    assert tu.flatten_dict(xs) == ftu.flatten_dict(xs)
    assert tu.unflatten_dict(tu.flatten_dict(xs, keep_empty_nodes=True)) == xs
    assert tu.flatten_dict(xs, sep="/") == ftu.flatten_dict(xs, sep="/")
