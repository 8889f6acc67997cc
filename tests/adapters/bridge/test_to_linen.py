"""adapters.bridge.ToLinen: a pytreemod Module inside Linen code."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from adapters import bridge
from adapters import linen as nn
from adapters.errors import InvalidRngError, ModifyScopeVariableError


class Scaled(pm.Param, collection="scales"):
    pass


class Counter(pm.Module):
    """A module with params in a list, a custom collection, a box and a write."""

    layers: list[pm.nn.Linear]
    scale: Scaled
    boxed: pm.Param
    calls: pm.BatchStat

    def __init__(self, n: int, *, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.layers = [pm.nn.Linear(n, n, key=k1), pm.nn.Linear(n, n, key=k2)]
        self.scale = Scaled(jnp.full((n,), 2.0))
        self.boxed = pm.Param(pm.Partitioned(jnp.ones((n,)), ("embed",)))
        self.calls = pm.BatchStat(jnp.zeros((), jnp.int32))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.calls.set(self.calls.get() + 1)
        for layer in self.layers:
            x = layer(x)
        return x * (self.scale.value * pm.unbox(self.boxed.value))[None]

    def double(self, x: jax.Array) -> jax.Array:
        return 2 * self(x)


X = jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32).reshape(2, 3)


def _tree_same(a: Any, b: Any) -> bool:
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(bool(jnp.array_equal(x, y)) for x, y in zip(la, lb, strict=True))


def test_init_puts_each_collection_under_its_name_with_string_keys_and_boxes() -> None:
    model = Counter(3, key=jax.random.key(0))
    lin = bridge.ToLinen(model)
    variables = lin.init(jax.random.key(1), X)
    assert sorted(variables) == ["batch_stats", "params", "scales"]
    assert sorted(variables["params"]["layers"]) == ["0", "1"]
    assert isinstance(variables["params"]["boxed"], pm.Partitioned)
    assert variables["params"]["boxed"].names == ("embed",)
    assert int(variables["batch_stats"]["calls"]) == 0  # init keeps the module as built
    assert lin.rebuild(variables) == model


def test_factory_is_built_from_the_params_rng_and_is_deterministic() -> None:
    lin = bridge.to_linen(Counter, 3)
    v1 = lin.init(jax.random.key(1), X)
    v2 = lin.init(jax.random.key(1), X)
    v3 = lin.init(jax.random.key(2), X)
    assert _tree_same(v1, v2)
    assert not _tree_same(v1["params"], v3["params"])
    rebuilt = lin.rebuild(v1)
    assert isinstance(rebuilt, Counter) and isinstance(rebuilt.scale, Scaled)


def test_key_given_in_kwargs_needs_no_rng() -> None:
    lin = bridge.ToLinen(Counter, args=(3,), kwargs={"key": jax.random.key(5)})
    variables = lin.init({}, X)
    assert lin.rebuild(variables) == Counter(3, key=jax.random.key(5))


def test_apply_equals_the_module_call_and_returns_writes_of_mutable_collections() -> None:
    model = Counter(3, key=jax.random.key(0))
    lin = bridge.ToLinen(model)
    variables = lin.init(jax.random.key(1), X)
    out, updates = lin.apply(variables, X, mutable=["batch_stats"])
    expected, new_model = pm.apply(model, X, mutable=True)
    assert jnp.allclose(out, expected)
    assert int(updates["batch_stats"]["calls"]) == 1
    assert int(new_model.calls.value) == 1


def test_writing_an_immutable_collection_raises_linens_error() -> None:
    lin = bridge.ToLinen(Counter(3, key=jax.random.key(0)))
    variables = lin.init(jax.random.key(1), X)
    with pytest.raises(ModifyScopeVariableError, match='collection "batch_stats" is immutable'):
        lin.apply(variables, X)


def test_method_selects_what_a_call_runs() -> None:
    model = Counter(3, key=jax.random.key(0))
    lin = bridge.ToLinen(model, method="double")
    variables = lin.init(jax.random.key(1), X)
    out, _ = lin.apply(variables, X, mutable=True)
    assert jnp.allclose(out, 2 * pm.apply(model, X, mutable=True)[0])


class Outer(nn.Module):
    """Linen code using pytreemod layers, in setup and in compact."""

    def setup(self) -> None:
        self.first = bridge.to_linen(pm.nn.Linear, 3, 4)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        x = self.first(x)
        x = bridge.to_linen(pm.nn.BatchNorm, 4, momentum=0.5)(x, use_running_average=not train)
        return nn.Dense(2)(x)


def test_inside_linen_models_batchnorm_stats_update_through_mutable() -> None:
    outer = Outer()
    variables = outer.init(jax.random.key(0), X, train=False)
    assert sorted(variables["params"]) == ["Dense_0", "ToLinen_0", "first"]
    assert sorted(variables["batch_stats"]["ToLinen_0"]) == ["mean", "var"]
    y, updates = outer.apply(variables, X, train=True, mutable=["batch_stats"])
    first = variables["params"]["first"]
    h = X @ first["kernel"] + first["bias"][None]
    assert jnp.allclose(updates["batch_stats"]["ToLinen_0"]["mean"], 0.5 * h.mean(0), atol=1e-6)
    assert y.shape == (2, 2)
    with pytest.raises(ModifyScopeVariableError, match="batch_stats"):
        outer.apply(variables, X, train=True)
    assert outer.apply(variables, X, train=False).shape == (2, 2)


def test_under_jit_and_grad() -> None:
    outer = Outer()
    variables = outer.init(jax.random.key(0), X, train=False)

    @jax.jit
    def loss(params: Any) -> jax.Array:
        return outer.apply({**variables, "params": params}, X, train=False).sum()

    grads = jax.grad(loss)(variables["params"])
    assert grads["first"]["kernel"].shape == (3, 4)
    assert float(jnp.abs(grads["first"]["kernel"]).sum()) > 0


def test_the_module_can_be_called_twice_in_one_init() -> None:
    class Twice(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            layer = bridge.to_linen(pm.nn.Linear, 3, 3)
            return layer(layer(x))

    variables = Twice().init(jax.random.key(0), X)
    assert sorted(variables["params"]["ToLinen_0"]) == ["bias", "kernel"]


def test_linen_vmap_and_scan_over_pytreemod_layers_add_axes_to_boxes() -> None:
    init = pm.with_partitioning(jax.nn.initializers.lecun_normal(), ("embed", "mlp"))
    ensemble = nn.vmap(
        bridge.ToLinen,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=None,
        axis_size=3,
        metadata_params={nn.PARTITION_NAME: "ens"},
    )(pm.nn.Linear, args=(3, 3), kwargs={"kernel_init": init})
    variables = ensemble.init(jax.random.key(0), X)
    kernel = variables["params"]["kernel"]
    assert kernel.names == ("ens", "embed", "mlp") and kernel.value.shape == (3, 3, 3)
    assert not jnp.allclose(kernel.value[0], kernel.value[1])
    out = ensemble.apply(variables, X)
    assert out.shape == (3, 2, 3)
    first = pm.nn.Linear(3, 3, key=jax.random.key(0))
    first = first.replace(
        kernel=pm.Param(pm.Partitioned(kernel.value[0], ("embed", "mlp"))),
        bias=pm.Param(variables["params"]["bias"][0]),
    )
    assert jnp.allclose(out[0], first(X), atol=1e-6)

    class Block(nn.Module):
        @nn.compact
        def __call__(self, carry: jax.Array, _: None) -> tuple[jax.Array, None]:
            return bridge.to_linen(pm.nn.Linear, 3, 3, kernel_init=init)(carry), None

    stack = nn.scan(
        Block,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        length=4,
        metadata_params={nn.PARTITION_NAME: "layers"},
    )()
    variables = stack.init(jax.random.key(1), X, None)
    kernel = variables["params"]["ToLinen_0"]["kernel"]
    assert kernel.names == ("layers", "embed", "mlp") and kernel.value.shape == (4, 3, 3)
    out, _ = stack.apply(variables, X, None)
    model = bridge.from_linen(stack, variables)
    assert jnp.allclose(model(X, None)[0], out)


class Mixed(pm.Module):
    """Non-array children (a float, a function) and a tied variable."""

    w: pm.Param
    w_again: pm.Param
    scale: float
    act: Any = pm.field(static=True)

    def __init__(self, n: int, *, key: jax.Array):
        self.w = self.w_again = pm.Param(jax.random.normal(key, (n,)))
        self.scale = 0.5
        self.act = jax.nn.relu

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.act(x * (self.w.value * self.w_again.value * self.scale)[None])


def test_factory_modules_with_python_children_and_ties_rebuild() -> None:
    lin = bridge.to_linen(Mixed, 3)
    variables = lin.init(jax.random.key(0), X)
    assert list(variables["params"]) == ["w"]  # a tied variable is stored once
    rebuilt = lin.rebuild(variables)
    assert rebuilt.w is rebuilt.w_again and rebuilt.scale == 0.5
    assert jnp.allclose(lin.apply(variables, X), rebuilt(X))


def test_missing_variables_are_reported_by_from_variables() -> None:
    lin = bridge.to_linen(Mixed, 3)
    with pytest.raises(pm.StateMismatchError, match=r"variables\['params'\] has no value for \.w"):
        lin.rebuild({"params": {"v": jnp.ones(3)}})


class Probe(pm.Module):
    seen: pm.Intermediate

    def __call__(self, x: jax.Array) -> jax.Array:
        self.seen.set(x)
        return x + 1


def test_intermediates_follow_inits_mutable() -> None:
    lin = bridge.ToLinen(Probe(pm.Intermediate(jnp.zeros((2, 3)))))
    assert lin.init(jax.random.key(0), X) == {}  # Linen's init leaves intermediates out
    with pytest.raises(pm.StateMismatchError, match=r"variables\['intermediates'\]"):
        lin.apply({}, X, mutable=True)
    variables = lin.init(jax.random.key(0), X, mutable=True)
    assert jnp.array_equal(variables["intermediates"]["seen"], jnp.zeros((2, 3)))
    _, updates = lin.apply(variables, X, mutable=["intermediates"])
    assert jnp.array_equal(updates["intermediates"]["seen"], X)


def test_a_linen_layer_inside_a_pytreemod_module_inside_linen_code() -> None:
    class Hybrid(pm.Module):
        linear: pm.nn.Linear
        norm: bridge.ToPytreemod  # a Linen BatchNorm as a pytreemod field

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.norm(self.linear(x))

    bn = nn.BatchNorm(use_running_average=False, momentum=0.5)
    h = jnp.zeros((2, 3))
    hybrid = Hybrid(
        pm.nn.Linear(3, 3, key=jax.random.key(0)),
        bridge.from_linen(bn, bn.init(jax.random.key(2), h)),
    )
    lin = bridge.ToLinen(hybrid)
    variables = lin.init(jax.random.key(1), X)
    assert sorted(variables["batch_stats"]["norm"]["variables"]["batch_stats"]) == ["mean", "var"]
    out, updates = lin.apply(variables, X, mutable=["batch_stats"])
    expected, new_hybrid = pm.apply(hybrid, X, mutable="batch_stats")
    assert jnp.allclose(out, expected)
    new_stats = updates["batch_stats"]["norm"]["variables"]["batch_stats"]
    assert jnp.allclose(new_stats["mean"], new_hybrid.norm.to_linen()[1]["batch_stats"]["mean"])
    assert not jnp.allclose(new_stats["mean"], 0.0)


def test_call_rngs_hand_a_fresh_key_from_a_linen_stream() -> None:
    drop = bridge.to_linen(pm.nn.Dropout, 0.5, key_arg=None, call_rngs={"key": "dropout"})
    x = jnp.ones((4, 8))
    variables = drop.init(jax.random.key(0), x)
    assert variables == {}
    a = drop.apply(variables, x, rngs={"dropout": jax.random.key(1)})
    b = drop.apply(variables, x, rngs={"dropout": jax.random.key(1)})
    c = drop.apply(variables, x, rngs={"dropout": jax.random.key(2)})
    assert jnp.array_equal(a, b) and not jnp.array_equal(a, c)
    assert bool(jnp.all((a == 0) | (a == 2)))
    given = drop.apply(variables, x, key=jax.random.key(3))  # an explicit key wins
    assert jnp.array_equal(given, pm.nn.Dropout(0.5)(x, key=jax.random.key(3)))


def test_a_factory_without_a_key_keyword_is_built_without_one() -> None:
    # Dropout's constructor takes no key: none is drawn or passed, with or without key_arg.
    x = jnp.ones((4, 8))
    for drop in (
        bridge.to_linen(pm.nn.Dropout, 0.5, call_rngs={"key": "dropout"}),
        bridge.to_linen(pm.nn.Dropout, 0.5, key_arg=None, call_rngs={"key": "dropout"}),
    ):
        assert drop.init({}, x, deterministic=True) == {}  # no params stream needed
        out = drop.apply({}, x, rngs={"dropout": jax.random.key(3)})
        assert bool(jnp.all((out == 0) | (out == 2))) and bool(jnp.any(out == 0))
        given = drop.apply({}, x, key=jax.random.key(3))
        assert jnp.array_equal(given, pm.nn.Dropout(0.5)(x, key=jax.random.key(3)))
    # A factory that takes **kwargs is given the key.
    seen: list[Any] = []

    def build(**kwargs: Any) -> pm.nn.Linear:
        seen.append(sorted(kwargs))
        return pm.nn.Linear(8, 2, **kwargs)

    bridge.to_linen(build).init(jax.random.key(0), x)
    assert ["key"] in seen


def test_call_rngs_are_optional_where_the_call_needs_no_key() -> None:
    drop = bridge.to_linen(pm.nn.Dropout, 0.5, key_arg=None, call_rngs={"key": "dropout"})
    x = jnp.ones((4, 8))
    variables = drop.init({}, x, deterministic=True)  # no rngs at all
    assert variables == {}
    assert jnp.array_equal(drop.apply(variables, x, deterministic=True), x)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, train: bool) -> jax.Array:
            x = nn.Dense(8)(x)
            return bridge.to_linen(
                pm.nn.Dropout, 0.5, key_arg=None, call_rngs={"key": "dropout"}, name="drop"
            )(x, deterministic=not train)

    net_vars = Net().init(jax.random.key(0), x, True)  # the params stream stands in
    evaluated = Net().apply(net_vars, x, False)  # evaluation: no rngs
    assert jnp.array_equal(
        evaluated, nn.Dense(8).apply({"params": net_vars["params"]["Dense_0"]}, x)
    )
    trained = Net().apply(net_vars, x, True, rngs={"dropout": jax.random.key(1)})
    assert bool(jnp.all((trained == 0) | (trained == 2 * evaluated)))


def test_a_missing_call_rng_is_reported_with_the_module_and_the_stream() -> None:
    drop = bridge.to_linen(pm.nn.Dropout, 0.5, key_arg=None, call_rngs={"key": "dropout"})
    x = jnp.ones((4, 8))
    message = (
        r'ToLinen "/" \(Dropout\) needs PRNG for "dropout" \(the key= of its __call__\): '
        r"pass rngs=\{'dropout': key\} to init/apply\."
    )
    with pytest.raises(InvalidRngError, match=message):
        drop.apply({}, x)
    with pytest.raises(InvalidRngError, match=message):
        drop.init({}, x)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return bridge.ToLinen(
                pm.nn.Dropout, (0.5,), key_arg=None, call_rngs={"key": "dropout"}, name="drop"
            )(x)

    with pytest.raises(InvalidRngError, match=r'ToLinen "/drop" \(Dropout\) needs PRNG'):
        Net().apply({}, x)


class Picky(pm.Module):
    """A call that takes an optional key and fails for another reason on 1-D inputs."""

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        if x.ndim != 2:
            raise pm.LayerConfigError("Picky takes 2-D inputs")
        return x if key is None else x + jax.random.normal(key, x.shape)


def test_a_failure_a_key_would_not_avoid_keeps_its_own_error() -> None:
    picky = bridge.ToLinen(Picky(), call_rngs={"key": "noise"})
    with pytest.raises(pm.LayerConfigError, match="Picky takes 2-D inputs"):
        picky.apply({}, jnp.ones(3))
    assert jnp.array_equal(picky.apply({}, jnp.ones((1, 3))), jnp.ones((1, 3)))


def test_a_missing_build_key_is_reported_with_the_module() -> None:
    with pytest.raises(InvalidRngError, match=r'ToLinen "/" \(Linear\) needs PRNG for "params"'):
        bridge.to_linen(pm.nn.Linear, 4, 3).init({}, jnp.ones((2, 4)))
