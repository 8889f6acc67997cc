"""``load`` of an Orbax checkpoint directory holding ``pm.state(model)``.

Orbax (``orbax-checkpoint``, imported only here and only when such a directory is
loaded) writes sharded arrays; ``load`` restores one into ``like``'s structure, each
array into ``like``'s sharding (an ``abstract`` skeleton's, or a real array's), and
turns Orbax's own failures (JSON, tensorstore, missing files) into pytreemod errors
naming the directory. Orbax's array data has no checksums: a changed byte inside
compressed array data can go unnoticed, unlike in a ``save`` file.
"""

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from ._errors import CheckpointError, CheckpointFormatError, CheckpointMismatchError
from ._partition import combine, state, structure_of

_ITEM_FILES = ("_METADATA", "manifest.ocdbt")
_DAMAGE = ("DATA_LOSS", "OUT_OF_RANGE", "NOT_FOUND", "FAILED_PRECONDITION")


def orbax_item(path: str) -> str | None:
    """The Orbax item directory at ``path``, or in its ``default`` subdirectory (a step of
    a ``CheckpointManager``); ``None`` if there is none."""
    for folder in (path, os.path.join(path, "default")):
        if any(os.path.exists(os.path.join(folder, f)) for f in _ITEM_FILES):
            return folder
    return None


def _needs_orbax(path: str) -> str:
    return (
        f"{path!r} is a directory, read as an Orbax checkpoint: that needs the "
        "orbax-checkpoint package (pip install orbax-checkpoint)."
    )


def not_orbax(path: str) -> str:
    """Why the directory ``path`` is not an Orbax checkpoint, naming it (that Orbax is
    not installed, if it is not: a directory may be a checkpoint Orbax could read)."""
    try:
        import orbax.checkpoint  # noqa: F401
    except ImportError:
        return _needs_orbax(path)
    return (
        f"{path!r}: a directory, but not an Orbax checkpoint (no {' or '.join(_ITEM_FILES)} "
        "in it or in its 'default' folder). pm.load reads a file or checkpoint directory "
        "written by pm.save, or an Orbax checkpoint of pm.state(model)."
    )


def _target(leaf: Any) -> Any:
    """What Orbax restores a leaf as: its shape, dtype and sharding (one device if none)."""
    sharding = getattr(leaf, "sharding", None)
    if not isinstance(sharding, jax.sharding.Sharding):
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shape, dtype = np.shape(leaf), getattr(leaf, "dtype", np.asarray(leaf).dtype)
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


class _AbslToDebug(logging.Filter):
    """Orbax's absl INFO messages during a restore (a dozen per restore: handlers, timings,
    throughput) go to DEBUG on pytreemod's logger; its warnings and errors stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and "Skipping merge of OCDBT" not in str(
            record.msg
        ):  # the one warning of every save without OCDBT (a checkpoint directory's)
            return True
        logging.getLogger("pytreemod").debug("Orbax: %s", record.getMessage())
        return False


@contextlib.contextmanager
def _absl_notices_at_debug() -> Iterator[None]:
    absl, notices = logging.getLogger("absl"), _AbslToDebug()
    absl.addFilter(notices)
    try:
        yield
    finally:
        absl.removeFilter(notices)


def load_orbax(path: str, like: Any) -> Any:
    """Restore the Orbax checkpoint of ``pm.state(model)`` at ``path`` into ``like``."""
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise CheckpointError(_needs_orbax(path)) from None
    item = orbax_item(path)
    if item is None:
        raise CheckpointFormatError(not_orbax(path))
    target = jax.tree.map(_target, state(like))
    try:
        with _absl_notices_at_debug():
            restored = ocp.StandardCheckpointer().restore(item, target)
    except CheckpointError:
        raise
    except Exception as e:
        raise _failure(path, e) from e
    return combine(structure_of(like), restored)


def _failure(path: str, e: Exception) -> CheckpointError:
    what = f"{type(e).__name__}: {_essential(str(e))}"
    if isinstance(e, (json.JSONDecodeError, UnicodeDecodeError, FileNotFoundError)) or any(
        code in str(e) for code in _DAMAGE
    ):
        return CheckpointFormatError(
            f"{path!r}: the Orbax checkpoint is damaged or incomplete ({what}); nothing was "
            "loaded. Restore an earlier checkpoint or a copy."
        )
    return CheckpointMismatchError(
        f"{path!r}: Orbax cannot restore the checkpoint into the model ({what}). Load into "
        "a model built with the saved configuration."
    )


# TensorStore's errors end with the JSON spec of every driver involved (kilobytes); the
# code, the file and the reason before it are what a reader needs (issue 32, item 6).
_TS_SPEC = re.compile(r"\s*\[(?:tensorstore_spec(?:\[\d+\])?|source locations)='.*?'\]", re.S)
_TS_DRIVER = re.compile(r'Error opening "\w+" driver: ')


def _essential(text: str, limit: int = 400) -> str:
    """``text`` without TensorStore's JSON specs and driver chain, at most ``limit`` long."""
    text = _TS_DRIVER.sub("", _TS_SPEC.sub("", text)).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


absl_notices_at_debug = _absl_notices_at_debug
orbax_failure = _failure
