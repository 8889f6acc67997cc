"""adapters.training.checkpoints: naming, keep/overwrite rules, msgpack and Orbax formats,
restore into a target or as a raw state dict, and files interchanged with real Flax."""

import logging
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import flax
import flax.training.checkpoints as flax_checkpoints
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from adapters import config, errors, struct
from adapters import linen as nn
from adapters.core import FrozenDict, freeze, unfreeze
from adapters.training import checkpoints, train_state

pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning"
    ),
    # Orbax's own note when a raw (target=None) restore reads jax.Arrays; Flax shows it too.
    pytest.mark.filterwarnings("ignore:Sharding info not provided:UserWarning"),
]


@pytest.fixture(params=[False, True], ids=["msgpack", "orbax"])
def use_orbax(request: pytest.FixtureRequest) -> Iterator[bool]:
    with config.temp_flip_flag("use_orbax_checkpointing", request.param):
        yield request.param


@pytest.fixture
def msgpack_only() -> Iterator[None]:
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        yield


def obj(fill: int) -> dict[str, np.ndarray]:
    return {"a": np.full(3, fill, np.int32), "b": np.arange(3, dtype=np.int32) + fill}


def assert_tree_equal(x: Any, y: Any) -> None:
    assert jax.tree.structure(x) == jax.tree.structure(y)
    for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------------------- names


def test_natural_sort_orders_numbers_by_value() -> None:
    names = ["f_10", "f_2", "f_1", "f_1e1", "f_-3.5", "f_0.25"]
    assert checkpoints.natural_sort(names) == ["f_-3.5", "f_0.25", "f_1", "f_2", "f_10", "f_1e1"]
    # Unsigned: the '-' separates instead of negating.
    assert checkpoints.natural_sort(["f_-3", "f_-2", "f_1"], signed=False) == [
        "f_1",
        "f_-2",
        "f_-3",
    ]


def test_safe_normpath_keeps_url_scheme() -> None:
    assert checkpoints.safe_normpath("./x//y/../z") == "x/z"
    assert checkpoints.safe_normpath("gs://bucket//a/./b") == "gs://bucket/a/b"


def test_latest_checkpoint_and_available_steps_skip_temporary_entries(tmp_path: Any) -> None:
    for name in ["ck_tmp", "ck_2", "ck_10", "ck_3_gda", "ck_7.orbax-checkpoint-tmp-1", "x_99"]:
        (tmp_path / name).write_text("")
    assert checkpoints.latest_checkpoint(tmp_path, "ck_") == os.path.join(tmp_path, "ck_10")
    assert checkpoints.available_steps(tmp_path, "ck_") == [2, 10]
    assert checkpoints.available_steps(tmp_path, "ck_", step_type=float) == [2.0, 10.0]
    assert checkpoints.latest_checkpoint(tmp_path, "none_") is None
    assert checkpoints.latest_checkpoint(tmp_path / "missing") is None


def test_convert_pre_linen_numbers_per_class() -> None:
    pre = {"Conv_0": {"Dense_0": {}, "Conv_1": {}, "Dense_2": {}}, "Dense_1": {}, "Dense_11": {}}
    linen = checkpoints.convert_pre_linen(pre)
    assert linen == {
        "Conv_0": {"Dense_0": {}, "Conv_0": {}, "Dense_1": {}},
        "Dense_0": {},
        "Dense_1": {},
    }
    frozen = checkpoints.convert_pre_linen(freeze(pre))
    assert isinstance(frozen, FrozenDict) and unfreeze(frozen) == linen
    assert checkpoints.convert_pre_linen(linen) == linen  # already Linen: unchanged
    assert checkpoints.convert_pre_linen(3) == 3


# ------------------------------------------------------------------- save and restore


def test_save_restore_newest_and_by_step(tmp_path: Any, use_orbax: bool) -> None:
    assert checkpoints.restore_checkpoint(tmp_path / "none", obj(0)) is not None
    path = checkpoints.save_checkpoint(tmp_path, obj(1), 1, prefix="p_", keep=3)
    assert path == os.path.join(tmp_path, "p_1")
    assert os.path.isdir(path) == use_orbax  # Orbax writes a directory, msgpack a file
    checkpoints.save_checkpoint(tmp_path, obj(2), 2, prefix="p_", keep=3)
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(0), prefix="p_"), obj(2))
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(0), 1, prefix="p_"), obj(1))
    assert_tree_equal(checkpoints.restore_checkpoint(path, obj(0)), obj(1))
    # A missing file path or empty directory gives the target back unchanged.
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path / "p_9", obj(5)), obj(5))
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(5), prefix="q_"), obj(5))
    with pytest.raises(ValueError, match="Matching checkpoint not found"):
        checkpoints.restore_checkpoint(tmp_path, obj(0), step=7, prefix="p_")


def test_target_none_returns_the_state_dict(tmp_path: Any, use_orbax: bool) -> None:
    checkpoints.save_checkpoint(tmp_path, (np.zeros(2), np.ones(2)), 0)
    raw = checkpoints.restore_checkpoint(tmp_path, None)
    assert set(raw) == {"0", "1"}
    np.testing.assert_array_equal(raw["1"], np.ones(2))


def test_keep_deletes_oldest(tmp_path: Any, use_orbax: bool) -> None:
    for step in range(5):
        checkpoints.save_checkpoint(tmp_path, obj(step), step, keep=2)
    assert checkpoints.available_steps(tmp_path) == [3, 4]


def test_keep_every_n_steps_spares_a_sparse_history(tmp_path: Any, msgpack_only: None) -> None:
    for step in range(0, 40, 5):
        checkpoints.save_checkpoint(tmp_path, obj(1), step, keep=2, keep_every_n_steps=10)
    # Step 0 is not "kept every n" (the first kept step must be a non-zero number).
    assert checkpoints.available_steps(tmp_path) == [5, 15, 25, 30, 35]


def test_keep_zero_deletes_nothing_as_in_flax(tmp_path: Any, msgpack_only: None) -> None:
    for step in range(3):
        checkpoints.save_checkpoint(tmp_path, obj(1), step, keep=0)
    assert checkpoints.available_steps(tmp_path) == [0, 1, 2]


def test_overwrite_rules(tmp_path: Any, msgpack_only: None) -> None:
    checkpoints.save_checkpoint(tmp_path, obj(1), 5, keep=5)
    checkpoints.save_checkpoint(tmp_path, obj(2), 7, keep=5)
    with pytest.raises(errors.InvalidCheckpointError, match='outdated checkpoint at step: "7"'):
        checkpoints.save_checkpoint(tmp_path, obj(3), 7, keep=5)
    with pytest.raises(errors.InvalidCheckpointError, match='step: "6"'):
        checkpoints.save_checkpoint(tmp_path, obj(3), 6, keep=5)
    # overwrite=True saves and deletes the later checkpoints.
    checkpoints.save_checkpoint(tmp_path, obj(3), 6, keep=5, overwrite=True)
    assert checkpoints.available_steps(tmp_path) == [5, 6]
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(0)), obj(3))


def test_overwrite_same_step_with_orbax_is_orbax_error(tmp_path: Any) -> None:
    with config.temp_flip_flag("use_orbax_checkpointing", True):
        checkpoints.save_checkpoint(tmp_path, obj(1), 0)
        with pytest.raises(ValueError, match="already exists"):
            checkpoints.save_checkpoint(tmp_path, obj(2), 0)
        checkpoints.save_checkpoint(tmp_path, obj(2), 0, overwrite=True)
        assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(0)), obj(2))


def test_float_steps_and_pathlib_dirs(tmp_path: Any, use_orbax: bool) -> None:
    directory = pathlib.Path(tmp_path) / "sub"
    checkpoints.save_checkpoint(directory, obj(1), 0.5, keep=2)
    checkpoints.save_checkpoint(directory, obj(2), 1.5, keep=2)
    assert sorted(os.listdir(directory)) == ["checkpoint_0.5", "checkpoint_1.5"]
    assert_tree_equal(checkpoints.restore_checkpoint(directory, obj(0)), obj(2))


def test_singular_and_empty_targets(tmp_path: Any, use_orbax: bool) -> None:
    if use_orbax:
        with pytest.raises(ValueError, match="only accept pytree"):
            checkpoints.save_checkpoint(tmp_path, np.ones(3), 0)
        return
    checkpoints.save_checkpoint(tmp_path, np.arange(3), 0)
    np.testing.assert_array_equal(checkpoints.restore_checkpoint(tmp_path, None), np.arange(3))
    checkpoints.save_checkpoint(tmp_path, [], 1)
    assert checkpoints.restore_checkpoint(tmp_path, None) == {}
    assert checkpoints.restore_checkpoint(tmp_path, []) == []


@struct.dataclass
class Pair:
    count: Any
    weights: Any


def test_struct_dataclasses_and_frozen_dicts(tmp_path: Any, use_orbax: bool) -> None:
    saved = [Pair(3, freeze({"w": jnp.arange(2.0)})), np.ones(2)]
    target = [Pair(0, freeze({"w": jnp.zeros(2)})), np.zeros(2)]
    checkpoints.save_checkpoint(tmp_path, saved, 0)
    restored = checkpoints.restore_checkpoint(tmp_path, target)
    assert isinstance(restored[0], Pair) and isinstance(restored[0].weights, FrozenDict)
    assert_tree_equal(restored, saved)


def test_restore_picks_format_per_checkpoint(tmp_path: Any) -> None:
    with config.temp_flip_flag("use_orbax_checkpointing", True):
        checkpoints.save_checkpoint(tmp_path, obj(1), 0, keep=2)
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        checkpoints.save_checkpoint(tmp_path, obj(2), 1, keep=2)
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(0), step=0), obj(1))
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(0), step=1), obj(2))


def test_async_manager_commits_in_order(tmp_path: Any, msgpack_only: None) -> None:
    manager = checkpoints.AsyncManager()
    for step in range(3):
        checkpoints.save_checkpoint(tmp_path, obj(step), step, async_manager=manager)
    assert manager.save_future is not None
    manager.save_future.result()
    assert checkpoints.available_steps(tmp_path) == [2]
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(0)), obj(2))


def test_save_checkpoint_multiprocess_in_one_process(tmp_path: Any, use_orbax: bool) -> None:
    for step in range(3):
        checkpoints.save_checkpoint_multiprocess(tmp_path, obj(step), step)
    # With Orbax, Flax cleans up before writing, so one more checkpoint remains.
    assert checkpoints.available_steps(tmp_path) == ([1, 2] if use_orbax else [2])
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(0)), obj(2))


def test_legacy_format_warns_as_flax_does(tmp_path: Any) -> None:
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        with pytest.warns(DeprecationWarning, match="in favor of Orbax"):
            checkpoints.save_checkpoint(tmp_path, obj(1), 0)


def test_without_orbax_saving_falls_back_to_msgpack(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)  # import fails
    with config.temp_flip_flag("use_orbax_checkpointing", True):
        path = checkpoints.save_checkpoint(tmp_path, obj(1), 0)
    assert os.path.isfile(path)
    assert_tree_equal(checkpoints.restore_checkpoint(tmp_path, obj(0)), obj(1))


# -------------------------------------------------------------------------- bad input


def test_corrupt_file_is_a_library_error(tmp_path: Any) -> None:
    (tmp_path / "checkpoint_3").write_bytes(b"\xc1 not msgpack")
    with pytest.raises(checkpoints.CheckpointReadError, match="not a readable msgpack"):
        checkpoints.restore_checkpoint(tmp_path, None)
    assert issubclass(checkpoints.CheckpointReadError, errors.FlaxError)


def test_truncated_file_is_a_library_error(tmp_path: Any, msgpack_only: None) -> None:
    path = checkpoints.save_checkpoint(tmp_path, obj(1), 0)
    data = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(data[: len(data) // 2])
    with pytest.raises(checkpoints.CheckpointReadError, match="checkpoint_0"):
        checkpoints.restore_checkpoint(tmp_path, obj(0))


def test_directory_that_is_not_orbax_is_a_library_error(tmp_path: Any) -> None:
    (tmp_path / "checkpoint_1").mkdir()
    (tmp_path / "checkpoint_1" / "junk.txt").write_text("x")
    with pytest.raises(checkpoints.CheckpointReadError, match="not an Orbax checkpoint"):
        checkpoints.restore_checkpoint(tmp_path, obj(0))


def test_orbax_checkpoint_without_orbax_is_a_library_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    with config.temp_flip_flag("use_orbax_checkpointing", True):
        checkpoints.save_checkpoint(tmp_path, obj(1), 0)
    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)
    with pytest.raises(checkpoints.CheckpointReadError, match="needs the orbax-checkpoint"):
        checkpoints.restore_checkpoint(tmp_path, obj(0))


def test_target_mismatch_names_the_path(tmp_path: Any, msgpack_only: None) -> None:
    checkpoints.save_checkpoint(tmp_path, {"a": np.ones(2)}, 0)
    with pytest.raises(
        checkpoints.CheckpointReadError,
        match=r"checkpoint_0: the checkpoint does not fit the target: .*keys \{'b'\}",
    ):
        checkpoints.restore_checkpoint(tmp_path, {"a": np.ones(2), "b": np.ones(2)})


def _orbax_checkpoint(tmp_path: Any) -> pathlib.Path:
    with config.temp_flip_flag("use_orbax_checkpointing", True):
        return pathlib.Path(checkpoints.save_checkpoint(tmp_path, obj(1), 0))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_damaged_orbax_checkpoints_say_which_and_what(tmp_path: Any) -> None:
    """Orbax's raw errors (JSON, tensorstore, a missing file) become CheckpointReadError
    naming the checkpoint and what is wrong."""
    path = _orbax_checkpoint(tmp_path / "meta")
    (path / "_METADATA").write_bytes((path / "_METADATA").read_bytes()[:20])
    with pytest.raises(
        checkpoints.CheckpointReadError,
        match=r"checkpoint_0: the Orbax checkpoint cannot be restored: a metadata file is "
        r"truncated or corrupted \(JSONDecodeError",
    ):
        checkpoints.restore_checkpoint(path, obj(0))
    path = _orbax_checkpoint(tmp_path / "manifest")
    (path / "manifest.ocdbt").unlink()
    with pytest.raises(
        checkpoints.CheckpointReadError, match=r"a file of the checkpoint is missing"
    ):
        checkpoints.restore_checkpoint(path, obj(0))
    path = _orbax_checkpoint(tmp_path / "data")
    for chunk in path.glob("**/d/*"):
        chunk.write_bytes(b"")
    with pytest.raises(
        checkpoints.CheckpointReadError,
        match=r"checkpoint_0: the Orbax checkpoint cannot be restored: the array data is "
        r"truncated, corrupted or missing",
    ):
        checkpoints.restore_checkpoint(path, obj(0))


def test_orbax_transforms_notice_is_debug_unless_the_user_passed_transforms(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Every restore into a target uses Orbax's transformations API on the user's behalf,
    and Orbax logs an absl WARNING about that API: it goes to DEBUG on our logger."""
    path = _orbax_checkpoint(tmp_path)
    with caplog.at_level(logging.DEBUG):
        checkpoints.restore_checkpoint(path, obj(0))
    notices = [r for r in caplog.records if "transformations API" in r.getMessage()]
    assert [(r.name, r.levelno) for r in notices] == [
        ("adapters.training.checkpoints", logging.DEBUG)
    ]
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        checkpoints.restore_checkpoint(path, obj(0), orbax_transforms={})
    notices = [r for r in caplog.records if "transformations API" in r.getMessage()]
    assert [(r.name, r.levelno) for r in notices] == [("absl", logging.WARNING)]


# -------------------------------------------------------------- interchange with flax


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Conv(4, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=True)(x)
        return nn.Dense(3)(x.reshape(x.shape[0], -1))


def _train_state() -> train_state.TrainState:
    x = jnp.ones((2, 5, 5, 1))
    variables = CNN().init(jax.random.key(0), x)
    state = train_state.TrainState.create(
        apply_fn=CNN().apply, params=variables["params"], tx=optax.adam(1e-3)
    )
    grads = jax.tree.map(jnp.ones_like, state.params)
    with jax.numpy_dtype_promotion("standard"):  # adam's bias correction mixes int and float
        return state.apply_gradients(grads=grads)


def _flax_train_state(state: train_state.TrainState) -> Any:
    import flax.training.train_state as flax_ts

    return flax_ts.TrainState.create(
        apply_fn=lambda *a: None,
        params=jax.tree.map(jnp.zeros_like, unfreeze(state.params)),
        tx=optax.adam(1e-3),
    )


@pytest.mark.parametrize("orbax", [False, True], ids=["msgpack", "orbax"])
def test_flax_reads_our_train_state_checkpoint(tmp_path: Any, orbax: bool) -> None:
    state = _train_state()
    with config.temp_flip_flag("use_orbax_checkpointing", orbax):
        checkpoints.save_checkpoint(tmp_path, state, 1)
    with flax.config.temp_flip_flag("use_orbax_checkpointing", orbax):
        restored = flax_checkpoints.restore_checkpoint(tmp_path, _flax_train_state(state))
    assert int(restored.step) == 1
    assert_tree_equal(unfreeze(restored.params), unfreeze(state.params))
    assert_tree_equal(restored.opt_state, state.opt_state)


@pytest.mark.parametrize("orbax", [False, True], ids=["msgpack", "orbax"])
def test_we_read_flax_train_state_checkpoint(tmp_path: Any, orbax: bool) -> None:
    state = _train_state()
    theirs = _flax_train_state(state).replace(
        params=unfreeze(state.params), opt_state=state.opt_state, step=1
    )
    with flax.config.temp_flip_flag("use_orbax_checkpointing", orbax):
        flax_checkpoints.save_checkpoint(tmp_path, theirs, 1)
    template = state.replace(step=0, params=jax.tree.map(jnp.zeros_like, state.params))
    with config.temp_flip_flag("use_orbax_checkpointing", orbax):
        restored = checkpoints.restore_checkpoint(tmp_path, template)
    assert isinstance(restored, train_state.TrainState) and int(restored.step) == 1
    assert_tree_equal(unfreeze(restored.params), unfreeze(state.params))
    raw = checkpoints.restore_checkpoint(tmp_path, None)
    assert set(raw) == {"step", "params", "opt_state"}


def test_msgpack_bytes_equal_flax(tmp_path: Any, msgpack_only: None) -> None:
    state = _train_state()
    ours = checkpoints.save_checkpoint(tmp_path / "ours", state, 3)
    with flax.config.temp_flip_flag("use_orbax_checkpointing", False):
        theirs = flax_checkpoints.save_checkpoint(
            tmp_path / "theirs",
            _flax_train_state(state).replace(
                params=unfreeze(state.params), opt_state=state.opt_state, step=1
            ),
            3,
        )
    assert pathlib.Path(ours).read_bytes() == pathlib.Path(theirs).read_bytes()


def test_pytreemod_train_state_through_checkpoints(tmp_path: Any, use_orbax: bool) -> None:
    import pytreemod as pm

    ts = pm.TrainState.create(pm.nn.Linear(3, 2, key=jax.random.key(0)), optax.sgd(0.1))
    ts = ts.replace(step=ts.step + 3)
    checkpoints.save_checkpoint(tmp_path, ts, 3)
    like = pm.TrainState.create(pm.nn.Linear(3, 2, key=jax.random.key(1)), ts.tx)
    back = checkpoints.restore_checkpoint(tmp_path, like)
    assert pm.tree_equal(back, ts)
    assert isinstance(back.model.kernel, pm.Param)
