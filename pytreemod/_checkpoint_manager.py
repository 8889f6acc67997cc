"""``CheckpointManager``: the checkpoints of a training run, one per step, on Orbax's
``CheckpointManager``.

Orbax keeps the run: a folder per step written under a temporary name and renamed when
complete (so an incomplete step is never listed), the last ``keep`` steps, the latest
step, saves in the background. pytreemod gives it what to write in each step: the
``pm.save`` checkpoint of the model (one checksummed file, or a checksummed directory
when the model's arrays are split over processes), through an Orbax checkpoint handler,
and ``restore`` is ``pm.load`` of a step. Orbax is imported when a manager is made.

A background step is ``pm.save_async``'s work as Orbax's commit future: the handler
copies the data off the devices (and starts Orbax's writes of a directory's shards) in
the thread that called ``save``; a thread of its own then writes, hashes and commits,
and Orbax's thread renames the step's folder into place once every process's future is
done. Every wait of those threads for the other processes is the distributed runtime's
coordination service, never a device collective (see ``_checkpoint_dir.coordinated``).
"""

import dataclasses
import os
from collections.abc import Callable
from typing import Any, TypeVar

from . import _checkpoint as ckpt
from . import _checkpoint_async as asave
from . import _checkpoint_dir as cdir
from . import _checkpoint_tree as ctree
from ._errors import CheckpointError
from ._filters import FilterLike

T = TypeVar("T")
ITEM = "model"  # the item folder in each step
NAME = "checkpoint"  # the pm.save file or directory in the item folder


def _ocp() -> Any:
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise CheckpointError(
            "pm.CheckpointManager runs on Orbax's CheckpointManager: install the "
            "orbax-checkpoint package (pip install orbax-checkpoint)."
        ) from None
    return ocp


def _start(directory: Any, args: Any, *, background: bool) -> tuple[bool, Callable[[], None]]:
    """Start saving a step's model into its item folder ``directory`` (which exists):
    whether it is a checkpoint directory, and what completes the save. A file's data is
    copied to the host now, and written by what is returned; a directory's arrays are
    copied off the devices now and written by Orbax meanwhile (in its own threads with
    ``background``, else before this returns), and what is returned hashes and commits
    them."""
    path = os.path.join(os.fspath(directory), NAME)
    model = args.model
    as_dir = args.directory
    if as_dir is None:
        as_dir = ctree.split_over_processes(model)
    if as_dir:
        header, arrays = ctree.describe(model, path, host=False)
        return True, cdir.save_dir(path, header, arrays, background=background)
    header, tensors = ctree.describe(model, path, host=True)
    return False, lambda: ckpt.write_file(path, header, tensors, sync=True)


class _Finishing:
    """Orbax's commit future of a step: the rest of its save (``_start``'s) running in a
    thread of its own, as a ``pm.save_async`` does; its error, a ``CheckpointError``
    naming the step's file or directory, is raised by ``result``."""

    def __init__(self, path: str, finish: Callable[[], None]):
        self._pending = asave.start(path, finish)

    def result(self, timeout: float | None = None) -> None:
        # Orbax's timeout is not applied: a directory's own barriers bound its waits, and
        # a long write is no failure
        self._pending.wait()

    def cancel(self) -> None:
        return None


_classes: dict[str, Any] = {}


def _handler_classes() -> tuple[Any, Any, Any]:
    """The Orbax handler and its save and restore arguments (made once, on first use:
    they subclass Orbax's classes)."""
    if _classes:
        return _classes["handler"], _classes["save"], _classes["restore"]
    ocp = _ocp()

    class Handler(ocp.AsyncCheckpointHandler):
        """Writes a step's model with ``pm.save`` (in the background), reads it with
        ``pm.load``."""

        async def async_save(self, directory: Any, args: Any) -> list[Any]:
            # The step's folder exists (the manager makes its folders synchronously).
            # A checkpoint directory waits for the other processes at barriers: in a
            # background thread only where the distributed runtime's coordination
            # service makes them (``cdir.coordinated``). Without it they are device
            # collectives, which would meet the training's own in a different order in
            # each process: then the directory is written, hashed and committed here, in
            # the thread that called save.
            background = cdir.coordinated()
            as_dir, finish = _start(directory, args, background=background)
            if as_dir and not background:
                finish()
                return []
            return [_Finishing(os.path.join(os.fspath(directory), NAME), finish)]

        def save(self, directory: Any, args: Any) -> None:
            _start(directory, args, background=False)[1]()

        def restore(self, directory: Any, args: Any = None) -> Any:
            path = os.path.join(os.fspath(directory), NAME)
            return ckpt.load(path, args.like, filter=args.filter)

        def metadata(self, directory: Any) -> None:
            return None

        def finalize(self, directory: Any) -> None:
            return None

        def close(self) -> None:
            return None

    @ocp.args.register_with_handler(Handler, for_save=True)
    @dataclasses.dataclass
    class Save(ocp.args.CheckpointArgs):
        model: Any
        directory: bool | None = None

    @ocp.args.register_with_handler(Handler, for_restore=True)
    @dataclasses.dataclass
    class Restore(ocp.args.CheckpointArgs):
        like: Any
        filter: Any = True

    _classes.update(handler=Handler, save=Save, restore=Restore)
    return Handler, Save, Restore


class CheckpointManager:
    """The checkpoints of a training run in ``directory``: one per step, the last
    ``keep`` kept, saved in the background; built on Orbax's ``CheckpointManager``.

    Each step is a ``pm.save`` checkpoint (checksummed; a directory of shards when the
    model's arrays are split over processes, every process writing its own) in the
    step's folder, which Orbax writes under a temporary name and renames when complete:
    a run killed at any moment resumes from ``latest_step()``, the last complete one. A
    step whose save fails is an error and leaves nothing on disk (its temporary folder
    is removed); the steps before it are kept.

    **Arguments:**

    - ``directory``: the run's folder (made if missing).
    - ``keep``: how many of the latest steps to keep (``None``: all).
    - ``save_interval_steps``: ``save`` writes only steps that are a multiple of it
      (unless ``force=True``).
    - ``background``: ``save`` returns once the arrays are copied off the devices; the
      step is written, hashed and committed in the background meanwhile, and listed
      once complete. The next ``save`` (of a step the interval does not skip),
      ``wait``, ``restore`` and ``close`` wait for it, and raise its error, if it
      failed. On several processes, a step that is a checkpoint directory waits for the
      other processes at the distributed runtime's barriers (its coordination service),
      so the training's collectives run meanwhile; every process must call ``save``
      with the same steps, in the same order (as ``pm.save``). Processes without a
      distributed client (``jax.distributed`` not initialized) have only barriers of
      device collectives, which must not run beside the training's: there a directory
      step is complete before ``save`` returns.

    >>> import tempfile, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> model = {"w": pm.Param(jnp.zeros(3))}
    >>> with pm.CheckpointManager(tempfile.mkdtemp(), keep=2) as run:
    ...     for step in range(4):
    ...         model = {"w": pm.Param(model["w"].value + 1)}
    ...         _ = run.save(step, model)
    ...     run.wait()
    ...     print(run.all_steps(), run.restore(model)["w"].value.tolist())
    [2, 3] [4.0, 4.0, 4.0]
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep: int | None = None,
        save_interval_steps: int = 1,
        background: bool = True,
    ):
        ocp = _ocp()
        handler, self._save_args, self._restore_args = _handler_classes()
        self.directory = os.path.abspath(os.fspath(directory))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            save_interval_steps=save_interval_steps,
            enable_async_checkpointing=background,
            create=True,
            # the step's folders exist before the handler runs (see Handler.async_save)
            async_options=ocp.AsyncOptions(create_directories_asynchronously=False),
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_handlers={ITEM: handler()}
        )
        self._background = background
        self._saving: int | None = None  # the step saved in the background, until waited

    def save(
        self, step: int, model: Any, *, force: bool = False, directory: bool | None = None
    ) -> bool:
        """Save ``model`` as ``step`` (a new step number: Orbax refuses to write one twice);
        ``False`` if the interval skips it. ``directory`` as for ``pm.save``."""
        if self._saving is not None and (force or self._manager.should_save(step)):
            self.wait()  # the previous step (Orbax's save would wait for it: its error here)
        args = _ocp().args.Composite(**{ITEM: self._save_args(model, directory)})
        try:
            saved = bool(self._manager.save(step, args=args, force=force))
        except BaseException:
            self._discard(step)
            raise
        if saved and self._background:
            self._saving = step
            if directory is None:
                directory = ctree.split_over_processes(model)
            if directory and not cdir.coordinated():
                # written before Orbax's save returned (Handler.async_save): wait for
                # Orbax to finish the step too (rename it into place), so that the step
                # is complete when save returns
                self.wait()
        return saved

    def restore(self, like: T, step: int | None = None, *, filter: FilterLike = True) -> T:
        """``pm.load`` of ``step`` (default: the latest complete one) into ``like``."""
        self.wait()
        if step is None:
            step = self.latest_step()
            if step is None:
                raise CheckpointError(
                    f"{self.directory!r}: no complete checkpoint to restore (no step was "
                    "saved, or none finished)."
                )
        if step not in self.all_steps():
            raise CheckpointError(
                f"{self.directory!r}: no complete checkpoint of step {step} (steps: "
                f"{self.all_steps()})."
            )
        args = _ocp().args.Composite(**{ITEM: self._restore_args(like, filter)})
        return self._manager.restore(step, args=args)[ITEM]

    def latest_step(self) -> int | None:
        """The latest complete step, or ``None``."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    def all_steps(self) -> list[int]:
        """Every complete step kept, oldest first (a step saved in the background is
        listed once Orbax has renamed its folder into place)."""
        return sorted(s for s in self._manager.all_steps() if s != self._saving or self._done(s))

    def _done(self, step: int) -> bool:
        # Orbax's folder of a step, named by its default step format
        return os.path.isdir(os.path.join(self.directory, str(step)))

    def wait(self) -> None:
        """Block until the save in the background is complete; raise its error, if it
        failed (the step is not kept; the steps before it are)."""
        step, self._saving = self._saving, None
        try:
            self._manager.wait_until_finished()
        except Exception as e:
            if step is not None:
                self._discard(step)
            what = "a step" if step is None else f"step {step}"
            raise CheckpointError(
                f"{self.directory!r}: the save of {what} failed in the background; the "
                f"step is not kept, the steps before it are. {e}"
            ) from e

    def _discard(self, step: int) -> None:
        """Remove what a failed save of ``step`` left: Orbax's temporary folder of the
        step, never listed."""
        cdir.discard(os.path.join(self.directory, str(step)))

    def close(self) -> None:
        """Wait for the save in the background (raising its error, if it failed), and
        release Orbax's resources."""
        try:
            self.wait()
        finally:
            self._manager.close()

    def __enter__(self) -> "CheckpointManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CheckpointManager({self.directory!r}, steps={self.all_steps()})"
