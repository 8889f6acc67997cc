"""adapters.training.train_state.TrainState behaves as flax.training's: the same updates,
fields, pytree layout and state dict, under jit, with subclasses and fp8 collections."""

from typing import Any

import flax.linen
import flax.serialization
import flax.training.train_state as flax_train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from adapters import linen as nn
from adapters import serialization, struct
from adapters.linen.fp8_ops import OVERWRITE_WITH_GRADIENT
from adapters.training.train_state import TrainState

pytestmark = pytest.mark.usefixtures("standard_promotion")


@pytest.fixture
def standard_promotion() -> Any:
    # optax.adam's bias correction mixes a Python float and an int32 count.
    with jax.numpy_dtype_promotion("standard"):
        yield


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(2)(nn.relu(nn.Dense(4)(x)))


def _loss(state: Any, params: Any, x: jax.Array) -> jax.Array:
    return jnp.mean(state.apply_fn({"params": params}, x) ** 2)


def _setup() -> tuple[TrainState, Any, jax.Array]:
    x = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    params = MLP().init(jax.random.key(0), x)["params"]
    ours = TrainState.create(apply_fn=MLP().apply, params=params, tx=optax.adam(0.1))
    theirs = flax_train_state.TrainState.create(
        apply_fn=MLP().apply, params=params, tx=optax.adam(0.1)
    )
    return ours, theirs, x


def test_create_starts_at_step_zero_with_tx_state() -> None:
    ours, theirs, _ = _setup()
    assert ours.step == 0
    assert jax.tree.structure(ours.opt_state) == jax.tree.structure(theirs.opt_state)
    # The static fields are not leaves; the children are step, params, opt_state.
    assert len(jax.tree.leaves(ours)) == len(jax.tree.leaves(theirs))


def test_apply_gradients_matches_flax_under_jit() -> None:
    ours, theirs, x = _setup()

    @jax.jit
    def step(state: Any) -> Any:
        grads = jax.grad(lambda p: _loss(state, p, x))(state.params)
        return state.apply_gradients(grads=grads)

    for _ in range(3):
        ours, theirs = step(ours), step(theirs)
    assert int(ours.step) == int(theirs.step) == 3
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_state_dict_is_flax_s() -> None:
    ours, theirs, _ = _setup()
    assert serialization.to_bytes(ours) == flax.serialization.to_bytes(theirs)
    sd = serialization.to_state_dict(ours)
    assert set(sd) == {"step", "params", "opt_state"}
    back = serialization.from_state_dict(ours, jax.tree.map(np.zeros_like, sd))
    assert isinstance(back, TrainState) and back.tx is ours.tx


def test_apply_gradients_replaces_extra_fields_of_subclasses() -> None:
    class WithStats(TrainState):
        batch_stats: Any
        note: str = struct.field(pytree_node=False, default="n")

    ours, _, _ = _setup()
    state = WithStats.create(
        apply_fn=ours.apply_fn, params=ours.params, tx=optax.sgd(1.0), batch_stats={"m": 0.0}
    )
    grads = jax.tree.map(jnp.ones_like, state.params)
    new = state.apply_gradients(grads=grads, batch_stats={"m": 1.0})
    assert isinstance(new, WithStats) and new.batch_stats == {"m": 1.0} and new.note == "n"
    np.testing.assert_allclose(new.params["Dense_0"]["bias"], state.params["Dense_0"]["bias"] - 1.0)
    assert new.replace(step=7).step == 7


def test_fields_are_frozen() -> None:
    ours, _, _ = _setup()
    with pytest.raises(AttributeError):
        ours.step = 3  # type: ignore[misc]


def test_overwrite_with_gradient_collection_is_not_optimized() -> None:
    params = {"params": {"w": jnp.ones(2)}, OVERWRITE_WITH_GRADIENT: {"scale": jnp.ones(())}}
    state = TrainState.create(apply_fn=lambda *a: None, params=params, tx=optax.sgd(0.5))
    # Only the 'params' part has optimizer state.
    assert jax.tree.structure(state.opt_state) == jax.tree.structure(
        optax.sgd(0.5).init(params["params"])
    )
    grads = {"params": {"w": jnp.ones(2)}, OVERWRITE_WITH_GRADIENT: {"scale": jnp.full((), 7.0)}}
    new = state.apply_gradients(grads=grads)
    np.testing.assert_allclose(new.params["params"]["w"], [0.5, 0.5])
    assert float(new.params[OVERWRITE_WITH_GRADIENT]["scale"]) == 7.0


def test_fp8_dense_trains_like_flax() -> None:
    x = jax.random.normal(jax.random.key(1), (4, 8))
    key = jax.random.key(0)
    ours_model = nn.DenseGeneral(4, dot_general_cls=nn.Fp8DotGeneral)
    flax_model = flax.linen.DenseGeneral(4, dot_general_cls=flax.linen.Fp8DotGeneral)
    v_ours = ours_model.init(key, x)
    v_flax = flax_model.init(key, x)
    ours = TrainState.create(apply_fn=ours_model.apply, params=v_ours, tx=optax.adam(0.1))
    theirs = flax_train_state.TrainState.create(
        apply_fn=flax_model.apply, params=v_flax, tx=optax.adam(0.1)
    )

    def step(state: Any) -> Any:
        grads = jax.grad(lambda v: jnp.sum(state.apply_fn(v, x)))(state.params)
        return state.apply_gradients(grads=grads)

    jitted = jax.jit(step)
    for _ in range(2):
        ours, theirs = jitted(ours), jitted(theirs)
    flat = lambda t: jax.tree.leaves(jax.tree.map(jnp.asarray, dict(t)))
    for a, b in zip(flat(ours.params), flat(theirs.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
