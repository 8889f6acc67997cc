"""adapters.training's small modules against flax.training's: common_utils,
early_stopping, dynamic_scale, lr_schedule, prefetch_iterator, orbax_utils."""

import logging
import threading
from collections.abc import Iterator
from typing import Any

import flax.training.common_utils as flax_common_utils
import flax.training.dynamic_scale as flax_dynamic_scale
import flax.training.lr_schedule as flax_lr_schedule
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from adapters.training import (
    common_utils,
    dynamic_scale,
    early_stopping,
    lr_schedule,
    orbax_utils,
    prefetch_iterator,
)

# ------------------------------------------------------------------------ common_utils


def test_onehot_matches_flax_and_jax() -> None:
    labels = jnp.array([[0, 2], [1, 3]])
    ours = common_utils.onehot(labels, 4, on_value=2.0, off_value=-1.0)
    assert ours.shape == (2, 2, 4) and ours.dtype == jnp.float32
    np.testing.assert_array_equal(ours, flax_common_utils.onehot(labels, 4, 2.0, -1.0))
    np.testing.assert_array_equal(common_utils.onehot(labels, 4), jax.nn.one_hot(labels, 4))


def test_shard_and_shard_prng_key_use_local_devices() -> None:
    n = jax.local_device_count()
    batch = {"x": jnp.arange(n * 6).reshape(n * 2, 3)}
    sharded = common_utils.shard(batch)
    assert sharded["x"].shape == (n, 2, 3)
    np.testing.assert_array_equal(sharded["x"].reshape(n * 2, 3), batch["x"])
    keys = common_utils.shard_prng_key(jax.random.key(0))
    assert keys.shape == (n,)


def test_stack_forest_and_get_metrics() -> None:
    forest = [{"loss": jnp.array(1.0)}, {"loss": jnp.array(3.0)}]
    np.testing.assert_array_equal(common_utils.stack_forest(forest)["loss"], [1.0, 3.0])
    n = jax.local_device_count()
    replicated = [{"loss": jax.pmap(lambda x: x)(jnp.full((n,), float(step)))} for step in range(3)]
    metrics = common_utils.get_metrics(replicated)
    np.testing.assert_array_equal(metrics["loss"], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(
        metrics["loss"], flax_common_utils.get_metrics(replicated)["loss"]
    )


# ---------------------------------------------------------------------- early_stopping


def test_early_stopping_follows_patience_and_min_delta() -> None:
    es = early_stopping.EarlyStopping(min_delta=0.1, patience=1)
    seen = []
    for metric in [1.0, 0.95, 0.8, 0.79, 0.78, 0.5]:
        es = es.update(metric)
        seen.append((es.has_improved, es.should_stop))
    assert seen == [
        (True, False),  # first value
        (False, False),  # improved by less than min_delta
        (True, False),  # improved by 0.2
        (False, False),  # patience 1: tolerated
        (False, True),  # second miss: stop
        (True, True),  # an improvement afterwards does not undo should_stop
    ]
    assert es.best_metric == 0.5
    fresh = es.reset()
    assert (fresh.best_metric, fresh.patience_count, fresh.should_stop) == (float("inf"), 0, False)
    assert fresh.patience == 1 and fresh.min_delta == 0.1


# ----------------------------------------------------------------------- dynamic_scale


def _loss(p: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.sum(jnp.asarray(p, jnp.float16) * x)


# Mixed precision code mixes float16 and float32 (and Python numbers with int steps): the
# conftest's strict promotion would reject it, in Flax's versions as in ours.
with_standard_promotion = pytest.mark.usefixtures("standard_promotion")


@pytest.fixture
def standard_promotion() -> Iterator[None]:
    with jax.numpy_dtype_promotion("standard"):
        yield


@with_standard_promotion
@pytest.mark.parametrize("has_aux", [False, True])
def test_dynamic_scale_matches_flax(has_aux: bool) -> None:
    fn = (lambda p, x: (_loss(p, x), {"n": 1})) if has_aux else _loss
    ours = dynamic_scale.DynamicScale(growth_interval=2, scale=8.0)
    theirs = flax_dynamic_scale.DynamicScale(growth_interval=2, scale=8.0)
    p = jnp.ones(3)
    for x in [jnp.ones(3), jnp.ones(3), jnp.ones(3), jnp.full(3, 1e5), jnp.ones(3)]:
        a = jax.jit(ours.value_and_grad(fn, has_aux=has_aux))(p, x)
        b = jax.jit(theirs.value_and_grad(fn, has_aux=has_aux))(p, x)
        assert isinstance(a, dynamic_scale.DynamicScaleResult)
        assert bool(a.finite) == bool(b.finite)
        np.testing.assert_allclose(a.grad, b.grad)
        assert float(a.dynamic_scale.scale) == float(b.dynamic_scale.scale)
        assert int(a.dynamic_scale.fin_steps) == int(b.dynamic_scale.fin_steps)
        if has_aux:
            assert a.aux[1] == {"n": 1}
        ours, theirs = a.dynamic_scale, b.dynamic_scale
    # 3 finite steps with interval 2 grew the scale once (8 -> 16); the overflow halved it.
    assert float(ours.scale) == 8.0


def test_dynamic_scale_respects_minimum_and_is_a_pytree() -> None:
    ds = dynamic_scale.DynamicScale(scale=1.0, minimum_scale=0.75)
    res = ds.value_and_grad(lambda p: p * jnp.inf)(jnp.ones(()))
    assert not bool(res.finite) and float(res.dynamic_scale.scale) == 0.75
    assert len(jax.tree.leaves(ds)) == 2  # fin_steps and scale; the factors are static


# ------------------------------------------------------------------------- lr_schedule


@with_standard_promotion
def test_lr_schedules_match_flax(caplog: pytest.LogCaptureFixture) -> None:
    steps = jnp.arange(0, 100, 7)
    with caplog.at_level(logging.WARNING, logger="adapters.training.lr_schedule"):
        pairs = [
            (
                lr_schedule.create_constant_learning_rate_schedule(0.1, 10, warmup_length=2),
                flax_lr_schedule.create_constant_learning_rate_schedule(0.1, 10, 2),
            ),
            (
                lr_schedule.create_stepped_learning_rate_schedule(
                    0.1, 10, [[3, 0.1], [6, 0.01]], warmup_length=1
                ),
                flax_lr_schedule.create_stepped_learning_rate_schedule(
                    0.1, 10, [[3, 0.1], [6, 0.01]], 1
                ),
            ),
            (
                lr_schedule.create_cosine_learning_rate_schedule(0.1, 10, 8, warmup_length=0.5),
                flax_lr_schedule.create_cosine_learning_rate_schedule(0.1, 10, 8, 0.5),
            ),
        ]
    assert "effectively deprecated" in caplog.text
    for ours, theirs in pairs:
        # The schedules take one step at a time (the stepped one compares it with a vector).
        np.testing.assert_allclose(jax.vmap(ours)(steps), jax.vmap(theirs)(steps), rtol=1e-6)
    stepped = pairs[1][0]
    np.testing.assert_allclose(
        [stepped(15), stepped(35), stepped(70)], [0.1, 0.01, 0.001], rtol=1e-6
    )


# ------------------------------------------------------------------- prefetch_iterator


def _make(items: Iterator[Any], buffer_size: int = 1) -> prefetch_iterator.PrefetchIterator:
    with pytest.warns(DeprecationWarning, match="PrefetchIterator is deprecated"):
        return prefetch_iterator.PrefetchIterator(items, buffer_size)


def test_prefetch_iterator_yields_everything_in_order() -> None:
    it = _make(iter(range(20)), buffer_size=3)
    assert list(it) == list(range(20))
    with pytest.raises(StopIteration):
        next(it)


def test_prefetch_iterator_reads_ahead_in_a_thread() -> None:
    read = threading.Event()

    def source() -> Iterator[int]:
        yield 1
        read.set()
        yield 2

    it = _make(source(), buffer_size=2)
    assert read.wait(timeout=10)  # the second item was read before anyone asked
    assert list(it) == [1, 2]


def test_prefetch_iterator_reraises_errors_after_buffered_items() -> None:
    def source() -> Iterator[int]:
        yield 1
        raise RuntimeError("broken source")

    it = _make(source())
    assert next(it) == 1
    with pytest.raises(RuntimeError, match="broken source"):
        next(it)


def test_prefetch_iterator_close_stops_reading() -> None:
    it = _make(iter(range(1000)))
    it.close()
    it._thread.join(timeout=10)
    assert not it._thread.is_alive()
    assert len(list(it)) <= 1  # at most what was buffered


# ------------------------------------------------------------------------- orbax_utils


def test_orbax_args_from_target() -> None:
    target = {"a": np.zeros(2), "b": {"c": np.ones(3)}}
    save_args = orbax_utils.save_args_from_target(target)
    assert all(isinstance(x, ocp.SaveArgs) for x in jax.tree.leaves(save_args))
    numpy_args = orbax_utils.restore_args_from_target(target)
    assert jax.tree.leaves(numpy_args)[0].restore_type is np.ndarray
    jax_args = orbax_utils.restore_args_from_target({"a": jnp.zeros(2)})
    assert isinstance(jax_args["a"], ocp.ArrayRestoreArgs)
    assert jax_args["a"].sharding == jnp.zeros(2).sharding


def test_orbax_restore_args_mesh_is_deprecated() -> None:
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
    arr = jax.device_put(jnp.zeros(2), jax.sharding.NamedSharding(mesh, jax.P()))
    with pytest.warns(DeprecationWarning, match="`mesh` arg is deprecated"):
        args = orbax_utils.restore_args_from_target({"a": arr}, mesh=mesh)
    assert args["a"].sharding.mesh == mesh


def test_orbax_transforms_fall_back_where_target_is_none() -> None:
    given = {"x": ocp.Transform()}
    assert orbax_utils.maybe_construct_transformations({"a": None}, given) is given
    built = orbax_utils.maybe_construct_transformations({"a": None, "b": np.ones(1)}, None)
    assert set(built) == {"a"} and built["a"].use_fallback


def test_is_multi_device_array() -> None:
    assert not orbax_utils.is_multi_device_array(np.ones(2))
    assert not orbax_utils.is_multi_device_array(jnp.ones(2))
    n = len(jax.devices())
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    split = jax.device_put(jnp.ones(n), jax.sharding.NamedSharding(mesh, jax.P("x")))
    assert orbax_utils.is_multi_device_array(split) == (n > 1)


def test_missing_orbax_is_an_import_error_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)
    with pytest.raises(ImportError, match="pip install orbax-checkpoint"):
        orbax_utils.save_args_from_target({"a": np.ones(1)})
