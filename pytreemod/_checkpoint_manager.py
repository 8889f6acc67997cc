"""``CheckpointManager``: the checkpoints of a training run, one per step, on Orbax's
``CheckpointManager``.

Orbax keeps the run: a folder per step written under a temporary name and renamed when
complete (so an incomplete step is never listed), the last ``keep`` steps, the latest
step, saves in the background. pytreemod gives it what to write in each step: the
``pm.save`` checkpoint of the model (one checksummed file, or a checksummed directory
when the model's arrays are split over processes), through an Orbax checkpoint handler,
and ``restore`` is ``pm.load`` of a step. Orbax is imported when a manager is made.
"""

import dataclasses
import os
from collections.abc import Callable
from typing import Any, TypeVar

from . import _checkpoint as ckpt
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


def _writer(directory: Any, args: Any) -> tuple[bool, Callable[[], None]]:
    """Whether a step's model is a checkpoint directory, and what writes it into the
    item folder ``directory`` (once that exists). A file's data is copied to the host
    now; a directory's arrays are written by Orbax from the devices when it runs."""
    path = os.path.join(os.fspath(directory), NAME)
    model = args.model
    as_dir = args.directory
    if as_dir is None:
        as_dir = ctree.split_over_processes(model)
    if as_dir:
        header, arrays = ctree.describe(model, path, host=False)
        return True, lambda: cdir.save_dir(path, header, arrays)()
    header, tensors = ctree.describe(model, path, host=True)
    return False, lambda: ckpt.write_file(path, header, tensors, sync=True)


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
            as_dir, write = _writer(directory, args)
            if as_dir:
                # Written now, in the thread that called save (the step's folder exists:
                # the manager makes its folders synchronously). A checkpoint directory's
                # save waits at barriers of every process, which Orbax and JAX make of
                # device collectives: from a background thread they would interleave
                # with the training's own collectives (and Orbax's) in a different order
                # in each process.
                write()
                return []

            async def commit() -> None:
                write()

            return [ocp.future.CommitFutureAwaitingContractedSignals(commit(), name=NAME)]

        def save(self, directory: Any, args: Any) -> None:
            _writer(directory, args)[1]()

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
    a run killed at any moment resumes from ``latest_step()``, the last complete one.

    **Arguments:**

    - ``directory``: the run's folder (made if missing).
    - ``keep``: how many of the latest steps to keep (``None``: all).
    - ``save_interval_steps``: ``save`` writes only steps that are a multiple of it
      (unless ``force=True``).
    - ``background``: ``save`` returns once the arrays are copied off the devices and
      writes meanwhile (the next ``save``, ``wait`` and ``close`` wait for it). A step
      that is a checkpoint directory (arrays split over processes) is written before
      ``save`` returns, as Orbax reads its arrays from the devices while it writes
      them; ``pm.save_async`` writes one in the background.

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

    def save(
        self, step: int, model: Any, *, force: bool = False, directory: bool | None = None
    ) -> bool:
        """Save ``model`` as ``step`` (a new step number: Orbax refuses to write one twice);
        ``False`` if the interval skips it. ``directory`` as for ``pm.save``."""
        args = _ocp().args.Composite(**{ITEM: self._save_args(model, directory)})
        saved = bool(self._manager.save(step, args=args, force=force))
        if saved and (directory or (directory is None and ctree.split_over_processes(model))):
            # a directory is written before Orbax's save returns (Handler.async_save):
            # wait for Orbax to finish the step too (rename it into place), so that the
            # step is complete when save returns
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
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Every complete step kept, oldest first."""
        return sorted(self._manager.all_steps())

    def wait(self) -> None:
        """Block until the saves in the background are complete."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Wait for the saves in the background, and release Orbax's resources."""
        self._manager.close()

    def __enter__(self) -> "CheckpointManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CheckpointManager({self.directory!r}, steps={self.all_steps()})"
