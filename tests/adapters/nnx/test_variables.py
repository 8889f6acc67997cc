"""adapters.nnx Variables: mutable boxes with metadata; pytrees over their value."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm
from adapters import nnx


def test_value_and_ellipsis_indexing_read_and_write():
    v = nnx.Param(jnp.zeros(3))
    assert v[...] is v.value
    v[...] = jnp.ones(3)
    np.testing.assert_array_equal(v.value, jnp.ones(3))
    v[1] = 5.0
    np.testing.assert_array_equal(v.value, jnp.array([1.0, 5.0, 1.0]))
    assert float(v[1]) == 5.0
    v.value = jnp.arange(3.0)
    assert v.shape == (3,) and v.dtype == jnp.float32 and v.ndim == 1 and v.size == 3
    assert len(v) == 3


def test_metadata_attributes_and_replace():
    v = nnx.BatchStat(jnp.zeros(2), tag="stats")
    assert v.tag == "stats" and v.get_metadata() == {"tag": "stats"}
    v.note = 1
    assert v.get_metadata() == {"tag": "stats", "note": 1}
    w = v.replace(jnp.ones(2), tag="other")
    assert type(w) is nnx.BatchStat and w.tag == "other" and w.note == 1
    np.testing.assert_array_equal(v.value, jnp.zeros(2))  # original untouched
    with pytest.raises(AttributeError, match="'BatchStat' object has no attribute 'missing'"):
        _ = v.missing


def test_arithmetic_uses_the_value():
    v = nnx.Param(jnp.array([1.0, 2.0]))
    np.testing.assert_array_equal(v + 1, jnp.array([2.0, 3.0]))
    np.testing.assert_array_equal(2 * v, jnp.array([2.0, 4.0]))
    np.testing.assert_array_equal(-v, jnp.array([-1.0, -2.0]))
    assert float(v @ v) == 5.0
    np.testing.assert_array_equal(np.asarray(v), np.array([1.0, 2.0]))


def test_variable_is_a_pytree_keeping_type_and_metadata():
    v = nnx.Param(jnp.ones(2), sharding=("data",))
    doubled = jax.tree.map(lambda x: 2 * x, v)
    assert type(doubled) is nnx.Param and doubled.sharding == ("data",)
    np.testing.assert_array_equal(doubled.value, 2 * jnp.ones(2))
    assert jax.tree.leaves(v) == [v.value]
    grads = jax.grad(lambda p: jnp.sum(p.value**2))(v)
    assert type(grads) is nnx.Param
    np.testing.assert_array_equal(grads.value, 2 * jnp.ones(2))


def test_equality_compares_values_and_variables_are_unhashable():
    v = nnx.Param(jnp.array([1.0, 2.0]))
    np.testing.assert_array_equal(v == jnp.array([1.0, 0.0]), [True, False])
    np.testing.assert_array_equal(v != nnx.Param(jnp.array([1.0, 0.0])), [False, True])
    with pytest.raises(TypeError, match="unhashable type: 'Param'"):
        hash(v)


def test_raw_value_transpose_and_set_metadata():
    v = nnx.Param(jnp.ones((2, 3)), a=1)
    assert v.get_raw_value() is v.value and v.T.shape == (3, 2)
    v.set_raw_value(jnp.zeros(1))
    assert v.shape == (1,)
    v.set_metadata("b", 2)
    v.set_metadata(c=3)
    assert v.get_metadata() == {"a": 1, "b": 2, "c": 3}
    v.set_metadata({"only": 0})
    assert v.get_metadata() == {"only": 0}
    with pytest.raises(TypeError, match="Cannot mix positional and keyword arguments"):
        v.set_metadata("a", x=1)
    with pytest.raises(TypeError, match="set_metadata takes 1 or 2 positional arguments, got 3"):
        v.set_metadata("a", 1, 2)


def test_get_metadata_by_name_and_call_proxy():
    v = nnx.Variable(lambda x: x + 1, kind="fn")
    assert v.get_metadata("kind") == "fn" and v.get_metadata("other", 0) == 0
    with pytest.raises(KeyError, match="'other' not found in the metadata of Variable"):
        v.get_metadata("other")
    assert v(1) == 2


def test_subclass_get_and_set_value_overrides_apply_to_indexing():
    class Shifted(nnx.Param):
        def get_value(self):
            return super().get_value() + 3

        def set_value(self, value):
            super().set_value(value * 2)

    v = Shifted(jnp.array(1))
    assert int(v[...]) == 4 and int(v.value) == 4
    v[...] = 5
    assert int(v.get_raw_value()) == 10


def test_pytree_round_trip_uses_the_raw_value():
    class Shifted(nnx.Param):
        def get_value(self):
            return super().get_value() + 3

    v = Shifted(jnp.array(1))
    again = jax.tree.map(lambda x: x, v)
    assert type(again) is Shifted and int(again.get_raw_value()) == 1 and int(again[...]) == 4


def test_nnx_variables_are_mutable_pytreemod_variables():
    v = nnx.BatchStat(jnp.zeros(2), note=1)
    assert isinstance(v, pm.BatchStat) and v.collection == "batch_stats"
    assert pm.to_filter("batch_stats")((), v) and not pm.to_filter("params")((), v)
    v.set(jnp.ones(2))  # in place, as set_value (pytreemod's set records into pm.apply)
    np.testing.assert_array_equal(v.get(), jnp.ones(2))
    del v.note
    assert v.get_metadata() == {}
    with pytest.raises(AttributeError, match="BatchStat has no metadata 'note'"):
        del v.note

    class Count(nnx.Variable):
        pass

    assert Count.collection == "Count" and nnx.Variable.collection == "variables"
    assert jax.tree.map(lambda x: x + 1, Count(1, tag="t")).tag == "t"
