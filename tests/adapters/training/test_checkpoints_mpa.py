"""Multiprocess arrays in msgpack checkpoints (save_checkpoint_multiprocess).

One process cannot hold an array split over processes, so these tests mark chosen arrays
as "multiprocess" (the check is one function); the file then holds a placeholder and the
array goes through a real GlobalAsyncCheckpointManager into ``<checkpoint>_gda``.
"""

import os
import pathlib
from collections.abc import Iterator
from typing import Any

import jax.numpy as jnp
import msgpack
import numpy as np
import pytest
from jax.experimental.array_serialization.serialization import GlobalAsyncCheckpointManager

from adapters import config, errors, serialization
from adapters.training import _mpa, checkpoints

pytestmark = pytest.mark.filterwarnings("ignore:Flax Checkpointing will soon:DeprecationWarning")


@pytest.fixture
def marked(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[int]]:
    ids: set[int] = set()
    monkeypatch.setattr(_mpa, "is_multiprocess_array", lambda x: id(x) in ids)
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        yield ids


def test_multiprocess_arrays_round_trip_through_gda_manager(
    tmp_path: Any, marked: set[int]
) -> None:
    big = jnp.arange(6.0).reshape(2, 3)
    marked.add(id(big))
    manager = GlobalAsyncCheckpointManager()
    path = checkpoints.save_checkpoint_multiprocess(
        tmp_path, {"big": big, "small": np.ones(2)}, 0, gda_manager=manager
    )
    manager.wait_until_finished()
    assert os.path.isdir(path + "_gda")
    raw = serialization.msgpack_restore(pathlib.Path(path).read_bytes())
    assert raw["big"] == checkpoints.MP_ARRAY_PH + "big"
    target = {"big": jnp.zeros((2, 3)), "small": np.zeros(2)}
    marked.add(id(target["big"]))
    restored = checkpoints.restore_checkpoint(tmp_path, target, gda_manager=manager)
    np.testing.assert_array_equal(restored["big"], big)
    np.testing.assert_array_equal(restored["small"], np.ones(2))
    # Saving the next step removes the old checkpoint with its array directory.
    checkpoints.save_checkpoint_multiprocess(
        tmp_path, {"big": big, "small": np.ones(2)}, 1, gda_manager=manager
    )
    manager.wait_until_finished()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_1", "checkpoint_1_gda"]


def test_saving_multiprocess_arrays_needs_a_gda_manager(tmp_path: Any, marked: set[int]) -> None:
    big = jnp.ones(2)
    marked.add(id(big))
    with pytest.raises(errors.MPACheckpointingRequiredError, match="GlobalAsyncCheckpointManager"):
        checkpoints.save_checkpoint_multiprocess(tmp_path, {"big": big}, 0)


def _placeholder_file(tmp_path: Any) -> None:
    state = {"big": checkpoints.MP_ARRAY_PH + "big", "small": np.ones(1)}
    (tmp_path / "checkpoint_0").write_bytes(serialization.msgpack_serialize(state))


def test_restoring_placeholders_needs_manager_and_target(tmp_path: Any, marked: set[int]) -> None:
    _placeholder_file(tmp_path)
    with pytest.raises(errors.MPACheckpointingRequiredError, match='step: "None"'):
        checkpoints.restore_checkpoint(tmp_path, None)
    manager = GlobalAsyncCheckpointManager()
    with pytest.raises(errors.MPARestoreTargetRequiredError, match="pre-created arrays"):
        checkpoints.restore_checkpoint(tmp_path, None, gda_manager=manager)
    target = {"big": np.zeros(1), "small": np.zeros(1)}  # no array to take a sharding from
    with pytest.raises(errors.MPARestoreTargetRequiredError, match="big"):
        checkpoints.restore_checkpoint(tmp_path, target, gda_manager=manager)
    partial = checkpoints.restore_checkpoint(
        tmp_path, target, gda_manager=manager, allow_partial_mpa_restoration=True
    )
    assert partial["big"] == checkpoints.MP_ARRAY_PH + "big"


def test_gcs_array_directory_without_commit_marker_is_corrupted(marked: set[int]) -> None:
    class Manager:
        def wait_until_finished(self) -> None:
            pass

    arr = jnp.ones(2)
    marked.add(id(arr))
    with pytest.raises(errors.MPARestoreDataCorruptedError, match=r"commit_success\.txt"):
        _mpa.restore_mpas(
            {"a": checkpoints.MP_ARRAY_PH + "a"}, {"a": arr}, "gs://b/ck_1", 1, Manager()
        )


def test_msgpack_placeholder_is_plain_text() -> None:
    # The placeholder is an ordinary msgpack string, readable by any msgpack reader.
    data = serialization.msgpack_serialize({"a": checkpoints.MP_ARRAY_PH + "a"})
    assert msgpack.unpackb(data) == {"a": "//GDAPlaceholder:a"}
