"""``adapters.training.checkpoints``: Flax's step-numbered checkpoints in a directory.

``save_checkpoint(ckpt_dir, target, step)`` writes ``<ckpt_dir>/<prefix><step>`` and
deletes checkpoints beyond the ``keep`` newest; ``restore_checkpoint(ckpt_dir, target)``
reads the newest (or ``step``'s) back into a copy of ``target``, or returns the raw state
dict when ``target`` is ``None``. As in Flax, with config ``flax_use_orbax_checkpointing``
on (the default) or an ``orbax_checkpointer`` given, checkpoints are Orbax directories;
otherwise they are one msgpack file (``adapters.serialization``'s encoding, the same bytes
as Flax's). ``restore_checkpoint`` reads both kinds. Files written by Flax load here and
the reverse.

Orbax is imported only to write or read an Orbax checkpoint; without the
``orbax-checkpoint`` package, saving falls back to msgpack files (logged). Reading never
runs code from the file; a file that is not a checkpoint raises
``CheckpointReadError``.

Importing this module also registers Flax's msgpack checkpoint file with ``pm.load``
(``pm.checkpoint_formats``, as ``flax-msgpack``): ``pm.load(path, like)`` then reads one
into a pytreemod model, after pytreemod's own formats. (Orbax directories ``pm.load``
reads already.)
"""

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax

import pytreemod as pm

from .. import config, errors, io, serialization
from ._checkpoint_files import (
    COMMIT_SUCCESS_FILE,
    MODULE_NUM_RE,
    MP_ARRAY_PH,
    MP_ARRAY_POSTFIX,
    ORBAX_CKPT_FILENAME,
    ORBAX_MANIFEST_OCDBT,
    ORBAX_METADATA_FILENAME,
    SCHEME_RE,
    SIGNED_FLOAT_RE,
    UNSIGNED_FLOAT_RE,
    available_steps,
    check_overwrite_error,
    checkpoint_path,
    convert_pre_linen,
    is_orbax_checkpoint,
    latest_checkpoint,
    logger,
    natural_sort,
    remove_invalid_ckpts,
    safe_normpath,
)
from ._mpa import commit_mpas, make_mpa_dirs, restore_mpas, save_mpas, split_mp_arrays
from .orbax_utils import maybe_construct_transformations, restore_args_from_target

__all__ = [
    "COMMIT_SUCCESS_FILE",
    "MODULE_NUM_RE",
    "MP_ARRAY_PH",
    "MP_ARRAY_POSTFIX",
    "ORBAX_CKPT_FILENAME",
    "ORBAX_MANIFEST_OCDBT",
    "ORBAX_METADATA_FILENAME",
    "SCHEME_RE",
    "SIGNED_FLOAT_RE",
    "UNSIGNED_FLOAT_RE",
    "AsyncManager",
    "CheckpointReadError",
    "available_steps",
    "convert_pre_linen",
    "latest_checkpoint",
    "natural_sort",
    "restore_checkpoint",
    "safe_normpath",
    "save_checkpoint",
    "save_checkpoint_multiprocess",
]

PyTree = Any

_DEPRECATION = (
    "Flax Checkpointing will soon be deprecated in favor of Orbax "
    "(https://github.com/google/orbax). Please refer to the Checkpoint Upgrade Guide "
    "(https://flax.readthedocs.io/en/latest/guides/converting_and_upgrading/"
    "orbax_upgrade_guide.html) to self-migrate your code to ocp."
)
_SINGULAR_ORBAX = (
    "Orbax backend only accept pytree as save target. To save singular objects like "
    "numbers or Numpy arrays, checkout https://flax.readthedocs.io/en/latest/guides/"
    "training_techniques/use_checkpointing.html#if-you-don-t-save-pytrees"
)


class CheckpointReadError(errors.FlaxError, ValueError):
    """A checkpoint path holds something that is not a readable checkpoint.

    Raised for a file whose bytes are not a msgpack checkpoint (truncated, corrupted or
    another format), for a directory at a checkpoint's path that Orbax did not write, and
    for an Orbax checkpoint when ``orbax-checkpoint`` is not installed. The message names
    the path; nothing of the file is run or returned.
    """


class AsyncManager:
    """Runs ``save_checkpoint``'s file writes in a background thread.

    Pass one to ``save_checkpoint(..., async_manager=am)``; the call returns at once and
    ``am.save_future`` completes when the file is committed. A new save first waits for
    the previous one, so ``keep``/``overwrite`` see finished files.
    """

    def __init__(self, max_workers: int = 1):
        self.executor: ThreadPoolExecutor = ThreadPoolExecutor(max_workers=max_workers)
        self.save_future: Future[Any] | None = None

    def wait_previous_save(self) -> None:
        """Block until the previous save has finished."""
        if self.save_future is not None and not self.save_future.done():
            logger.warning(
                "The previous async save_checkpoint has not finished yet. Waiting for it "
                "to complete before the next save."
            )
            self.save_future.result()

    def save_async(self, task: Callable[[], Any]) -> None:
        """Wait for the previous save, then run ``task`` in the background."""
        self.wait_previous_save()
        self.save_future = self.executor.submit(task)


# ----------------------------------------------------------------------------- saving


def _paths(ckpt_dir: str | os.PathLike[str], step: Any, prefix: str) -> tuple[str, str, str]:
    """``(checkpoint path, temporary path, base path)`` of a save."""
    ckpt_dir = safe_normpath(os.fspath(ckpt_dir))
    logger.info("Saving checkpoint at step: %s", step)
    return (
        checkpoint_path(ckpt_dir, step, prefix),
        checkpoint_path(ckpt_dir, "tmp", prefix),
        os.path.join(ckpt_dir, prefix),
    )


def _orbax_checkpointer(orbax_checkpointer: Any) -> Any | None:
    """The checkpointer to save with, or ``None`` to write msgpack."""
    if orbax_checkpointer is None and not config.flax_use_orbax_checkpointing:
        return None
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        if orbax_checkpointer is not None:
            raise
        logger.warning(
            "config flax_use_orbax_checkpointing is on but orbax-checkpoint is not "
            "installed: writing a msgpack checkpoint instead."
        )
        return None
    if isinstance(orbax_checkpointer, ocp.AsyncCheckpointer):
        orbax_checkpointer.wait_until_finished()
    if orbax_checkpointer is None:
        orbax_checkpointer = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    return orbax_checkpointer


def _check_orbax_target(checkpointer: Any, target: Any) -> None:
    import orbax.checkpoint as ocp

    handler = getattr(checkpointer, "_handler", None)
    single = jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(target))
    if single and not isinstance(handler, ocp.ArrayCheckpointHandler):
        raise ValueError(_SINGULAR_ORBAX)


def _commit(
    tmp_path: str,
    ckpt_path: str,
    base_path: str,
    keep: int,
    overwrite: bool,
    keep_every_n_steps: int | None,
    has_mpa: bool = False,
    write_commit_success: bool = False,
    async_manager: AsyncManager | None = None,
) -> None:
    """Move a finished write into place, then apply ``overwrite``/``keep``."""
    if has_mpa:
        commit_mpas(tmp_path, ckpt_path, write_commit_success)
    if async_manager is not None:
        async_manager.wait_previous_save()
    io.rename(tmp_path, ckpt_path, overwrite=overwrite)
    logger.info("Saved checkpoint at %s", ckpt_path)
    remove_invalid_ckpts(ckpt_path, base_path, keep, overwrite, keep_every_n_steps, has_mpa)


def _write_main_file(data: bytes, tmp_path: str, commit: Callable[[], None] | None) -> None:
    io.makedirs(os.path.dirname(tmp_path))
    with io.GFile(tmp_path, "wb") as f:
        f.write(data)
    if commit is not None:
        commit()


def save_checkpoint(
    ckpt_dir: str | os.PathLike[str],
    target: PyTree,
    step: int | float,
    prefix: str = "checkpoint_",
    keep: int = 1,
    overwrite: bool = False,
    keep_every_n_steps: int | None = None,
    async_manager: AsyncManager | None = None,
    orbax_checkpointer: Any | None = None,
) -> str:
    """Save ``target`` as ``<ckpt_dir>/<prefix><step>``; every process saves its own.

    Args:
      ckpt_dir: the directory (created if missing; ``str`` or path-like).
      target: a serializable object: dicts, lists, struct dataclasses such as
        ``TrainState``, arrays...
      step: the step (or any number) in the name; names sort by it.
      prefix: the name prefix.
      keep: how many of the newest checkpoints to keep (older ones are deleted).
      overwrite: allow a step at or below the newest existing one; checkpoints of later
        steps are then deleted. Without it, that is an ``InvalidCheckpointError`` (a
        ``ValueError`` from Orbax for Orbax checkpoints).
      keep_every_n_steps: also keep one checkpoint every this many steps.
      async_manager: write in a background thread (msgpack only).
      orbax_checkpointer: save with this Orbax checkpointer.

    Returns:
      The path of the checkpoint.

    The msgpack file is written under a temporary name and renamed, so a crash mid-write
    leaves the previous checkpoints intact.
    """
    if async_manager is not None:
        async_manager.wait_previous_save()
    ckpt_path, tmp_path, base_path = _paths(ckpt_dir, step, prefix)
    checkpointer = _orbax_checkpointer(orbax_checkpointer)
    if checkpointer is not None:
        if jax.process_count() > 1:
            logger.warning(
                "Multiple JAX processes detected when calling single-process "
                "`save_checkpoint`. Your devices will HANG if this function is only called "
                "on process 0!"
            )
        _check_orbax_target(checkpointer, target)
        checkpointer.save(ckpt_path, target, force=overwrite)
        if jax.process_index() == 0:
            remove_invalid_ckpts(ckpt_path, base_path, keep, overwrite, keep_every_n_steps, True)
        return ckpt_path

    warnings.warn(_DEPRECATION, DeprecationWarning, stacklevel=2)
    if not overwrite:
        check_overwrite_error(tmp_path, ckpt_path, base_path, step)
    data = serialization.to_bytes(target)

    def task() -> None:
        commit = lambda: _commit(
            tmp_path, ckpt_path, base_path, keep, overwrite, keep_every_n_steps
        )
        _write_main_file(data, tmp_path, commit)

    if async_manager is not None:
        async_manager.save_async(task)
    else:
        task()
    return ckpt_path


def save_checkpoint_multiprocess(
    ckpt_dir: str | os.PathLike[str],
    target: PyTree,
    step: int | float,
    prefix: str = "checkpoint_",
    keep: int = 1,
    overwrite: bool = False,
    keep_every_n_steps: int | None = None,
    async_manager: AsyncManager | None = None,
    gda_manager: Any | None = None,
    orbax_checkpointer: Any | None = None,
) -> str:
    """Save ``target`` from several processes into one (shared) directory.

    Every process calls it. Process 0 writes the main file and deletes old checkpoints;
    arrays spread over processes are written by all of them with ``gda_manager`` (a
    ``GlobalAsyncCheckpointManager``, required for such arrays) under
    ``<checkpoint>_gda``. Other arguments and the result are ``save_checkpoint``'s.
    """
    from jax.experimental.multihost_utils import sync_global_devices

    sync_global_devices("Flax:Checkpoint:StartSave")
    if async_manager is not None:
        async_manager.wait_previous_save()
    if gda_manager is not None:
        gda_manager.wait_until_finished()
        sync_global_devices("Flax:Checkpoint:WaitLastSaveDone")
    ckpt_path, tmp_path, base_path = _paths(ckpt_dir, step, prefix)
    checkpointer = _orbax_checkpointer(orbax_checkpointer)
    if checkpointer is not None:
        _check_orbax_target(checkpointer, target)
        if jax.process_index() == 0:
            remove_invalid_ckpts(ckpt_path, base_path, keep, overwrite, keep_every_n_steps, True)
        checkpointer.save(ckpt_path, target, force=overwrite)
        return ckpt_path

    warnings.warn(_DEPRECATION, DeprecationWarning, stacklevel=2)
    state, mpa_targets = split_mp_arrays(serialization.to_state_dict(target))
    data = serialization.msgpack_serialize(state)
    has_mpa = bool(mpa_targets)
    if not overwrite:
        check_overwrite_error(tmp_path, ckpt_path, base_path, step)
        sync_global_devices("Flax:Checkpoint:CheckOverwriteBeforeSave")

    def commit(has_mpa: bool = False, write_commit_success: bool = False) -> None:
        _commit(
            tmp_path,
            ckpt_path,
            base_path,
            keep,
            overwrite,
            keep_every_n_steps,
            has_mpa,
            write_commit_success,
            async_manager if has_mpa else None,
        )

    if jax.process_index() == 0:
        task = lambda: _write_main_file(data, tmp_path, None if has_mpa else commit)
        if async_manager is not None:
            async_manager.save_async(task)
        else:
            task()
    if has_mpa:
        if gda_manager is None:
            raise errors.MPACheckpointingRequiredError(ckpt_path, step)
        if jax.process_index() == 0:
            make_mpa_dirs(mpa_targets, tmp_path)
        sync_global_devices("Flax:Checkpoint:AfterCreateMPADir")
        save_mpas(gda_manager, mpa_targets, tmp_path, ckpt_path, commit)
    return ckpt_path


# ---------------------------------------------------------------------------- restoring


def _read_msgpack(path: str) -> Any:
    if io.isdir(path):
        raise CheckpointReadError(
            f"{path} is a directory but not an Orbax checkpoint (no {ORBAX_CKPT_FILENAME}, "
            f"{ORBAX_METADATA_FILENAME} or {ORBAX_MANIFEST_OCDBT} in it); pass the path of "
            "a checkpoint or of the directory holding them."
        )
    with io.GFile(path, "rb") as f:
        data = f.read()
    try:
        return serialization.msgpack_restore(data)
    except Exception as e:  # any decoding failure: the bytes are not a checkpoint
        raise CheckpointReadError(
            f"{path} is not a readable msgpack checkpoint ({type(e).__name__}: {e})."
        ) from e


def _orbax_failure(path: str, e: Exception) -> str:
    what = f"{type(e).__name__}: {e}"
    if isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)):
        what = f"a metadata file is truncated or corrupted ({what})"
    elif isinstance(e, FileNotFoundError):
        what = f"a file of the checkpoint is missing ({what})"
    elif any(c in str(e) for c in ("DATA_LOSS", "OUT_OF_RANGE", "NOT_FOUND", "FAILED_PRECON")):
        what = f"the array data is truncated, corrupted or missing ({what})"
    return (
        f"{path}: the Orbax checkpoint cannot be restored: {what}. Restore an earlier "
        "checkpoint or a copy; if the checkpoint is intact, check that the target has the "
        "saved structure."
    )


_TRANSFORMS_NOTICE = "The transformations API will eventually be replaced"


class _TransformsNotice(logging.Filter):
    """Moves Orbax's notice about its transformations API to DEBUG on our logger: the
    restore uses that API on the user's behalf (as Flax's does), so the user has nothing
    to change."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(_TRANSFORMS_NOTICE):
            return True
        logger.debug("Orbax: %s", record.getMessage())
        return False


@contextlib.contextmanager
def _quiet_transforms_notice(*, user_transforms: bool) -> Iterator[None]:
    """During one restore: Orbax's absl WARNING about its transformations API, which every
    restore with a target prints, goes to DEBUG, unless the user passed ``orbax_transforms``
    (then the notice concerns their code and is kept)."""
    if user_transforms:
        yield
        return
    absl_logger, notice = logging.getLogger("absl"), _TransformsNotice()
    absl_logger.addFilter(notice)
    try:
        yield
    finally:
        absl_logger.removeFilter(notice)


def _restore_orbax(path: str, target: Any, checkpointer: Any, transforms: Any) -> Any:
    try:
        import orbax.checkpoint as ocp
    except ImportError as e:
        raise CheckpointReadError(
            f"{path} is an Orbax checkpoint; reading it needs the orbax-checkpoint "
            "package (pip install orbax-checkpoint)."
        ) from e
    if checkpointer is None:
        checkpointer = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    kwargs: dict[str, Any] = {}
    if target is not None:
        kwargs["restore_args"] = restore_args_from_target(target)
        if isinstance(getattr(checkpointer, "_handler", None), ocp.PyTreeCheckpointHandler):
            kwargs["transforms"] = maybe_construct_transformations(target, transforms)
    with _quiet_transforms_notice(user_transforms=transforms is not None):
        try:
            restored = checkpointer.restore(path, item=target, **kwargs)
        except errors.FlaxError:
            raise
        except Exception as e:  # JSON, tensorstore, missing files: say which checkpoint
            raise CheckpointReadError(_orbax_failure(path, e)) from e
    restored = serialization.to_state_dict(restored)
    return restored if target is None else _into_target(path, target, restored)


def _into_target(path: str, target: Any, state: Any) -> Any:
    """``from_state_dict``; a checkpoint that does not fit ``target`` names its path."""
    try:
        return serialization.from_state_dict(target, state)
    except errors.FlaxError:
        raise
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointReadError(
            f"{path}: the checkpoint does not fit the target: {e} (it was written for "
            "another structure, or is damaged)."
        ) from e


def restore_checkpoint(
    ckpt_dir: str | os.PathLike[str],
    target: Any | None,
    step: int | float | None = None,
    prefix: str = "checkpoint_",
    parallel: bool = True,
    gda_manager: Any | None = None,
    allow_partial_mpa_restoration: bool = False,
    orbax_checkpointer: Any | None = None,
    orbax_transforms: dict[str, Any] | None = None,
) -> PyTree:
    """Restore the newest checkpoint in ``ckpt_dir`` (or the one of ``step``).

    Args:
      ckpt_dir: a directory of checkpoints, or the path of one checkpoint.
      target: an object of the saved structure, restored as a copy; ``None`` returns the
        checkpoint's state dict (nested dicts of NumPy arrays).
      step: the step to load (``ckpt_dir`` must then be the directory); a missing one is
        a ``ValueError``. ``None``: the newest by natural order of the names.
      prefix: the name prefix.
      parallel: accepted for Flax's signature (the file is read in one piece).
      gda_manager: reads multiprocess arrays saved by ``save_checkpoint_multiprocess``.
      allow_partial_mpa_restoration: skip multiprocess arrays ``target`` has no array for.
      orbax_checkpointer: the Orbax checkpointer to read an Orbax checkpoint with.
      orbax_transforms: Orbax transforms for the restore.

    Returns:
      The restored object; ``target`` itself if the directory (or the given checkpoint
      path) does not exist or holds no checkpoint with ``prefix``.
    """
    del parallel
    if orbax_checkpointer is not None and hasattr(orbax_checkpointer, "wait_until_finished"):
        orbax_checkpointer.wait_until_finished()
    ckpt_dir = safe_normpath(os.fspath(ckpt_dir))
    if step is not None:
        ckpt_path = checkpoint_path(ckpt_dir, step, prefix)
        if not io.exists(ckpt_path):
            raise ValueError(f"Matching checkpoint not found: {ckpt_path}")
    elif not io.exists(ckpt_dir):
        logger.info("Found no checkpoint directory at %s", ckpt_dir)
        return target
    elif io.isdir(ckpt_dir) and not is_orbax_checkpoint(ckpt_dir):
        found = latest_checkpoint(ckpt_dir, prefix)
        if found is None:
            logger.info("Found no checkpoint files in %s with prefix %s", ckpt_dir, prefix)
            return target
        ckpt_path = found
    else:
        ckpt_path = ckpt_dir

    if is_orbax_checkpoint(ckpt_path):
        logger.info("Restoring orbax checkpoint from %s", ckpt_path)
        return _restore_orbax(ckpt_path, target, orbax_checkpointer, orbax_transforms)
    logger.info("Restoring legacy Flax checkpoint from %s", ckpt_path)
    state = _read_msgpack(ckpt_path)
    state = restore_mpas(state, target, ckpt_path, step, gda_manager, allow_partial_mpa_restoration)
    return state if target is None else _into_target(ckpt_path, target, state)


# ------------------------------------------------------------------ pm.load's format

_MAPS = {0x80 + n: 1 for n in range(16)} | {0xDE: 3, 0xDF: 5}  # map marker -> its size
_STRS = frozenset([*range(0xA0, 0xC0), 0xD9, 0xDA, 0xDB])  # fixstr, str 8, 16, 32


class _FlaxMsgpackFile(pm.checkpoint_formats.CheckpointFormat):
    """A Flax msgpack checkpoint file (``save_checkpoint`` without Orbax, or the bytes of
    ``serialization.to_bytes``) as a format ``pm.load`` reads and writes."""

    name = "flax-msgpack"

    def detect(self, path: str) -> bool:
        """A file that starts as a msgpack map whose first key is a string (Flax's state
        dicts have string keys). Files of pytreemod's own formats are detected first."""
        try:
            if not os.path.isfile(path):
                return False
            with open(path, "rb") as f:
                head = f.read(6)
        except OSError:
            return False
        size = _MAPS.get(head[0]) if head else None
        if size is None:
            return False
        return head[0] == 0x80 or (len(head) > size and head[size] in _STRS)

    def read(self, path: str, like: Any, *, filter: pm.FilterLike = True) -> Any:
        if not isinstance(pm.to_filter(filter), pm.Everything):
            raise pm.CheckpointError(
                f"{path!r}: a Flax msgpack checkpoint is loaded whole; filter= cannot select "
                "part of it. Load it without filter=, then take the part you need."
            )
        with open(path, "rb") as f:
            data = f.read()
        try:
            state = serialization.msgpack_restore(data)
        except serialization.MsgpackDecodeError as e:
            raise pm.CheckpointFormatError(
                f"{path!r}: not a readable Flax msgpack checkpoint ({e}); nothing was loaded."
            ) from None
        try:
            return serialization.from_state_dict(like, state)
        except (ValueError, TypeError, KeyError) as e:
            raise pm.CheckpointMismatchError(
                f"{path!r} does not fit the model: {e}. Load into a model built with the "
                "saved configuration."
            ) from None

    def write(self, path: str, tree: Any) -> None:
        """The msgpack bytes of ``tree``'s state dict, written to a temporary file and
        renamed into place (a crash leaves the old file or none)."""
        data = serialization.to_bytes(tree)
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise pm.CheckpointError(f"Cannot save {path!r}: {e.strerror or e}.") from None


pm.checkpoint_formats.register_format(_FlaxMsgpackFile())
