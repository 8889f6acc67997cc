"""adapters.traverse_util's Traversal objects (Flax's deprecated lenses): they focus on
values inside dicts, tuples, named tuples and dataclasses, iterate over them and update
or set them in a copy, as flax.traverse_util's do."""

import dataclasses
from typing import Any, NamedTuple

import jax.numpy as jnp
import pytest

from adapters import traverse_util as tu
from adapters.core import FrozenDict

# Every new Traversal warns that the API is deprecated, as Flax's do.
pytestmark = pytest.mark.filterwarnings("ignore:.*Traversal.*:DeprecationWarning")


class Pair(NamedTuple):
    a: Any
    b: Any


@dataclasses.dataclass(frozen=True)
class Holder:
    x: Any
    y: Any


class Plain:
    def __init__(self, value: Any) -> None:
        self.value = value


def test_focusing_by_item_attribute_and_slice() -> None:
    data = {"a": (1, 2, 3, 4), "b": Pair(5, 6)}
    items = tu.t_identity["a"]
    assert list(items.iterate(data)) == [(1, 2, 3, 4)]
    middle = items[1:3]
    assert list(middle.iterate(data)) == [2, 3]
    updated = middle.update(lambda v: -v, data)
    assert updated == {"a": (1, -2, -3, 4), "b": Pair(5, 6)}
    assert data["a"] == (1, 2, 3, 4)  # a copy: the input is unchanged
    second = tu.t_identity["b"][1]
    assert second.update(lambda v: v * 10, data)["b"] == Pair(5, 60)
    assert type(second.update(lambda v: v, data)["b"]) is Pair
    assert tu.t_identity["b"].a.update(str, data)["b"] == Pair("5", 6)
    assert tu.t_identity.y.update(lambda v: v + 1, Holder(1, 2)) == Holder(1, 3)
    plain = Plain(3)
    changed = tu.t_identity.value.update(lambda v: v * 2, plain)
    assert (changed.value, plain.value) == (6, 3)


def test_each_filter_tree_and_merge() -> None:
    data = [{"w": 1, "b": -2}, {"w": -3, "b": 4}]
    each = tu.t_identity.each()
    assert list(each["w"].iterate(data)) == [1, -3]
    assert each.each().update(abs, data) == [{"w": 1, "b": 2}, {"w": 3, "b": 4}]
    negative = each.each().filter(lambda v: v < 0)
    assert list(negative.iterate(data)) == [-2, -3]
    assert negative.update(lambda v: 0, data) == [{"w": 1, "b": 0}, {"w": 0, "b": 4}]
    both = each.merge(tu.t_identity["w"], tu.t_identity["b"])
    assert list(both.iterate(data)) == [1, -2, -3, 4]  # per entry: w, then b
    tree = {"a": jnp.ones(2), "b": [jnp.zeros(1)]}
    leaves = list(tu.t_identity.tree().iterate(tree))
    assert [x.shape for x in leaves] == [(2,), (1,)]
    assert tu.t_identity.tree().update(lambda x: x + 1, tree)["b"][0].tolist() == [1.0]


def test_set_needs_exactly_one_value_per_focus() -> None:
    data = {"foo": [1, 2]}
    focus = tu.t_identity["foo"].each()
    assert focus.set([3, 4], data) == {"foo": [3, 4]}
    with pytest.raises(ValueError, match="Not enough values provided"):
        focus.set([3], data)
    with pytest.raises(ValueError, match="Too many values provided"):
        focus.set([3, 4, 5], data)


def test_each_refuses_other_containers() -> None:
    with pytest.raises(ValueError, match="Only the entries of a list or tuple"):
        tu.t_identity.each().update(lambda v: v, {1, 2})


def test_model_param_traversal_selects_by_path_in_sorted_order() -> None:
    params = {"dense": {"kernel": 1, "bias": 2}, "norm": {"scale": 3}, "empty": {}}
    seen: list[str] = []

    def kernels_and_scales(path: str, value: Any) -> bool:
        seen.append(path)
        return path.endswith(("/kernel", "/scale"))

    with pytest.warns(DeprecationWarning, match="Traversal"):
        traversal = tu.ModelParamTraversal(kernels_and_scales)
    assert list(traversal.iterate(params)) == [1, 3]
    assert seen == ["/dense/bias", "/dense/kernel", "/norm/scale"]
    updated = traversal.update(lambda v: v * 100, params)
    assert updated == {"dense": {"kernel": 100, "bias": 2}, "norm": {"scale": 300}, "empty": {}}
    frozen = traversal.update(lambda v: v, FrozenDict(params))
    assert isinstance(frozen, FrozenDict)
    with pytest.raises(ValueError, match="Can only traverse a flax Model instance"):
        list(traversal.iterate([1, 2]))


def test_new_traversals_warn_and_protocol_names_are_not_fields() -> None:
    with pytest.warns(DeprecationWarning, match="will be deprecated"):
        tu.TraverseId()
    with pytest.raises(AttributeError):
        tu.t_identity.__array__  # noqa: B018
