"""Damaged checkpoints of every format fail clearly: a pm.save file, a msgpack checkpoint
and an Orbax checkpoint directory (written by adapters.training.checkpoints, and one of
``pm.state`` read by ``pm.load``), cut short, with changed bytes or a missing file.

Each case either raises a library error (a ``pm.PytreemodError``) whose message names the
checkpoint, or, for the formats without checksums (msgpack, Orbax's array data), restores
a tree of the saved structure. No raw ``json``/``msgpack``/tensorstore exception escapes,
and a pm.save file never loads at all.
"""

import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from hypothesis import HealthCheck, given, settings

import pytreemod as pm
from adapters import config
from adapters.training import checkpoints

pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning"
    ),
    # Orbax's background tasks of a failed read, finished after the error was raised
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

TARGET = {
    "params": {"w": np.arange(24, dtype=np.float32).reshape(4, 6), "b": np.ones(6, np.int32)},
    "step": np.int64(7),
}
MODEL = {"w": pm.Param(np.arange(24, dtype=np.float32).reshape(4, 6)), "b": pm.BatchStat(1.5)}


@pytest.fixture(scope="module")
def originals() -> Iterator[dict[str, str]]:
    """One intact checkpoint of each format, written once for the module."""
    with tempfile.TemporaryDirectory() as folder:
        pm.save(os.path.join(folder, "model.safetensors"), MODEL)
        with ocp.CheckpointManager(os.path.join(folder, "pm-orbax")) as manager:
            manager.save(1, args=ocp.args.StandardSave(pm.state(MODEL)))
            manager.wait_until_finished()
        for name, orbax in (("msgpack", False), ("orbax", True)):
            with config.temp_flip_flag("use_orbax_checkpointing", orbax):
                checkpoints.save_checkpoint(os.path.join(folder, name), TARGET, step=1)
        yield {
            "safetensors": os.path.join(folder, "model.safetensors"),
            "msgpack": os.path.join(folder, "msgpack", "checkpoint_1"),
            "orbax": os.path.join(folder, "orbax", "checkpoint_1"),
            "pm-orbax": os.path.join(folder, "pm-orbax", "1"),
        }


def _damage(path: str, data: st.DataObject) -> str:
    """Cut, change or (in a directory) delete one file under ``path``; say what."""
    files = (
        [path]
        if os.path.isfile(path)
        else sorted(os.path.join(root, f) for root, _, names in os.walk(path) for f in names)
    )
    file = data.draw(st.sampled_from(files))
    raw = bytearray(pathlib.Path(file).read_bytes())
    how = data.draw(st.sampled_from(["cut", "change"] + (["delete"] if len(files) > 1 else [])))
    if how == "delete":
        os.unlink(file)
    elif how == "cut" or not raw:
        pathlib.Path(file).write_bytes(
            bytes(raw[: data.draw(st.integers(0, max(len(raw) - 1, 0)))])
        )
    else:
        for i in data.draw(st.sets(st.integers(0, len(raw) - 1), min_size=1, max_size=4)):
            raw[i] ^= data.draw(st.integers(1, 255))
        pathlib.Path(file).write_bytes(bytes(raw))
    return f"{how} {os.path.relpath(file, os.path.dirname(path))}"


def _restore(kind: str, path: str) -> Any:
    if kind in ("safetensors", "pm-orbax"):
        return pm.load(path, MODEL)
    return checkpoints.restore_checkpoint(path, TARGET)


@settings(
    max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_damaged_checkpoints_of_every_format_fail_clearly(
    originals: dict[str, str], data: st.DataObject
) -> None:
    kind = data.draw(st.sampled_from(sorted(originals)))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, os.path.basename(originals[kind]))
        copy = shutil.copytree if os.path.isdir(originals[kind]) else shutil.copyfile
        copy(originals[kind], path)
        what = _damage(path, data)
        try:
            restored = _restore(kind, path)
        except pm.PytreemodError as e:
            assert path in str(e), (what, str(e))
            return
        assert kind != "safetensors", f"{what}: a damaged pm.save file loaded"
        like = MODEL if kind == "pm-orbax" else TARGET
        assert jax.tree.structure(restored) == jax.tree.structure(like), what
