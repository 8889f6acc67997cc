"""Saves that finish in the background: ``PendingSave`` and the saves still running.

A background save has copied the model's arrays off the devices before ``save_async``
returns (training may go on, even donate the arrays); the rest (writing, hashing,
committing) runs in a thread. Saves to one path run one after another: a new save to a
path first waits for the one still running there, and so does ``load`` of it. The
program waits for every pending save before it exits.
"""

import atexit
import os
import threading
from collections.abc import Callable
from types import TracebackType

from ._errors import CheckpointError

_lock = threading.Lock()
_pending: dict[str, "PendingSave"] = {}


class PendingSave:
    """A checkpoint being written in the background, returned by ``pm.save_async``.

    ``wait()`` blocks until the checkpoint is complete (committed: ``load`` sees it) and
    raises the save's error, if it failed; ``done()`` tells without blocking. Used as a
    context manager, it waits on exit.

    >>> import tempfile, os, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    >>> with pm.save_async(path, {"w": pm.Param(jnp.ones(3))}):
    ...     pass  # a training step here runs while the file is written
    >>> pm.load(path, {"w": pm.Param(jnp.zeros(3))})["w"].value.tolist()
    [1.0, 1.0, 1.0]
    """

    def __init__(self, path: str, finish: Callable[[], None]):
        self.path = path
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(finish,), name=f"pytreemod-save:{path}", daemon=True
        )

    def _run(self, finish: Callable[[], None]) -> None:
        try:
            finish()
        except BaseException as e:  # handed to wait()
            self._error = e

    def done(self) -> bool:
        """Whether the save has finished (successfully or not)."""
        return not self._thread.is_alive()

    def wait(self) -> None:
        """Block until the save is complete; raise its error if it failed."""
        self._thread.join()
        with _lock:
            if _pending.get(self.path) is self:
                del _pending[self.path]
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, CheckpointError):
                raise error
            raise CheckpointError(
                f"Cannot save {self.path!r}: the background save failed "
                f"({type(error).__name__}: {error})."
            ) from error

    def __enter__(self) -> "PendingSave":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.wait()

    def __repr__(self) -> str:
        return f"PendingSave({self.path!r}, {'done' if self.done() else 'running'})"


def key(path: str) -> str:
    return os.path.abspath(path)


def wait_for(path: str) -> None:
    """Wait for a save to ``path`` still running in the background (its errors are its
    caller's, reported by its own ``wait``)."""
    with _lock:
        pending = _pending.get(key(path))
    if pending is not None:
        pending._thread.join()


def start(path: str, finish: Callable[[], None]) -> PendingSave:
    """Run ``finish`` in the background as the save to ``path``."""
    pending = PendingSave(key(path), finish)
    with _lock:
        _pending[pending.path] = pending
    pending._thread.start()
    return pending


@atexit.register
def _wait_for_all() -> None:
    with _lock:
        running = list(_pending.values())
    for pending in running:
        pending._thread.join()
