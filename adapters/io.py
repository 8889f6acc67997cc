"""``adapters.io``: the file operations ``flax.io`` offers, on the local file system.

Checkpointing goes through these functions (``GFile``, ``listdir``, ``exists``,
``makedirs``, ``rename``, ``rmtree``...), as Flax's does. Flax routes them to
``tensorflow.io.gfile`` when TensorFlow is installed; here they always use Python's ``os``,
``shutil`` and ``glob`` (``BackendMode.DEFAULT``), so ``gs://`` paths are not supported.
``BackendMode.TF`` is accepted by ``set_mode``/``override_mode`` only if TensorFlow can be
imported.
"""

import contextlib
import glob as glob_module
import importlib.util
import os
import shutil
from collections.abc import Iterator
from enum import Enum
from typing import IO, Any

from . import errors

__all__ = [
    "BackendMode",
    "GFile",
    "NotFoundError",
    "copy",
    "exists",
    "getsize",
    "glob",
    "io_mode",
    "isdir",
    "listdir",
    "makedirs",
    "override_mode",
    "remove",
    "rename",
    "rmtree",
    "set_mode",
]


class BackendMode(Enum):
    """Which implementation the file operations use."""

    DEFAULT = 0
    TF = 1


io_mode: BackendMode = BackendMode.DEFAULT
NotFoundError = FileNotFoundError


def _gfile() -> Any:
    from tensorflow.io import gfile  # type: ignore[import-not-found]

    return gfile


def _check_mode(mode: BackendMode) -> None:
    if not isinstance(mode, BackendMode):
        raise ValueError("Unknown IO Backend Mode.")
    if mode is BackendMode.TF and importlib.util.find_spec("tensorflow") is None:
        raise ValueError("BackendMode.TF needs tensorflow, which is not installed.")


@contextlib.contextmanager
def override_mode(override: BackendMode) -> Iterator[None]:
    """Use ``override`` as the backend inside the ``with`` block."""
    global io_mode
    _check_mode(override)
    previous = io_mode
    io_mode = override
    try:
        yield
    finally:
        io_mode = previous


def set_mode(override: BackendMode) -> None:
    """Set the backend for every later call."""
    global io_mode
    _check_mode(override)
    io_mode = override


def _tf() -> bool:
    return io_mode is BackendMode.TF


def GFile(name: str | os.PathLike[str], mode: str) -> IO[Any]:
    """Open a file (text files as UTF-8)."""
    if _tf():
        return _gfile().GFile(name, mode)
    if "b" in mode:
        return open(name, mode)
    return open(name, mode, encoding="utf-8")


def listdir(path: str | os.PathLike[str]) -> list[str]:
    """The names of the entries in directory ``path``."""
    return _gfile().listdir(path) if _tf() else os.listdir(path)


def isdir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory."""
    return bool(_gfile().isdir(path)) if _tf() else os.path.isdir(path)


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists."""
    return bool(_gfile().exists(path)) if _tf() else os.path.exists(path)


def copy(src: str | os.PathLike[str], dst: str | os.PathLike[str], overwrite: bool = False) -> None:
    """Copy a file; an existing ``dst`` raises ``AlreadyExistsError`` unless ``overwrite``."""
    if _tf():
        _gfile().copy(src, dst, overwrite=overwrite)
        return
    if os.path.exists(dst) and not overwrite:
        raise errors.AlreadyExistsError(dst)
    shutil.copy(src, dst)


def rename(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], overwrite: bool = False
) -> None:
    """Rename ``src`` to ``dst``; an existing ``dst`` raises ``AlreadyExistsError`` unless
    ``overwrite`` (an existing directory is then replaced)."""
    if _tf():
        _gfile().rename(src, dst, overwrite=overwrite)
        return
    if os.path.exists(dst):
        if not overwrite:
            raise errors.AlreadyExistsError(dst)
        if os.path.isdir(dst) and not os.path.isdir(src):
            shutil.rmtree(dst)
    os.replace(src, dst)


def makedirs(path: str | os.PathLike[str]) -> None:
    """Create directory ``path`` and its parents (no error if it exists)."""
    if _tf():
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def glob(pattern: str) -> list[str]:
    """The paths matching ``pattern`` (not recursive; no trailing slashes)."""
    if _tf():
        return list(_gfile().glob(pattern))
    return [p.rstrip("/") for p in glob_module.glob(pattern, recursive=False)]


def remove(path: str | os.PathLike[str]) -> None:
    """Remove the file at ``path``."""
    if _tf():
        _gfile().remove(path)
    else:
        os.remove(path)


def rmtree(path: str | os.PathLike[str]) -> None:
    """Remove directory ``path`` and everything in it."""
    if _tf():
        _gfile().rmtree(path)
    else:
        shutil.rmtree(path)


def getsize(path: str | os.PathLike[str]) -> int:
    """The size of the file at ``path`` in bytes."""
    return int(_gfile().stat(path).length) if _tf() else os.path.getsize(path)
