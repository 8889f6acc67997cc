"""adapters.nnx Variables: Flax 0.12.8's mutable boxes with metadata, as pytreemod Variables."""

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx

import pytreemod as pm
from adapters import errors, nnx
from adapters.nnx import ids, reprlib, tracers, variablelib

REQUIRED = {"hijax": False, "ref": False, "eager_sharding": True}


def test_indexing_reads_and_writes_and_value_is_deprecated():
    v = nnx.Param(jnp.zeros(3))
    v[...] = jnp.ones(3)
    v[1] = 5.0
    np.testing.assert_array_equal(v[...], jnp.array([1.0, 5.0, 1.0]))
    assert v.shape == (3,) and v.dtype == jnp.float32 and v.ndim == 1 and v.T.shape == (3,)
    with pytest.warns(DeprecationWarning, match=r"'\.value' access is now deprecated"):
        _ = v.value
    with pytest.warns(DeprecationWarning, match=r"'\.value' setter is now deprecated"):
        v.value = jnp.zeros(3)
    with pytest.warns(DeprecationWarning, match=r"'\.raw_value' access is now deprecated"):
        _ = v.raw_value
    assert float(v.get_value(index=0)) == 0.0 and len(v) == 3


def test_required_metadata_and_set_metadata_like_flax():
    v = nnx.Variable(jnp.array(1.0), a=1)
    assert v.get_metadata() == {"a": 1, **REQUIRED}
    assert v.get_metadata(exclude_required=True) == {"a": 1}
    assert v.get_metadata("b", default=3) == 3 and v.a == 1 and v.has_metadata("a")
    v.set_metadata("b", 2)
    v.set_metadata(c=3)
    v.set_metadata({"only": 0})
    assert v.get_metadata() == {"only": 0, **REQUIRED}
    v.del_metadata("only")
    with pytest.raises(
        ValueError, match="Cannot change `hijax` metadata, expected False, got True"
    ):
        v.set_metadata(hijax=True)
    with pytest.raises(ValueError, match="Cannot change `ref` metadata, expected False, got True"):
        v.set_metadata("ref", True)
    with pytest.raises(ValueError, match="Cannot delete `ref` metadata"):
        v.del_metadata("ref")
    with pytest.raises(TypeError, match="Cannot mix positional and keyword arguments"):
        v.set_metadata("a", x=1)
    with pytest.raises(TypeError, match="set_metadata takes either 1 or 2 arguments"):
        v.set_metadata()
    with pytest.raises(TypeError, match="Cannot specify both 'name' and 'exclude_required'"):
        v.get_metadata("a", exclude_required=True)
    with pytest.raises(TypeError, match="Cannot provide a default value when 'name' is not"):
        v.get_metadata(default=1)
    with pytest.raises(AttributeError, match=r"Cannot set attribute foo\. To set Variable meta"):
        v.foo = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match=r"Cannot delete attribute foo\. To delete"):
        del v.foo  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match="'sharding' is deprecated, use 'out_sharding'"):
        v.set_metadata(sharding=("x",))
    assert v.get_metadata("out_sharding") == ("x",)


def test_operators_eq_and_jax_array_follow_the_value():
    v = nnx.Param(jnp.array([1.0, 2.0]))
    np.testing.assert_array_equal(v + 1, [2.0, 3.0])
    np.testing.assert_array_equal(2 * v, [2.0, 4.0])
    np.testing.assert_array_equal(-v, [-1.0, -2.0])
    # jnp.dot takes a Variable through __jax_array__
    assert float(v @ v) == 5.0 and float(jnp.dot(v, v)) == 5.0  # pyright: ignore[reportArgumentType]
    np.testing.assert_array_equal(v == nnx.Param(jnp.array([1.0, 0.0])), [True, False])
    with pytest.raises(TypeError, match="unhashable type: 'Param'"):
        hash(v)
    with pytest.raises(NotImplementedError, match=r"Use `variable\[\.\.\.\] \+= x` instead"):
        v += 1
    assert nnx.Variable(lambda x: x + 1)(1) == 2 and int(nnx.Variable(3.7)) == 3


def test_pytree_key_path_and_aux_data_match_flax():
    ours = jax.tree_util.tree_flatten_with_path(nnx.Param(jnp.ones(2), tag="t"))
    theirs = jax.tree_util.tree_flatten_with_path(fnnx.Param(jnp.ones(2), tag="t"))
    assert [p for p, _ in ours[0]] == [p for p, _ in theirs[0]]
    v = nnx.BatchStat(jnp.ones(2), note=1)
    doubled = jax.tree.map(lambda x: 2 * x, v)
    assert type(doubled) is nnx.BatchStat and doubled.note == 1 and doubled is not v
    grads = jax.grad(lambda p: jnp.sum(p[...] ** 2))(nnx.Param(jnp.ones(2)))
    assert type(grads) is nnx.Param


def test_nnx_variables_are_pytreemod_variables_in_their_collections():
    assert isinstance(nnx.Param(1), pm.Param) and nnx.Param.collection == "params"
    assert isinstance(nnx.BatchStat(1), pm.BatchStat) and nnx.Cache.collection == "cache"
    assert isinstance(nnx.Perturbation(1), pm.Intermediate)
    assert pm.to_filter("batch_stats")((), nnx.BatchStat(1))

    class Count(nnx.Variable):
        pass

    assert Count.collection == "Count" and nnx.Variable.collection == "variables"
    assert not hasattr(Count(1), "__dict__")  # slots only, as Flax's VariableMeta
    v = nnx.Param(jnp.zeros(2))
    v.set(jnp.ones(2))  # pytreemod's set is in place here
    np.testing.assert_array_equal(v.get(), jnp.ones(2))


def test_copy_replace_from_metadata_and_pickle():
    v = nnx.Param(jnp.zeros(2), tag="a")
    w = v.replace(jnp.ones(2), tag="b")
    assert type(w) is nnx.Param and w.tag == "b" and float(v[0]) == 0.0
    u = nnx.Param.from_metadata(jnp.ones(1), v.get_metadata())
    assert u.get_metadata() == v.get_metadata()
    again = pickle.loads(pickle.dumps(v))
    assert type(again) is nnx.Param and again.tag == "a"
    other = nnx.Param(jnp.ones(3))
    v.copy_from(other)
    assert v.shape == (3,) and not v.has_metadata("tag")
    with pytest.raises(ValueError, match="expected Param, got BatchStat"):
        v.copy_from(nnx.BatchStat(1))  # type: ignore[arg-type]


def test_repr_matches_flax():
    for ours, theirs in [
        (nnx.Param(jnp.ones(3)), fnnx.Param(jnp.ones(3))),
        (nnx.Variable(1, tag="x"), fnnx.Variable(1, tag="x")),
        (nnx.Cache(jnp.ones(2), ref=True), fnnx.Cache(jnp.ones(2), ref=True)),
    ]:
        assert repr(ours) == repr(theirs)


def test_treescope_rendering_matches_flax():
    treescope = pytest.importorskip("treescope")
    ours = treescope.render_to_text(nnx.State({"a": nnx.Param(1, tag="t")}))
    assert ours == treescope.render_to_text(fnnx.State({"a": fnnx.Param(1, tag="t")}))


def test_ref_mode_keeps_a_jax_ref_updated_in_place():
    v = nnx.Variable(jnp.zeros(2), ref=True)
    assert isinstance(v.get_raw_value(), jax.Ref) and not isinstance(v[...], jax.Ref)
    v[...] = jnp.ones(2)
    v[0] = 5.0
    np.testing.assert_array_equal(v[...], [5.0, 1.0])
    w = v.copy()
    assert w.get_raw_value() is not v.get_raw_value() and w.ref
    with pytest.raises(ValueError, match="Cannot pass a Ref directly into Variable constructor"):
        nnx.Variable(jax.new_ref(jnp.zeros(1)))


def test_var_defaults_and_eager_sharding_settings_nest_and_decorate():
    assert nnx.var_defaults() == variablelib.VarDefaults(hijax=False, ref=False)
    with nnx.var_defaults(ref=True):
        assert nnx.Variable(jnp.zeros(1)).ref and dict(nnx.var_defaults())["ref"]
    assert not nnx.Variable(jnp.zeros(1)).ref

    @nnx.var_defaults(hijax=True)
    def make():
        return nnx.Variable(jnp.zeros(1))

    assert make().hijax and not nnx.var_defaults().hijax
    assert isinstance(make(), variablelib.HijaxVariable)
    assert not isinstance(nnx.Variable(1), variablelib.HijaxVariable)
    assert nnx.using_eager_sharding()
    with nnx.use_eager_sharding(False):
        assert not nnx.using_eager_sharding()
        assert nnx.Variable(1).eager_sharding is False
    assert nnx.using_eager_sharding()


def test_eager_sharding_without_a_mesh_is_an_error():
    with pytest.raises(ValueError, match="An auto mesh context or metadata is required"):
        nnx.Param(jnp.ones(2), out_sharding=("x",))
    assert nnx.Param(jnp.ones(2), out_sharding=("x",), eager_sharding=False).out_sharding == ("x",)


def test_eager_sharding_places_the_value_on_the_mesh():
    auto = jax.make_mesh((1,), ("a",), axis_types=(jax.sharding.AxisType.Auto,))
    v = nnx.Param(jnp.ones(2), out_sharding=("a",), mesh=auto)
    assert v[...].sharding == jax.sharding.NamedSharding(auto, jax.sharding.PartitionSpec("a"))
    types = (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto)
    mixed = jax.sharding.AbstractMesh((1, 1), ("a", "b"), axis_types=types)
    with pytest.raises(ValueError, match="Mesh must have all axes as Explicit or all axes as"):
        nnx.Param(jnp.ones((1, 1)), out_sharding=("a", "b"), mesh=mixed)


def test_mutating_from_another_trace_is_a_trace_context_error():
    v = nnx.Variable(jnp.zeros(1))

    @jax.jit
    def write(x):
        v[...] = x
        return x

    with pytest.raises(errors.TraceContextError, match="Cannot mutate Variable from a different"):
        write(jnp.ones(1))
    hi = nnx.Variable(jnp.zeros(1), hijax=True)
    hi[...] = jnp.ones(1)  # hijax Variables skip the check
    assert tracers.TraceState() == tracers.TraceState()


def test_with_metadata_and_hooks():
    init = nnx.with_metadata(jnp.zeros, out_sharding=None, note="n")
    v = nnx.Param(init((2,)), eager_sharding=False)
    assert v.note == "n" and v.shape == (2,)
    with pytest.warns(UserWarning, match="Variable hooks are deprecated"):
        hooked = nnx.with_metadata(jnp.ones, on_get_value=lambda var, x: x * 2)
    with pytest.warns(UserWarning, match="Variable hooks are deprecated"):
        w = nnx.Param(hooked((2,)))
    np.testing.assert_array_equal(w[...], [2.0, 2.0])
    with pytest.raises(ValueError, match="Cannot specify ref both in VariableMetadata"):
        nnx.Param(nnx.VariableMetadata(1, metadata={"ref": True}), ref=False)


def test_subclass_overrides_of_get_and_set_value_apply_to_indexing():
    class Shifted(nnx.Param):
        def get_value(self, **kwargs):
            return super().get_value(**kwargs) + 3

        def set_value(self, value, **kwargs):
            super().set_value(value * 2, **kwargs)

    v = Shifted(jnp.array(1))
    assert int(v[...]) == 4
    v[...] = 5
    assert int(v.get_raw_value()) == 10
    again = jax.tree.map(lambda x: x, v)
    assert type(again) is Shifted and int(again.get_raw_value()) == 10


def test_variable_name_registry():
    assert nnx.variable_type_from_name("params") is nnx.Param
    assert nnx.variable_name_from_type(nnx.Perturbation) == "perturbations"
    with pytest.raises(ValueError, match="Name nope_xyz is not registered in the registry"):
        nnx.variable_type_from_name("nope_xyz")
    with pytest.raises(ValueError, match="Name params already mapped to type"):
        nnx.register_variable_name("params", nnx.Cache)

    class Unregistered(nnx.Variable):
        pass

    with pytest.raises(ValueError, match="is not registered in the registry"):
        nnx.variable_name_from_type(Unregistered)
    assert nnx.variable_name_from_type(Unregistered, allow_register=True) == "Unregistered"
    del variablelib.VariableTypeCache["Unregistered"]
    Params = type("params", (nnx.Variable,), {})
    with pytest.raises(ValueError, match="Name params is already registered in the registry as"):
        nnx.variable_name_from_type(Params, allow_register=True)


def test_copy_takes_the_value_as_value_and_reprlib_checks_its_protocol():
    with pytest.raises(TypeError, match="copy\\(\\) takes the value as `value`"):
        nnx.Param(1).copy(raw_value=2)
    assert nnx.Param(1).copy(value=2).get_value() == 2

    class NoHeader(reprlib.Representable):
        def __nnx_repr__(self):
            yield reprlib.Attr("a", 1)

    class BadItem(reprlib.Representable):
        def __nnx_repr__(self):  # pyright: ignore[reportIncompatibleMethodOverride]
            yield reprlib.Object("BadItem")
            yield 1

    with pytest.raises(TypeError, match="First item must be Config, got Attr"):
        repr(NoHeader())
    with pytest.raises(TypeError, match="Item must be Elem, got int"):
        repr(BadItem())
    with pytest.raises(TypeError, match="Object 1 is not representable"):
        reprlib.get_repr(1)  # type: ignore[arg-type]
    assert repr(reprlib.PrettyMapping({"a": 1})) == "PrettyMapping({\n  'a': 1\n})"


def test_variable_state_alias_and_unknown_names():
    with pytest.warns(DeprecationWarning, match="'VariableState' was removed"):
        assert nnx.VariableState is nnx.Variable  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match=r"Module adapters\.nnx has no attribute 'nope'"):
        _ = nnx.nope  # type: ignore[attr-defined]


def test_ids_are_unique_and_copies_are_new_ids():
    a, b = ids.uuid(), ids.uuid()
    assert a == a and a != b and hash(a) != hash(b)
    assert copy.copy(a) != a and copy.deepcopy(a) != a
