"""adapters.bridge.ToPytreemod: a Linen module with its variables as a pytreemod Module."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm
from adapters import bridge
from adapters import linen as nn

X = jnp.linspace(-1.0, 2.0, 12, dtype=jnp.float32).reshape(4, 3)


class Net(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        init = nn.with_partitioning(nn.initializers.lecun_normal(), ("in", "out"))
        x = nn.Dense(5, kernel_init=init)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.8)(x)
        self.variable("counters", "seen", lambda: jnp.zeros((), jnp.int32))
        return nn.Dense(2)(nn.relu(x))

    def doubled(self, x: jax.Array) -> jax.Array:
        return 2 * self(x, train=False)


def _same(a: Any, b: Any) -> bool:
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(
        bool(jnp.allclose(x, y, atol=1e-6)) for x, y in zip(la, lb, strict=True)
    )


@pytest.fixture(scope="module")
def linen() -> tuple[Net, dict[str, Any]]:
    net = Net()
    return net, net.init(jax.random.key(0), X, train=False)


def test_fields_are_variables_of_the_collection_types_with_boxes(linen: Any) -> None:
    net, variables = linen
    model = bridge.from_linen(net, variables)
    held = model.variables
    assert isinstance(held["params"]["Dense_0"]["bias"], pm.Param)
    assert isinstance(held["batch_stats"]["BatchNorm_0"]["mean"], pm.BatchStat)
    kernel = held["params"]["Dense_0"]["kernel"]
    assert isinstance(kernel.value, pm.Partitioned) and kernel.value.names == ("in", "out")
    seen = held["counters"]["seen"]
    assert seen.collection == "counters" and type(seen) is bridge.variable_type("counters")
    assert type(seen).__name__ == "Counters"
    assert bridge.variable_type("cache") is pm.Cache
    assert bridge.variable_type("intermediates") is pm.Intermediate
    assert sorted(pm.to_variables(model)) == ["batch_stats", "counters", "params"]


def test_call_and_method_equal_linen_apply(linen: Any) -> None:
    net, variables = linen
    model = bridge.from_linen(net, variables)
    assert _same(model(X, train=False), net.apply(variables, X, train=False))
    assert _same(model(X, method=Net.doubled), net.apply(variables, X, method=Net.doubled))
    assert _same(model(X, method="doubled"), net.apply(variables, X, method="doubled"))


def test_batchnorm_stats_update_under_pm_apply(linen: Any) -> None:
    net, variables = linen
    model = bridge.from_linen(net, variables)
    out, new = pm.apply(model, X, mutable="batch_stats")
    expected, updates = net.apply(variables, X, mutable=["batch_stats"])
    assert _same(out, expected)
    assert _same(new.to_linen()[1]["batch_stats"], updates["batch_stats"])
    assert _same(pm.to_variables(new)["batch_stats"]["variables"], updates)
    assert new.variables["params"] is not None
    assert (
        new.variables["params"]["Dense_1"]["kernel"]
        is model.variables["params"]["Dense_1"]["kernel"]
    )
    with pytest.raises(pm.StateWriteError, match='collection "batch_stats" is immutable'):
        pm.apply(model, X, mutable="params")
    with pytest.raises(pm.StateWriteError, match=r"outside pytreemod\.apply nothing is mutable"):
        model(X)


def test_partition_filters_jit_and_grad(linen: Any) -> None:
    net, variables = linen
    model = bridge.from_linen(net, variables)
    structure, params, rest = pm.partition(model, "params")
    assert sorted(params["variables"]["params"]) == ["BatchNorm_0", "Dense_0", "Dense_1"]
    assert sorted(rest["variables"]) == ["batch_stats", "counters"]
    assert pm.combine(structure, params, rest) == model
    boxed = pm.state(model, pm.Partitioned)
    assert list(boxed["variables"]["params"]) == ["Dense_0"]

    @pm.jit
    def step(model: bridge.ToPytreemod, x: jax.Array) -> tuple[jax.Array, Any]:
        return pm.apply(model, x, mutable="batch_stats")

    out, new = step(model, X)
    assert _same(out, net.apply(variables, X, mutable=["batch_stats"])[0])
    assert isinstance(new, bridge.ToPytreemod)

    def loss(params: Any) -> jax.Array:
        return pm.combine(structure, params, rest)(X, train=False).sum()

    grads = jax.grad(loss)(params)
    expected = jax.grad(lambda p: net.apply({**variables, "params": p}, X, train=False).sum())(
        variables["params"]
    )
    assert _same(grads["variables"]["params"], expected)
    pm_grads = pm.grad(lambda m: m(X, train=False).sum())(model)
    assert _same(pm.state(pm_grads, "params")["variables"]["params"], expected)


def test_to_linen_gives_back_the_module_and_variables(linen: Any) -> None:
    net, variables = linen
    module, back = bridge.from_linen(net, variables).to_linen()
    assert module is net
    assert _same(back, variables)
    assert isinstance(back["params"]["Dense_0"]["kernel"], pm.Partitioned)


def test_variable_types_override_and_rngs() -> None:
    class Lora(pm.Param, collection="lora"):
        pass

    class Drop(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            scale = self.variable("lora", "scale", jnp.ones, (3,))
            return nn.Dropout(0.5, deterministic=False)(x * scale.value[None])

    variables = Drop().init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, X)
    model = bridge.from_linen(Drop(), variables, variable_types={"lora": Lora})
    assert type(model.variables["lora"]["scale"]) is Lora
    assert _same(pm.state(model, pm.Param), {"variables": {"lora": {"scale": jnp.ones(3)}}})
    rngs = {"dropout": jax.random.key(7)}
    assert _same(model(X, rngs=rngs), Drop().apply(variables, X, rngs=rngs))


def test_a_call_that_creates_a_variable_is_an_error() -> None:
    class Grows(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            if not self.is_initializing():
                self.put_variable("params", "late", x)
            return nn.Dense(2)(x)

    variables = Grows().init(jax.random.key(0), X)
    model = bridge.from_linen(Grows(), variables)
    with pytest.raises(bridge.BridgeError, match="created the variable params/late"):
        pm.apply(model, X, mutable=True)


def test_attention_decode_cache_steps_match_linen() -> None:
    attn = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=4, decode=True)
    seq = jax.random.normal(jax.random.key(1), (1, 3, 4))
    variables = attn.init(jax.random.key(0), seq)
    model = bridge.from_linen(attn, variables)
    assert isinstance(model.variables["cache"]["cache_index"], pm.Cache)
    step = pm.jit(lambda m, tok: pm.apply(m, tok, mutable="cache"))
    linen_vars = variables
    for t in range(3):
        tok = seq[:, t : t + 1]
        out, model = step(model, tok)
        expected, updates = attn.apply(linen_vars, tok, mutable=["cache"])
        linen_vars = {**linen_vars, **updates}
        assert _same(out, expected)
    assert int(model.variables["cache"]["cache_index"].value) == 3
    assert _same(model.to_linen()[1], linen_vars)


def test_intermediates_given_at_init_are_appended_to() -> None:
    class Sows(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            self.sow("intermediates", "x", x)
            return x

    variables = Sows().init(jax.random.key(0), X, mutable=True)
    model = bridge.from_linen(Sows(), variables)
    assert sorted(pm.to_variables(model)) == ["intermediates"]
    _, new = pm.apply(model, X, mutable="intermediates")
    assert len(new.variables["intermediates"]["x"].value) == 2


def test_pytreemod_checkpoints_keep_collections_and_boxes(linen: Any, tmp_path: Any) -> None:
    net, variables = linen
    model = bridge.from_linen(net, variables)
    pm.save(tmp_path / "net.safetensors", model)
    like = pm.eval_shape(lambda: bridge.from_linen(net, variables))
    loaded = pm.load(tmp_path / "net.safetensors", like)
    assert loaded == model
    assert type(loaded.variables["counters"]["seen"]) is bridge.variable_type("counters")
    assert _same(loaded.to_linen()[1], variables)


def test_an_ensemble_of_linen_models_with_pm_vmap() -> None:
    dense = nn.Dense(3)
    keys = jax.random.split(jax.random.key(0), 5)
    ensemble = pm.vmap(lambda k: bridge.from_linen(dense, dense.init(k, X)))(keys)
    assert ensemble.variables["params"]["kernel"].shape == (5, 3, 3)
    out = pm.vmap(lambda m: m(X))(ensemble)
    third = jax.tree.map(lambda a: a[2], ensemble.to_linen()[1])
    assert out.shape == (5, 4, 3)
    assert jnp.allclose(out[2], dense.apply(third, X), atol=1e-6)
    assert not jnp.allclose(out[0], out[1])


def test_unwritten_collections_are_not_writes_under_lifted_transforms() -> None:
    # nn.scan over nn.remat returns new array objects for every variable it carries, even
    # unchanged ones: only collections the enclosing pm.apply lets the model write are
    # offered to Linen as mutable, so reading the parameters is never a write.
    class Body(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, _: Any) -> tuple[jax.Array, None]:
            seen = self.is_mutable_collection("params")
            self.sow("intermediates", "params_mutable", jnp.asarray(seen))
            return nn.Dense(3)(x), None

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            scanned = nn.scan(
                nn.remat(Body),
                variable_axes={"params": 0, "intermediates": 0},
                split_rngs={"params": True},
                length=2,
            )
            return scanned(name="body")(x, None)[0]

    x = jnp.ones((2, 3))
    variables = Stack().init(jax.random.key(0), x, mutable=True)
    model = bridge.from_linen(Stack(), variables)
    np.testing.assert_allclose(model(x), Stack().apply(variables, x))
    out, new = pm.apply(model, x, mutable="intermediates")
    at_init, in_apply = new.to_linen()[1]["intermediates"]["body"]["params_mutable"]
    assert bool(jnp.all(at_init))  # init may write everything
    assert not bool(jnp.any(in_apply))  # Linen saw params as immutable
    assert new.variables["params"] is not None
    np.testing.assert_allclose(out, Stack().apply(variables, x))


def test_is_mutable_follows_the_enclosing_apply() -> None:
    stats = pm.BatchStat(jnp.zeros(2))
    tree = {"stats": stats, "w": pm.Param(jnp.ones(2))}

    class Probe(pm.Module):
        tree: dict[str, Any]

        def __call__(self) -> tuple[bool, bool]:
            return pm.is_mutable(self.tree["stats"]), pm.is_mutable(self.tree["w"])

    probe = Probe(tree)
    assert probe() == (False, False)
    assert pm.apply(probe, mutable="batch_stats")[0] == (True, False)
    assert pm.apply(probe, mutable=True)[0] == (True, True)
    assert not pm.is_mutable(pm.BatchStat(jnp.zeros(1)))  # not part of any applied model
