"""pm.jit builds its output with CPython's cyclic collector held off: a training loop's
output burst and the frees of the previous step's output cancel out in the collector's
allocation count, and the collector's own state is left as the caller had it."""

import gc
from typing import Any, cast

import jax
import jax.numpy as jnp
import optax
import pytest

import pytreemod as pm


class Layer(pm.Module):
    weight: pm.Param[jax.Array]
    bias: pm.Param[jax.Array]

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weight.value + self.bias.value


class Stack(pm.Module):
    layers: list[Layer]

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers:
            x = layer(x)
        return x


def _model(depth: int) -> Stack:
    return Stack([Layer(pm.Param(jnp.eye(2)), pm.Param(jnp.zeros(2))) for _ in range(depth)])


def _momentum_step() -> Any:
    opt = optax.sgd(1e-3, momentum=0.9)

    @pm.jit
    def step(model: Stack, state: Any) -> Any:
        grads = pm.grad(lambda m: jnp.sum(m(jnp.ones(2))))(model)
        updates, state = opt.update(grads, state, model)
        return optax.apply_updates(model, updates), state

    return step, opt


def _collections() -> int:
    return sum(g["collections"] for g in gc.get_stats())


def test_a_training_loop_starts_no_collection_while_the_collector_is_on() -> None:
    # 150 layers: the model and its momentum rebuilt per step are about 1,800 objects
    # that the collector tracks (modules, their field dicts, Variables, arrays), well past
    # its threshold of 700, so counted as they were built they would start a collection
    # in every step.
    step, opt = _momentum_step()
    model = _model(150)
    state = opt.init(model)
    for _ in range(3):
        model, state = step(model, state)
    assert gc.isenabled()
    before = _collections()
    for _ in range(20):
        model, state = step(model, state)
    assert _collections() - before < 5
    assert gc.isenabled()
    assert isinstance(model, Stack) and isinstance(model.layers[3].weight, pm.Param)


def test_collection_is_deferred_not_skipped() -> None:
    # Outputs kept alive past the call still count: the first allocation after the call
    # collects (about once a step here, against none when each output replaces the last).
    step, opt = _momentum_step()
    model = _model(150)
    state = opt.init(model)
    kept = []
    for _ in range(3):
        model, state = step(model, state)
    before = _collections()
    for _ in range(20):
        model, state = step(model, state)
        kept.append((model, state))  # every output stays alive
    assert _collections() - before >= 10
    assert gc.isenabled()


def test_a_caller_who_disabled_the_collector_keeps_it_disabled() -> None:
    step, opt = _momentum_step()
    model = _model(3)
    state = opt.init(model)
    gc.disable()
    try:
        for _ in range(4):  # the checked first calls and the fast path after them
            model, state = step(model, state)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_failing_output_build_reenables_the_collector() -> None:
    @pm.jit
    def f(x: jax.Array) -> Any:
        return {"a": x, "b": x + 1}

    f(jnp.ones(2))  # checked; learns the pattern the next calls take
    entry = cast(Any, f)._pytreemod_jit._patterns[0].entry
    original = entry.build

    def failing(arrays: Any) -> Any:
        raise MemoryError("no memory for the output")

    entry.build = failing
    try:
        with pytest.raises(MemoryError, match="no memory for the output"):
            f(jnp.ones(2))
        assert gc.isenabled()
    finally:
        entry.build = original
    assert float(f(jnp.ones(2))["b"][0]) == 2.0
