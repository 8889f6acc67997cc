"""Checkpoint file names: step numbers in names, natural order, listing and clean-up.

A checkpoint of step ``s`` is ``<ckpt_dir>/<prefix><s>`` (a msgpack file, or an Orbax
directory); ``<prefix>tmp`` is a file being written; ``<name>_gda`` holds a checkpoint's
multiprocess arrays. Names sort "naturally": the numbers in them compare as numbers.
"""

import logging
import os
import pathlib
import re
from collections.abc import Iterable
from typing import Any

from .. import errors, io
from ..core import FrozenDict, freeze

logger = logging.getLogger("adapters.training.checkpoints")

# One capture group: a signed or unsigned decimal or scientific-notation number.
SIGNED_FLOAT_RE = re.compile(r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)")
UNSIGNED_FLOAT_RE = re.compile(r"[-+]?((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)")
MODULE_NUM_RE = re.compile(r"(.*)_\d+$")
SCHEME_RE = re.compile("^(?P<scheme>[a-z][a-z0-9.+-]+://)?(?P<path>.*)", re.I)

MP_ARRAY_POSTFIX = "_gda"
MP_ARRAY_PH = "//GDAPlaceholder:"
COMMIT_SUCCESS_FILE = "commit_success.txt"
ORBAX_CKPT_FILENAME = "checkpoint"
ORBAX_MANIFEST_OCDBT = "manifest.ocdbt"
ORBAX_METADATA_FILENAME = "_METADATA"
ORBAX_TMP_DIR_SUFFIX = ".orbax-checkpoint-tmp"  # orbax.checkpoint.utils.TMP_DIR_SUFFIX


def natural_sort(file_list: Iterable[str], signed: bool = True) -> list[str]:
    """Sort names comparing their numeric parts as numbers.

    ``file_1, file_10, file_2 -> file_1, file_2, file_10``;
    ``file_0.1, file_-0.2, file_2.0 -> file_-0.2, file_0.1, file_2.0``. With
    ``signed=False`` a leading ``-``/``+`` is a separator, not a sign.
    """
    pattern = SIGNED_FLOAT_RE if signed else UNSIGNED_FLOAT_RE

    def key(name: str) -> list[Any]:
        return [float(p) if pattern.match(p) else p for p in pattern.split(name)]

    return sorted(file_list, key=key)


def safe_normpath(path: str) -> str:
    """``os.path.normpath`` that keeps a URL scheme's ``//`` (``gs://a//b`` -> ``gs://a/b``)."""
    match = SCHEME_RE.match(path)
    assert match is not None
    return (match.group("scheme") or "") + os.path.normpath(match.group("path"))


def checkpoint_path(ckpt_dir: str, step: Any, prefix: str = "checkpoint_") -> str:
    return os.path.join(ckpt_dir, f"{prefix}{step}")


def checkpoint_path_step(path: str) -> float | None:
    """The last number in ``path`` (the step of a checkpoint path), or ``None``."""
    for part in reversed(SIGNED_FLOAT_RE.split(path)):
        if SIGNED_FLOAT_RE.match(part):
            return float(part)
    return None


def listdir_or_empty(path: str) -> list[str]:
    try:
        return io.listdir(path)
    except (io.NotFoundError, NotADirectoryError):
        return []


def safe_remove(path: str) -> None:
    if io.isdir(path):
        io.rmtree(path)
    else:
        io.remove(path)


def is_orbax_checkpoint(path: str) -> bool:
    """Whether ``path`` is a directory written by Orbax."""
    names = (ORBAX_CKPT_FILENAME, ORBAX_METADATA_FILENAME, ORBAX_MANIFEST_OCDBT)
    return any(io.exists(os.path.join(path, n)) for n in names)


def _with_prefix(dir_path: str, prefix: str) -> list[str]:
    """Paths in ``dir_path`` named ``prefix*``, without multiprocess-array directories."""
    names = [pathlib.PurePath(n) for n in listdir_or_empty(dir_path)]
    return [
        os.path.join(dir_path, n)
        for n in names
        if n.match(f"{prefix}*") and not n.match(f"*{MP_ARRAY_POSTFIX}")
    ]


def all_checkpoints(ckpt_dir: str | os.PathLike[str], prefix: str = "checkpoint_") -> list[str]:
    """The finished checkpoints in ``ckpt_dir`` with ``prefix``, oldest first."""
    ckpt_dir = os.fspath(ckpt_dir)
    found = [
        p
        for p in _with_prefix(ckpt_dir, prefix)
        if not pathlib.PurePath(p).match(f"{prefix}tmp")
        and not pathlib.PurePath(p).match(f"*{ORBAX_TMP_DIR_SUFFIX}*")
    ]
    return natural_sort(found)


def latest_checkpoint(ckpt_dir: str | os.PathLike[str], prefix: str = "checkpoint_") -> str | None:
    """The path of the newest checkpoint in ``ckpt_dir`` (by natural order of the step in
    its name), or ``None`` if there is none."""
    found = all_checkpoints(ckpt_dir, prefix)
    return found[-1] if found else None


def available_steps(
    ckpt_dir: str | os.PathLike[str], prefix: str = "checkpoint_", step_type: type = int
) -> list[int | float]:
    """The steps of the checkpoints in ``ckpt_dir``, in order, converted by ``step_type``
    (``int`` or ``float``)."""
    steps = []
    for path in all_checkpoints(ckpt_dir, prefix):
        steps.append(step_type(path[path.rfind(prefix) + len(prefix) :]))
    return steps


def remove_invalid_ckpts(
    ckpt_path: str,
    base_path: str,
    keep: int,
    overwrite: bool,
    keep_every_n_steps: int | None,
    has_mpa: bool,
) -> None:
    """After saving ``ckpt_path``: with ``overwrite``, delete the checkpoints after it;
    then delete all but the ``keep`` newest, sparing one every ``keep_every_n_steps``
    steps among the older ones."""
    dir_path, prefix = os.path.split(base_path)
    found = natural_sort(_with_prefix(dir_path, prefix))

    def remove(path: str) -> None:
        logger.info("Removing checkpoint at %s", path)
        if has_mpa and io.exists(path + MP_ARRAY_POSTFIX):
            io.rmtree(path + MP_ARRAY_POSTFIX)
        safe_remove(path)

    if overwrite and ckpt_path in found:
        cut = found.index(ckpt_path) + 1
        for path in found[cut:]:
            remove(path)
        found = found[:cut]
    if len(found) <= keep:
        return
    last_kept = -float("inf")
    for path in found[:-keep]:  # keep=0 removes nothing, as in Flax
        if keep_every_n_steps:
            step = checkpoint_path_step(path)
            if step and step - last_kept >= keep_every_n_steps:
                last_kept = step
                continue
        remove(path)


def check_overwrite_error(ckpt_tmp_path: str, ckpt_path: str, base_path: str, step: Any) -> None:
    """Raise ``InvalidCheckpointError`` if a checkpoint of ``step`` or a later one exists."""
    dir_path, prefix = os.path.split(base_path)
    found = _with_prefix(dir_path, prefix)
    if ckpt_path in found:
        raise errors.InvalidCheckpointError(ckpt_path, step)
    ordered = natural_sort([*found, ckpt_path])
    if ordered[-1] == ckpt_tmp_path:  # a write cut short before its rename
        ordered.pop()
    if ordered[-1] != ckpt_path:
        raise errors.InvalidCheckpointError(ckpt_path, step)


def convert_pre_linen(params: Any) -> Any:
    """Rename submodules of a pre-Linen parameter tree to Linen's per-class numbering.

    Before Linen, submodules were numbered in one sequence whatever their class
    (``{'Conv_0': ..., 'Dense_1': ...}``); Linen counts each class separately
    (``{'Conv_0': ..., 'Dense_0': ...}``). Names ``<class>_<n>`` are renumbered per class
    in natural order, at every level. A tree already in Linen form comes back unchanged;
    a ``FrozenDict`` comes back frozen.
    """
    if not isinstance(params, (dict, FrozenDict)):
        return params
    renamed: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for name in natural_sort(params.keys()):
        value = params[name]
        match = MODULE_NUM_RE.match(name)
        if match:
            cls = match.group(1)
            renamed[f"{cls}_{counts.get(cls, 0)}"] = convert_pre_linen(value)
            counts[cls] = counts.get(cls, 0) + 1
        else:
            renamed[name] = convert_pre_linen(value)
    return freeze(renamed) if isinstance(params, FrozenDict) else renamed
