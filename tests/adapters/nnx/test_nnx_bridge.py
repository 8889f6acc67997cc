"""adapters.nnx.bridge: Linen modules in NNX (ToNNX), NNX modules in Linen (ToLinen),
Linen-style NNX modules (bridge.Module) and the variable conversions between them."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters import errors, linen, nnx
from adapters.nnx import bridge
from adapters.nnx.bridge import module as bridge_module
from adapters.nnx.bridge import variables as bv
from adapters.nnx.bridge import wrappers


def test_to_nnx_runs_linen_apply_on_its_variables():
    dense = linen.Dense(3)
    x = jnp.ones((2, 4))
    model = bridge.ToNNX(dense, rngs=nnx.Rngs(0)).lazy_init(x)
    assert isinstance(model.kernel, nnx.Param)
    variables = {"params": {"kernel": model.kernel[...], "bias": model.bias[...]}}
    np.testing.assert_array_equal(model(x), dense.apply(variables, x))
    with pytest.raises(ValueError, match="needs to be a method of an NNX Module"):
        bridge.lazy_init(lambda: None)


def test_to_nnx_mutable_collection_is_written_back():
    class Counter(linen.Module):
        @linen.compact
        def __call__(self, x):
            count = self.variable("counter", "count", lambda: jnp.zeros((), jnp.int32))
            if not self.is_initializing():
                count.value += 1
            return x

    model = bridge.ToNNX(Counter(), rngs=nnx.Rngs(0)).lazy_init(1.0)
    model(1.0, mutable=True)
    model(1.0, mutable=True)
    assert int(nnx.state(model)["count"][...]) == 2


def test_to_linen_keeps_the_nnx_module_state_as_linen_variables():
    model = bridge.to_linen(nnx.Linear, 4, 3)
    x = jnp.ones((2, 4))
    y, variables = model.init_with_output(jax.random.key(0), x)
    assert set(variables) == {"params"}
    assert variables["params"]["kernel"].shape == (4, 3)
    expected = x @ variables["params"]["kernel"] + variables["params"]["bias"][None]
    np.testing.assert_allclose(model.apply(variables, x), expected, rtol=1e-6)
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_module_method_lookup_errors():
    class Flagged(nnx.Module):
        flag = 3

    with pytest.raises(TypeError, match=re.escape("'Flagged.flag' must be a callable")):
        wrappers._get_module_method(Flagged(), "flag")
    with pytest.raises(TypeError, match="must be a callable, got <class 'int'>"):
        wrappers._get_module_method(None, 3)  # type: ignore[arg-type]


def test_variable_conversions_round_trip_and_nnxmeta_axis_law():
    boxed = linen.Partitioned(jnp.ones((2, 3)), ("a", "b"))
    with nnx.use_eager_sharding(False):
        var = bv.to_nnx_var("params", boxed)
    assert isinstance(var, nnx.Param) and var.out_sharding == ("a", "b")
    back = bv.to_linen_var(var)
    assert isinstance(back, linen.Partitioned) and back.names == ("a", "b")
    assert isinstance(bv.to_linen_var(nnx.Param(jnp.ones(2))), jax.Array)

    meta = bv.NNXMeta(nnx.Param, jnp.ones((2, 3)), {"out_sharding": ("a", "b")})
    params = {"partition_name": "layers"}
    added = meta.add_axis(0, params)
    assert added.metadata["out_sharding"] == ("layers", "a", "b")
    assert added.remove_axis(0, params) == meta
    with nnx.use_eager_sharding(False):
        rebuilt = bv.to_nnx_var("params", meta)
    assert isinstance(rebuilt, nnx.Param) and rebuilt.out_sharding == ("a", "b")

    with pytest.raises(ValueError, match="Found duplicate variable path"):
        bv.linen_vars_to_nnx_attrs({"params": {"w": 1.0}, "batch_stats": {"w": 2.0}})
    with pytest.raises(ValueError, match="Cannot infer collection name from value"):
        bv.nnx_attrs_to_linen_vars({"w": 1.0})


class _Dot(bridge.Module):
    features: int

    @bridge.compact
    def __call__(self, x):
        w = self.param("w", jax.nn.initializers.ones, (x.shape[-1], self.features))
        return x @ w


class _Stack(bridge.Module):
    @bridge.compact
    def __call__(self, x):
        return _Dot(2)(_Dot(3)(x))


def test_bridge_module_init_apply_and_auto_names():
    model = _Stack()
    x = jnp.ones((1, 4))
    variables = model.init(0, x)
    assert set(variables["params"]) == {"_Dot_0", "_Dot_1"}
    # _Dot(2) is built before _Dot(3): it is _Dot_0, applied last
    assert variables["params"]["_Dot_1"]["w"].shape == (4, 3)
    assert variables["params"]["_Dot_0"]["w"].shape == (3, 2)
    doubled = jax.tree.map(lambda w: 2 * w, variables)
    np.testing.assert_allclose(model.apply(doubled, x), jnp.full((1, 2), 4 * 2 * 3 * 2.0))


def test_bridge_module_errors():
    class Bad(bridge.Module):
        def __call__(self, x):
            return self.param("w", jax.nn.initializers.ones, (2,))

    with pytest.raises(ValueError, match="Parameters must be initialized in `setup"):
        Bad()(1.0)
    with pytest.raises(ValueError, match="Variables must be initialized in `setup"):
        Bad().variable("cache", "c", jnp.zeros, ())
    with pytest.raises(ValueError, match="Can't use RNGs on unbound modules"):
        Bad().make_rng("params")
    with pytest.raises(ValueError, match=re.escape("Expected 'self' to be a nnx.bridge.Module")):
        bridge.compact(lambda self: None)(object())
    with pytest.raises(TypeError, match=re.escape("'_Dot.features' must be a callable")):
        _Dot(2).apply({}, jnp.ones((1, 2)), method="features")
    with pytest.raises(errors.ApplyModuleInvalidMethodError):
        _Dot(2).apply({}, method=lambda: None)
    with pytest.raises(
        errors.ScopeParamShapeError, match=r"initializer is expected to generate shape \(5, 2\)"
    ):
        bridge_module._checked_value("w", jnp.ones((5, 2)), jax.ShapeDtypeStruct((4, 2), float))

    class Named(bridge.Module):
        mode: str

        @bridge.compact
        def __call__(self, x):
            if self.mode == "parent":
                _Dot(1, parent=self)
            elif self.mode == "name":
                _Dot(1, name=3)
            elif self.mode == "kind":
                self.variable("batch_stats", "w", jnp.zeros, ())
                self.param("w", jax.nn.initializers.ones, ())
            elif self.mode == "init_fn":
                self.variable("cache", "c")
            else:
                self.variable("cache", "c", jnp.zeros, ())
                vars(self)["d"] = jnp.zeros(())
                self.variable("cache", "d")
            return x

    cases = {
        "parent": "'parent' can only be set to None, got Named",
        "name": "'name' must be a 'str', got int",
        "kind": "Expected 'w' to be a Param, got BatchStat",
        "init_fn": "Expected 'init_fn' to be a callable, got None",
        "loaded": "Expected 'init_fn' to be a callable, got None",
    }
    for mode, message in cases.items():
        with pytest.raises(ValueError, match=message):
            Named(mode).init(0, 1.0)
