"""Variables: collections, subclassing, immutability, shape/dtype, PyTree behaviour."""

import copy
import pickle
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import pytreemod as pm
from tests.helpers import tree_allclose


class LoRAParam(pm.Param, collection="lora_params"):
    """A parameter subclass with its own collection."""


class Counter(pm.Variable):
    """Default collection: the class name."""


class Nested(LoRAParam):
    """A subclass without ``collection=`` gets its own name, not its parent's."""


@pytest.mark.parametrize(
    ("cls", "collection"),
    [
        (pm.Param, "params"),
        (pm.BatchStat, "batch_stats"),
        (pm.Cache, "cache"),
        (pm.Intermediate, "intermediates"),
        (pm.Variable, "variables"),
        (LoRAParam, "lora_params"),
        (Counter, "Counter"),
        (Nested, "Nested"),
    ],
)
def test_collections(cls: type[pm.Variable], collection: str) -> None:
    assert cls.collection == collection
    v = cls(jnp.zeros(2, dtype=jnp.float32))
    assert v.collection == collection
    assert pm.collection_of(v) == collection


def test_subclass_is_still_an_instance_of_its_base() -> None:
    v = LoRAParam(jnp.zeros(2, dtype=jnp.float32))
    assert isinstance(v, pm.Param)
    assert isinstance(v, pm.Variable)
    assert not isinstance(pm.Param(1.0), LoRAParam)


@pytest.mark.parametrize(
    "value", [jnp.ones(2, dtype=jnp.float32), np.ones(2, dtype=np.float32), 1.0]
)
def test_bare_values_count_as_params(value: Any) -> None:
    assert pm.collection_of(value) == "params"


def test_variables_are_immutable() -> None:
    v = pm.Param(jnp.zeros(2, dtype=jnp.float32))
    with pytest.raises(pm.FrozenModuleError, match=r"Cannot assign Param\.value.*var\.replace"):
        v.value = jnp.ones(2, dtype=jnp.float32)
    with pytest.raises(pm.FrozenModuleError, match=r"Cannot delete Param\.value"):
        del v.value
    with pytest.raises(AttributeError):
        v.other = 1  # pyright: ignore[reportAttributeAccessIssue]
    assert tree_allclose(v.value, jnp.zeros(2, dtype=jnp.float32))


def test_replace_keeps_type_and_collection() -> None:
    v = LoRAParam(jnp.zeros(2, dtype=jnp.float32))
    new = v.replace(jnp.ones(3, dtype=jnp.float32))
    assert type(new) is LoRAParam
    assert new.collection == "lora_params"
    assert new.shape == (3,)
    assert v.shape == (2,)


def test_shape_and_dtype() -> None:
    v = pm.BatchStat(jnp.zeros((2, 5), dtype=jnp.bfloat16))
    assert v.shape == (2, 5)
    assert v.dtype == jnp.bfloat16


def test_shape_and_dtype_through_partitioned_box() -> None:
    v = pm.Param(pm.Partitioned(jnp.zeros((4, 8), dtype=jnp.float16), ("embed", "mlp")))
    assert v.shape == (4, 8)
    assert v.dtype == jnp.float16


def test_tree_map_keeps_the_box() -> None:
    v = Counter(jnp.arange(3, dtype=jnp.int32))
    leaves, treedef = jtu.tree_flatten(v)
    assert len(leaves) == 1
    assert leaves[0] is v.value
    doubled = jax.tree.map(lambda x: x * 2, v)
    assert type(doubled) is Counter
    assert tree_allclose(doubled.value, jnp.array([0, 2, 4], dtype=jnp.int32))
    assert jtu.tree_unflatten(treedef, [7]).value == 7
    ((path, _),) = jtu.tree_flatten_with_path(v)[0]
    assert path == (jtu.GetAttrKey("value"),)


def test_variable_holding_a_subtree() -> None:
    v = pm.Cache({"k": jnp.zeros(2, dtype=jnp.float32), "v": jnp.ones(2, dtype=jnp.float32)})
    assert len(jax.tree.leaves(v)) == 2
    out = jax.tree.map(lambda x: x + 1, v)
    assert type(out) is pm.Cache
    assert tree_allclose(out.value["k"], jnp.ones(2, dtype=jnp.float32))


def test_variables_under_jit_and_grad() -> None:
    w = pm.Param(jnp.array([1.0, 2.0], dtype=jnp.float32))
    out = jax.jit(lambda v: v.replace(v.value * 3))(w)
    assert type(out) is pm.Param
    assert tree_allclose(out.value, jnp.array([3.0, 6.0], dtype=jnp.float32))
    g = jax.grad(lambda v: jnp.sum(v.value**2))(w)
    assert type(g) is pm.Param
    assert tree_allclose(g.value, jnp.array([2.0, 4.0], dtype=jnp.float32))


def test_equality_and_hash() -> None:
    a = pm.Param(jnp.arange(2, dtype=jnp.float32))
    assert a == pm.Param(jnp.arange(2, dtype=jnp.float32))
    assert a != pm.Param(jnp.ones(2, dtype=jnp.float32))
    assert a != pm.BatchStat(jnp.arange(2, dtype=jnp.float32))
    assert a != LoRAParam(jnp.arange(2, dtype=jnp.float32))
    assert pm.Param(1.0) == pm.Param(1.0)
    assert hash(pm.Param(1.0)) == hash(pm.Param(1.0))
    assert hash(pm.Param(1.0)) != hash(pm.Cache(1.0))


@pytest.mark.parametrize(
    "clone",
    [copy.copy, copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))],
    ids=["copy", "deepcopy", "pickle"],
)
def test_copy_deepcopy_pickle(clone: Callable[[Any], Any]) -> None:
    for v in (
        pm.Param(jnp.arange(3, dtype=jnp.float32)),
        LoRAParam(jnp.ones(2, dtype=jnp.float32)),
        pm.Cache(pm.Partitioned(jnp.ones(2, dtype=jnp.float32), ("a",))),
    ):
        new = clone(v)
        assert type(new) is type(v)
        assert new == v
        assert new.collection == v.collection
        with pytest.raises(pm.FrozenModuleError):
            new.value = 1  # pyright: ignore[reportAttributeAccessIssue]
