"""adapters.nnx training: Optimizer, metrics and EMA, compared with flax.nnx's values."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx as fnnx

from adapters import nnx


@pytest.fixture(autouse=True)
def _standard_promotion():
    # optax's schedules and Flax's metrics mix Python floats with int32 counters.
    with jax.numpy_dtype_promotion("standard"):
        yield


def _loss(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


def _train(lib, tx):
    """Two optimizer steps; returns the model, the optimizer and the last updates."""
    model = lib.Linear(2, 3, rngs=lib.Rngs(0))
    optimizer = lib.Optimizer(model, tx, wrt=lib.Param)
    x, y = jnp.ones((4, 2)), jnp.zeros((4, 3))
    optimizer.update(model, lib.grad(_loss)(model, x, y))
    updates = optimizer.update(model, lib.grad(_loss)(model, x, y))
    return model, optimizer, updates


def test_optimizer_steps_match_flax():
    ours, opt, updates = _train(nnx, optax.adamw(0.1))
    theirs, fopt, fupdates = _train(fnnx, optax.adamw(0.1))
    np.testing.assert_allclose(ours.kernel[...], theirs.kernel[...], rtol=1e-6)
    assert ours.bias is not None and theirs.bias is not None
    np.testing.assert_allclose(ours.bias[...], theirs.bias[...], rtol=1e-6)
    assert int(opt.step[...]) == int(fopt.step[...]) == 2
    assert opt.step[...].dtype == jnp.uint32
    assert fupdates is not None
    np.testing.assert_allclose(updates["kernel"], fupdates["kernel"], rtol=1e-6)
    # the optimizer state is OptState Variables (OptVariable for a Variable leaf), as Flax's
    leaves = jax.tree.leaves(opt.opt_state, is_leaf=lambda x: isinstance(x, nnx.Variable))
    fleaves = jax.tree.leaves(fopt.opt_state, is_leaf=lambda x: isinstance(x, fnnx.Variable))
    assert [type(v).__name__ for v in leaves] == [type(v).__name__ for v in fleaves]
    assert all(isinstance(v, nnx.OptState) for v in leaves)


def test_optimizer_wrt_leaves_other_variables_alone():
    model = nnx.Sequential(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), nnx.BatchNorm(2, rngs=nnx.Rngs(1)))
    stats_before = jax.tree.map(jnp.copy, nnx.state(model, nnx.BatchStat))
    optimizer = nnx.Optimizer(model, optax.sgd(1.0), wrt=nnx.Param)
    grads = jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param))
    kernel_before = jnp.copy(model.layers[0].kernel[...])
    optimizer.update(model, grads)
    np.testing.assert_allclose(model.layers[0].kernel[...], kernel_before - 1.0)
    jax.tree.map(np.testing.assert_array_equal, nnx.state(model, nnx.BatchStat), stats_before)


def test_optimizer_split_merge_and_model_and_optimizer():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    state = nnx.ModelAndOptimizer(model, optax.sgd(0.5))
    assert state.model is model
    graphdef, pure = nnx.split(state)
    restored = nnx.merge(graphdef, pure)
    grads = nnx.grad(_loss)(restored.model, jnp.ones((1, 2)), jnp.zeros((1, 3)))
    before = _loss(restored.model, jnp.ones((1, 2)), jnp.zeros((1, 3)))
    restored.update(grads)
    assert _loss(restored.model, jnp.ones((1, 2)), jnp.zeros((1, 3))) < before


def test_optimizer_errors_are_flax_s():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="Missing required argument `wrt`"):
        nnx.Optimizer(model, optax.sgd(0.1))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    with pytest.raises(TypeError, match="Missing required argument `grads`"):
        optimizer.update(model)
    with pytest.raises(
        AttributeError, match=re.escape("does not have attribute 'model' since Flax 0.11")
    ):
        _ = optimizer.model
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = optimizer.nope


def test_metrics_match_flax():
    logits = jnp.array([[-1.0, 1.0], [1.0, -1.0], [-1.0, 1.0]])
    labels = jnp.array([1, 1, 1])
    loss = jnp.array([1.0, 2.0, 6.0])
    ours = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average())
    theirs = fnnx.MultiMetric(accuracy=fnnx.metrics.Accuracy(), loss=fnnx.metrics.Average())
    assert all(jnp.isnan(v) for v in ours.compute().values())
    for metrics in (ours, theirs):
        metrics.update(logits=logits, labels=labels, values=loss, mask={"loss": loss > 1.5})
    got, want = ours.compute(), theirs.compute()
    assert list(got) == ["accuracy", "loss"]
    for name in want:
        np.testing.assert_allclose(got[name], want[name])
    ours.reset()
    assert jnp.isnan(ours.compute()["loss"])

    values = jax.random.normal(jax.random.key(0), (6,)) + 3.0
    ours_w, theirs_w = nnx.metrics.Welford(), fnnx.metrics.Welford()
    for w in (ours_w, theirs_w):
        w.update(values=values[:4])
        w.update(values=values[4:])
    a, b = ours_w.compute(), theirs_w.compute()
    assert isinstance(a, nnx.metrics.Statistics)
    for field in ("mean", "standard_deviation", "standard_error_of_mean"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=1e-5)


def test_binary_accuracy_and_scalar_average():
    acc = nnx.metrics.Accuracy(threshold=0.5)
    acc.update(logits=jnp.array([0.2, 0.7, 0.9]), labels=jnp.array([0, 1, 0]))
    np.testing.assert_allclose(acc.compute(), 2 / 3)
    avg = nnx.metrics.Average("loss")
    avg.update(loss=2.0)
    avg.update(loss=4.0)
    np.testing.assert_allclose(avg.compute(), 3.0)
    graphdef, state = avg.split()
    np.testing.assert_allclose(nnx.merge(graphdef, state).compute(), 3.0)


def test_metric_errors_are_flax_s():
    with pytest.raises(NotImplementedError, match="Must override `__init__"):
        nnx.Metric()
    bare = object.__new__(nnx.Metric)
    for method in ("reset", "update", "compute"):
        with pytest.raises(NotImplementedError, match=f"Must override `{method}"):
            getattr(bare, method)()
    with pytest.raises(TypeError, match="Expected keyword argument 'values'"):
        nnx.metrics.Average().update(loss=1.0)
    with pytest.raises(TypeError, match="Expected keyword argument 'values'"):
        nnx.metrics.Welford().update(loss=1.0)
    with pytest.raises(ValueError, match="should be a jax array"):
        nnx.metrics.Average().update(values=1.0, mask=jnp.ones(1))
    with pytest.raises(TypeError, match="Expected threshold to be a float"):
        nnx.metrics.Accuracy(threshold=1)
    with pytest.raises(ValueError, match="For multi-class classification"):
        nnx.metrics.Accuracy().update(logits=jnp.ones(3), labels=jnp.ones(3, jnp.int32))
    with pytest.raises(ValueError, match="For binary classification"):
        nnx.metrics.Accuracy(0.5).update(logits=jnp.ones(3), labels=jnp.ones((3, 1), jnp.int32))
    with pytest.raises(ValueError, match=re.escape("Expected labels.dtype==jnp.int32")):
        nnx.metrics.Accuracy().update(logits=jnp.ones((3, 2)), labels=jnp.ones(3))


def test_ema_tracks_and_shares_with_apply_to():
    model = nnx.Linear(2, 2, use_bias=False, rngs=nnx.Rngs(0))
    start = jnp.copy(model.kernel[...])
    ema = nnx.EMA(model, decay=0.9)
    view = ema.apply_to(model)
    assert view.kernel is ema.params["kernel"]
    assert isinstance(view.kernel, nnx.Param)
    model.kernel[...] = start * 3.0
    ema.update(model)
    np.testing.assert_allclose(
        ema.params["kernel"][...], 0.9 * start + 0.1 * 3.0 * start, rtol=1e-6
    )
    np.testing.assert_allclose(view.kernel[...], ema.params["kernel"][...])
    with pytest.raises(TypeError, match=r"EMA only supports Variable leaves, got .* at path"):
        nnx.EMA({"w": jnp.ones(2)}, decay=0.5)
