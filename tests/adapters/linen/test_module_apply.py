"""Running Linen modules: init/apply (mutable, rngs, method, capture_intermediates),
the variables API (param, variable, sow, perturb...), bind/unbind, lazy_init,
module_paths, and agreement with flax.linen on the same program."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn
from adapters import errors
from adapters.core import Scope


class Scale(nn.Module):
    features: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.param("w", jax.nn.initializers.ones, (x.shape[-1], self.features))
        return x @ w


class Counter(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        n = self.variable("stats", "n", jnp.zeros, ())
        if self.is_mutable_collection("stats"):
            n.value = n.value + 1
        return x + n.value


# ----------------------------------------------------------------------------- init/apply


def test_init_apply_and_mutable_collections() -> None:
    x = jnp.ones((1, 2))
    variables = Counter().init(jax.random.key(0), x)
    assert float(variables["stats"]["n"]) == 1.0
    y = Counter().apply(variables, x)
    assert float(y[0, 0]) == 2.0
    y, updates = Counter().apply(variables, x, mutable=["stats"])
    assert float(updates["stats"]["n"]) == 2.0 and float(y[0, 0]) == 3.0
    assert float(variables["stats"]["n"]) == 1.0  # inputs are never written


def test_init_with_output_and_a_key_or_dict_of_keys() -> None:
    x = jnp.ones((1, 3))
    y, v1 = Scale().init_with_output(jax.random.key(0), x)
    v2 = Scale().init({"params": jax.random.key(0)}, x)
    np.testing.assert_array_equal(v1["params"]["w"], v2["params"]["w"])
    np.testing.assert_array_equal(y, x @ v1["params"]["w"])


def test_invalid_rngs_are_reported() -> None:
    x = jnp.ones((1, 2))
    with pytest.raises(errors.InvalidRngError, match="RNGs should be of shape \\(2,\\) or PRNGKey"):
        Scale().init("nope", x)
    with pytest.raises(ValueError, match="First argument passed to an init function"):
        Scale().init({"params": "nope"}, x)
    with pytest.raises(ValueError, match="The ``rngs`` argument passed to an apply function"):
        Scale().apply({}, x, rngs={"params": "nope"})
    with pytest.raises(errors.InvalidRngError, match="RNGs should be of shape"):
        Scale().apply({}, x, rngs="nope")


def test_missing_rng_stream_names_the_module() -> None:
    with pytest.raises(errors.InvalidRngError, match='Scale_0 needs PRNG for "params"'):

        class Net(nn.Module):
            @nn.compact
            def __call__(self, x: jax.Array) -> jax.Array:
                return Scale()(x)

        Net().init({"other": jax.random.key(0)}, jnp.ones((1, 2)))

    class Noise(nn.Module):
        @nn.compact
        def __call__(self) -> jax.Array:
            return jax.random.normal(self.make_rng("noise"), ())

    with pytest.raises(errors.InvalidRngError, match='None needs PRNG for "noise"'):
        Noise().apply({})
    # A missing stream falls back to "params".
    assert Noise().apply({}, rngs={"params": jax.random.key(1)}).shape == ()


class Normed(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.BatchNorm(use_running_average=False)(nn.Dense(3)(x))


def test_a_misspelt_mutable_collection_gets_a_hint_after_flax_message() -> None:
    x = jnp.ones((2, 4))
    variables = Normed().init(jax.random.key(0), x)
    flax_text = (
        'Cannot update variable "mean" in "/BatchNorm_0" because collection "batch_stats" '
        "is immutable."
    )
    for mutable in (["batch_stat"], "batch_stat", ("intermediates", "batch_stat")):
        with pytest.raises(errors.ModifyScopeVariableError) as info:
            Normed().apply(variables, x, mutable=mutable)
        assert str(info.value).startswith(
            flax_text + ' mutable= names "batch_stat", not "batch_stats" (a typo?).'
        )
    with pytest.raises(errors.ModifyScopeVariableError) as info:  # nothing close: no hint
        Normed().apply(variables, x, mutable=["intermediates"])
    assert str(info.value).startswith(flax_text + " (https://")


def test_a_misspelt_collection_in_the_variables_gets_a_hint_after_flax_message() -> None:
    x = jnp.ones((2, 4))
    variables = Normed().init(jax.random.key(0), x)
    misspelt = {"param": variables["params"], "batch_stats": variables["batch_stats"]}
    with pytest.raises(errors.ScopeCollectionNotFound) as info:
        Normed().apply(misspelt, x, mutable=["batch_stats"])
    assert str(info.value).startswith(
        'Tried to access "kernel" from collection "params" in "/Dense_0" but the collection '
        'is empty. The variables have collection "param", not "params" (a typo?).'
    )
    stats = variables["batch_stats"]["BatchNorm_0"]
    with pytest.raises(errors.ScopeCollectionNotFound, match=r'have collection "batch_stat",'):
        nn.BatchNorm(use_running_average=True).apply({"batch_stat": stats}, jnp.ones((2, 3)))
    with pytest.raises(errors.ScopeCollectionNotFound) as info:  # nothing close: no hint
        Normed().apply({"weights": variables["params"]}, x)
    assert "(a typo?)" not in str(info.value)


def test_apply_method_forms() -> None:
    class Multi(nn.Module):
        sub: nn.Module = None  # type: ignore[assignment]
        number: int = 1

        def double(self, x: jax.Array) -> jax.Array:
            return 2 * x

        def __call__(self, x: jax.Array) -> jax.Array:
            return x

    m = Multi(Scale())
    x = jnp.ones((1, 2))
    assert float(m.apply({}, x, method="double")[0, 0]) == 2.0
    assert float(m.apply({}, x, method=Multi.double)[0, 0]) == 2.0
    assert float(m.apply({}, x, method=m.double)[0, 0]) == 2.0
    assert float(m.apply({}, x, method=lambda mod, x: mod.double(x) + 1)[0, 0]) == 3.0
    v = m.init(jax.random.key(0), x, method="sub")
    assert list(v["params"]) == ["sub"]
    with pytest.raises(TypeError, match=r"'Multi\.number' must be a callable"):
        m.apply({}, x, method="number")
    with pytest.raises(errors.ApplyModuleInvalidMethodError, match="Cannot call apply"):
        m.apply({}, method=lambda: 1)


def test_capture_intermediates() -> None:
    class Inner(nn.Module):
        def __call__(self, x: Any) -> Any:
            return x + 1

        def other(self, x: Any) -> Any:
            return x * 10

    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            return Inner()(x) + Inner().other(x)

    _, state = Outer().apply({}, 1, capture_intermediates=True)
    assert state == {"intermediates": {"Inner_0": {"__call__": (2,)}, "__call__": (12,)}}
    only_other = lambda mdl, name: name == "other"
    _, state = Outer().apply({}, 1, capture_intermediates=only_other)
    assert state == {"intermediates": {"Inner_1": {"other": (10,)}}}


def test_sow_collects_only_when_mutable() -> None:
    class Sower(nn.Module):
        @nn.compact
        def __call__(self, x: Any, **kw: Any) -> Any:
            stored = self.sow("intermediates", "h", x, **kw)
            self.sow("intermediates", "h", 2 * x, **kw)
            return stored

    assert Sower().apply({}, 1) is False
    assert "intermediates" not in Sower().init(jax.random.key(0), 1)
    stored, state = Sower().apply({}, 1, mutable=["intermediates"])
    assert stored is True and state == {"intermediates": {"h": (1, 2)}}
    _, state = Sower().apply(
        {}, 1, init_fn=lambda: 0, reduce_fn=lambda a, b: a + b, mutable="intermediates"
    )
    assert state == {"intermediates": {"h": 3}}


def test_perturb_gives_gradients_of_intermediates() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            h = self.perturb("h", Scale(3)(x))
            return self.perturb("out", 3 * h)

    x = jnp.ones((1, 2))
    variables = Net().init(jax.random.key(0), x)
    assert variables["perturbations"]["h"].shape == (1, 3)

    def loss(perturbations: Any) -> jax.Array:
        y = Net().apply({"params": variables["params"], "perturbations": perturbations}, x)
        return jnp.sum(y**2)

    grads = jax.grad(loss)(variables["perturbations"])
    np.testing.assert_allclose(grads["h"], 3 * grads["out"], rtol=1e-6)
    Net().apply({"params": variables["params"]}, x)  # no perturbations: a no-op
    with pytest.raises(ValueError, match="Perturbation collection perturbations present"):
        Net().apply({"params": variables["params"], "perturbations": {}}, x)


def test_param_shape_is_checked_against_the_initializer() -> None:
    variables = Scale(2).init(jax.random.key(0), jnp.ones((1, 3)))
    with pytest.raises(errors.ScopeParamShapeError, match='"w"'):
        Scale(2).apply(variables, jnp.ones((1, 4)))


def test_get_put_has_variable_and_is_initializing() -> None:
    class Store(nn.Module):
        def __call__(self, x: jax.Array) -> Any:
            self.put_variable("col", "a", x)
            return (
                self.has_variable("col", "a"),
                self.get_variable("col", "a"),
                self.is_initializing(),
            )

    (has, value, initializing), state = Store().apply({}, jnp.ones(2), mutable=["col"])
    assert has and not initializing
    np.testing.assert_array_equal(value, state["col"]["a"])
    (_, _, initializing), _ = Store().init_with_output(jax.random.key(0), jnp.ones(2))
    assert initializing


def test_functional_init_and_apply_with_a_function_of_the_module() -> None:
    class Pair(nn.Module):
        def setup(self) -> None:
            self.a = Scale(3)
            self.b = Scale(1)

    def forward(m: Pair, x: jax.Array) -> jax.Array:
        return m.b(m.a(x))

    x = jnp.ones((1, 2))
    y, variables = nn.init_with_output(forward, Pair())(jax.random.key(0), x)
    np.testing.assert_array_equal(nn.apply(forward, Pair())(variables, x), y)
    assert sorted(nn.init(forward, Pair())(jax.random.key(0), x)["params"]) == ["a", "b"]


def test_bind_and_unbind() -> None:
    class Pair(nn.Module):
        def setup(self) -> None:
            self.enc = Scale(3)
            self.dec = Scale(2)

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.dec(self.enc(x))

    x = jnp.ones((1, 2))
    variables = Pair().init(jax.random.key(0), x)
    bound = Pair().bind(variables)
    np.testing.assert_array_equal(bound(x), Pair().apply(variables, x))
    enc, enc_vars = bound.enc.unbind()
    assert enc == Scale(3) and enc.scope is None
    np.testing.assert_array_equal(enc_vars["params"]["w"], variables["params"]["enc"]["w"])


def test_bind_with_mutable_collections() -> None:
    bound = Counter().bind({"stats": {"n": jnp.zeros(())}}, mutable=["stats"])
    bound(jnp.ones(()))
    bound(jnp.ones(()))
    assert float(bound.variables["stats"]["n"]) == 2.0


def test_lazy_init_runs_no_computation() -> None:
    shape = jax.ShapeDtypeStruct((1 << 30, 4), jnp.float32)
    variables = Scale(3).lazy_init(jax.random.key(0), shape)
    assert variables["params"]["w"].shape == (4, 3)

    class Dependent(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return self.param("p", lambda _: x)

    with pytest.raises(errors.LazyInitError):
        Dependent().lazy_init(jax.random.key(0), jax.ShapeDtypeStruct((2,), jnp.float32))


def test_module_paths() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return Scale(name="out")(Scale()(x))

    paths = Net().module_paths(jax.random.key(0), jnp.ones((1, 2)))
    assert sorted(paths) == ["", "Scale_0", "out"]
    assert type(paths["out"]) is Scale and paths["out"].scope is None


def test_merge_param() -> None:
    assert nn.merge_param("rate", None, 0.5) == 0.5
    assert nn.merge_param("rate", 0.1, None) == 0.1
    with pytest.raises(ValueError, match='Parameter "rate" must be passed'):
        nn.merge_param("rate", None, None)
    with pytest.raises(ValueError, match='Parameter "rate" was passed to the constructor and at'):
        nn.merge_param("rate", 0.1, 0.2)


def test_module_on_a_core_scope() -> None:
    scope = Scope({}, {"params": jax.random.key(0)}, mutable=["params"])
    y = Scale(parent=scope)(jnp.ones((1, 2)))
    assert scope.variables()["params"]["w"].shape == (2, 2)
    y2 = Scale(parent=scope.rewound())(jnp.ones((1, 2)))
    np.testing.assert_array_equal(y, y2)


# ----------------------------------------------------------------------------- flax


def _mlp(lib: Any) -> Any:
    class Block(lib.Module):
        width: int

        def setup(self) -> None:
            self.dense = lib.Dense(self.width)
            self.extra = [lib.Dense(self.width), lib.Dense(self.width)]

        def __call__(self, x: jax.Array) -> jax.Array:
            x = self.dense(x)
            for layer in self.extra:
                x = lib.relu(layer(x))
            self.sow("intermediates", "act", x)
            return x

    class Net(lib.Module):
        @lib.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            x = Block(4)(x)
            x = Block(3, name="named")(x)
            return lib.Dense(2)(x)

    return Net()


def test_same_variables_and_outputs_as_flax() -> None:
    flax_nn = pytest.importorskip("flax.linen")
    x = jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)
    ours = _mlp(nn)
    theirs = _mlp(flax_nn)
    ours_vars = ours.init(jax.random.key(0), x)
    theirs_vars = jax.tree.map(lambda a: a, theirs.init(jax.random.key(0), x))
    # Same names, shapes and (the same keys being drawn) the same initial values.
    assert jax.tree.structure(ours_vars) == jax.tree.structure(theirs_vars)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
        ours_vars,
        theirs_vars,
    )
    y_ours, state_ours = ours.apply(theirs_vars, x, mutable=["intermediates"])
    y_theirs, state_theirs = theirs.apply(theirs_vars, x, mutable=["intermediates"])
    np.testing.assert_allclose(y_ours, y_theirs, rtol=1e-5, atol=1e-5)
    assert jax.tree.structure(state_ours) == jax.tree.structure(dict(state_theirs))
