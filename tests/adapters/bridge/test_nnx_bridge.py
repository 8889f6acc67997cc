"""The NNX bridge's round-trip laws, under hypothesis, over random NNX models.

- NNX -> pytreemod -> NNX: ``from_nnx(m).to_nnx()`` has ``m``'s graph, Variable types,
  metadata (sharding included) and values; shared Variables and modules stay shared.
- pytreemod -> NNX -> pytreemod: ``to_nnx(p).to_pytreemod() == p``, and
  ``from_nnx(from_nnx(m).to_nnx()) == from_nnx(m)``.
- A stateful call (BatchNorm statistics, a counter) under ``pm.apply`` gives the output
  and the state the NNX call gives; so does a call of ``to_nnx(p)``.
"""

from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings

import pytreemod as pm
from adapters import bridge, nnx

SETTINGS = settings(max_examples=6, deadline=None)
F = 3  # features of every layer


@pytest.fixture(autouse=True)
def _lazy_sharding() -> Any:
    # Sharding names without a mesh: Variables keep them as metadata only.
    with nnx.use_eager_sharding(False):
        yield


class Count(nnx.Variable):
    """A Variable type of its own collection (``Count``)."""


class Stack(nnx.Module):
    """``specs``: ``(kind, option)`` per layer; ``extras``: ``(type, tagged)`` per Variable."""

    def __init__(self, specs: Any, extras: Any, tie: bool, rngs: nnx.Rngs) -> None:
        layers: list[Any] = []
        for kind, option in specs:
            if kind == "linear":
                init = nnx.initializers.lecun_normal()
                if option:
                    init = nnx.with_partitioning(init, ("embed", "mlp"))
                layers.append(nnx.Linear(F, F, kernel_init=init, rngs=rngs))
            else:
                layers.append(nnx.BatchNorm(F, momentum=0.8, rngs=rngs))
        self.layers = nnx.List(layers)
        self.extras = nnx.List(
            [
                vtype(jax.random.normal(rngs.params(), (F,)), **({"tag": "t"} if tagged else {}))
                for vtype, tagged in extras
            ]
        )
        self.steps = Count(jnp.array(0))
        if tie:
            self.tied_layer = self.layers[0]  # one module in two places
            self.tied_steps = self.steps  # one Variable in two places

    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        for layer in self.layers:
            if isinstance(layer, nnx.BatchNorm):
                x = layer(x, use_running_average=not train)
            else:
                x = layer(x)
        for var in self.extras:
            x = x + var[...][None]
        self.steps[...] += 1
        return x


EXTRA_TYPES = (nnx.Param, nnx.BatchStat, nnx.Cache, nnx.Variable, Count)

models = st.builds(
    lambda specs, extras, tie, seed: Stack(specs, extras, tie, nnx.Rngs(seed)),
    specs=st.lists(
        st.one_of(st.tuples(st.just("linear"), st.booleans()), st.tuples(st.just("bn"), st.none())),
        min_size=1,
        max_size=3,
    ),
    extras=st.lists(st.tuples(st.sampled_from(EXTRA_TYPES), st.booleans()), max_size=2),
    tie=st.booleans(),
    seed=st.integers(0, 2**16),
)


def _flat(model: Any) -> list[tuple[Any, type, dict[str, Any], Any]]:
    state = nnx.state(model)
    return [
        (path, type(v), dict(v.get_metadata()), v.get_value())
        for path, v in nnx.to_flat_state(state)
    ]


def _same_nnx(a: Any, b: Any, exact: bool = True) -> bool:
    if nnx.graphdef(a) != nnx.graphdef(b):
        return False
    fa, fb = _flat(a), _flat(b)
    if [x[:3] for x in fa] != [x[:3] for x in fb]:
        return False
    close = jnp.array_equal if exact else lambda x, y: jnp.allclose(x, y, atol=1e-5)
    return all(bool(close(x[3], y[3])) for x, y in zip(fa, fb, strict=True))


@SETTINGS
@given(model=models)
def test_nnx_to_pytreemod_to_nnx(model: Stack) -> None:
    converted = bridge.from_nnx(model)
    back = converted.to_nnx()
    assert back is not model
    assert _same_nnx(back, model)
    assert all(type(a) is type(b) for a, b in zip(back.layers, model.layers, strict=True))
    if hasattr(model, "tied_layer"):
        assert back.tied_layer is back.layers[0]
        assert back.tied_steps is back.steps
    # The pytreemod side: collections and boxes.
    variables = pm.to_variables(converted)
    expected = {type(v).collection for _, v in nnx.to_flat_state(nnx.state(model))}
    assert set(variables) == expected
    assert type(converted.variables["steps"]) is bridge.variable_type("Count")
    for i, layer in enumerate(model.layers):
        if isinstance(layer, nnx.Linear):
            kernel = converted.variables["layers"][i]["kernel"]
            assert type(kernel) is pm.Param
            names = layer.kernel.get_metadata().get("out_sharding")
            if names is None:
                assert not pm.is_box(kernel.get())
            else:
                assert kernel.get().names == tuple(names)


@SETTINGS
@given(model=models)
def test_pytreemod_to_nnx_to_pytreemod(model: Stack) -> None:
    converted = bridge.from_nnx(model)
    assert bridge.from_nnx(converted.to_nnx()) == converted
    wrapped = bridge.to_nnx(converted)
    assert isinstance(wrapped, nnx.Module)
    assert wrapped.to_pytreemod() == converted
    # The wrapper is an NNX graph too: through split/merge and back to pytreemod.
    again = nnx.merge(*nnx.split(wrapped))
    assert again.to_pytreemod() == converted


@SETTINGS
@given(model=models, train=st.booleans())
def test_stateful_call_matches_nnx(model: Stack, train: bool) -> None:
    converted = bridge.from_nnx(model)
    wrapped = bridge.to_nnx(converted)
    x = jax.random.normal(jax.random.key(1), (4, F))
    out, new = pm.apply(converted, x, train, mutable=True)
    expected = model(x, train)  # model is updated in place
    assert jnp.allclose(out, expected, atol=1e-5)
    assert _same_nnx(new.to_nnx(), model, exact=False)
    assert int(new.variables["steps"].get()) == 1
    # The same call through the NNX wrapper of the pytreemod model.
    out2 = wrapped(x, train)
    assert jnp.allclose(out2, expected, atol=1e-5)
    assert _same_nnx(wrapped.to_pytreemod().to_nnx(), model, exact=False)


def test_layers_compute_as_in_nnx() -> None:
    rngs = nnx.Rngs(0)
    x = jax.random.normal(jax.random.key(2), (2, F))
    for layer in (
        nnx.Linear(F, 2, rngs=rngs),
        nnx.Sequential(nnx.Linear(F, 4, rngs=rngs), nnx.relu, nnx.Linear(4, 2, rngs=rngs)),
        nnx.BatchNorm(F, use_running_average=True, rngs=rngs),
    ):
        assert jnp.allclose(bridge.from_nnx(layer)(x), layer(x))


def test_sharding_metadata_is_a_box_and_changes_come_back() -> None:
    init = nnx.with_partitioning(nnx.initializers.ones_init(), ("embed", "mlp"))
    layer = nnx.Linear(F, 2, kernel_init=init, rngs=nnx.Rngs(0))
    converted = bridge.from_nnx(layer)
    kernel = converted.variables["kernel"].get()
    assert isinstance(kernel, pm.Partitioned)
    assert (kernel.names, kernel.mesh) == (("embed", "mlp"), None)
    # An ensemble made with pm.vmap adds its axis name; the NNX Variable gets it too.
    keys = jax.random.split(jax.random.key(0), 2)
    stacked = pm.vmap(lambda k: converted, metadata_params={pm.PARTITION_NAME: "ens"})(keys)
    back = stacked.to_nnx()
    assert back.kernel.get_metadata()["out_sharding"] == ("ens", "embed", "mlp")
    assert back.kernel.get_value().shape == (2, F, 2)
    assert nnx.graphdef(back) != nnx.graphdef(layer)  # the metadata differs


def test_sharding_rules_are_a_logical_box() -> None:
    rules = (("a", "x"), ("b", None))
    var = nnx.Param(jnp.ones((2, F)), out_sharding=("a", "b"), sharding_rules=rules)
    converted = bridge.from_nnx(nnx.Dict(w=var))
    box = converted.variables["w"].get()
    assert isinstance(box, pm.LogicallyPartitioned)
    assert (box.names, box.rules) == (("a", "b"), rules)
    back = converted.to_nnx()["w"]
    assert back.get_metadata() == var.get_metadata()  # no `mesh` key added
    wrapped = bridge.to_nnx(converted)
    meta = wrapped.variables["params"]["variables"]["w"].get_metadata()
    assert meta["sharding_rules"] == rules and meta["out_sharding"] == ("a", "b")


def test_to_nnx_maps_collections_and_boxes() -> None:
    class Lora(pm.Param, collection="lora_bridge"):
        pass

    class Model(pm.Module):
        w: pm.Param
        mean: pm.BatchStat
        extra: Lora

        def __call__(self, x: jax.Array) -> jax.Array:
            self.mean.set(self.mean.get() + x.sum(0))
            return x * pm.unbox(self.w.get())[None] + self.extra.get()[None]

    model = Model(
        pm.Param(pm.Partitioned(jnp.ones(F), ("embed",))),
        pm.BatchStat(jnp.zeros(F)),
        Lora(jnp.full(F, 2.0)),
    )
    with nnx.use_eager_sharding(True):  # the values are placed already: not resharded
        wrapped = bridge.to_nnx(model)
    w = wrapped.variables["params"]["w"]
    assert type(w) is nnx.Param
    assert w.get_metadata()["out_sharding"] == ("embed",)
    assert type(wrapped.variables["batch_stats"]["mean"]) is nnx.BatchStat
    assert type(wrapped.variables["lora_bridge"]["extra"]) is nnx.variable_type_from_name(
        "lora_bridge"
    )
    assert wrapped.to_pytreemod() == model
    x = jnp.ones((2, F))
    assert jnp.allclose(wrapped(x), 3.0)
    assert jnp.allclose(wrapped.variables["batch_stats"]["mean"].get_value(), 2.0)
    # NNX's own split/merge and state see the pytreemod model's Variables.
    flat = nnx.to_flat_state(nnx.state(wrapped, nnx.BatchStat))
    assert [tuple(path) for path, _ in flat] == [("variables", "batch_stats", "mean")]


class Grows(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.ones(F))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.h = nnx.Intermediate(x)  # a new Variable
        return x * self.w[...][None]


def test_errors() -> None:
    layer = nnx.BatchNorm(F, rngs=nnx.Rngs(0))
    converted = bridge.from_nnx(layer)
    x = jnp.ones((2, F))
    with pytest.raises(pm.StateWriteError):
        converted(x)  # training mode writes batch_stats outside pm.apply
    out, new = pm.apply(converted, x, mutable="batch_stats")
    assert out.shape == x.shape and new != converted
    with pytest.raises(bridge.BridgeError, match="changed the model's graph"):
        pm.apply(bridge.from_nnx(Grows()), x, mutable=True)


def test_jit_and_method() -> None:
    layer = nnx.Linear(F, 2, rngs=nnx.Rngs(0))
    converted = bridge.from_nnx(layer)
    x = jnp.ones((2, F))
    assert jnp.allclose(pm.jit(lambda m, x: m(x))(converted, x), layer(x))
    assert jnp.allclose(converted(x, method="__call__"), layer(x))
    assert jnp.allclose(converted(x, method=lambda m, x: m(x) * 2), layer(x) * 2)
    assert converted.graphdef == nnx.graphdef(layer)
    # Metadata JAX cannot hash (a list) still goes through pm.jit, and comes back.
    tagged = nnx.Dict(w=nnx.Param(jnp.ones(F), notes=["a", "b"]))
    moved = pm.jit(lambda m: m)(bridge.from_nnx(tagged)).to_nnx()
    assert moved["w"].get_metadata()["notes"] == ["a", "b"]


class Lora(pm.Param, collection="lora"):
    pass


class PmStack(pm.Module):
    layers: list[Any]
    extras: dict[str, pm.Variable[Any]]

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers:
            x = layer(x)
        for var in self.extras.values():
            x = x + pm.unbox(var.get())[None]
            if isinstance(var, pm.Cache):
                var.set(jax.tree.map(lambda v: v + 1.0, var.get()))
        return x


def _build_pm(kinds: Any, extras: Any, tie: bool, seed: int) -> PmStack:
    keys = iter(jax.random.split(jax.random.key(seed), len(kinds) + len(extras)))
    layers: list[Any] = []
    for kind in kinds:
        if kind == "bn":
            layers.append(pm.nn.BatchNorm(F, momentum=0.8))
        else:
            init = jax.nn.initializers.lecun_normal()
            if kind == "sharded":
                init = pm.with_partitioning(init, ("embed", "mlp"))
            layers.append(pm.nn.Linear(F, F, kernel_init=init, key=next(keys)))
    table: dict[str, pm.Variable[Any]] = {}
    for i, (vtype, boxed) in enumerate(extras):
        value: Any = jax.random.normal(next(keys), (F,))
        table[f"e{i}"] = vtype(pm.Partitioned(value, ("embed",)) if boxed else value)
    if tie and table:
        table["tied"] = table["e0"]  # one Variable in two places
    return PmStack(layers, table)


@SETTINGS
@given(
    kinds=st.lists(st.sampled_from(["linear", "sharded", "bn"]), min_size=1, max_size=3),
    extras=st.lists(
        st.tuples(st.sampled_from((pm.Param, pm.BatchStat, pm.Cache, Lora)), st.booleans()),
        max_size=2,
    ),
    tie=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_any_pytreemod_model_to_nnx_and_back(kinds: Any, extras: Any, tie: bool, seed: int) -> None:
    model = _build_pm(kinds, extras, tie, seed)
    wrapped = bridge.to_nnx(model)
    rebuilt = wrapped.to_pytreemod()
    assert rebuilt == model
    if "tied" in model.extras:
        assert rebuilt.extras["tied"] is rebuilt.extras["e0"]
    x = jax.random.normal(jax.random.key(seed + 1), (2, F))
    expected, new_model = pm.apply(model, x, mutable=True)
    assert jnp.allclose(wrapped(x), expected, atol=1e-5)
    assert pm.tree_equal(wrapped.to_pytreemod(), new_model)
    # and through from_nnx: the NNX wrapper as a pytreemod model
    converted = bridge.from_nnx(bridge.to_nnx(model))
    out, new_converted = pm.apply(converted, x, mutable=True)
    assert jnp.allclose(out, expected, atol=1e-5)
    assert pm.tree_equal(new_converted.to_nnx().to_pytreemod(), new_model)
