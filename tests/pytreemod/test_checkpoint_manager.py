"""pm.CheckpointManager's saves in the background, in one process: a step is listed once
complete, and a step that failed in the background is an error at the next ``save`` or
``wait`` naming the run and the step, the steps before it kept. (Two processes saving
directory steps while training runs collectives: test_checkpoint_multiprocess.py.)"""

import os
import pathlib
import threading
from typing import Any

import jax.numpy as jnp
import pytest

import pytreemod as pm
from pytreemod import _checkpoint_dir, _checkpoint_file


def model(value: float) -> dict[str, Any]:
    return {"w": pm.Param(jnp.full(4, value))}


def test_a_directory_step_is_listed_once_complete(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step's hashing held back until the main thread lets it go: ``save`` has
    returned, and the step is not listed (the previous one is the latest) until then."""
    gate = threading.Event()
    hash_mine = _checkpoint_dir._hash_mine

    def held_back(version: str, owners: Any) -> Any:
        assert gate.wait(timeout=20)
        return hash_mine(version, owners)

    with pm.CheckpointManager(tmp_path / "run") as run:
        assert run.save(1, model(1.0), directory=True)
        run.wait()
        monkeypatch.setattr(_checkpoint_dir, "_hash_mine", held_back)
        assert run.save(2, model(2.0), directory=True)
        assert run.all_steps() == [1] and run.latest_step() == 1
        gate.set()
        run.wait()
        assert run.all_steps() == [1, 2]
        assert run.restore(model(0.0))["w"].value.tolist() == [2.0] * 4
    assert (tmp_path / "run" / "2" / "model" / "checkpoint" / "CHECKPOINT").is_file()


def _full(*args: Any, **kwargs: Any) -> Any:
    raise OSError(28, "No space left on device")


def _fill_the_disk(patch: pytest.MonkeyPatch) -> None:
    """Every write of a file or of a directory's shards fails as on a full disk."""
    patch.setattr(_checkpoint_dir, "_hash_mine", _full)
    patch.setattr(_checkpoint_file, "write", _full)


@pytest.mark.parametrize("directory", [False, True])
def test_a_failed_background_save_is_an_error_at_the_next_save_or_wait(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, directory: bool
) -> None:
    with pm.CheckpointManager(tmp_path / "run") as run:
        assert run.save(1, model(1.0), directory=directory)
        run.wait()
        with monkeypatch.context() as patch:
            _fill_the_disk(patch)
            assert run.save(2, model(2.0), directory=directory)
            error = (
                r"run'?: the save of step 2 failed in the background; the step is not kept, "
                r"the steps before it are\. Cannot save '.*checkpoint'?: the disk .* is full"
            )
            if directory:  # at the next save
                with pytest.raises(pm.CheckpointError, match=error):
                    run.save(3, model(3.0), directory=directory)
            else:
                with pytest.raises(pm.CheckpointError, match=error):
                    run.wait()
        assert run.all_steps() == [1]
        assert sorted(os.listdir(tmp_path / "run")) == ["1"]  # nothing of step 2 is left
        assert run.restore(model(0.0))["w"].value.tolist() == [1.0] * 4
        assert run.save(4, model(4.0), directory=directory)  # saves go on
    with pm.CheckpointManager(tmp_path / "run") as again:
        assert again.all_steps() == [1, 4]
        assert again.restore(model(0.0))["w"].value.tolist() == [4.0] * 4


@pytest.mark.parametrize("directory", [False, True])
def test_a_failed_save_in_the_foreground_raises_and_leaves_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, directory: bool
) -> None:
    with pm.CheckpointManager(tmp_path / "run", background=False) as run:
        assert run.save(1, model(1.0), directory=directory)
        with monkeypatch.context() as patch:
            _fill_the_disk(patch)
            with pytest.raises(pm.CheckpointError, match=r"the disk .* is full"):
                run.save(2, model(2.0), directory=directory)
        assert run.all_steps() == [1]
        assert sorted(os.listdir(tmp_path / "run")) == ["1"]
