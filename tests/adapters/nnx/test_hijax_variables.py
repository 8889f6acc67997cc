"""adapters.nnx hijax Variables: ``hijax=True`` Variables are JAX "hijax" types, so what a
traced function writes into them reaches the caller's Variable."""

import copy
import pickle
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters import errors, nnx
from adapters.nnx import variablelib

HijaxVariable = variablelib.HijaxVariable


def test_hijax_flag_makes_a_hijax_variable_that_passes_for_its_type():
    low = nnx.Param(jnp.array(1.0), a="hi")
    hi = nnx.Param(jnp.array(1.0), a="hi", hijax=True)
    assert type(low) is nnx.Param and not isinstance(low, HijaxVariable)
    assert type(hi) is HijaxVariable and isinstance(hi, HijaxVariable)
    assert isinstance(hi, nnx.Param) and isinstance(hi, nnx.Variable)
    assert not isinstance(hi, nnx.BatchStat)
    assert hi.hijax and not hi.ref and hi.var_type is nnx.Param and hi.type is nnx.Param
    assert hi.a == "hi" and hi.get_metadata("a") == "hi" and hi.shape == ()
    with nnx.var_defaults(hijax=True):
        assert type(nnx.BatchStat(0)) is HijaxVariable
        assert type(nnx.BatchStat(0, hijax=False)) is nnx.BatchStat


def test_with_vars_and_from_metadata_convert_both_ways():
    low = nnx.Param(jnp.array([1, 2]), tag="t")
    hi = nnx.with_vars(low, hijax=True)
    assert type(hi) is HijaxVariable and hi.tag == "t"
    hi[0] = 7
    back = nnx.with_vars(hi, hijax=False)
    assert type(back) is nnx.Param and not back.hijax and back.tag == "t"
    np.testing.assert_array_equal(back[...], [7, 2])
    meta = {"tag": "t", "hijax": True, "ref": False, "eager_sharding": True}
    made = nnx.Param.from_metadata(jnp.array(3), meta)
    assert type(made) is HijaxVariable and made[...] == 3
    assert type(hi.to_variable()) is nnx.Param and type(hi.copy()) is HijaxVariable
    with pytest.raises(TypeError, match=r"needs a Variable type.*nnx\.Param\.from_metadata"):
        HijaxVariable.from_metadata(1, meta)


def test_eager_reads_writes_metadata_and_operators():
    v = nnx.Variable(jnp.array(2.0), hijax=True, tag="a")
    v[...] = 3.0
    v.set_metadata(tag="b")
    assert v.tag == "b" and v[...] == 3.0
    assert float(v + 1) == 4.0 and float(1 - v) == -2.0 and float(-v) == -3.0
    assert float(v) == 3.0 and float(jnp.asarray(v)) == 3.0
    other = nnx.Variable(jnp.array(9.0), hijax=True, tag="c")
    v.update_from_state(other)
    assert v[...] == 9.0 and v.tag == "c"
    assert "value=Array(9." in repr(v)
    with pytest.raises(AttributeError, match="object has no attribute '__nope__'"):
        _ = v.__nope__


def test_deepcopy_and_pickle_make_independent_hijax_variables():
    v = nnx.Param(jnp.array([1.0, 2.0]), hijax=True, tag="t")
    for clone in (copy.deepcopy(v), pickle.loads(pickle.dumps(v))):
        assert type(clone) is HijaxVariable and clone.tag == "t"
        clone[...] = jnp.zeros(2)
        np.testing.assert_array_equal(v[...], [1.0, 2.0])


def test_value_property_warns_like_ordinary_variables():
    v = nnx.Variable(jnp.array(2.0), hijax=True)
    with pytest.warns(DeprecationWarning, match=r"'\.value' access is now deprecated"):
        assert v.value == 2.0
    with pytest.warns(DeprecationWarning, match=r"'\.value' setter is now deprecated"):
        v.value = jnp.array(5.0)
    assert v[...] == 5.0


def test_jit_writes_reach_the_caller():
    v = nnx.Param(jnp.array(1), a="hi", hijax=True)

    @jax.jit
    def f(v, x):
        assert isinstance(v, nnx.Param) and isinstance(v, HijaxVariable)
        assert v.hijax and v.a == "hi"
        v[...] = x
        v[...] += 5
        return v + 2

    assert f(v, 10) == 17 and v[...] == 15
    assert f(v, 1) == 8 and v[...] == 6  # the second call reuses the compiled function


def test_jit_may_change_the_value_structure_and_metadata():
    metrics = nnx.Variable({}, hijax=True, tag="m")

    @jax.jit
    def log(metrics, x):
        metrics["total"] = jnp.sum(x)
        metrics.set_metadata(tag="logged")

    log(metrics, jnp.ones((2, 3)))
    assert "total" in metrics and len(metrics) == 1 and metrics["total"] == 6.0
    assert metrics.tag == "logged"


def test_scan_and_grad_write_captured_variables():
    count = nnx.Variable(jnp.array(0.0), hijax=True)

    def body(carry, _):
        count[...] += 1.0
        return carry, None

    jax.lax.scan(body, None, None, length=4)
    assert count[...] == 4.0

    def loss(x):
        count[...] = jax.lax.stop_gradient(x * 2)
        return x**2 + count[...]

    assert jax.grad(loss)(jnp.array(3.0)) == 6.0 and count[...] == 6.0
    assert jax.eval_shape(lambda v: v[...] * 2, count).shape == ()
    grad = jax.grad(lambda v: v[...] ** 2)(count)  # the cotangent is a hijax Variable too
    assert type(grad) is HijaxVariable and grad[...] == 12.0


def test_differentiating_through_a_hijax_variable_is_refused():
    v = nnx.Variable(jnp.array(2.0), hijax=True)

    def write(x):
        v[...] = x
        return v[...]

    with pytest.raises(ValueError, match=r"Apply `jax\.lax\.stop_gradient`"):
        jax.grad(write)(1.0)
    with pytest.raises(NotImplementedError, match=r"creation of a hijax Param.*hijax=False"):
        jax.grad(lambda x: nnx.Param(x, hijax=True)[...])(1.0)


def test_ref_hijax_variable_updates_in_place_but_keeps_its_structure():
    v = nnx.Param(jnp.array(1.0), hijax=True, ref=True)
    assert v.ref and not v.has_qdd and isinstance(v.get_raw_value(), jax.Ref)
    v[...] = 4.0
    assert v[...] == 4.0
    with pytest.raises(errors.ImmutableVariableError, match="with ref=True"):
        v.set_metadata(tag="x")
    with pytest.raises(NotImplementedError, match=r"ref=True cannot be used inside a JAX"):
        jax.jit(lambda v: v[...])(v)


def test_abstract_variable_hides_array_attributes_and_private_names():
    aval = jax.typeof(nnx.Param(jnp.ones(2), hijax=True))
    assert isinstance(aval, variablelib.AbstractVariable) and str(aval) == "Param()"
    with pytest.raises(AttributeError, match="object has no attribute 'shape'"):
        _ = aval.shape
    with pytest.raises(AttributeError, match="object has no attribute '_private'"):
        _ = aval._private


def test_modules_with_hijax_variables_through_jax_and_nnx_transforms():
    with nnx.var_defaults(hijax=True):
        model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        rngs = nnx.Rngs(0)
    assert type(model.kernel) is HijaxVariable and type(rngs.default.count) is HijaxVariable
    graphdef, state = nnx.split(model)
    assert type(nnx.merge(graphdef, state).kernel) is HijaxVariable
    assert set(nnx.state(model, nnx.Param)) == {"kernel", "bias"}

    @jax.jit
    def shift(model, rngs, x):
        model.bias[...] += 1.0
        return model(x), rngs()

    y, k1 = shift(model, rngs, jnp.ones((1, 2)))
    _, k2 = shift(model, rngs, jnp.ones((1, 2)))
    assert y.shape == (1, 3) and rngs.default.count[...] == 2 and not jnp.array_equal(k1, k2)
    np.testing.assert_allclose(model.bias[...], 2.0)

    @nnx.jit
    def shift_again(model):
        model.bias[...] += 1.0

    shift_again(model)
    np.testing.assert_allclose(model.bias[...], 3.0)


def test_hijax_hooks_leave_ordinary_values_alone():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not isinstance(jnp.ones(1), nnx.Variable)
        assert not isinstance(1, HijaxVariable)
        seen = []
        jax.jit(lambda x: seen.append(isinstance(x, (nnx.Variable, HijaxVariable))))(1.0)
        assert seen == [False]


def test_transform_outputs_hold_ordinary_variables():
    # JAX's transforms cannot return a hijax Variable: a model made inside one comes out
    # with ordinary Variables (still flagged hijax), as Flax's eval_shape gives them.
    with nnx.var_defaults(hijax=True):
        abstract = nnx.eval_shape(
            lambda: nnx.Linear(1, 2, rngs=nnx.Rngs(0)), graph=True, graph_updates=True
        )
    assert type(abstract.kernel) is nnx.Param and abstract.kernel.hijax
    assert isinstance(abstract.kernel.get_value(), jax.ShapeDtypeStruct)
    assert abstract.kernel.shape == (1, 2)


def test_a_module_of_hijax_variables_prints_as_flax_prints_it() -> None:
    import flax.nnx as fnnx

    reprs = []
    for lib in (nnx, fnnx):
        with lib.var_defaults(hijax=True):
            layer = lib.Linear(2, 3, rngs=lib.Rngs(0))
            reprs.append(repr(layer).split("dot_general")[0])  # (function addresses differ)
    assert "hijax=True" in reprs[0]
    assert reprs[0] == reprs[1]
