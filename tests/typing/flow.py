"""Types that flow through pytreemod's transforms and state functions.

pyright checks this file (``tests/`` is in its include list): every ``assert_type`` states
what a user's type checker infers. ``test_flow.py`` runs the functions, so the code is
also correct at run time (``assert_type`` returns its argument unchanged).
"""

from typing import Any, assert_type

import jax
import jax.numpy as jnp
import optax

import pytreemod as pm


class Stats(pm.Module):
    """A layer with parameters and a batch statistic."""

    weight: pm.Param[jax.Array]
    count: pm.BatchStat[jax.Array]

    def __init__(self, n: int) -> None:
        self.weight = pm.Param(jnp.ones((n,)))
        self.count = pm.BatchStat(jnp.zeros(()))

    def __call__(self, x: jax.Array) -> jax.Array:
        if pm.is_mutable(self.count):  # counts calls made through pm.apply
            self.count.set(self.count.get() + 1)
        return x * self.weight.value


def loss(model: Stats, x: jax.Array) -> jax.Array:
    return jnp.sum(model(x) ** 2)


def loss_with_aux(model: Stats, x: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    y = model(x)
    return jnp.sum(y**2), {"mean": jnp.mean(y)}


def partition_and_combine() -> Stats:
    model = Stats(3)
    structure, params, rest = pm.partition(model, "params")
    assert_type(structure, pm.Structure[Stats])
    assert_type(params, pm.State)
    assert_type(rest, pm.State)
    rebuilt = assert_type(pm.combine(structure, params, rest), Stats)
    assert_type(pm.structure_of(model), pm.Structure[Stats])
    variables = pm.to_variables(model)
    assert_type(pm.from_variables(model, variables), Stats)
    assert_type(pm.from_variables(structure, variables), Stats)
    assert_type(pm.state(model, "batch_stats"), pm.State)
    return rebuilt


def documented_train_step() -> Stats:
    """The optax step of the docs, without a cast."""
    model = Stats(3)
    x = jnp.arange(3.0)
    optimizer = optax.sgd(0.1)
    structure, params, rest = pm.partition(model, "params")
    opt_state = optimizer.init(params)

    def params_loss(params: pm.State) -> jax.Array:
        return loss(pm.combine(structure, params, rest), x)

    grads = jax.grad(params_loss)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return assert_type(pm.combine(structure, optax.apply_updates(params, updates), rest), Stats)


def gradients() -> None:
    model, x = Stats(3), jnp.arange(3.0)
    assert_type(pm.grad(loss)(model, x), Stats)
    assert_type(pm.grad(lambda m: loss(m, x))(model), Stats)
    grads, aux = pm.grad(loss_with_aux, has_aux=True)(model, x)
    assert_type(grads, Stats)
    assert_type(aux, dict[str, jax.Array])
    assert_type(pm.grad(loss, argnums=pm.DiffState(0, "params"))(model, x), pm.State)
    assert_type(pm.grad(loss, argnums=1)(model, x), Any)
    value, g = pm.value_and_grad(loss)(model, x)
    assert_type(value, jax.Array)
    assert_type(g, Stats)

    @pm.grad
    def decorated(model: Stats) -> jax.Array:
        return loss(model, x)

    assert_type(decorated(model), Stats)


def transforms() -> None:
    model, x = Stats(3), jnp.arange(3.0)
    fast = pm.jit(loss)
    assert_type(fast(model, x), jax.Array)

    @pm.jit(donate_argnums=0)
    def step(model: Stats, x: jax.Array) -> tuple[jax.Array, Stats]:
        return pm.apply(model, x, mutable="batch_stats")

    out, new = step(Stats(3), x)  # donated: a model not used again
    assert_type(out, jax.Array)
    assert_type(new, Stats)
    ensemble = pm.vmap(lambda _: Stats(3), axis_size=2)(jnp.zeros(2))
    assert_type(ensemble, Stats)
    batched = pm.vmap(loss, in_axes=(None, 0))(model, jnp.ones((4, 3)))
    assert_type(batched, jax.Array)

    def body(carry: jax.Array, row: jax.Array) -> tuple[jax.Array, jax.Array]:
        return carry + row, jnp.sum(row)

    total, sums = pm.scan(body)(jnp.zeros(3), jnp.ones((4, 3)))
    assert_type(total, jax.Array)
    assert_type(sums, jax.Array)
    assert_type(pm.remat(loss)(model, x), jax.Array)
    assert_type(pm.eval_shape(lambda: Stats(3)), Stats)
    assert_type(pm.cond(True, lambda m: m, lambda m: m, model), Stats)
    assert_type(pm.while_loop(lambda m: False, lambda m: m, model), Stats)


def updates() -> None:
    model = Stats(3)
    assert_type(pm.tree_at(lambda m: m.weight, model, pm.Param(jnp.zeros(3))), Stats)
    assert_type(model.replace(count=pm.BatchStat(jnp.ones(()))), Stats)
    out, new = pm.apply(model, jnp.arange(3.0), mutable="batch_stats")
    assert_type(out, jax.Array)
    assert_type(new, Stats)
    assert int(new.count.value) == 1
    state = pm.TrainState.create(model, optax.sgd(0.1))
    assert_type(state.model, Stats)
    assert_type(state.apply_gradients(pm.state(model, "params")), pm.TrainState[Stats])
    del new
