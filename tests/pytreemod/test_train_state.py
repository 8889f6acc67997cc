"""pm.TrainState: a model, its optax state and a step as one Module; updates keep the
model's types, boxes, ties and untrained collections; pm.save/pm.load round-trip it."""

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import pytreemod as pm
from pytreemod import nn


class Net(pm.Module):
    lin: nn.Linear
    scale: pm.Param
    mean: pm.BatchStat
    tied: pm.Param

    def __init__(self, *, key: jax.Array) -> None:
        self.lin = nn.Linear(3, 2, key=key)
        init = pm.with_partitioning(jax.nn.initializers.ones, ("out",))
        self.scale = pm.Param(init(key, (2,)))
        self.mean = pm.BatchStat(jnp.zeros(2))
        self.tied = self.scale

    def __call__(self, x: jax.Array) -> jax.Array:
        return (self.lin(x) - self.mean.value) * pm.unbox(self.scale.value)


X = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)


def loss(model: Net) -> jax.Array:
    return jnp.mean(jax.vmap(model)(X) ** 2)


def test_create_initialises_the_optimizer_on_the_trained_state() -> None:
    ts = pm.TrainState.create(Net(key=jax.random.key(0)), optax.adam(0.1))
    assert int(ts.step) == 0 and ts.step.dtype == jnp.int32
    expected = optax.adam(0.1).init(pm.state(ts.model, "params"))
    assert jax.tree.structure(ts.opt_state) == jax.tree.structure(expected)
    assert set(ts.params()) == {"lin", "scale"}  # tied appears once; mean is not trained


@pytest.mark.parametrize("form", ["model", "state", "unboxed"])
def test_apply_gradients_keeps_types_boxes_ties_and_other_collections(form: str) -> None:
    ts = pm.TrainState.create(Net(key=jax.random.key(0)), optax.sgd(0.1))

    @pm.jit  # keeps the tie (jax.jit would return two separate Variables)
    def step(ts: pm.TrainState[Net]) -> pm.TrainState[Net]:
        if form == "model":
            grads = pm.grad(loss)(ts.model)
        else:
            grads = pm.grad(loss, argnums=pm.DiffState(0, "params"))(ts.model)
            if form == "unboxed":
                grads = pm.unbox(grads)
        return ts.apply_gradients(grads)

    new = step(ts)
    model = new.model
    assert int(new.step) == 1
    assert isinstance(model, Net) and isinstance(model.lin, nn.Linear)
    assert isinstance(model.scale, pm.Param) and isinstance(model.scale.value, pm.Partitioned)
    assert model.scale.value.names == ("out",)
    assert model.tied is model.scale
    np.testing.assert_array_equal(model.mean.value, ts.model.mean.value)
    # The same update as optax applied by hand to the state.
    params = ts.params()
    grads = pm.grad(loss, argnums=pm.DiffState(0, "params"))(ts.model)
    tx = optax.sgd(0.1)
    expected = optax.apply_updates(params, tx.update(grads, tx.init(params), params)[0])
    for a, b in zip(jax.tree.leaves(new.params()), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert loss(model) < loss(ts.model)


def test_apply_gradients_replaces_extra_fields_of_subclasses() -> None:
    class WithEpoch(pm.TrainState[Any]):
        epoch: int = 0

    model = {"w": pm.Param(jnp.ones(2))}
    ts = WithEpoch.create(model, optax.sgd(1.0))
    new = ts.apply_gradients({"w": jnp.ones(2)}, epoch=3)
    assert isinstance(new, WithEpoch) and new.epoch == 3
    np.testing.assert_array_equal(new.model["w"].value, [0.0, 0.0])


def test_other_filters_choose_what_is_trained() -> None:
    model = {"w": pm.Param(jnp.ones(2)), "m": pm.BatchStat(jnp.ones(2))}
    ts = pm.TrainState.create(model, optax.sgd(1.0), wrt="batch_stats")
    new = ts.apply_gradients({"m": jnp.ones(2)})
    np.testing.assert_array_equal(new.model["m"].value, [0.0, 0.0])
    np.testing.assert_array_equal(new.model["w"].value, [1.0, 1.0])


def test_wrong_gradients_are_a_state_mismatch() -> None:
    ts = pm.TrainState.create({"w": pm.Param(jnp.ones(2))}, optax.sgd(1.0))
    with pytest.raises(pm.StateMismatchError, match="do not have the structure"):
        ts.apply_gradients({"v": jnp.ones(2)})


def test_save_load_round_trip(tmp_path: Any) -> None:
    ts = pm.TrainState.create(Net(key=jax.random.key(0)), optax.adam(0.1))
    with jax.numpy_dtype_promotion("standard"):  # adam mixes an int count and floats
        ts = ts.apply_gradients(pm.grad(loss)(ts.model))
    path = os.path.join(tmp_path, "state.safetensors")
    pm.save(path, ts)
    like = pm.TrainState.create(Net(key=jax.random.key(1)), ts.tx)
    back = pm.load(path, like)
    assert pm.tree_equal(back, ts)
    assert int(back.step) == 1 and back.model.tied is back.model.scale
    assert isinstance(back.model.scale.value, pm.Partitioned)
    skeleton = pm.eval_shape(lambda: like)
    assert pm.tree_equal(pm.load(path, skeleton), ts)


def test_docstring_example_runs() -> None:
    import doctest

    import pytreemod._train_state as module

    with jax.numpy_dtype_promotion("standard"):
        result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


class BNNet(pm.Module):
    lin: nn.Linear
    bn: nn.BatchNorm

    def __init__(self, *, key: jax.Array) -> None:
        self.lin, self.bn = nn.Linear(3, 4, key=key), nn.BatchNorm(4, momentum=0.5)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.bn(self.lin(x), use_running_average=False)


def test_one_call_applies_gradients_and_takes_new_batch_statistics() -> None:
    """``apply_gradients(grads, model=new_model)`` under jit equals the hand-written step:
    gradients applied to the params, the batch statistics of the forward pass taken."""
    x = jax.random.normal(jax.random.key(1), (8, 3))
    ts = pm.TrainState.create(BNNet(key=jax.random.key(0)), optax.sgd(0.1))

    def loss_and_model(params: Any, ts: Any) -> Any:
        structure, _, rest = pm.partition(ts.model, "params")
        out, new_model = pm.apply(pm.combine(structure, params, rest), x, mutable="batch_stats")
        return jnp.sum(out**2), new_model

    @pm.jit
    def step(ts: Any) -> Any:
        grads, new_model = jax.grad(loss_and_model, has_aux=True)(ts.params(), ts)
        return ts.apply_gradients(grads, model=new_model)

    new = step(ts)
    grads, by_hand = jax.grad(loss_and_model, has_aux=True)(ts.params(), ts)
    params = jax.tree.map(lambda p, g: p - 0.1 * g, ts.params(), grads)
    structure, _, rest = pm.partition(by_hand, "params")
    expected = pm.combine(structure, params, rest)
    assert int(new.step) == 1
    assert not np.allclose(new.model.bn.mean.value, ts.model.bn.mean.value)  # statistics moved
    for got, want in zip(jax.tree.leaves(new.model), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_documented_step_with_value_and_grad_and_apply() -> None:
    """The step docs/training.md shows: ``pm.value_and_grad`` of a loss that returns the
    model ``pm.apply(..., mutable="batch_stats")`` left, then one ``apply_gradients``."""
    x = jax.random.normal(jax.random.key(1), (8, 3))
    ts = pm.TrainState.create(BNNet(key=jax.random.key(0)), optax.sgd(0.1))

    def loss(model: Any) -> Any:
        out, new_model = pm.apply(model, x, mutable="batch_stats")
        return jnp.mean((out - 1.0) ** 2), new_model

    @pm.jit
    def step(ts: Any) -> Any:
        (_, new_model), grads = pm.value_and_grad(loss, has_aux=True)(ts.model)
        return ts.apply_gradients(grads, model=new_model)

    new = step(ts)
    (_, forward), grads = pm.value_and_grad(loss, has_aux=True)(ts.model)
    kernel = ts.model.lin.kernel.value - 0.1 * grads.lin.kernel.value
    np.testing.assert_allclose(new.model.lin.kernel.value, kernel, rtol=1e-5, atol=1e-6)
    for name in ("mean", "var"):
        got, want = getattr(new.model.bn, name).value, getattr(forward.bn, name).value
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert not np.allclose(got, getattr(ts.model.bn, name).value)  # they moved
    assert int(new.step) == 1
    kept = ts.apply_gradients(grads)  # without model=: the state's own statistics
    np.testing.assert_array_equal(kept.model.bn.mean.value, ts.model.bn.mean.value)
    np.testing.assert_allclose(kept.model.lin.kernel.value, kernel, rtol=1e-5, atol=1e-6)


def test_a_model_of_another_structure_is_a_state_mismatch() -> None:
    ts = pm.TrainState.create(BNNet(key=jax.random.key(0)), optax.sgd(0.1))
    other = pm.TrainState.create(Net(key=jax.random.key(0)), optax.sgd(0.1))
    with pytest.raises(
        pm.StateMismatchError,
        match=r"apply_gradients\(model=\.\.\.\): the model's variables outside 'params' do not",
    ):
        ts.apply_gradients(ts.params(), model=other.model)
